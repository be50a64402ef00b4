"""The run directory's lifecycle: one process at a time, no debris, no silent config change, nothing lost.

* :class:`RunDirLock`: an exclusive ``flock`` on ``<run_dir>/.lock`` held for the whole run (released by
  the kernel when the process dies, so a killed or requeued job never leaves a stale lock). A second
  process is refused in one line naming the holder's PID and host. Taking it first refuses a run directory
  with links among the entries embodirl writes (:func:`~embodirl.runtime.files.check_run_dir_links`).
* :func:`remove_temp_files`: hidden ``.<name>.<random>.tmp`` files that a kill during an atomic write
  left behind (only safe under the lock).
* :func:`resume_overrides`: the overrides that continue a run directory as it was started (the comparison of
  a resumed run's config with its checkpoint's is :mod:`embodirl.app.resume`'s).
* :func:`write_hydra_files`: the composed config, Hydra's config and the overrides in ``.hydra/``,
  written by the run (not by Hydra) only after those checks; earlier versions move to ``.hydra/history/``.
* :func:`holds_only_empty_files` / :func:`discard_unproduced`: a directory a command made for itself and that
  holds nothing produced when the command fails (only its log, lock, status and config copies) is removed, so
  that refused and aborted runs leave no directories for reports to list.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from embodirl.runtime.files import atomic_write_bytes, check_run_dir_links, open_own_file
from embodirl.runtime.status import STATUS_FILE, write_status

__all__ = ["RunDirBusyError", "RunDirLock", "discard_unproduced", "holds_only_empty_files", "record_refused_job",
           "remove_temp_files", "resume_overrides", "write_hydra_files"]

LOCK_FILE = ".lock"
_TEMP_DIRS = (".", "checkpoints", ".hydra", "videos")

class RunDirBusyError(RuntimeError):
    """Another process holds the run directory."""


class RunDirLock:
    """Exclusive lock on a run directory; the holder's PID, host and start time are written into the lock file.

    Args:
        run_dir: The run directory (created if missing).
    """

    def __init__(self, run_dir: str | Path) -> None:
        self.path = Path(run_dir) / LOCK_FILE
        self._fd: int | None = None

    def acquire(self) -> RunDirLock:
        """Take the lock or raise :class:`RunDirBusyError` naming the holder.

        Raises:
            RunDirLinkError: An entry embodirl writes is a link (see :func:`check_run_dir_links`); the lock file
                is opened without following a link and never truncated when another file's name (nothing written).
        """
        self.path.parent.mkdir(parents=True, exist_ok=True)
        check_run_dir_links(self.path.parent)
        fd = open_own_file(self.path, os.O_RDWR)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_holder(fd)
            os.close(fd)
            raise RunDirBusyError(
                f"{self.path.parent} is in use by process {holder.get('pid', '?')} on host {holder.get('host', '?')} "
                f"(since {holder.get('since', '?')}); two processes in one run directory would corrupt it. Fix: wait "
                "for that run to end or stop it, or pass hydra.run.dir=<another directory>") from None
        record = {"pid": os.getpid(), "host": socket.gethostname(),
                  "since": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime())}
        os.ftruncate(fd, 0)
        os.pwrite(fd, (json.dumps(record) + "\n").encode(), 0)
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the descriptor releases the flock
            self._fd = None

    def __enter__(self) -> RunDirLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def _read_holder(fd: int) -> dict[str, Any]:
    try:
        record = json.loads(os.pread(fd, 4096, 0).decode("utf-8"))
        return record if isinstance(record, dict) else {}
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return {}


def remove_temp_files(run_dir: str | Path) -> list[Path]:
    """Delete the hidden temp files of interrupted atomic writes (``.<name>.<random>.tmp``); return them."""
    removed = []
    for sub in _TEMP_DIRS:
        folder = Path(run_dir) / sub
        if folder.is_dir() and not folder.is_symlink():  # a linked folder is another's: its files are not debris
            for tmp in folder.glob(".*.tmp"):
                tmp.unlink(missing_ok=True)
                removed.append(tmp)
    return removed


def resume_overrides(run_dir: str | Path) -> list[str] | None:
    """The overrides that continue ``run_dir`` as it was started (its ``.hydra/overrides.yaml``; a sweep job's hold
    its sweep's values), ``hydra.run.dir`` pinned to it; None when they cannot be read. ``hydra.mode=RUN`` keeps a
    ready sweep's file (``sweep=seeds``) from starting the sweep again."""
    import yaml

    try:
        overrides = yaml.safe_load((Path(run_dir) / ".hydra" / "overrides.yaml").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return None
    if not isinstance(overrides, list):
        return None
    words = [str(o) for o in overrides]
    if any(w.lstrip("+").startswith("sweep=") for w in words):
        words.append("hydra.mode=RUN")
    return [*words, f"hydra.run.dir={Path(run_dir).resolve()}"]


def write_hydra_files(run_dir: str | Path, files: Mapping[str, str]) -> None:
    """Write ``.hydra/<name>`` for each ``name -> text``; earlier, different versions move to ``.hydra/history/``."""
    folder = Path(run_dir) / ".hydra"
    changed = [name for name, text in files.items()
               if (folder / name).is_file() and (folder / name).read_bytes() != text.encode("utf-8")]
    if changed:
        history = folder / "history" / time.strftime("%Y-%m-%d_%H-%M-%S")
        history.mkdir(parents=True, exist_ok=True)
        for name in files:
            if (folder / name).is_file():
                os.replace(folder / name, history / name)
    for name, text in files.items():
        atomic_write_bytes(folder / name, text.encode("utf-8"))


def record_refused_job(run_dir: str | Path, hydra_files: Mapping[str, str], exc: BaseException) -> bool:
    """Write ``.hydra/`` and a ``failed`` status into the directory of a sweep job refused before its run began.

    A refused job's directory would otherwise be empty, and reports (which find runs by ``.hydra/overrides.yaml``)
    would not list it. A directory that holds a status or checkpoints belongs to a run that began (this job's, or
    an earlier run's it must not overwrite), and one locked by another process is in use: both are left alone.

    Returns:
        Whether the job's directory now records the failure.
    """
    run_dir = Path(run_dir)
    if (run_dir / STATUS_FILE).exists() or (run_dir / "checkpoints").exists():
        return False
    try:
        with RunDirLock(run_dir):
            write_hydra_files(run_dir, hydra_files)
            write_status(run_dir, "failed", exc=exc)
    except (RunDirBusyError, OSError):
        return False
    return True


def holds_only_empty_files(directory: str | Path, skip: str | None = None) -> bool:
    """Whether ``directory`` holds nothing but empty files (and ``skip``, Hydra's copy of the config where it writes
    one): the state in which Hydra hands a directory it has just made to the command (its new, empty log), never
    that of a directory an earlier run wrote."""
    return all(entry.name == skip or (entry.is_file(follow_symlinks=False) and entry.stat().st_size == 0)
               for entry in os.scandir(directory))


def discard_unproduced(directory: str | Path, start_files: set[str], parents: int = 0) -> bool:
    """Remove ``directory`` if it holds only ``start_files`` (paths relative to it: what a command writes before
    it produces anything, e.g. its log and status) and empty folders, then up to ``parents`` of its parents that
    are left empty; return whether ``directory`` was removed.

    Nothing else is ever deleted: a directory holding any other file, or a symlink, is left as it is.
    """
    root = Path(directory)
    files, folders = [], []
    for path in root.rglob("*"):
        if path.is_dir() and not path.is_symlink():
            folders.append(path)
        elif path.relative_to(root).as_posix() in start_files and not path.is_symlink():
            files.append(path)
        else:
            return False
    try:
        for path in files:
            path.unlink()
        for folder in sorted(folders, key=lambda p: len(p.parts), reverse=True):
            folder.rmdir()
        root.rmdir()
    except OSError:  # another process wrote into it meanwhile: what is left stays
        return False
    for parent in root.absolute().parents[:parents]:
        try:
            parent.rmdir()
        except OSError:  # not empty: it holds other runs
            break
    return True

"""Reading what a run directory holds, whatever it holds (regular files only, bounded in size, data only), and
writing its files atomically.

A run directory is written by embodirl, but a report or a sweep's end reads whatever is there: a FIFO named
``status.json`` (opening it waits for a writer forever), ``metrics.jsonl`` linked to ``/dev/zero`` (reading it
never ends), a YAML alias bomb, JSON nested a million deep, integers too long to convert. The readers here
refuse such files with an :class:`UnreadableFileError` (an ``OSError``: callers that skip unreadable files
catch it already) or a ``ValueError`` (a parse that failed), each naming what was wrong in one line.

A run directory is also data when written: a received tarball or a colleague's directory may hold links planted
where embodirl writes (``.lock -> ~/.bashrc``). :func:`check_run_dir_links` refuses a run directory whose
entries are links, in one line, before anything is opened; :func:`open_append` and :class:`RunLogHandler` open
with ``O_NOFOLLOW`` and refuse a file with other names (a hard link), so a link planted later is not followed
either. Atomic writes create their temporary file with ``O_EXCL`` and rename it over the name (which replaces a
link, never writes through it).

Size caps: :data:`MAX_FILE_BYTES` (1 MiB) for ``status.json``, ``summary.json`` and the ``.hydra`` YAML files,
which hold a few kB (a status with a traceback tens of kB); :data:`MAX_METRICS_BYTES` (64 MiB) for
``metrics.jsonl`` (about 90,000 iterations of about 700 bytes), of which a longer file is read from its end.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import shlex
import stat
import tempfile
from pathlib import Path
from typing import Any, BinaryIO

import yaml
from yaml.composer import ComposerError

__all__ = [
    "MAX_DEPTH",
    "MAX_FILE_BYTES",
    "MAX_METRICS_BYTES",
    "RUN_DIR_ENTRIES",
    "RunDirLinkError",
    "RunLogHandler",
    "UnreadableFileError",
    "atomic_write_bytes",
    "atomic_write_json",
    "check_run_dir_links",
    "describe_size",
    "file_mode",
    "open_append",
    "open_own_file",
    "open_regular_file",
    "parse_json",
    "parse_yaml",
    "printable",
    "read_regular_file",
]

MAX_FILE_BYTES = 1 << 20
MAX_METRICS_BYTES = 64 << 20
MAX_DEPTH = 32  # nesting of lists and mappings in a parsed file; embodirl's own files nest 4 deep at most

_KINDS = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISDIR, "a directory"), (stat.S_ISSOCK, "a socket"))


class UnreadableFileError(OSError):
    """A file that is not read: not a regular file, or larger than the reader's cap."""


def _check_regular(mode: int) -> None:
    if not stat.S_ISREG(mode):
        kind = next((name for test, name in _KINDS if test(mode)), "not a regular file")
        raise UnreadableFileError(f"{kind}, not a regular file")


def open_regular_file(path: str | Path) -> BinaryIO:
    """``path`` opened for binary reading if it is a regular file (a symlink to one is followed).

    The path is checked before it is opened (opening a device can have effects) and the open file again
    (the path may have changed in between). ``O_NONBLOCK`` keeps the open of a FIFO from waiting for a writer.

    Raises:
        FileNotFoundError: No such file (or a dangling symlink).
        UnreadableFileError: A FIFO, device, directory or socket.
    """
    _check_regular(os.stat(path).st_mode)
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(path, flags)
    try:
        _check_regular(os.fstat(fd).st_mode)
    except BaseException:
        os.close(fd)
        raise
    return os.fdopen(fd, "rb")


def read_regular_file(path: str | Path, max_bytes: int = MAX_FILE_BYTES) -> bytes:
    """The bytes of the regular file ``path`` (see :func:`open_regular_file`), at most ``max_bytes`` of them.

    Raises:
        FileNotFoundError: No such file.
        UnreadableFileError: Not a regular file, or larger than ``max_bytes``.
    """
    with open_regular_file(path) as file:
        data = file.read(max_bytes + 1)  # bounded even if the file grows after the check
    if len(data) > max_bytes:
        raise UnreadableFileError(f"larger than the {describe_size(max_bytes)} read from such a file")
    return data


def describe_size(num_bytes: int) -> str:
    """``64 MiB`` for whole MiB, else ``1,234 bytes``."""
    return f"{num_bytes >> 20} MiB" if num_bytes and num_bytes % (1 << 20) == 0 else f"{num_bytes:,} bytes"


def _check_depth(value: Any) -> Any:
    """``value`` if its lists and mappings nest at most :data:`MAX_DEPTH` deep (checked without recursion, so
    that a later ``repr`` or comparison of it cannot exceed Python's recursion limit)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else ()
        for child in children:
            if isinstance(child, dict | list):
                if depth >= MAX_DEPTH:
                    raise ValueError(f"lists or mappings nested more than {MAX_DEPTH} deep")
                stack.append((child, depth + 1))
    return value


def parse_json(data: bytes) -> Any:
    """UTF-8 JSON data as Python values.

    Raises:
        ValueError: Not UTF-8, not JSON, an integer over Python's 4,300-digit limit, or nested too deep.
    """
    try:
        return _check_depth(json.loads(data.decode("utf-8")))
    except RecursionError:
        raise ValueError(f"lists or mappings nested more than {MAX_DEPTH} deep") from None


class _NoAliasLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` without aliases: ``*name`` refers back to an anchored node, so a few hundred bytes
    can stand for billions of items (an alias bomb). Hydra and OmegaConf never write aliases."""

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise ComposerError(None, None, f"an alias (*{event.anchor}), which embodirl's files never hold",
                                event.start_mark)
        return super().compose_node(parent, index)


def parse_yaml(data: bytes) -> Any:
    """UTF-8 YAML data as Python values (the safe subset: no Python objects, no aliases).

    Raises:
        ValueError: Not UTF-8, not YAML (``yaml.YAMLError`` is re-raised as ``ValueError``), an alias, an
            integer over Python's 4,300-digit limit, or nested too deep.
    """
    try:
        return _check_depth(yaml.load(data.decode("utf-8"), Loader=_NoAliasLoader))
    except yaml.YAMLError as exc:
        mark, problem = getattr(exc, "problem_mark", None), getattr(exc, "problem", None) or str(exc)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        raise ValueError(" ".join(f"{where}{problem}".split())) from None
    except RecursionError:
        raise ValueError(f"lists or mappings nested more than {MAX_DEPTH} deep") from None


def printable(text: Any, max_chars: int = 500) -> str:
    """``text`` as one line for a report or a terminal: whitespace runs become one space, other control
    characters (e.g. terminal escape sequences) become U+FFFD, and more than ``max_chars`` end in "..."."""
    line = " ".join(str(text).split())
    line = "".join(c if c.isprintable() else "\ufffd" for c in line)
    return line if len(line) <= max_chars else line[: max_chars - 3] + "..."


# --- links in a run directory -----------------------------------------------------------------------------
#: Entries of a run directory that embodirl creates, appends, truncates, moves or deletes files in (``train*.log``:
#: every rank's log). Their own entries that embodirl names are checked too (:data:`_RUN_DIR_SUBENTRIES`).
RUN_DIR_ENTRIES = (".lock", "train*.log", "metrics.jsonl", "metrics.superseded.jsonl", "status.json", "summary.json",
                   "checkpoints", ".hydra", "videos", "tb", "wandb", "eval", "export")
_RUN_DIR_SUBENTRIES = (("checkpoints", ("superseded",)), (".hydra", ("history",)),
                       ("export", ("onnx", "torchscript")))


class RunDirLinkError(OSError):
    """An entry of a run directory that embodirl writes is a symbolic link, or a file with other names."""

    def __init__(self, path: str | Path, what: str, fix: str | None = None) -> None:
        fix = fix or f"remove it (rm {shlex.quote(printable(path))})"
        super().__init__(errno.ELOOP, (
            f"{printable(path)} is {what}; embodirl never writes through a link in a run directory (it would change "
            f"a file outside it). Fix: {fix}, or pass hydra.run.dir=<another directory>"), str(path))

    def __str__(self) -> str:
        return str(self.strerror)


def _link_error(path: Path) -> RunDirLinkError:
    try:
        target = os.readlink(path)
    except OSError:
        target = "?"
    fix = None
    if path.is_dir():  # a linked folder holds what the run needs (its checkpoints): a copy keeps it
        link, copy = shlex.quote(printable(path)), shlex.quote(printable(path.resolve()))
        fix = f"replace it with a copy of its folder (rm {link} && cp -r {copy} {link})"
    return RunDirLinkError(path, f"a symbolic link to {printable(target)!r}", fix)


def check_run_dir_links(run_dir: str | Path) -> None:
    """Refuse ``run_dir`` if one of the entries embodirl writes (:data:`RUN_DIR_ENTRIES`) is a symbolic link.

    The run directory itself may be a link (``runs/latest``); only what lies in it is checked.

    Raises:
        RunDirLinkError: Naming the first link, where it points, and the fix.
    """
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        return
    for pattern in RUN_DIR_ENTRIES:
        for path in sorted(run_dir.glob(pattern)) if "*" in pattern else [run_dir / pattern]:
            if path.is_symlink():
                raise _link_error(path)
    for folder, names in _RUN_DIR_SUBENTRIES:
        for name in names:
            if (run_dir / folder / name).is_symlink():
                raise _link_error(run_dir / folder / name)


_OWN_FLAGS = os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NONBLOCK", 0)


def open_own_file(path: str | Path, flags: int) -> int:
    """A descriptor of ``path`` opened with ``flags`` (created 0666 minus the umask if missing) that is a regular
    file with no other name: a symbolic link is not followed, and a hard link (another name for a file elsewhere)
    or a FIFO or device is refused, before anything is written. Never truncates.

    Raises:
        RunDirLinkError: ``path`` is a link, or not a regular file.
    """
    try:
        fd = os.open(path, flags | _OWN_FLAGS, 0o666)
    except OSError as exc:
        if exc.errno == errno.ELOOP or Path(path).is_symlink():
            raise _link_error(Path(path)) from None
        raise
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1:
        os.close(fd)
        what = "not a regular file" if not stat.S_ISREG(info.st_mode) else f"a file with {info.st_nlink} names " \
            "(a hard link)"
        raise RunDirLinkError(path, what)
    return fd


def open_append(path: str | Path) -> BinaryIO:
    """``path`` opened for appending bytes (and reading), created if missing (see :func:`open_own_file`)."""
    return os.fdopen(open_own_file(path, os.O_RDWR | os.O_APPEND), "a+b")


class RunLogHandler(logging.FileHandler):
    """Hydra's ``train.log`` handler (``conf/train.yaml``), opened before the run begins: in a run directory with
    links among its entries (:func:`check_run_dir_links`) it writes nothing (its file may be the link), and it
    opens its file as :func:`open_append` does. The run's lock then refuses the directory in one line
    (:class:`~embodirl.runtime.rundir.RunDirLock`), and a sweep's other jobs go on."""

    refused: RunDirLinkError | None = None

    def _open(self) -> Any:
        try:
            check_run_dir_links(Path(self.baseFilename).parent)
            fd = open_own_file(self.baseFilename, os.O_WRONLY | os.O_APPEND)
        except RunDirLinkError as exc:
            self.refused = exc
            return open(os.devnull, "w", encoding="utf-8")  # closed by the handler
        return os.fdopen(fd, "a", encoding=self.encoding, errors=self.errors)


# --- writing ----------------------------------------------------------------------------------------------
def _umask() -> int:
    """The process's umask, read without changing it where /proc allows (os.umask is set-and-return)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def file_mode() -> int:
    """The mode an ordinary write gives a new file: 0666 minus the umask (``mkstemp`` makes 0600)."""
    return 0o666 & ~_umask()


def _atomic_replace(path: Path, write) -> None:
    """Write through a hidden temp file (``.<name>.<random>.tmp``) renamed over ``path``.

    The file gets the mode an ordinary write would (0666 minus the umask), not mkstemp's 0600, so
    colleagues sharing a cluster file system can read results. OS errors name ``path``.
    """
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as exc:
        raise exc if exc.filename else type(exc)(exc.errno, exc.strerror, str(path)) from None
    try:
        os.fchmod(fd, file_mode())
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(exc, OSError) and exc.filename != str(path):
            raise type(exc)(exc.errno, exc.strerror, str(path)) from None
        raise


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so readers see the old file or the new one, never a partial one."""
    _atomic_replace(Path(path), lambda f: f.write(data))


def atomic_write_json(path: str | Path, obj: Any) -> None:
    """Atomically write ``obj`` as indented JSON (NaN written as null)."""
    atomic_write_bytes(path, (json.dumps(_nan_to_none(obj), indent=2) + "\n").encode())


def _nan_to_none(obj: Any) -> Any:
    if isinstance(obj, float) and obj != obj:
        return None
    if isinstance(obj, dict):
        return {k: _nan_to_none(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_nan_to_none(v) for v in obj]
    return obj

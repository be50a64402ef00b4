"""Each run records its own fate in ``status.json``, so results survive the submitting process.

States: ``running`` (written at start, with host, pid, SLURM ids and the attempt number),
``completed`` (with the objective), ``failed`` (exception, message and traceback), ``preempted``
(the job was signalled; a requeued attempt resumes from ``checkpoints/last.pt``) and ``interrupted``
(Ctrl-C; the same command resumes). Every write is atomic; when the disk is full (no room for the
temporary file of an atomic write) the record is rewritten in place, without its traceback, in the space
the file already holds. ``summary.json`` carries the same status. A record written by a job of a multirun
names the sweep (``sweep_id``, see :mod:`embodirl.app.sweep`).

A run killed outright (kill -9, out of memory, a failed machine) cannot record its fate: its record still
says ``running``. :func:`process_gone` tells such a record from a live run when the reader is on the run's
host; reports show the run as ``failed`` (``ProcessGone``).
"""

from __future__ import annotations

import json
import os
import socket
import time
import traceback
from pathlib import Path
from typing import Any

from embodirl.errors import is_int
from embodirl.runtime.files import MAX_FILE_BYTES, atomic_write_json, parse_json, read_regular_file

__all__ = ["STATES", "SWEEP_ID_ENV", "as_failed_if_gone", "fate_of", "process_gone", "read_status", "write_status"]

STATES = ("running", "completed", "failed", "preempted", "interrupted")

STATUS_FILE = "status.json"
#: Set by :class:`embodirl.app.sweep.SweepFate` for the jobs of one multirun (launchers pass the
#: environment on to the job processes), so that records tell this sweep's jobs from earlier runs.
SWEEP_ID_ENV = "EMBODIRL_SWEEP_ID"
_JOB_ENV = ("SLURM_JOB_ID", "SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID", "SLURM_PROCID", "SLURM_RESTART_COUNT",
            "SUBMITIT_LOCAL_JOB_ID")


def fate_of(exc: BaseException | None) -> str:
    """The state a run ends in when ``exc`` (None: nothing) ended it."""
    from embodirl.runtime.preemption import PreemptedError, was_preempted

    if exc is None:
        return "completed"
    if isinstance(exc, PreemptedError) or (isinstance(exc, SystemExit) and was_preempted()):
        return "preempted"
    if isinstance(exc, KeyboardInterrupt):
        return "interrupted"
    return "failed"


def read_status(run_dir: str | Path) -> dict[str, Any] | None:
    """The run's status record, or None when it has none or it is unreadable or malformed (not a regular
    file, over 1 MiB, not UTF-8 JSON, nested too deep, no string ``status``: see :mod:`embodirl.runtime.files`);
    a malformed ``attempt`` or ``started_at`` is dropped."""
    try:
        record = parse_json(read_regular_file(Path(run_dir) / STATUS_FILE, MAX_FILE_BYTES))
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or not isinstance(record.get("status"), str):
        return None
    for key, kind in (("attempt", int), ("started_at", float)):
        value = record.get(key)
        if key in record and (isinstance(value, bool) or not isinstance(value, int | kind)):
            del record[key]
    return record


def write_status(run_dir: str | Path, status: str, *, exc: BaseException | None = None,
                 **fields: Any) -> dict[str, Any]:
    """Atomically write ``status.json``; keeps ``started_at`` and counts attempts across requeues."""
    run_dir = Path(run_dir)
    previous = read_status(run_dir) or {}
    now = time.time()
    attempt = previous.get("attempt", 0) + (1 if status == "running" else 0)
    record: dict[str, Any] = {
        "status": status,
        "attempt": max(attempt, 1),
        "started_at": previous.get("started_at", now),  # the first attempt's start, across requeues
        "updated_at": now,
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "job": {k: os.environ[k] for k in _JOB_ENV if k in os.environ},
        **({"sweep_id": os.environ[SWEEP_ID_ENV]} if os.environ.get(SWEEP_ID_ENV) else {}),
        **fields,
    }
    if exc is not None:
        record["exception"] = type(exc).__name__
        record["message"] = str(exc)
        record["traceback"] = "".join(traceback.format_exception(exc))
    try:
        atomic_write_json(run_dir / STATUS_FILE, record)
    except OSError:
        if not _overwrite(run_dir / STATUS_FILE, {k: v for k, v in record.items() if k != "traceback"}):
            raise
    return record


def _overwrite(path: Path, record: dict[str, Any]) -> bool:
    """Rewrite an existing ``path`` in place with compact JSON (no new file, so no new disk space when the
    file's blocks already hold the record); False if it cannot be done. Not atomic: only for a full disk."""
    data = json.dumps(record, separators=(",", ":")).encode() + b"\n"
    try:
        fd = os.open(path, os.O_WRONLY)
    except OSError:
        return False
    try:
        os.pwrite(fd, data, 0)
        os.ftruncate(fd, len(data))
        os.fsync(fd)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def process_gone(record: dict[str, Any]) -> bool:
    """Whether a ``running`` record's process has ended without recording its fate.

    Only a record from this host can be judged: its process is gone when no process has its pid, or when the
    one that has it started after the record was written (the pid was reused).
    """
    pid = record.get("pid")
    if record.get("status") != "running" or record.get("host") != socket.gethostname() or not is_int(pid) \
            or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:  # it exists, under another user
        pass
    started, written = _process_start_time(pid), record.get("updated_at")
    # The start time is known to about a second (the boot time is whole seconds): allow for that.
    return started is not None and isinstance(written, int | float) and started > written + 2


def as_failed_if_gone(record: dict[str, Any]) -> dict[str, Any]:
    """``record``, or, when its process is gone (:func:`process_gone`), a copy that says ``failed`` with the
    exception ``ProcessGone`` and a message saying so."""
    if not process_gone(record):
        return record
    return {**record, "status": "failed", "exception": "ProcessGone", "message": (
        f"status.json says running, but process {record['pid']} on host {record['host']} has ended without "
        "recording its fate (killed, out of memory, or the machine failed); checkpoints/last.pt holds its last "
        "saved state")}


def _process_start_time(pid: int) -> float | None:
    """When process ``pid`` started (seconds since the epoch), from ``/proc``; None where that cannot be read."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
        boot = next(float(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines()
                    if line.startswith("btime "))
        return boot + int(fields[19]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return None

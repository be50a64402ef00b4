"""Each run records its own fate in ``status.json``, so results survive the submitting process.

States: ``running`` (written at start, with host, pid, SLURM ids and the attempt number),
``completed`` (with the objective), ``failed`` (exception, message and traceback), ``preempted``
(the job was signalled; a requeued attempt resumes from ``checkpoints/last.pt``) and ``interrupted``
(Ctrl-C; the same command resumes). Every write is atomic. ``summary.json`` carries the same status.
A record written by a job of a multirun names the sweep (``sweep_id``, see :mod:`embodirl.runtime.sweep`).
"""

from __future__ import annotations

import os
import socket
import time
import traceback
from pathlib import Path
from typing import Any

from embodirl.checkpoint import atomic_write_json
from embodirl.runtime.files import MAX_FILE_BYTES, parse_json, read_regular_file

__all__ = ["STATES", "SWEEP_ID_ENV", "fate_of", "read_status", "write_status"]

STATES = ("running", "completed", "failed", "preempted", "interrupted")

STATUS_FILE = "status.json"
#: Set by :class:`embodirl.runtime.sweep.SweepFate` for the jobs of one multirun (launchers pass the
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
    atomic_write_json(run_dir / STATUS_FILE, record)
    return record

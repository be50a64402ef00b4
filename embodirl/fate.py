"""Each run records its own fate in ``status.json``, so results survive the submitting process.

States: ``running`` (written at start, with host, pid, SLURM ids and the attempt number),
``completed`` (with the objective), ``failed`` (exception, message and traceback), ``preempted``
(the job was signalled; a requeued attempt resumes from ``checkpoints/last.pt``).
Every write is atomic.
"""

from __future__ import annotations

import json
import os
import socket
import time
import traceback
from pathlib import Path
from typing import Any

from embodirl.checkpoint import atomic_write_json

__all__ = ["read_status", "write_status"]

STATUS_FILE = "status.json"
_JOB_ENV = ("SLURM_JOB_ID", "SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID", "SLURM_PROCID", "SLURM_RESTART_COUNT",
            "SUBMITIT_LOCAL_JOB_ID")


def read_status(run_dir: str | Path) -> dict[str, Any] | None:
    """The run's status record, or None when it has none (or it is unreadable)."""
    try:
        return json.loads((Path(run_dir) / STATUS_FILE).read_text())
    except (OSError, json.JSONDecodeError):
        return None


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
        **fields,
    }
    if exc is not None:
        record["exception"] = type(exc).__name__
        record["message"] = str(exc)
        record["traceback"] = "".join(traceback.format_exception(exc))
    atomic_write_json(run_dir / STATUS_FILE, record)
    return record

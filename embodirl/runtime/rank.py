"""Which process of a launch this is, read from the environment before torch or any process group exists (so
the command line can decide it before importing torch)."""

from __future__ import annotations

import os
from typing import Any

__all__ = ["env_rank", "submitit_env"]


def env_rank() -> int:
    """This process's global rank from the environment (torchrun, submitit), before any process group."""
    if "RANK" in os.environ:
        return int(os.environ["RANK"])
    env = submitit_env()
    return env.global_rank if env is not None else 0


def submitit_env() -> Any | None:
    """submitit's job environment when this process is one task of several, else None."""
    if "SUBMITIT_EXECUTOR" not in os.environ:  # submitit sets it in every job it starts: not a submitit job
        return None
    try:
        import submitit

        env = submitit.JobEnvironment()
        return env if env.num_tasks > 1 else None
    except (RuntimeError, ImportError, KeyError):
        return None

"""OmegaConf resolvers used by the shipped config (registered when ``embodirl.conf`` is imported).

* ``${embodirl_now:PATTERN}``: the run's start time; every rank of a torchrun launch formats rank 0's
  time (``EMBODIRL_RUN_TIME``, set by ``embodirl-train`` before Hydra names the run directory), so
  the ranks share one run directory. Cached per config like Hydra's ``now``, so submitit jobs see the
  sweep directory their launcher saw.
* ``${embodirl_rank_suffix:}``: ``""`` on rank 0, ``".rank<r>"`` elsewhere (per-rank log files).
"""

from __future__ import annotations

import datetime
import os

from omegaconf import OmegaConf

__all__ = ["RUN_TIME_ENV", "START", "rank_suffix", "run_time"]

RUN_TIME_ENV = "EMBODIRL_RUN_TIME"
START = datetime.datetime.now()


def run_time(pattern: str) -> str:
    """The run's start time (``EMBODIRL_RUN_TIME`` if set, else this process's) formatted with ``pattern``."""
    shared = os.environ.get(RUN_TIME_ENV)
    return (datetime.datetime.fromisoformat(shared) if shared else START).strftime(pattern)


def rank_suffix() -> str:
    """``""`` on rank 0, ``".rank<r>"`` elsewhere."""
    from embodirl.runtime.rank import env_rank

    rank = env_rank()
    return f".rank{rank}" if rank else ""


OmegaConf.register_new_resolver("embodirl_now", run_time, replace=True, use_cache=True)
OmegaConf.register_new_resolver("embodirl_rank_suffix", rank_suffix, replace=True)

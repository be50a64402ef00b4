"""The run's final record, ``summary.json``: how it ended, where it got, its last metrics, its checkpoints."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from embodirl.envs.base import BatchedEnv
from embodirl.errors import DivergedError, NonFiniteLossError
from embodirl.runtime.files import atomic_write_json
from embodirl.training.evaluation import EVAL_KEYS
from embodirl.training.state import TrainState

__all__ = ["SUMMARY_KEYS", "end_reason", "run_summary", "write_summary"]

log = logging.getLogger(__name__)

SUMMARY_KEYS = ("episode/return_mean", "episode/length_mean", "episode/success_rate", *EVAL_KEYS)


def end_reason(exc: BaseException, status: str, reason: str | None) -> str:
    """The ``stop_reason`` of a run that ``exc`` ended in ``status``."""
    if isinstance(exc, NonFiniteLossError):
        return "non_finite_loss"
    if isinstance(exc, DivergedError):
        return "diverged"
    return "aborted" if status == "interrupted" else reason or type(exc).__name__


def run_summary(state: TrainState, status: str, reason: str | None, *, env: BatchedEnv, best_metric: str,
                compile_s: float, run_dir: Path, distributed: dict[str, Any],
                started_at: float | None = None) -> dict[str, Any]:
    """The run's final record.

    Args:
        state: The trainer's counters.
        status: ``completed``, ``failed``, ``preempted`` or ``interrupted``.
        reason: Why it stopped (``solved``, ``total_env_steps``, ``stop_on``, ...).
        env: The training env (its solved criterion).
        best_metric: The metric ``best.pt`` is chosen by.
        compile_s: Seconds the compile warm-up took.
        run_dir: The run directory.
        distributed: The ranks' parameter check after training (or just the world size).
        started_at: When this process's training clock started, in seconds since the epoch (``time.time()``):
            a launcher that noted when it started the process reads the start-up time from it.
    """
    ckpt_dir = run_dir / "checkpoints"
    out: dict[str, Any] = {"status": status, "stop_reason": reason,
                           "stop_condition": state.stop_condition if reason == "stop_on" else None,
                           "env_steps": state.env_steps, "iterations": state.iteration,
                           "wall_time_s": state.wall_time_s, "started_at": started_at,
                           "sps": state.env_steps / state.wall_time_s if state.wall_time_s > 0 else None}
    out.update({k: state.last.get(k) for k in SUMMARY_KEYS})
    out.update({k: v for k, v in state.last.items() if k.startswith(("loss/", "diag/"))})
    out.update({"solved_metric": env.solved_metric, "solved_threshold": env.solved_threshold,
                "solved_env_steps": state.solved_env_steps, "solved_wall_time_s": state.solved_wall_time_s,
                "compile_s": compile_s, "best_metric": best_metric, "best_value": state.best_value,
                "best_env_steps": state.best_env_steps,
                "best_checkpoint": str((ckpt_dir / "best.pt").resolve()) if state.best_value is not None else None,
                "run_dir": str(run_dir.resolve()), "checkpoint": str((ckpt_dir / "last.pt").resolve()),
                "distributed": distributed})
    return out


def write_summary(run_dir: Path, summary: dict[str, Any]) -> None:
    """Write ``summary.json``; while an exception is propagating, a failed write is only logged."""
    try:
        atomic_write_json(run_dir / "summary.json", summary)
    except OSError as exc:
        if exc.__context__ is None:  # nothing else is propagating: this failure is the run's
            raise
        log.error("could not write %s: %s", run_dir / "summary.json", exc)

"""The trainer's counters (:class:`TrainState`), checkpointed as ``trainer`` and restored on resume."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["TrainState", "next_threshold"]


@dataclass
class TrainState:
    """Trainer counters, checkpointed and restored on resume."""

    iteration: int = 0
    env_steps: int = 0
    wall_time_s: float = 0.0
    next_eval: int = 0
    next_checkpoint: int = 0
    solved_env_steps: int | None = None
    solved_wall_time_s: float | None = None
    last: dict[str, Any] = field(default_factory=dict)
    stop_condition: str | None = None  # the trainer.stop_on condition that held
    stop_state: dict[str, list] = field(default_factory=dict)  # plateau bookkeeping of trainer.stop_on
    best_metric: str | None = None  # the metric checkpoints/best.pt was chosen by, its value and env steps
    best_value: float | None = None
    best_env_steps: int | None = None
    best_return: float | None = None  # its eval/return_mean, which breaks ties of best_value
    curriculum: dict[str, int] = field(default_factory=dict)  # trainer.curriculum: each entry's level


def next_threshold(value: int, every: int) -> int:
    """The first multiple of ``every`` strictly above ``value`` (cadences fire on crossing)."""
    return (value // every + 1) * every

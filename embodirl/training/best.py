"""``checkpoints/best.pt``: the state with the best value of ``trainer.best_metric`` so far."""

from __future__ import annotations

import math
from typing import Any, Literal

from embodirl.training.state import TrainState

__all__ = ["BestTracker"]


class BestTracker:
    """Tells when a record beats the best value of ``metric`` so far (the first to reach a value keeps it).

    Args:
        metric: The metric (``trainer.best_metric``, else the env's ``solved_metric``).
        mode: ``max`` (higher is better) or ``min``.
    """

    def __init__(self, metric: str, mode: Literal["max", "min"]) -> None:
        self.metric, self.mode = metric, mode

    def improved(self, record: dict[str, Any], state: TrainState) -> bool:
        """Whether ``record`` holds a new best; if so, it is noted in ``state`` (``best_*``)."""
        value = record.get(self.metric)
        if not (isinstance(value, int | float) and math.isfinite(value)):
            return False
        if state.best_value is not None and not (value > state.best_value if self.mode == "max"
                                                 else value < state.best_value):
            return False
        state.best_metric, state.best_value, state.best_env_steps = self.metric, float(value), state.env_steps
        return True

    def resumed(self, state: TrainState) -> None:
        """Forget a resumed run's best when it was chosen by another metric (``trainer.best_metric`` changed)."""
        if state.best_metric != self.metric:
            state.best_value = state.best_env_steps = None

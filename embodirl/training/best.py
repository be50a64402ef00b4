"""``checkpoints/best.pt``: the state with the best value of ``trainer.best_metric`` so far."""

from __future__ import annotations

import math
from typing import Any, Literal, TypeGuard

from embodirl.training.state import TrainState

__all__ = ["BestTracker"]


class BestTracker:
    """Tells when a record beats the best value of ``metric`` so far.

    A metric that saturates (a success rate at 1.0) ties often; a tie goes to the higher ``eval/return_mean``
    and, where that ties too (or is the metric itself), to the later record: the policy trained longer.

    Args:
        metric: The metric (``trainer.best_metric``, else the env's ``solved_metric``).
        mode: ``max`` (higher is better) or ``min``.
    """

    TIEBREAK = "eval/return_mean"

    def __init__(self, metric: str, mode: Literal["max", "min"]) -> None:
        self.metric, self.mode = metric, mode

    def improved(self, record: dict[str, Any], state: TrainState) -> bool:
        """Whether ``record`` holds a new best; if so, it is noted in ``state`` (``best_*``)."""
        value, ret = record.get(self.metric), record.get(self.TIEBREAK)
        if not _finite(value):
            return False
        ret = float(ret) if _finite(ret) else None
        if state.best_value is not None and not self._beats(float(value), ret, state.best_value, state.best_return):
            return False
        state.best_metric, state.best_value, state.best_env_steps = self.metric, float(value), state.env_steps
        state.best_return = ret
        return True

    def _beats(self, value: float, ret: float | None, best: float, best_ret: float | None) -> bool:
        """``value`` with return ``ret`` beats ``best`` with ``best_ret``: better, or equal and no lower return."""
        if value != best:
            return value > best if self.mode == "max" else value < best
        return ret is None or best_ret is None or ret >= best_ret

    def resumed(self, state: TrainState) -> None:
        """Forget a resumed run's best when it was chosen by another metric (``trainer.best_metric`` changed)."""
        if state.best_metric != self.metric:
            state.best_value = state.best_env_steps = state.best_return = None


def _finite(value: Any) -> TypeGuard[int | float]:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)

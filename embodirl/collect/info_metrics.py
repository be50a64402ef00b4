"""Env ``info`` values logged as episode metrics: ``episode/metrics/<key>`` and ``eval/metrics/<key>``.

An env declares which of its ``StepResult.info`` entries are metrics in :attr:`BatchedEnv.info_metrics`
(push_cube: ``dist_to_goal``, ``is_reached``). Each step records their values (:meth:`InfoMetrics.values`); for each
finished episode the value on its last step (the step that ended it: the cube's final distance to the goal) is
accumulated on the device when a block of steps is folded (:meth:`InfoMetrics.add_steps`, called by
:class:`~embodirl.collect.episode_stats.EpisodeStats`); the metric is the mean over the episodes finished since the
last :meth:`InfoMetrics.pop` (booleans become fractions).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import Tensor

__all__ = ["InfoMetrics"]


class InfoMetrics:
    """On-device sums of declared info values at episode ends.

    Args:
        keys: The env's ``info_metrics``.
        num_envs: Number of envs ``N``.
        device: Device of the env's tensors.
    """

    def __init__(self, keys: Sequence[str], num_envs: int, device: torch.device) -> None:
        self.keys = tuple(keys)
        # Row k < K: per-env sum of info[keys[k]] over the counted episodes; row K: their count.
        self.sums = torch.zeros(len(self.keys) + 1, num_envs, dtype=torch.float64, device=device)

    def values(self, info: dict[str, Tensor]) -> Tensor:
        """This step's values of the keys, ``[N, K]`` (what a step records for :meth:`add_steps`)."""
        missing = [key for key in self.keys if key not in info]
        if missing:
            raise KeyError(f"the env declares info_metrics {list(self.keys)} but its step() info lacks {missing} "
                           f"(it has {sorted(info)}): return every declared key on every step")
        return torch.stack([info[key].reshape(-1) for key in self.keys], dim=1)

    def add_steps(self, values: Tensor, ended: Tensor) -> None:
        """Count the episodes that end in a block of ``S`` steps with their values on that step.

        Args:
            values: ``[S, N, K]``, :meth:`values` of each step.
            ended: ``[S, N]`` bool, the step ended a counted episode.
        """
        if self.keys:
            weight = ended.to(torch.float64)
            self.sums[:-1] += (values * weight.unsqueeze(-1)).sum(dim=0).t()
            self.sums[-1] += weight.sum(dim=0)

    def zero(self) -> None:
        self.sums.zero_()

    def pop(self, prefix: str, reduce: Callable[[Tensor], Tensor] | None = None) -> dict[str, float]:
        """``{prefix + key: mean}`` over the counted episodes (none when no episode ended), then clear.

        Args:
            prefix: ``"episode/metrics/"`` or ``"eval/metrics/"``.
            reduce: Applied to the ``[K + 1]`` sums before the means, e.g. a sum over ranks.
        """
        if not self.keys:
            return {}
        sums = self.sums.sum(dim=1)
        *totals, count = (sums if reduce is None else reduce(sums)).tolist()
        self.sums.zero_()
        if count == 0:
            return {}
        return {prefix + key: total / count for key, total in zip(self.keys, totals, strict=True)}

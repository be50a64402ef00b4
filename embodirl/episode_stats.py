"""Episode statistics the collector keeps: return, length and success of every finished episode.

Accumulated on the device at every step (no host sync) and fetched once per training iteration with
:meth:`EpisodeStats.pop`. Envs keep none: they return rewards and flags, the collector counts.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

__all__ = ["EpisodeStats"]


class EpisodeStats:
    """Per-env running episode return/length and on-device sums over finished episodes.

    Args:
        num_envs: Number of envs.
        device: Device of the env's tensors.
    """

    def __init__(self, num_envs: int, device: torch.device | str) -> None:
        self.num_envs = num_envs
        self.device = torch.device(device)
        self.running_return = torch.zeros(num_envs, dtype=torch.float64, device=self.device)
        self.running_length = torch.zeros(num_envs, dtype=torch.int64, device=self.device)
        # Per-env sums over finished episodes: count, return, length, successes. Reduced only in pop().
        self._sums = torch.zeros(4, num_envs, dtype=torch.float64, device=self.device)
        self._sums_no_success = self._sums[:3]
        self._ones = torch.ones(num_envs, dtype=torch.float64, device=self.device)
        self._reports_success = False

    def step(self, reward: Tensor, done: Tensor, success: Tensor | None = None) -> None:
        """Account one env step; ``done`` envs close their episode and start a fresh one (eight ops: on a CPU
        every op costs a few microseconds, so a step is kept to few of them)."""
        self.running_return += reward
        self.running_length += 1
        done_f = done.to(torch.float64)
        if success is None:
            rows = torch.stack((self._ones, self.running_return, self.running_length))
            self._sums_no_success.addcmul_(rows, done_f)
        else:
            rows = torch.stack((self._ones, self.running_return, self.running_length, success))
            self._sums.addcmul_(rows, done_f)
            self._reports_success = True  # a constant store: compiled steps need no guard on it
        self.running_return.masked_fill_(done, 0.0)
        self.running_length.masked_fill_(done, 0)

    def buffers(self) -> tuple[Tensor, ...]:
        """The tensors :meth:`step` updates in place (for :func:`mark_static`)."""
        return self.running_return, self.running_length, self._sums

    def discard(self, mask: Tensor | None = None) -> None:
        """Drop the partial episodes of ``mask`` envs (all when None), e.g. on a forced reset."""
        if mask is None:
            self.running_return.zero_()
            self.running_length.zero_()
        else:
            self.running_return *= ~mask
            self.running_length *= ~mask

    def pop(self, reduce: Callable[[Tensor], Tensor] | None = None) -> dict[str, float]:
        """Means over the episodes finished since the last call (one host sync), then clear.

        Args:
            reduce: Applied to the ``[4]`` sums (count, return, length, successes) before the means,
                e.g. a sum over ranks.

        Returns:
            ``episode/count``, and when at least one episode finished ``episode/return_mean``,
            ``episode/length_mean``, plus ``episode/success_rate`` if the env reports success.
        """
        sums = self._sums.sum(dim=1)
        count, ret, length, success = (sums if reduce is None else reduce(sums)).tolist()
        reports_success = self._reports_success
        self._sums.zero_()
        out = {"episode/count": count}
        if count > 0:
            out["episode/return_mean"] = ret / count
            out["episode/length_mean"] = length / count
            if reports_success:
                out["episode/success_rate"] = success / count
        return out

    def state_dict(self) -> dict[str, Tensor]:
        return {
            "running_return": self.running_return.clone(),
            "running_length": self.running_length.clone(),
            "sums": self._sums.clone(),
            "reports_success": torch.tensor(self._reports_success),
        }

    def load_state_dict(self, state: dict[str, Tensor]) -> None:
        self.running_return.copy_(state["running_return"])
        self.running_length.copy_(state["running_length"])
        self._sums.copy_(state["sums"])
        self._reports_success = bool(state["reports_success"])

"""Episode statistics: return, length and success of the episodes that end in a block of steps.

:func:`fold_steps` closes the episodes of a block of steps at once, from its rewards and flags (the collector
folds each rollout, the evaluator every 16 steps): a few dozen tensor ops per block instead of a handful per
step, which on a CPU, where every op costs microseconds, is most of the bookkeeping's time. The sums stay on
the device (no host sync) and are fetched once per training iteration with :meth:`EpisodeStats.pop`. Envs keep
none: they return rewards and flags, the collector counts.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

__all__ = ["EpisodeStats", "fold_steps"]


def fold_steps(reward: Tensor, done: Tensor, success: Tensor, episode_return: Tensor, episode_length: Tensor,
               success_once: Tensor, finished: Tensor, target: Tensor) -> tuple[Tensor, Tensor, tuple[Tensor, ...]]:
    """The episodes that end in a block of ``S`` consecutive steps of ``N`` envs, from its rewards and flags at once.

    Env ``i`` records its first ``target[i]`` episodes. An episode that began before the block carries in its
    return, length and whether it had a success so far; ``finished`` counts the episodes each env ended before.
    Returns are the float64 sums of the rewards (``total - total at the previous end`` within the block).

    Args:
        reward: ``[S, N]`` float64 rewards.
        done: ``[S, N]`` bool, the step ended its env's episode.
        success: ``[S, N]`` bool, the step was a success (all False for an env without a success criterion).
        episode_return: ``[N]`` float64, return of each env's running episode before the block.
        episode_length: ``[N]`` float64, its length.
        success_once: ``[N]`` bool, whether it had a successful step.
        finished: ``[N]`` int64, episodes each env ended before the block.
        target: ``[N]`` int64, episodes each env records.

    Returns:
        ``(sums, record, carry)``: per-env sums over the recorded episodes that end in the block, ``[5, N]``
        (return, squared return, length, success on the last step, success on any step); ``record``
        ``[S, N]``, the steps that end a recorded episode; ``carry``, the four per-env inputs after the block.
    """
    steps = torch.arange(done.shape[0], device=done.device).unsqueeze(1)
    last_end = torch.cummax(torch.where(done, steps, -1), dim=0).values
    start = torch.cat([torch.full_like(last_end[:1], -1), last_end[:-1]])  # the previous end (-1: before the block)
    fresh = start >= 0  # the step's episode began inside the block
    total = torch.cumsum(reward, dim=0) + episode_return
    returns = total - torch.where(fresh, total.gather(0, start.clamp_min(0)), 0.0)
    lengths = torch.where(fresh, steps - start, episode_length + steps + 1).to(torch.float64)
    record = done & (finished + torch.cumsum(done, dim=0) - done.long() < target)
    last_success = torch.cummax(torch.where(success, steps, -1), dim=0).values
    once = (last_success > start) | (success_once & ~fresh)  # a success since the episode began
    rows = torch.stack([returns, returns * returns, lengths, success.to(torch.float64), once.to(torch.float64)])
    sums = (rows * record.to(torch.float64)).sum(dim=1)
    carry = (returns[-1].masked_fill(done[-1], 0.0), lengths[-1].masked_fill(done[-1], 0.0), once[-1] & ~done[-1],
             finished + done.sum(dim=0))
    return sums, record, carry


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
        self._reports_success = False
        # fold_steps' inputs that are constant here: no success so far, no episode counted yet, every one counted.
        self._no_success = torch.zeros(num_envs, dtype=torch.bool, device=self.device)
        self._none = torch.zeros(num_envs, dtype=torch.int64, device=self.device)
        self._every = torch.full_like(self._none, torch.iinfo(torch.int64).max)

    def add_steps(self, reward: Tensor, done: Tensor, success: Tensor | None = None) -> None:
        """Account a block of ``S`` consecutive steps (:func:`fold_steps`): ``reward`` ``[S, N]``, ``done``
        ``[S, N]`` bool, ``success`` ``[S, N]`` bool when the env reports it; episodes running at the block's
        end continue into the next one."""
        flags = torch.zeros_like(done) if success is None else success
        sums, record, (ret, length, _, _) = fold_steps(
            reward.to(torch.float64), done, flags, self.running_return, self.running_length.to(torch.float64),
            self._no_success, self._none, self._every)
        self._sums[0] += record.sum(dim=0)
        self._sums[1:3] += sums[[0, 2]]
        if success is not None:
            self._sums[3] += sums[3]
            self._reports_success = True
        self.running_return.copy_(ret)
        self.running_length.copy_(length)

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

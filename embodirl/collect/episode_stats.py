"""Episode statistics, counted one way for training and evaluation: :class:`EpisodeStats`.

The collector and the evaluator record each step's reward and ``done`` (and ``success`` and the env's info
metrics, :meth:`EpisodeStats.extend_record`) in buffers along a time dimension; after a block of steps (the
collector's rollout, the evaluator's 16-step block) :meth:`EpisodeStats.add_steps` closes the block's episodes at
once (:func:`fold_steps`): a few dozen tensor ops per block instead of a handful per step. The sums stay on the
device (no host sync) and are fetched once per training iteration (:meth:`EpisodeStats.pop`) or evaluation
(:meth:`EpisodeStats.take`). Envs keep none: they return rewards and flags, the collector counts.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import Tensor

from embodirl.collect.info_metrics import InfoMetrics

__all__ = ["EpisodeStats", "fold_steps", "fold_sums"]

ROWS = ("count", "return", "return_sq", "length", "success_at_end", "success_once")  # EpisodeStats' sums


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


def fold_sums(values: Tensor, done: Tensor, running: Tensor) -> tuple[Tensor, Tensor]:
    """Per-episode sums of ``K`` values over a block of ``S`` steps of ``N`` envs (the reward's terms).

    Args:
        values: ``[S, N, K]`` float64, each step's values.
        done: ``[S, N]`` bool, the step ended its env's episode.
        running: ``[N, K]`` float64, the sums of each env's running episode before the block.

    Returns:
        ``(sums, carry)``: ``[S, N, K]``, the sums of the episode each step belongs to, up to and including it (at a
        step that ends an episode: its total); ``[N, K]``, the running sums after the block.
    """
    steps = torch.arange(done.shape[0], device=done.device).unsqueeze(1)
    last_end = torch.cummax(torch.where(done, steps, -1), dim=0).values
    start = torch.cat([torch.full_like(last_end[:1], -1), last_end[:-1]])  # the previous end (-1: before the block)
    total = torch.cumsum(values, dim=0) + running
    before = total.gather(0, start.clamp_min(0).unsqueeze(-1).expand_as(total))
    sums = total - torch.where((start >= 0).unsqueeze(-1), before, 0.0)
    return sums, sums[-1].masked_fill(done[-1].unsqueeze(-1), 0.0)


class EpisodeStats:
    """Per-env running episodes and on-device sums over the finished episodes each env records.

    Every episode is recorded unless :meth:`restart` sets a target (the evaluator: env ``i`` records its first
    ``target[i]`` episodes). The env's ``info_metrics`` are counted at the same episode ends (:attr:`info`), and so
    are the sums of its ``reward_terms`` over each episode (:attr:`term_sums`).

    Args:
        num_envs: Number of envs.
        device: Device of the env's tensors.
        info_keys: The env's ``info_metrics`` (:mod:`embodirl.collect.info_metrics`).
        reward_terms: The env's ``reward_terms`` (each step's ``info["reward/<term>"]``).
    """

    def __init__(self, num_envs: int, device: torch.device | str, info_keys: Sequence[str] = (),
                 reward_terms: Sequence[str] = ()) -> None:
        self.num_envs = num_envs
        self.device = torch.device(device)
        self.info = InfoMetrics(info_keys, num_envs, self.device)
        # The env's reward terms: each one's sum over the running episode and over the recorded ones, per env.
        self.reward_terms = tuple(reward_terms)
        self.running_terms = torch.zeros(num_envs, len(self.reward_terms), dtype=torch.float64, device=self.device)
        self.term_sums = torch.zeros_like(self.running_terms)
        zeros = torch.zeros(num_envs, dtype=torch.float64, device=self.device)
        # The running episode of each env (return, length, a success so far) and the episodes it has ended.
        self.running_return, self.running_length = zeros, zeros.clone()
        self.success_once = torch.zeros(num_envs, dtype=torch.bool, device=self.device)
        self.finished = torch.zeros(num_envs, dtype=torch.int64, device=self.device)
        self.target = torch.full_like(self.finished, torch.iinfo(torch.int64).max)
        self._sums = torch.zeros(len(ROWS), num_envs, dtype=torch.float64, device=self.device)  # per env, by ROWS
        self.reports_success = False  # the env's step info has "success"

    def extend_record(self, info: dict[str, Tensor], record: dict[str, Any]) -> None:
        """Add to a step's ``record`` what the statistics need beyond its ``reward`` and ``done``: ``success`` when
        the env reports it, and ``info`` (``[N, K]``) when it declares info metrics. Runs inside compiled steps."""
        success = info.get("success")
        if success is not None:
            record["success"] = success
            self.reports_success = True  # a constant store: compiled steps need no guard on it
        if self.info.keys:
            record["info"] = self.info.values(info)
        if self.reward_terms:
            record["reward_terms"] = self.term_values(info)

    def term_values(self, info: dict[str, Tensor]) -> Tensor:
        """This step's reward terms, ``[N, K]`` (``info["reward/<term>"]`` of each of :attr:`reward_terms`)."""
        missing = [term for term in self.reward_terms if f"reward/{term}" not in info]
        if missing:
            raise KeyError(f"the env declares reward_terms {list(self.reward_terms)} but its step() info lacks "
                           f"{[f'reward/{term}' for term in missing]}: return every term on every step")
        return torch.stack([info[f"reward/{term}"].reshape(-1) for term in self.reward_terms], dim=1)

    def add_steps(self, reward: Tensor, done: Tensor, success: Tensor | None = None,
                  info: Tensor | None = None, terms: Tensor | None = None) -> None:
        """Account a block of ``S`` consecutive steps; episodes running at its end continue into the next block.

        Args:
            reward: ``[S, N]`` rewards.
            done: ``[S, N]`` bool.
            success: ``[S, N]`` bool when the env reports success (None: not reported).
            info: ``[S, N, K]`` values of the env's info metrics (None when it declares none).
            terms: ``[S, N, K]`` the env's reward terms (None when it declares none).
        """
        if success is not None:
            self.reports_success = True
        flags = torch.zeros_like(done) if success is None else success
        sums, record, carry = fold_steps(reward.to(torch.float64), done, flags, self.running_return,
                                         self.running_length, self.success_once, self.finished, self.target)
        self._sums[0] += record.sum(dim=0)
        self._sums[1:] += sums
        for buffer, value in zip((self.running_return, self.running_length, self.success_once, self.finished), carry,
                                 strict=True):
            buffer.copy_(value)
        if info is not None:
            self.info.add_steps(info, record)
        if terms is not None and self.reward_terms:
            term_sums, running_terms = fold_sums(terms.to(torch.float64), done, self.running_terms)
            self.term_sums += (term_sums * record.unsqueeze(-1).to(torch.float64)).sum(dim=0)
            self.running_terms.copy_(running_terms)

    def discard(self) -> None:
        """Drop the partial episodes (a forced reset of every env); the finished ones stay counted."""
        for buffer in (self.running_return, self.running_length, self.success_once, self.running_terms):
            buffer.zero_()

    def restart(self, target: Tensor | None = None) -> None:
        """Forget every episode and sum; then env ``i`` records its first ``target[i]`` episodes (None: all)."""
        self.discard()
        for buffer in (self.finished, self._sums, self.term_sums):
            buffer.zero_()
        self.info.zero()
        if target is None:
            self.target.fill_(torch.iinfo(torch.int64).max)
        else:
            self.target.copy_(target)

    def all_recorded(self) -> bool:
        """Whether every env has ended the episodes it records (one host sync)."""
        return bool((self.finished >= self.target).all())

    def take(self, reduce: Callable[[Tensor], Tensor] | None = None) -> Tensor:
        """The sums over envs, ``[6]`` in :data:`ROWS` order, with ``reduce`` (e.g. a sum over ranks) applied; then
        clear them."""
        sums = self._sums.sum(dim=1)
        self._sums.zero_()
        return sums if reduce is None else reduce(sums)

    def pop(self, reduce: Callable[[Tensor], Tensor] | None = None) -> dict[str, float]:
        """The training metrics of the episodes finished since the last call (one host sync each), then clear.

        Args:
            reduce: Applied to the sums before the means, e.g. a sum over ranks.

        Returns:
            ``episode/count``, and when at least one episode finished ``episode/return_mean``,
            ``episode/length_mean``, plus ``episode/success_rate`` (success on the last step) if the env reports
            success; then ``episode/metrics/<key>`` of the env's info metrics and ``episode/rewards/<term>`` of its
            reward terms (the mean of each one's sum over an episode).
        """
        count, ret, _, length, success, _ = self.take(reduce).tolist()
        out = {"episode/count": count}
        if count > 0:
            out["episode/return_mean"] = ret / count
            out["episode/length_mean"] = length / count
            if self.reports_success:
                out["episode/success_rate"] = success / count
        out.update(self.info.pop("episode/metrics/", reduce))
        out.update(self.pop_terms("episode/rewards/", count, reduce))
        return out

    def pop_terms(self, prefix: str, count: float,
                  reduce: Callable[[Tensor], Tensor] | None = None) -> dict[str, float]:
        """``{prefix + term: mean episode sum}`` over the ``count`` episodes counted since the last call (none when
        ``count`` is 0), then clear; ``reduce`` (a sum over ranks) is applied to the sums first."""
        if not self.reward_terms:
            return {}
        sums = self.term_sums.sum(dim=0)
        totals = (sums if reduce is None else reduce(sums)).tolist()
        self.term_sums.zero_()
        if count <= 0:
            return {}
        return {prefix + term: total / count for term, total in zip(self.reward_terms, totals, strict=True)}

    def state_dict(self) -> dict[str, Tensor]:
        """The running episodes and the sums (to continue a training run exactly)."""
        return {"running_return": self.running_return.clone(), "running_length": self.running_length.clone(),
                "success_once": self.success_once.clone(), "sums": self._sums.clone(),
                "info_sums": self.info.sums.clone(), "reports_success": torch.tensor(self.reports_success),
                "running_terms": self.running_terms.clone(), "term_sums": self.term_sums.clone()}

    def load_state_dict(self, state: dict[str, Tensor]) -> None:
        """Load :meth:`state_dict`, or the layout written before evaluation shared these statistics (integer
        lengths; sums of count, return, length and success only; no success-once and no info metric sums)."""
        self.running_return.copy_(state["running_return"])
        self.running_length.copy_(state["running_length"])
        self.success_once.copy_(state.get("success_once", torch.zeros_like(self.success_once)))
        self.info.sums.copy_(state.get("info_sums", torch.zeros_like(self.info.sums)))
        self.running_terms.copy_(state.get("running_terms", torch.zeros_like(self.running_terms)))
        self.term_sums.copy_(state.get("term_sums", torch.zeros_like(self.term_sums)))
        sums = state["sums"]
        self._sums.zero_()
        if sums.shape[0] == len(ROWS):
            self._sums.copy_(sums)
        else:
            self._sums[[0, 1, 3, 4]] = sums.to(self._sums)
        self.reports_success = bool(state["reports_success"])

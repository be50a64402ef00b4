"""Deterministic evaluation on separate env instances."""

from __future__ import annotations

import math

import torch

from embodirl.accel.compile import Acceleration, capture, compile_step
from embodirl.collect.collector import StepSlot, leaves
from embodirl.collect.episode_stats import fold_steps
from embodirl.collect.info_metrics import InfoMetrics
from embodirl.envs.base import BatchedEnv, env_mode
from embodirl.envs.observations import allocate, observation_spec
from embodirl.policies.base import Policy

__all__ = ["Evaluator", "evaluate_policy"]

_BLOCK = 16  # steps between folds of the episode bookkeeping (and host-side "all episodes done?" checks)


class Evaluator:
    """Runs deterministic episodes of ``policy`` in ``env`` (its own env copies).

    Env ``i`` runs ``num_episodes // E`` episodes (+1 for the first ``num_episodes % E``), so short
    episodes are not over-represented. The env is reset with the given seed every call, so successive
    evaluations see the same initial states and differ only through the policy. One step
    (:meth:`step`) acts, steps the env and stores the step's rewards and flags in a block of ``_BLOCK`` rows;
    every block is then folded into the episode statistics at once (:func:`fold_steps`: a few dozen ops per
    block instead of a dozen per step). The step reads and writes only tensors allocated once, so it can be
    compiled and captured as a CUDA graph (``accel``), like the collector's.

    Args:
        env: The evaluation env.
        policy: The policy (its deterministic action, :meth:`Policy.mode`, is taken).
        accel: Compile and/or capture the evaluation step.
    """

    def __init__(self, env: BatchedEnv, policy: Policy, accel: Acceleration = Acceleration()) -> None:
        self.env, self.policy = env, policy
        n, dev = env.num_envs, env.device
        spec = observation_spec(env.observation_space)
        self._keys = list(spec)
        self.obs = allocate(spec, (n,), dev)
        self._obs = leaves(self.obs, self._keys)
        self.state = policy.initial_state(n)
        self._target = torch.zeros(n, dtype=torch.int64, device=dev)  # episodes env i records
        # The block of steps since the last fold, and the running episodes carried across folds.
        self._reward = torch.zeros(_BLOCK, n, dtype=torch.float64, device=dev)
        self._done = torch.zeros(_BLOCK, n, dtype=torch.bool, device=dev)
        self._success = torch.zeros(_BLOCK, n, dtype=torch.bool, device=dev)
        self._info = InfoMetrics(getattr(env, "info_metrics", ()), n, dev)  # eval/metrics/*
        self._values = torch.zeros(len(self._info.keys), _BLOCK, n, dtype=torch.float64, device=dev)
        self._carry = (torch.zeros(n, dtype=torch.float64, device=dev), torch.zeros(n, dtype=torch.float64, device=dev),
                       torch.zeros(n, dtype=torch.bool, device=dev), torch.zeros(n, dtype=torch.int64, device=dev))
        # Per env sums over its recorded episodes: return, return^2, length, success at end, success once.
        self._sums = torch.zeros(5, n, dtype=torch.float64, device=dev)
        self._reports_success = torch.zeros((), dtype=torch.bool, device=dev)
        self.recurrent = not self.state.is_empty()
        self._row = StepSlot(not accel.enabled, dev)  # the block row the next step writes
        self.accel = accel
        self._step = compile_step(self.step, accel.compile)

    def use_cuda_graphs(self) -> None:
        """Record :meth:`step` as a CUDA graph at its next calls (after the compile warm-up, before training)."""
        self._step = capture(self._step, self.accel.cuda_graphs, self.env.device)

    def step(self) -> None:
        """One deterministic step of every env, its rewards and flags stored in the block; the compiled/captured
        unit."""
        action, next_state = self.policy.mode(self.obs, self.state)
        step = self.env.step(action)
        done = step.terminated | step.truncated
        row = self._row
        row.write(self._reward, step.reward, 0)
        row.write(self._done, done, 0)
        success = step.info.get("success")
        if success is not None:
            self._reports_success.fill_(True)
            row.write(self._success, success, 0)
        if self._info.keys:
            row.write(self._values, self._info.values(step.info), 1)
        if self.recurrent:
            keep = ~done
            self.state.apply_(lambda buffer, leaf: buffer.copy_(leaf * keep.view(-1, *[1] * (leaf.dim() - 1))),
                              next_state)
        for buffer, leaf in zip(self._obs, leaves(step.obs, self._keys), strict=True):
            buffer.copy_(leaf)
        row.advance()

    def _fold(self) -> None:
        """Fold the block's steps into the episode statistics and start a new block."""
        sums, record, carry = fold_steps(self._reward, self._done, self._success, *self._carry, self._target)
        self._sums += sums
        self._info.add_steps(self._values, record)
        for buffer, value in zip(self._carry, carry, strict=True):
            buffer.copy_(value)
        self._row.reset()

    @env_mode()
    def evaluate(self, num_episodes: int, seed: int) -> dict[str, float]:
        """Run ``num_episodes`` deterministic episodes spread evenly over the env's copies.

        Returns:
            ``eval/return_mean``, ``eval/return_std`` (population), ``eval/length_mean``,
            ``eval/num_episodes``, and when the env reports ``success``: ``eval/success_at_end`` (success
            on the episode's last step), ``eval/success_once`` (success at any step) and
            ``eval/success_rate`` (= ``success_at_end``, the stricter one, which decides "solved"), and
            ``eval/metrics/<key>`` for the env's ``info_metrics`` (mean of the value on each episode's last step).
        """
        n = self.env.num_envs
        index = torch.arange(n, device=self.env.device)
        self._target.copy_(num_episodes // n + (index < num_episodes % n))
        for buffer in (*self._carry, self._sums, self._reports_success):
            buffer.zero_()
        self._info.zero()
        for buffer, leaf in zip(self._obs, leaves(self.env.reset(seed=seed), self._keys), strict=True):
            buffer.copy_(leaf)
        self.state.zero_()
        self._row.reset()
        max_steps = self.env.max_episode_steps * math.ceil(num_episodes / n) + 1  # every recorded episode has ended
        for _ in range(math.ceil(max_steps / _BLOCK)):
            for _ in range(_BLOCK):
                self._step()
            self._fold()
            if bool((self._carry[3] >= self._target).all()):
                break

        total_return, total_sq, total_length, at_end, once = (self._sums.sum(dim=1) / num_episodes).tolist()
        metrics = {
            "eval/return_mean": total_return,
            "eval/return_std": math.sqrt(max(total_sq - total_return**2, 0.0)),
            "eval/length_mean": total_length,
            "eval/num_episodes": float(num_episodes),
        }
        if bool(self._reports_success):
            metrics.update({"eval/success_rate": at_end, "eval/success_at_end": at_end, "eval/success_once": once})
        metrics.update(self._info.pop("eval/metrics/"))
        return metrics


def evaluate_policy(env: BatchedEnv, policy: Policy, num_episodes: int, seed: int) -> dict[str, float]:
    """Eager one-off evaluation (see :meth:`Evaluator.evaluate`)."""
    return Evaluator(env, policy).evaluate(num_episodes, seed)

"""Deterministic evaluation on separate env instances."""

from __future__ import annotations

import math

import torch

from embodirl.collector import leaves
from embodirl.compiled import Acceleration, capture, compile_step
from embodirl.envs.base import BatchedEnv, env_mode
from embodirl.envs.observations import allocate, observation_spec
from embodirl.info_metrics import InfoMetrics
from embodirl.policies.base import PolicyProtocol

__all__ = ["Evaluator", "evaluate_policy"]

_CHECK_EVERY = 16  # steps between host-side "all episodes done?" checks


class Evaluator:
    """Runs deterministic episodes of ``policy`` in ``env`` (its own env copies).

    Env ``i`` runs ``num_episodes // E`` episodes (+1 for the first ``num_episodes % E``), so short
    episodes are not over-represented. The env is reset with the given seed every call, so successive
    evaluations see the same initial states and differ only through the policy. One step
    (:meth:`step`) reads and writes only tensors allocated once, so it can be compiled and captured
    as a CUDA graph (``accel``), like the collector's.

    Args:
        env: The evaluation env.
        policy: The policy (its deterministic action, :meth:`Policy.mode`, is taken).
        accel: Compile and/or capture the evaluation step.
    """

    def __init__(self, env: BatchedEnv, policy: PolicyProtocol, accel: Acceleration = Acceleration()) -> None:
        self.env, self.policy = env, policy
        n, dev = env.num_envs, env.device
        spec = observation_spec(env.observation_space)
        self._keys = list(spec)
        self.obs = allocate(spec, (n,), dev)
        self._obs = leaves(self.obs, self._keys)
        self.state = policy.initial_state(n)
        self._target = torch.zeros(n, dtype=torch.int64, device=dev)  # episodes env i records
        self._finished = torch.zeros(n, dtype=torch.int64, device=dev)
        self._return = torch.zeros(n, dtype=torch.float64, device=dev)  # of the current episode
        self._length = torch.zeros(n, dtype=torch.float64, device=dev)
        self._ever_success = torch.zeros(n, dtype=torch.bool, device=dev)
        # Per env sums over its recorded episodes: return, return^2, length, success at end, success once.
        self._sums = torch.zeros(5, n, dtype=torch.float64, device=dev)
        self._sums_no_success = self._sums[:3]  # the rows an env without ``success`` updates
        self._reports_success = torch.zeros((), dtype=torch.bool, device=dev)
        self.recurrent = not self.state.is_empty()
        self._info = InfoMetrics(getattr(env, "info_metrics", ()), n, dev)  # eval/metrics/*
        self.accel = accel
        self._step = compile_step(self.step, accel.compile)

    def use_cuda_graphs(self) -> None:
        """Record :meth:`step` as a CUDA graph at its next calls (after the compile warm-up, before training)."""
        self._step = capture(self._step, self.accel.cuda_graphs, self.env.device)

    def step(self) -> None:
        """One deterministic step of every env with the episode bookkeeping; the compiled/captured unit.

        Eager, every op here is dispatched one by one, so the bookkeeping is kept to a dozen ops (it costs as much
        as a CartPole step otherwise)."""
        action, next_state = self.policy.mode(self.obs, self.state)
        step = self.env.step(action)
        ret, length = self._return, self._length
        ret += step.reward
        length += 1
        done = step.terminated | step.truncated
        record = done & (self._finished < self._target)  # env i records its first target[i] episodes
        weight = record.to(torch.float64)
        success = step.info.get("success")
        if success is None:
            self._sums_no_success.addcmul_(torch.stack((ret, ret * ret, length)), weight)
        else:
            self._reports_success.fill_(True)
            self._ever_success |= success
            rows = (ret, ret * ret, length, success.to(torch.float64), self._ever_success.to(torch.float64))
            self._sums.addcmul_(torch.stack(rows), weight)
            self._ever_success.masked_fill_(done, False)
        self._finished += record
        self._info.step(step.info, record)
        ret.masked_fill_(done, 0.0)
        length.masked_fill_(done, 0.0)
        if self.recurrent:
            keep = ~done
            self.state.apply_(lambda buffer, leaf: buffer.copy_(leaf * keep.view(-1, *[1] * (leaf.dim() - 1))),
                              next_state)
        for buffer, leaf in zip(self._obs, leaves(step.obs, self._keys), strict=True):
            buffer.copy_(leaf)

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
        for buffer in (self._finished, self._return, self._length, self._ever_success, self._sums,
                       self._reports_success):
            buffer.zero_()
        self._info.zero()
        for buffer, leaf in zip(self._obs, leaves(self.env.reset(seed=seed), self._keys), strict=True):
            buffer.copy_(leaf)
        self.state.zero_()
        max_steps = self.env.max_episode_steps * math.ceil(num_episodes / n) + 1
        for t in range(max_steps):
            self._step()
            if t % _CHECK_EVERY == _CHECK_EVERY - 1 and bool((self._finished >= self._target).all()):
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


def evaluate_policy(env: BatchedEnv, policy: PolicyProtocol, num_episodes: int, seed: int) -> dict[str, float]:
    """Eager one-off evaluation (see :meth:`Evaluator.evaluate`)."""
    return Evaluator(env, policy).evaluate(num_episodes, seed)

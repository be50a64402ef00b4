"""Evaluation on separate env instances: the policy's most likely action, or actions sampled from it."""

from __future__ import annotations

import math

import torch
from tensordict import TensorCollection, TensorDict
from torch import Tensor

from embodirl.accel.compile import Acceleration
from embodirl.accel.loop import EAGER, Carry, StepLoop, Values
from embodirl.collect.collector import chunk_step, env_step
from embodirl.collect.episode_stats import EpisodeStats
from embodirl.envs.base import BatchedEnv, env_mode
from embodirl.envs.observations import allocate, observation_spec
from embodirl.policies.base import Policy
from embodirl.policies.distributions import chunk_steps

__all__ = ["Evaluator", "evaluate_policy"]

_BLOCK = 16  # steps between folds of the episode statistics (and host-side "all episodes done?" checks)


class Evaluator:
    """Runs episodes of ``policy`` in ``env`` (its own env copies), deterministic or sampled.

    Env ``i`` runs ``num_episodes // E`` episodes (+1 for the first ``num_episodes % E``), so short
    episodes are not over-represented. The env is reset with the given seed every call, so successive
    evaluations see the same initial states and differ only through the policy. One step is the plain function
    :meth:`step`: the deterministic action, the env step, and what the episode statistics need, recorded by a
    :class:`~embodirl.accel.loop.StepLoop` in a block of ``_BLOCK`` rows that is then folded into the
    episode statistics at once (the collector's :class:`~embodirl.collect.episode_stats.EpisodeStats`). Like the
    collector's, the step is compiled and captured as a CUDA graph with ``accel``.

    Sampled actions (``deterministic=False``, as SB3's and skrl's stochastic evaluation, the way VLA and GRPO
    policies are often judged) come from torch's generator seeded with the evaluation's seed inside a fork of the
    RNG state: two evaluations with one seed sample the same actions, and training's random stream is untouched.

    Args:
        env: The evaluation env.
        policy: The policy: its most likely action (:meth:`Policy.mode`), or one sampled (:meth:`Policy.act`).
        accel: Compile and/or capture the evaluation step.
        deterministic: Take the most likely action (True) or sample it from the policy's distribution.
    """

    def __init__(self, env: BatchedEnv, policy: Policy, accel: Acceleration = EAGER,
                 deterministic: bool = True) -> None:
        self.env, self.policy, self.deterministic = env, policy, deterministic
        n, dev = env.num_envs, env.device
        self.episode_stats = EpisodeStats(n, dev, getattr(env, "info_metrics", ()), getattr(env, "reward_terms", ()))
        state = policy.initial_state(n)
        self.recurrent = not state.is_empty()
        # A chunked policy's row is one decision: k env steps ([_BLOCK, k, N]), each counted by the statistics.
        self.execute = chunk_steps(policy.dist)
        rows = (_BLOCK, self.execute) if self.execute else (_BLOCK,)
        # The steps since the last fold of the episode statistics, row by row.
        self.block = TensorDict({"reward": torch.zeros(*rows, n, dtype=torch.float64, device=dev),
                                 "done": torch.zeros(*rows, n, dtype=torch.bool, device=dev),
                                 "success": torch.zeros(*rows, n, dtype=torch.bool, device=dev),
                                 "info": torch.zeros(*rows, n, len(self.episode_stats.info.keys), dtype=torch.float64,
                                                     device=dev),
                                 "reward_terms": torch.zeros(*rows, n, len(self.episode_stats.reward_terms),
                                                             dtype=torch.float64, device=dev)},
                                batch_size=[*rows, n], device=dev)
        carry = {"obs": allocate(observation_spec(env.observation_space), (n,), dev), "state": state}
        self.loop = StepLoop(self.chunk_step if self.execute else self.step, carry, dict(self.block.items()), dim=0,
                             accel=accel, device=dev, name="evaluation_step")

    def step(self, carry: Carry) -> tuple[Values, Values]:
        """One step of every env: what the block's row records and the next carry."""
        if self.deterministic:
            action, next_state = self.policy.mode(carry["obs"], carry["state"])
        else:
            action, _, _, next_state = self.policy.act(carry["obs"], carry["state"])
        out, done, next_carry = env_step(self.env, action, next_state, self.recurrent)
        record: dict[str, Tensor | TensorCollection] = {"reward": out.reward, "done": done}
        self.episode_stats.extend_record(out.info, record)
        return record, next_carry

    def chunk_step(self, carry: Carry) -> tuple[Values, Values]:
        """One decision of a chunked policy: its chunk's first ``k`` actions, one env step each (the collector's
        :func:`~embodirl.collect.collector.chunk_step`), recorded as ``k`` rows of env steps."""
        if self.deterministic:
            chunk, next_state = self.policy.mode(carry["obs"], carry["state"])
        else:
            chunk, _, _, next_state = self.policy.act(carry["obs"], carry["state"])
        out, _, steps = chunk_step(self.env, chunk, self.execute, self.episode_stats)
        return {key: value.transpose(0, 1) for key, value in steps.items()}, {"obs": out.obs, "state": next_state}

    def evaluate(self, num_episodes: int, seed: int) -> dict[str, float]:
        """Run ``num_episodes`` episodes spread evenly over the env's copies (sampled ones seeded by ``seed``).

        Returns:
            ``eval/return_mean``, ``eval/return_std`` (population), ``eval/length_mean``,
            ``eval/num_episodes``, ``eval/deterministic`` (1 for the most likely action, 0 sampled), and when
            the env reports ``success``: ``eval/success_at_end`` (success on the episode's last step),
            ``eval/success_once`` (success at any step) and ``eval/success_rate`` (= ``success_at_end``, the
            stricter one, which decides "solved"), and
            ``eval/metrics/<key>`` for the env's ``info_metrics`` (mean of the value on each episode's last step) and
            ``eval/rewards/<term>`` for its ``reward_terms`` (mean of each one's sum over an episode).
        """
        if self.deterministic:
            return self._run(num_episodes, seed)
        device = self.env.device
        with torch.random.fork_rng(devices=[device] if device.type == "cuda" else [], device_type=device.type):
            torch.manual_seed(seed)
            return self._run(num_episodes, seed)

    @env_mode()
    def _run(self, num_episodes: int, seed: int) -> dict[str, float]:
        n = self.env.num_envs
        index = torch.arange(n, device=self.env.device)
        self.episode_stats.restart(target=num_episodes // n + (index < num_episodes % n))
        self.loop.load_carry({"obs": self.env.reset(seed=seed)})
        self.loop.carry["state"].zero_()
        self.loop.rewind()
        max_steps = self.env.max_episode_steps * math.ceil(num_episodes / n) + 1  # every recorded episode has ended
        for _ in range(math.ceil(max_steps / _BLOCK)):
            self.loop.steps(_BLOCK)
            self._fold()
            if self.episode_stats.all_recorded():
                break
        return self._metrics(num_episodes)

    def _fold(self) -> None:
        """Fold the block's steps into the episode statistics and start a new block."""
        block = self.block.flatten(0, 1) if self.execute else self.block  # [_BLOCK, k, N] -> [_BLOCK k, N]
        self.episode_stats.add_steps(block["reward"], block["done"],
                                     block["success"] if self.episode_stats.reports_success else None,
                                     block["info"], block["reward_terms"])
        self.loop.rewind()

    def _metrics(self, num_episodes: int) -> dict[str, float]:
        _, mean_return, mean_sq, mean_length, at_end, once = (self.episode_stats.take() / num_episodes).tolist()
        metrics = {
            "eval/return_mean": mean_return,
            "eval/return_std": math.sqrt(max(mean_sq - mean_return**2, 0.0)),
            "eval/length_mean": mean_length,
            "eval/num_episodes": float(num_episodes),
            "eval/deterministic": float(self.deterministic),
        }
        if self.episode_stats.reports_success:
            metrics.update({"eval/success_rate": at_end, "eval/success_at_end": at_end, "eval/success_once": once})
        metrics.update(self.episode_stats.info.pop("eval/metrics/"))
        metrics.update(self.episode_stats.pop_terms("eval/rewards/", num_episodes))
        return metrics


    def use_cuda_graphs(self) -> None:
        """Record :meth:`step` as a CUDA graph at its next calls (after the compile warm-up, before training)."""
        self.loop.use_cuda_graphs()

def evaluate_policy(env: BatchedEnv, policy: Policy, num_episodes: int, seed: int,
                    deterministic: bool = True) -> dict[str, float]:
    """Eager one-off evaluation (see :meth:`Evaluator.evaluate`)."""
    return Evaluator(env, policy, deterministic=deterministic).evaluate(num_episodes, seed)

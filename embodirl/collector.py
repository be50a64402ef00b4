"""Runs a policy in a batched env and fills the pre-allocated ``[N, T+1]`` rollout."""

from __future__ import annotations

import torch
from tensordict import TensorDict
from torch import Tensor

from embodirl.algos.base import CollectPlan
from embodirl.envs.base import BatchedEnv
from embodirl.policies.base import Policy
from embodirl.rollout import allocate_rollout

__all__ = ["Collector"]

_CHECK_EVERY = 8  # steps between host-side "has every env finished an episode?" checks


class Collector:
    """Fills one rollout per :meth:`collect` call, continuing episodes across calls.

    The step loop writes into plain tensors of the pre-allocated TensorDict and never syncs with the
    host; after the loop one masked critic pass bootstraps the transitions cut by a time limit
    (``final_value``), which costs at most one host sync per rollout. With
    ``plan.stop_when_all_done`` the loop checks every few steps whether every env has finished an
    episode and then stops (the rest would be masked out); the rollout's non-tensor entry
    ``num_steps_collected`` says how many steps were simulated.

    Args:
        env: The training env.
        policy: The policy that acts.
        plan: Rollout length and reset behaviour requested by the algorithm.
    """

    def __init__(self, env: BatchedEnv, policy: Policy, plan: CollectPlan) -> None:
        self.env = env
        self.policy = policy
        self.plan = plan
        obs_shape = tuple(env.observation_space.shape)
        self.rollout = allocate_rollout(
            env.num_envs, plan.num_steps, obs_shape, policy.dist.action_shape, policy.dist.action_dtype, env.device
        )
        self._buf = {key: self.rollout.get(key) for key in self.rollout.keys()}
        self._final_obs = torch.zeros(env.num_envs, plan.num_steps, *obs_shape, device=env.device)
        self.obs: Tensor | None = None

    def reset(self, seed: int | None = None) -> None:
        """Start fresh episodes in every env."""
        self.obs = self.env.reset(seed=seed, group_size=self.plan.group_size if self.plan.reset_every_rollout else 1)

    @torch.no_grad()
    def collect(self) -> TensorDict:
        """Run ``T`` steps and return the filled rollout (the same TensorDict every call)."""
        if self.plan.reset_every_rollout or self.obs is None:
            self.reset()
        b = self._buf
        obs = self.obs
        num_steps = self.plan.num_steps
        finished = torch.zeros(self.env.num_envs, dtype=torch.bool, device=self.env.device)
        for t in range(self.plan.num_steps):
            if self.plan.stop_when_all_done and t % _CHECK_EVERY == 0 and t > 0 and bool(finished.all()):
                num_steps = t
                break
            action, log_prob, value = self.policy.act(obs)
            step = self.env.step(action)
            b["obs"][:, t] = obs
            b["action"][:, t] = action
            b["sample_log_prob"][:, t] = log_prob
            b["value"][:, t] = value
            b["reward"][:, t] = step.reward
            b["terminated"][:, t] = step.terminated
            b["truncated"][:, t] = step.truncated
            b["done"][:, t] = step.terminated | step.truncated
            if self.policy.has_critic:  # only a critic bootstraps from the true final observation
                self._final_obs[:, t] = step.final_obs
            if self.plan.stop_when_all_done:
                finished |= step.terminated | step.truncated
            obs = step.obs
        if num_steps < self.plan.num_steps:
            self._pad(num_steps)
        b["obs"][:, -1] = obs
        b["value"][:, -1] = self.policy.value(obs)
        self._bootstrap_truncations()
        self.obs = obs
        self.rollout.set_non_tensor("num_steps_collected", num_steps)
        return self.rollout

    def _pad(self, start: int) -> None:
        """Fill the slots the collector skipped with harmless padding: ended, zero reward."""
        for key, value in self._buf.items():
            value[:, start:-1] = key in ("done", "terminated")
        self._final_obs[:, start:] = 0

    def _bootstrap_truncations(self) -> None:
        final_value = self._buf["final_value"]
        final_value.zero_()
        if not self.policy.has_critic:
            return
        cut = self._buf["truncated"][:, :-1] & ~self._buf["terminated"][:, :-1]
        if cut.any():
            final_value[:, :-1][cut] = self.policy.value(self._final_obs[cut])

    def state_dict(self) -> dict[str, Tensor]:
        return {} if self.obs is None else {"obs": self.obs.clone()}

    def load_state_dict(self, state: dict[str, Tensor]) -> None:
        self.obs = state["obs"].to(self.env.device) if "obs" in state else None

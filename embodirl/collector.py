"""Runs a policy in a batched env and fills the pre-allocated ``[N, T+1]`` rollout."""

from __future__ import annotations

import torch
from tensordict import TensorDict
from torch import Tensor

from embodirl.algos.base import CollectPlan
from embodirl.compiled import Acceleration, capture, compile_step
from embodirl.envs.base import BatchedEnv
from embodirl.policies.base import Policy
from embodirl.rollout import allocate_rollout

__all__ = ["Collector"]

_CHECK_EVERY = 8  # steps between host-side "has every env finished an episode?" checks


class Collector:
    """Fills one rollout per :meth:`collect` call, continuing episodes across calls.

    One environment step is :meth:`step`: act on the current observation, step the env, write slot
    ``t`` of the rollout and advance ``t``. It reads and writes only tensors allocated once (the
    rollout, the current observation, ``t`` itself and the env's own state), takes no arguments and
    never syncs with the host, so it can be compiled as one graph and replayed as a CUDA graph
    (``accel``). After the loop one masked critic pass bootstraps the transitions cut by a time limit
    (``final_value``), at most one host sync per rollout. With ``plan.stop_when_all_done`` the loop checks
    every few steps whether every env has finished an episode and then stops (the rest would be masked
    out); the rollout's non-tensor entry ``num_steps_collected`` says how many steps were simulated.

    Args:
        env: The training env.
        policy: The policy that acts.
        plan: Rollout length and reset behaviour requested by the algorithm.
        accel: Compile and/or capture :meth:`step`.
    """

    def __init__(self, env: BatchedEnv, policy: Policy, plan: CollectPlan, accel: Acceleration = Acceleration()) -> None:
        self.env = env
        self.policy = policy
        self.plan = plan
        n, dev = env.num_envs, env.device
        obs_shape = tuple(env.observation_space.shape)
        self.rollout = allocate_rollout(n, plan.num_steps, obs_shape, policy.dist.action_shape,
                                        policy.dist.action_dtype, dev)
        self._buf = {key: self.rollout.get(key) for key in self.rollout.keys()}
        self._final_obs = torch.zeros(n, plan.num_steps, *obs_shape, device=dev) if policy.has_critic else None
        self._obs = torch.zeros(n, *obs_shape, device=dev)  # the observation to act on next
        self._finished = torch.zeros(n, dtype=torch.bool, device=dev)  # env ended an episode in this rollout
        self._t = torch.zeros(1, dtype=torch.int64, device=dev)  # the rollout slot the next step writes
        self.started = False
        self.accel = accel
        self._step = compile_step(self.step, accel.compile)

    def use_cuda_graphs(self) -> None:
        """Record :meth:`step` as a CUDA graph at its next calls (after the compile warm-up, before training)."""
        self._step = capture(self._step, self.accel.cuda_graphs, self.env.device)

    def reset(self, seed: int | None = None) -> None:
        """Start fresh episodes in every env."""
        group = self.plan.group_size if self.plan.reset_every_rollout else 1
        self._obs.copy_(self.env.reset(seed=seed, group_size=group))
        self.started = True

    def step(self) -> None:
        """One env step into rollout slot ``t``; the unit that is compiled and captured."""
        obs, t, b = self._obs, self._t, self._buf
        action, log_prob, value = self.policy.act(obs)
        step = self.env.step(action)
        done = step.terminated | step.truncated
        for key, data in (("obs", obs), ("action", action), ("sample_log_prob", log_prob), ("value", value),
                          ("reward", step.reward), ("terminated", step.terminated), ("truncated", step.truncated),
                          ("done", done)):
            b[key].index_copy_(1, t, data.unsqueeze(1))
        if self._final_obs is not None:  # only a critic bootstraps from the true final observation
            self._final_obs.index_copy_(1, t, step.final_obs.unsqueeze(1))
        if self.plan.stop_when_all_done:
            self._finished |= done
        obs.copy_(step.obs)
        t.add_(1)

    @torch.no_grad()
    def collect(self) -> TensorDict:
        """Run ``T`` steps and return the filled rollout (the same TensorDict every call)."""
        if self.plan.reset_every_rollout or not self.started:
            self.reset()
        self._t.zero_()
        self._finished.zero_()
        num_steps = self.plan.num_steps
        for t in range(self.plan.num_steps):
            if self.plan.stop_when_all_done and t % _CHECK_EVERY == 0 and t > 0 and bool(self._finished.all()):
                num_steps = t
                break
            self._step()
        if num_steps < self.plan.num_steps:
            self._pad(num_steps)
        self._buf["obs"][:, -1] = self._obs
        self._buf["value"][:, -1] = self.policy.value(self._obs)
        self._bootstrap_truncations(num_steps)
        self.rollout.set_non_tensor("num_steps_collected", num_steps)
        return self.rollout

    def _pad(self, start: int) -> None:
        """Fill the slots the collector skipped with harmless padding: ended, zero reward."""
        for key, value in self._buf.items():
            value[:, start:-1] = key in ("done", "terminated")

    def _bootstrap_truncations(self, num_steps: int) -> None:
        final_value = self._buf["final_value"]
        final_value.zero_()
        if self._final_obs is None:
            return
        cut = self._buf["truncated"][:, :num_steps] & ~self._buf["terminated"][:, :num_steps]
        if cut.any():
            final_value[:, :num_steps][cut] = self.policy.value(self._final_obs[:, :num_steps][cut])

    def state_dict(self) -> dict[str, Tensor]:
        return {"obs": self._obs.clone()} if self.started else {}

    def load_state_dict(self, state: dict[str, Tensor]) -> None:
        if "obs" in state:
            self._obs.copy_(state["obs"])
            self.started = True
        else:
            self.started = False

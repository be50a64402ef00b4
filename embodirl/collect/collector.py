"""Runs a policy in a batched env and fills the pre-allocated ``[N, T+1]`` rollout."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from tensordict import TensorDict
from torch import Tensor

from embodirl.accel.compile import Acceleration, capture, compile_step
from embodirl.collect.episode_stats import EpisodeStats
from embodirl.collect.info_metrics import InfoMetrics
from embodirl.collect.rollout import allocate_rollout
from embodirl.envs.base import BatchedEnv, env_mode
from embodirl.envs.observations import allocate, observation_spec
from embodirl.policies.base import Policy

__all__ = ["CollectPlan", "Collector", "StepSlot", "leaves"]

_CHECK_EVERY = 8  # steps between host-side "has every env finished an episode?" checks
_FLAT = ("action", "sample_log_prob", "value", "reward", "terminated", "truncated", "done")


@dataclass(frozen=True)
class CollectPlan:
    """How the collector fills rollouts for an algorithm.

    Attributes:
        num_steps: Rollout length ``T``.
        reset_every_rollout: Reset every env before each rollout (episodes start at t = 0).
        group_size: With ``reset_every_rollout``, envs in consecutive groups of this size start from
            one shared initial state (1 = independent).
        first_episode_only: Only each env's first episode of the rollout counts: stop stepping once every env
            has finished one (the rest would be masked out); later slots are padding with ``done = True``.
    """

    num_steps: int
    reset_every_rollout: bool = False
    group_size: int = 1
    first_episode_only: bool = False


def leaves(obs: Tensor | TensorDict, keys: list) -> list[Tensor]:
    """The tensors of an observation in ``keys`` order (a Box env's tensor is its only leaf)."""
    return [obs] if isinstance(obs, Tensor) else [obs.get(key) for key in keys]


class StepSlot:
    """The slot a step writes along a time dimension of buffers allocated once, advanced after every step.

    Eager it is a Python int (a slice write is one op less than an indexed one, and advancing it costs none); in
    a compiled or captured step it is a one-element device tensor, updated in place, so the step never recompiles
    and its CUDA graph reads the current slot.

    Args:
        eager: Whether the steps run eagerly (neither compiled nor captured).
        device: Device of the tensor slot.
    """

    def __init__(self, eager: bool, device: torch.device) -> None:
        self.eager = eager
        self.index = 0
        self.tensor = torch.zeros(1, dtype=torch.int64, device=device)

    def write(self, buffer: Tensor, data: Tensor, dim: int) -> None:
        """Write ``data`` into the current slot of ``buffer`` along ``dim`` (``data`` lacks that dimension)."""
        if self.eager:
            buffer.select(dim, self.index).copy_(data)
        else:
            buffer.index_copy_(dim, self.tensor, data.unsqueeze(dim))

    def advance(self) -> None:
        if self.eager:
            self.index += 1
        else:
            self.tensor.add_(1)

    def reset(self) -> None:
        self.index = 0
        self.tensor.zero_()


class Collector:
    """Fills one rollout per :meth:`collect` call, continuing episodes across calls.

    One environment step is :meth:`step`: act on the current observation (and the policy's state), step
    the env, write slot ``t`` of the rollout (and of the ``success`` flags), account the info metrics and
    advance ``t``. It reads and writes only tensors allocated once (the rollout, the current observation and
    policy state, ``t`` itself, the statistics and the env's own state), takes no arguments and never syncs
    with the host, so it can be compiled as one graph and replayed as a CUDA graph (``accel``).
    A recurrent policy's state is stored in the rollout (``policy_state``) and restarts where an episode
    ends. After the loop the rollout's rewards and flags are folded into the episode statistics at once
    (:meth:`EpisodeStats.add_steps`), and one masked critic pass bootstraps the transitions cut by a time
    limit (``final_value``; recurrent policies compute it inside the step), at most one host sync per rollout.
    With ``plan.first_episode_only`` the loop checks every few steps whether every env has finished an
    episode and then stops (the rest would be masked out); the rollout's non-tensor entry
    ``num_steps_collected`` says how many steps were simulated.

    Args:
        env: The training env.
        policy: The policy that acts.
        plan: Rollout length and reset behaviour requested by the algorithm.
        accel: Compile and/or capture :meth:`step`.
    """

    def __init__(self, env: BatchedEnv, policy: Policy, plan: CollectPlan,
                 accel: Acceleration = Acceleration()) -> None:
        self.env, self.policy, self.plan, self.accel = env, policy, plan, accel
        n, dev = env.num_envs, env.device
        spec = observation_spec(env.observation_space)
        self._keys = list(spec)
        initial = policy.initial_state(n)
        self.recurrent = not initial.is_empty()
        self.rollout = allocate_rollout(n, plan.num_steps, spec, policy.dist.action_shape, policy.dist.action_dtype,
                                        dev, initial if self.recurrent else None)
        self._buf = {key: self.rollout.get(key) for key in (*_FLAT, "final_value")}
        self._obs_buf = leaves(self.rollout.get("obs"), self._keys)
        self.obs = allocate(spec, (n,), dev)  # the observation to act on next
        self._obs = leaves(self.obs, self._keys)
        self.state = initial  # the recurrent policy's state for the next step (empty when feedforward)
        self._final_obs = None
        if policy.has_critic and not self.recurrent:  # only a critic bootstraps from the true final observation
            self._final_obs = allocate(spec, (n, plan.num_steps), dev)
            self._final_obs_buf = leaves(self._final_obs, self._keys)
        self.episode_stats = EpisodeStats(n, dev)  # counted from the rollout's rewards and flags after each collect
        self._success = torch.zeros(n, plan.num_steps, dtype=torch.bool, device=dev)  # info["success"], if reported
        self._reports_success = False
        self.info_metrics = InfoMetrics(getattr(env, "info_metrics", ()), n, dev)  # episode/metrics/*
        self._finished = torch.zeros(n, dtype=torch.bool, device=dev)  # env ended an episode in this rollout
        self._slot = StepSlot(not accel.enabled, dev)  # the rollout slot the next step writes
        self.started = False
        self._step = compile_step(self.step, accel.compile)

    def use_cuda_graphs(self) -> None:
        """Record :meth:`step` as a CUDA graph at its next calls (after the compile warm-up, before training)."""
        self._step = capture(self._step, self.accel.cuda_graphs, self.env.device)

    @env_mode()
    def reset(self, seed: int | None = None) -> None:
        """Start fresh episodes in every env (and the policy's state)."""
        group = self.plan.group_size if self.plan.reset_every_rollout else 1
        for buffer, leaf in zip(self._obs, leaves(self.env.reset(seed=seed, group_size=group), self._keys), strict=True):
            buffer.copy_(leaf)
        self.state.zero_()
        self.episode_stats.discard()
        self.started = True

    def step(self) -> None:
        """One env step into rollout slot ``t``; the unit that is compiled and captured."""
        b, write = self._buf, self._write
        action, log_prob, value, next_state = self.policy.act(self.obs, self.state)
        step = self.env.step(action)
        done = step.terminated | step.truncated
        for buffer, leaf in zip(self._obs_buf, self._obs, strict=True):
            write(buffer, leaf)
        for key, data in (("action", action), ("sample_log_prob", log_prob), ("value", value), ("reward", step.reward),
                          ("terminated", step.terminated), ("truncated", step.truncated), ("done", done)):
            write(b[key], data)
        if self._final_obs is not None:
            for buffer, leaf in zip(self._final_obs_buf, leaves(step.final_obs, self._keys), strict=True):
                write(buffer, leaf)
        if self.recurrent:
            self._step_state(step, next_state, done)
        success = step.info.get("success")
        if success is not None:
            write(self._success, success)
            self._reports_success = True  # a constant store: compiled steps need no guard on it
        self.info_metrics.step(step.info, done)
        if self.plan.first_episode_only:
            self._finished |= done
        for buffer, leaf in zip(self._obs, leaves(step.obs, self._keys), strict=True):
            buffer.copy_(leaf)
        self._slot.advance()

    def _write(self, buffer: Tensor, leaf: Tensor) -> None:
        """Write ``leaf`` ``[N, ...]`` into slot ``t`` of ``buffer`` ``[N, T(+1), ...]``."""
        self._slot.write(buffer, leaf, 1)

    def _step_state(self, step, next_state: TensorDict, done: Tensor) -> None:
        """Store the state acted with, bootstrap truncations in-step, restart the state where episodes end."""
        self.rollout.get("policy_state").apply_(self._write, self.state)
        if self.policy.has_critic:
            final = self.policy.value(TensorDict(dict(zip(self._keys, leaves(step.final_obs, self._keys), strict=True)),
                                                 batch_size=[self.env.num_envs]), next_state)
            cut = step.truncated & ~step.terminated
            self._write(self._buf["final_value"], torch.where(cut, final, torch.zeros_like(final)))
        keep = ~done
        self.state.apply_(lambda buffer, leaf: buffer.copy_(leaf * keep.view(-1, *[1] * (leaf.dim() - 1))), next_state)

    @env_mode()
    def collect(self) -> TensorDict:
        """Run ``T`` steps and return the filled rollout (the same TensorDict every call; its tensors, allocated
        once, stay normal tensors: they are written in place under :func:`~embodirl.envs.base.env_mode`)."""
        if self.plan.reset_every_rollout or not self.started:
            self.reset()
        self._slot.reset()
        self._finished.zero_()
        if not self.recurrent:
            self._buf["final_value"].zero_()
        num_steps = self.plan.num_steps
        for t in range(self.plan.num_steps):
            if self.plan.first_episode_only and t % _CHECK_EVERY == 0 and t > 0 and bool(self._finished.all()):
                num_steps = t
                break
            self._step()
        b = self._buf
        self.episode_stats.add_steps(b["reward"][:, :num_steps].t(), b["done"][:, :num_steps].t(),
                                     self._success[:, :num_steps].t() if self._reports_success else None)
        if num_steps < self.plan.num_steps:
            self._pad(num_steps)
        for buffer, leaf in zip(self._obs_buf, self._obs, strict=True):
            buffer[:, -1] = leaf
        self._buf["value"][:, -1] = self.policy.value(self.obs, self.state)
        if self.recurrent:
            self.rollout.get("policy_state")[:, -1] = self.state
        else:
            self._bootstrap_truncations(num_steps)
        self.rollout.set_non_tensor("num_steps_collected", num_steps)
        return self.rollout

    def _pad(self, start: int) -> None:
        """Fill the slots the collector skipped with harmless padding: ended, zero reward."""
        for key, value in self._buf.items():
            value[:, start:-1] = key in ("done", "terminated")

    def _bootstrap_truncations(self, num_steps: int) -> None:
        if self._final_obs is None:
            return
        cut = self._buf["truncated"][:, :num_steps] & ~self._buf["terminated"][:, :num_steps]
        if cut.any():
            self._buf["final_value"][:, :num_steps][cut] = self.policy.value(self._final_obs[:, :num_steps][cut])

    def state_dict(self) -> dict[str, Tensor]:
        """The current observation and policy state, and the episode statistics (to continue exactly)."""
        if not self.started:
            return {}
        state = {f"obs.{i}": leaf.clone() for i, leaf in enumerate(self._obs)}
        state.update({f"policy_state.{k}": v.clone() for k, v in self.state.flatten_keys(".").items()})
        state.update({f"episode_stats.{k}": v for k, v in self.episode_stats.state_dict().items()})
        return state

    def load_state_dict(self, state: dict[str, Tensor]) -> None:
        self.started = "obs.0" in state
        if not self.started:
            return
        for i, leaf in enumerate(self._obs):
            leaf.copy_(state[f"obs.{i}"])
        for key, value in self.state.flatten_keys(".").items():
            value.copy_(state[f"policy_state.{key}"])
        prefix = "episode_stats."
        self.episode_stats.load_state_dict({k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)})

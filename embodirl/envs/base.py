"""The batched-env contract every embodirl environment follows.

A batched env holds ``num_envs`` independent copies of a task as tensors on one device. Actions go in
and observations, rewards and flags come out as tensors on that device; nothing crosses to the host
inside :meth:`BatchedEnv.step`. Envs auto-reset: when an episode ends, ``StepResult.obs`` already holds
the next episode's first observation and ``StepResult.final_obs`` the true last observation of the
finished one (so a time-limit truncation can be bootstrapped from it). ``terminated`` (the task ended:
no future reward) and ``truncated`` (cut by a time limit: the future was not observed) stay separate.

Envs keep no episode statistics: the collector does (:class:`embodirl.collect.episode_stats.EpisodeStats`), from
the rewards and flags every env returns.

The native envs' ``step`` is graph-ready: it compiles with ``torch.compile(env.step, fullgraph=True)``
without recompiling and can be captured in a CUDA graph, because every piece of state is a tensor
allocated once and updated in place (:func:`mark_static`), no Python counter changes inside it and nothing
syncs with the host.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, NamedTuple

import gymnasium as gym
import numpy as np
import torch
from torch import Tensor

from embodirl.errors import ConfigError

if TYPE_CHECKING:
    from embodirl.envs.randomization import Randomization

__all__ = ["BatchedEnv", "StepResult", "env_mode", "mark_static"]


class StepResult(NamedTuple):
    """What :meth:`BatchedEnv.step` returns; every tensor has leading dimension ``num_envs``.

    Attributes:
        obs: ``[N, *obs_shape]`` float32, the observation to act on next (post-reset where done).
        reward: ``[N]`` float32.
        terminated: ``[N]`` bool, the episode reached a terminal state.
        truncated: ``[N]`` bool, the episode was cut (time limit) without reaching a terminal state.
        final_obs: ``[N, *obs_shape]`` float32, the true last observation where ``terminated | truncated``;
            equal to ``obs`` elsewhere.
        info: Extra per-env tensors, e.g. ``"success"`` ``[N]`` bool.
    """

    obs: Tensor
    reward: Tensor
    terminated: Tensor
    truncated: Tensor
    final_obs: Tensor
    info: dict[str, Tensor]


def env_mode() -> torch.inference_mode:
    """The autograd mode every reset, step and restore of an env runs in: ``torch.inference_mode()`` (a decorator
    or a context manager). Eager ops skip the autograd and version-counter bookkeeping that ``no_grad`` still
    does. See :meth:`BatchedEnv.step`."""
    return torch.inference_mode()


def mark_static(device: torch.device, *buffers: Tensor) -> None:
    """Tell ``torch.compile(mode="reduce-overhead")`` that these env buffers keep their address, so its CUDA
    graphs may update them in place instead of skipping ("mutated inputs"). No effect off CUDA."""
    if device.type == "cuda":
        for buffer in buffers:
            torch._dynamo.mark_static_address(buffer)


class BatchedEnv(ABC):
    """Base class of batched envs.

    Subclasses set these attributes in ``__init__``:

    Attributes:
        num_envs: Number of parallel envs ``N``.
        device: Device of every tensor going in and out.
        observation_space: Single-env observation space: a ``gym.spaces.Box`` (one float32 tensor) or a (nested)
            ``gym.spaces.Dict`` of them (a TensorDict; :mod:`embodirl.envs.observations`).
        action_space: Single-env action space (``gym.spaces.Box`` or ``gym.spaces.Discrete``).
            Discrete actions are int64 tensors ``[N]``; Box actions float32 ``[N, act_dim]``.
            Box actions outside the bounds are clipped by the env.
        max_episode_steps: Time limit of one episode.
        solved_metric: The deterministic-eval metric that decides "solved" (``eval/return_mean`` by
            default; ``eval/success_rate`` for tasks with a success criterion).
        solved_threshold: Value of ``solved_metric`` at which the task counts as solved (None: never).
        info_metrics: Keys of ``StepResult.info`` (present on every step, ``[N]`` numbers or bools) logged as
            ``episode/metrics/<key>`` and ``eval/metrics/<key>``: the mean over finished episodes of the value
            on each one's last step (:mod:`embodirl.collect.info_metrics`).
        reward_terms: Names of the terms the reward is the sum of: every step's info holds ``"reward/<term>"``
            (``[N]`` float32) and the reward equals their sum. Logged as ``episode/rewards/<term>`` and
            ``eval/rewards/<term>``: the mean over finished episodes of each one's sum of the term.
    """

    num_envs: int
    device: torch.device
    observation_space: gym.Space
    action_space: gym.spaces.Space
    max_episode_steps: int
    solved_metric: str = "eval/return_mean"
    solved_threshold: float | None = None
    info_metrics: tuple[str, ...] = ()
    reward_terms: tuple[str, ...] = ()
    randomization: Randomization | None = None  # env.randomize's parameters (embodirl.envs.randomization)

    @abstractmethod
    def reset(self, seed: int | None = None, group_size: int = 1) -> Tensor:
        """Reset every env and return the first observations ``[N, *obs_shape]``.

        Args:
            seed: Reseed the env's random stream; None continues it.
            group_size: Envs ``{0..g-1}``, ``{g..2g-1}``, ... start from one identical initial state
                per group (different groups from different states). 1 = every env independent.
                Partial episodes are discarded from the statistics, never merged.
        """

    @abstractmethod
    def step(self, action: Tensor) -> StepResult:
        """Advance every env one step; done envs auto-reset (see :class:`StepResult`).

        Collection, evaluation and videos call ``step`` (and ``reset`` between rollouts) under :func:`env_mode`,
        ``torch.inference_mode()``: tensors made there are inference tensors. Updating state allocated in
        ``__init__`` in place is fine, and so is replacing an attribute by a new tensor: the trainer steps,
        resets and restores (``load_state_dict``) the env only in that mode. An env whose step needs autograd
        (a differentiable solver) opens ``with torch.inference_mode(False), torch.enable_grad():`` around that
        part and clones the tensors it differentiates through there (``action.clone()``): inference tensors
        cannot be saved for backward.
        """

    def override_solved(self, solved_metric: str | None, solved_threshold: float | None) -> None:
        """Replace the env's own solved criterion by the config's (``env.solved_metric``, ``env.solved_threshold``)
        where it sets one; null keeps the env's."""
        if solved_metric is not None:
            self.solved_metric = solved_metric
        if solved_threshold is not None:
            self.solved_threshold = float(solved_threshold)

    def is_solved(self, eval_metrics: dict[str, float]) -> bool:
        """Whether deterministic-eval metrics meet the task's solved criterion."""
        value = eval_metrics.get(self.solved_metric)
        return self.solved_threshold is not None and value is not None and value >= self.solved_threshold

    def set_randomize_range(self, name: str, low: float, high: float) -> None:
        """Draw randomized parameter ``name`` from ``[low, high]`` (in its entry's scale) from the next resets on:
        what a curriculum moves (:mod:`embodirl.training.curriculum`).

        Raises:
            ConfigError: ``name`` is not in ``env.randomize``, or the range is invalid.
        """
        if self.randomization is None:
            raise ConfigError("param", name, f"a parameter in env.randomize ({type(self).__name__} randomizes none "
                              "here)", f"add +env.randomize.{name}.range=[1,1] to the training env")
        self.randomization.set_range(name, low, high)
        self.randomization_changed()

    def randomization_changed(self) -> None:  # noqa: B027 - a default that does nothing
        """Called after a range changed: an env that memoises future draws drops them here."""

    def render(self, env_ids: list[int] | None = None, size: int = 256) -> np.ndarray:
        """RGB frames of the given envs (all when None) as uint8 ``[k, size, size, 3]``, drawn without a
        display or GPU. Envs without pictures raise NotImplementedError."""
        raise NotImplementedError(f"{type(self).__name__} does not render frames")

    def restart(self, mask: Tensor) -> Tensor:
        """Start the ``mask`` ``[N]`` envs over from where the last :meth:`reset` started them (its state and
        parameters: a group's shared start), e.g. after their auto-reset, and return every env's observation.
        GRPO's ``algo.restart_finished`` needs it; envs that cannot raise NotImplementedError."""
        raise NotImplementedError(f"{type(self).__name__} cannot restart envs from their reset state")

    def state_dict(self) -> dict[str, Tensor]:
        """Everything needed to continue the env exactly (for resume). Envs that cannot be
        snapshotted raise NotImplementedError; a resumed run then starts fresh episodes."""
        raise NotImplementedError(f"{type(self).__name__} cannot snapshot its state")

    def load_state_dict(self, state: dict[str, Tensor]) -> None:
        raise NotImplementedError(f"{type(self).__name__} cannot restore its state")

    def close(self) -> None:  # noqa: B027 - a default that does nothing, not an abstract method
        """Release resources (subprocesses, files)."""

    @property
    def unwrapped(self) -> BatchedEnv:
        """The env inside any wrappers (:mod:`embodirl.envs.wrappers`); the env itself when it is none."""
        return self

    @property
    def is_discrete(self) -> bool:
        return isinstance(self.action_space, gym.spaces.Discrete)

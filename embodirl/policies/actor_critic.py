"""Actor-critic policy: the actor of :class:`Policy` plus a separate critic MLP."""

from __future__ import annotations

from collections.abc import Sequence

import gymnasium as gym
from torch import Tensor

from embodirl.policies.base import Policy
from embodirl.policies.networks import build_mlp

__all__ = ["ActorCritic"]


class ActorCritic(Policy):
    """Actor and critic as separate MLPs over the same (optionally normalised) observation.

    Args:
        critic_hidden_sizes: Critic hidden sizes; None uses ``hidden_sizes``.
        **kwargs: See :class:`embodirl.policies.base.Policy`.
    """

    has_critic = True

    def __init__(
        self,
        observation_space: gym.spaces.Box,
        action_space: gym.spaces.Space,
        hidden_sizes: Sequence[int] = (64, 64),
        critic_hidden_sizes: Sequence[int] | None = None,
        activation: str = "relu",
        init_log_std: float = 0.0,
        log_std_min: float = -5.0,
        log_std_max: float = 2.0,
        normalize_obs: bool = False,
    ) -> None:
        super().__init__(
            observation_space, action_space, hidden_sizes, activation,
            init_log_std, log_std_min, log_std_max, normalize_obs,
        )
        sizes = list(hidden_sizes if critic_hidden_sizes is None else critic_hidden_sizes)
        self.critic = build_mlp(self.obs_dim, 1, sizes, activation, 1.0)

    def _value(self, x: Tensor) -> Tensor:
        return self.critic(x).squeeze(-1)

"""Actor-critic policy: the actor of :class:`Policy` plus a critic MLP over the critic's observation keys."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import gymnasium as gym
import torch
from torch import Tensor

from embodirl.policies.actor_only import ActorOnly
from embodirl.policies.distributions import ActionDistribution
from embodirl.policies.networks import build_mlp

__all__ = ["ActorCritic"]


class ActorCritic(ActorOnly):
    """Actor and critic as separate MLPs over encoded observations; the encoders are shared.

    The critic reads ``critic_keys`` (default: the actor's keys), which may include privileged keys the
    actor never sees (an asymmetric actor-critic, e.g. the true state for a critic of a pixel policy).

    Args:
        critic_hidden_sizes: Critic hidden sizes; None uses ``hidden_sizes``.
        **kwargs: See :class:`embodirl.policies.actor_only.ActorOnly`.
    """

    has_critic = True

    def __init__(
        self,
        observation_space: gym.Space,
        action_space: gym.spaces.Space,
        hidden_sizes: Sequence[int] = (64, 64),
        critic_hidden_sizes: Sequence[int] | None = None,
        activation: str = "relu",
        init_log_std: float = 0.0,
        log_std_min: float = -5.0,
        log_std_max: float = 2.0,
        normalize_obs: bool = False,
        encoders: Mapping[str, Any] | None = None,
        actor_keys: Sequence[str] | None = None,
        critic_keys: Sequence[str] | None = None,
        distribution: Callable[..., ActionDistribution] | None = None,
    ) -> None:
        super().__init__(observation_space, action_space, hidden_sizes, activation, init_log_std, log_std_min,
                         log_std_max, normalize_obs, encoders, actor_keys, critic_keys,
                         distribution)
        sizes = list(hidden_sizes if critic_hidden_sizes is None else critic_hidden_sizes)
        key = "hidden_sizes" if critic_hidden_sizes is None else "critic_hidden_sizes"
        self.critic = build_mlp(self.feature_dim(self.critic_keys), 1, sizes, activation, 1.0, key)

    def _value(self, features: Mapping[str, Tensor], batch: torch.Size) -> Tensor:
        return self.critic(self.join(features, self.critic_keys)).squeeze(-1)

"""Actor-critic policy: the actor of :class:`~embodirl.policies.actor_only.ActorOnly` plus a critic MLP over the
critic's observation keys."""

from __future__ import annotations

from collections.abc import Mapping

import gymnasium as gym
import torch
from torch import Tensor

from embodirl.config.policies import ActorCriticConfig
from embodirl.policies.actor_only import ActorOnly
from embodirl.policies.networks import MLP, build_mlp

__all__ = ["ActorCritic", "critic_mlp"]


def critic_mlp(cfg: ActorCriticConfig, in_dim: int) -> MLP:
    """The critic's MLP from ``in_dim`` features to one value: ``critic_hidden_sizes`` (None: ``hidden_sizes``)."""
    sizes = list(cfg.hidden_sizes if cfg.critic_hidden_sizes is None else cfg.critic_hidden_sizes)
    key = "hidden_sizes" if cfg.critic_hidden_sizes is None else "critic_hidden_sizes"
    return build_mlp(in_dim, 1, sizes, cfg.activation, 1.0, key)


class ActorCritic(ActorOnly):
    """Actor and critic as separate MLPs over encoded observations; the encoders are shared.

    The critic reads ``critic_keys`` (default: the actor's keys), which may include privileged keys the
    actor never sees (an asymmetric actor-critic, e.g. the true state for a critic of a pixel policy); its
    hidden sizes are ``critic_hidden_sizes`` (None: ``hidden_sizes``).

    Args:
        cfg: The policy's keys (:class:`~embodirl.config.policies.ActorCriticConfig`; the shared ones are
            described in :class:`~embodirl.policies.actor_only.ActorOnly`).
        observation_space: Single-env observation space (Box or Dict of Boxes).
        action_space: Single-env action space (Discrete or 1-D Box).
    """

    has_critic = True

    def __init__(self, cfg: ActorCriticConfig, *, observation_space: gym.Space, action_space: gym.Space) -> None:
        super().__init__(cfg, observation_space=observation_space, action_space=action_space)
        self.critic = critic_mlp(cfg, self.feature_dim(self.critic_keys))

    def _value(self, features: Mapping[str, Tensor], batch: torch.Size) -> Tensor:
        return self.critic(self.join(features, self.critic_keys)).squeeze(-1)

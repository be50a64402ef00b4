"""Policies: actor-critic and actor-only over a distribution fitted to the action space."""

from embodirl.policies.actor_critic import ActorCritic
from embodirl.policies.actor_only import ActorOnly
from embodirl.policies.base import Policy

__all__ = ["ActorCritic", "ActorOnly", "Policy"]

"""Policies: the contract (:class:`Policy`) and the shipped actor-only, actor-critic and recurrent policies."""

from embodirl.policies.actor_critic import ActorCritic
from embodirl.policies.actor_only import ActorOnly
from embodirl.policies.base import Policy

__all__ = ["ActorCritic", "ActorOnly", "Policy"]

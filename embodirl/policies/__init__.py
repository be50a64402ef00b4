"""Policies: the contract (:class:`Policy`) and the shipped actor-only, actor-critic and recurrent policies."""

from typing import TYPE_CHECKING

from embodirl.policies.actor_critic import ActorCritic
from embodirl.policies.actor_only import ActorOnly
from embodirl.policies.base import Policy

__all__ = ["ActorCritic", "ActorOnly", "Policy"]

if TYPE_CHECKING:  # mypy checks that every shipped policy fulfils the contract
    from embodirl.policies.recurrent import ActorCriticRNN

    _SHIPPED: tuple[type[Policy], ...] = (ActorOnly, ActorCritic, ActorCriticRNN)

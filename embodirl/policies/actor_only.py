"""Actor-only policy for critic-free algorithms (GRPO): values are always 0."""

from __future__ import annotations

from embodirl.policies.base import Policy

__all__ = ["ActorOnly"]


class ActorOnly(Policy):
    """Encoders, an actor and an action distribution, no critic. See :class:`embodirl.policies.base.Policy`."""

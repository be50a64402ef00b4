"""User-facing errors: each names the key, the value, what is valid and the usual fix."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any, TypeGuard

__all__ = ["CheckpointError", "ConfigError", "DivergedError", "NonFiniteLossError", "check", "check_choice", "is_int"]


class ConfigError(ValueError):
    """A bad configuration value, raised before any training happens.

    Args:
        key: Config key relative to the component (``clip_coef``); :meth:`with_prefix` makes it full.
        value: The offending value.
        expected: What would be valid, e.g. ``"a float in (0, 1]"`` or ``"one of: ppo, grpo"``.
        fix: How to fix it; defaults to ``"pass a valid value, e.g. KEY=..."``-style advice.
        absolute: ``key`` is already a full config path (e.g. ``policy`` raised from inside the
            algorithm): :meth:`with_prefix` leaves it alone.
    """

    def __init__(self, key: str, value: Any, expected: str, fix: str | None = None, *, absolute: bool = False) -> None:
        self.key = key
        self.value = value
        self.expected = expected
        self.fix = fix
        self.absolute = absolute
        super().__init__(self._message())

    def _message(self) -> str:
        fix = self.fix or f"set {self.key} to a valid value on the command line or in its YAML file"
        return f"{self.key}={self.value!r} is invalid: expected {self.expected}. Fix: {fix}."

    def with_prefix(self, prefix: str) -> ConfigError:
        """Return the same error with ``prefix`` (e.g. ``"algo."``) in front of the key."""
        if not prefix or self.absolute or self.key.startswith(prefix):
            return self
        # Prefix the key where the fix names it as a whole word that is not already part of a dotted path
        # ("pass group_size=4" -> "pass algo.group_size=4"; never "did" -> "denv.id", "algo.algo.x").
        pattern = re.compile(rf"(?<![\w.]){re.escape(self.key)}(?![\w])")
        fix = pattern.sub(lambda _: prefix + self.key, self.fix) if self.fix else None
        return ConfigError(prefix + self.key, self.value, self.expected, fix)


class CheckpointError(ValueError):
    """A checkpoint that is missing, unreadable or incompatible."""


class DivergedError(RuntimeError):
    """Training diverged (see :mod:`embodirl.training.divergence`); the last good checkpoint is kept."""


class NonFiniteLossError(DivergedError):
    """Training produced a NaN or infinite loss; the last good checkpoint is kept."""


def is_int(value: object) -> TypeGuard[int]:
    """Whether ``value`` is an int and not a bool (``True`` is an ``int`` to Python, never a count to us)."""
    return isinstance(value, int) and not isinstance(value, bool)


def check(condition: bool, key: str, value: Any, expected: str, fix: str | None = None, *,
          absolute: bool = False) -> None:
    """Raise :class:`ConfigError` unless ``condition`` holds."""
    if not condition:
        raise ConfigError(key, value, expected, fix, absolute=absolute)


def check_choice(key: str, value: Any, choices: Iterable[Any]) -> None:
    """Raise :class:`ConfigError` unless ``value`` is one of ``choices``."""
    choices = list(choices)
    if value not in choices:
        listed = ", ".join(str(c) for c in choices)
        raise ConfigError(key, value, f"one of: {listed}", f"pass {key}={choices[0]} (or another of: {listed})")

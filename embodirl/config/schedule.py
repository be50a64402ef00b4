"""Hyperparameter schedules over env steps, as the config writes them: constant, linear, cosine, lists, adaptive KL.

A schedule is one key next to the value it schedules (``algo.learning_rate`` with ``algo.lr_schedule``,
``algo.ent_coef`` with ``algo.ent_coef_schedule``):

* ``constant``: the value, always;
* ``linear`` / ``cosine``: from the value at env step 0 down to 0 at ``trainer.total_env_steps``;
* a list ``[[env_step, value], ...]`` (steps strictly increasing, values >= 0) read with a kind
  (``algo.lr_schedule_kind`` / ``algo.ent_coef_schedule_kind``): ``step`` holds each value from its env step on
  (jump and hold), ``interp`` interpolates linearly between the points; both hold the first value before the
  first point and the last value after the last one. The scheduled key's own value is unused;
* ``adaptive_kl`` (learning rate only, rsl_rl's rule): starts at the value and, after every minibatch, divides it
  by 1.5 when the approx-KL exceeds ``2 * desired_kl`` or multiplies it by 1.5 when it falls below
  ``desired_kl / 2``, clamped to ``[1e-5, 1e-2]`` (:func:`embodirl.algos.schedules.adaptive_kl_lr`).

Pure Python: the schemas check schedules before torch is imported, and the algorithms evaluate them.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, cast

from embodirl.errors import ConfigError, check, check_choice

__all__ = ["KINDS", "SHAPES", "Schedule", "ScheduleKind", "ScheduleSpec", "cosine_decay", "linear_decay",
           "parse_schedule", "piecewise"]

ScheduleSpec = str | list[list[float]]
ScheduleKind = Literal["step", "interp"]
SHAPES = ("constant", "linear", "cosine")
KINDS = ("step", "interp")


def linear_decay(initial: float, progress: float) -> float:
    """``initial * (1 - p)`` with ``p = progress`` clamped to [0, 1]."""
    return initial * (1.0 - min(max(progress, 0.0), 1.0))


def cosine_decay(initial: float, progress: float) -> float:
    """``initial * (1 + cos(pi p)) / 2`` with ``p = progress`` clamped to [0, 1] (half a cosine down to 0)."""
    p = min(max(progress, 0.0), 1.0)
    return initial * 0.5 * (1.0 + math.cos(math.pi * p))


def piecewise(points: Sequence[tuple[int, float]], env_step: int, kind: ScheduleKind) -> float:
    """The value of a ``[(env_step, value), ...]`` schedule at ``env_step`` (``step``: hold; ``interp``: linear).

    Example: points ``[(0, 1.0), (100, 0.5)]`` at env step 50 give 1.0 with ``step`` and 0.75 with ``interp``.
    """
    if env_step <= points[0][0]:
        return points[0][1]
    for (s0, v0), (s1, v1) in itertools.pairwise(points):
        if env_step < s1:
            return v0 if kind == "step" else v0 + (v1 - v0) * (env_step - s0) / (s1 - s0)
    return points[-1][1]


@dataclass(frozen=True)
class Schedule:
    """A validated schedule of one hyperparameter (build it with :func:`parse_schedule`).

    Attributes:
        initial: The configured value (the start of ``linear``/``cosine``/``adaptive_kl``).
        shape: ``constant``, ``linear``, ``cosine``, ``points`` or ``adaptive_kl``.
        points: ``(env_step, value)`` pairs when ``shape == "points"``.
        kind: ``step`` or ``interp`` (``points`` only).
    """

    initial: float
    shape: str = "constant"
    points: tuple[tuple[int, float], ...] = ()
    kind: ScheduleKind = "step"

    @property
    def adaptive(self) -> bool:
        return self.shape == "adaptive_kl"

    @property
    def start(self) -> float:
        """The value at env step 0."""
        return self.value(0, 1)

    def value(self, env_step: int, total_env_steps: int) -> float:
        """The value after ``env_step`` of ``total_env_steps``; ``adaptive_kl`` gives its starting value (the
        algorithm adapts it)."""
        progress = env_step / max(total_env_steps, 1)
        if self.shape == "linear":
            return linear_decay(self.initial, progress)
        if self.shape == "cosine":
            return cosine_decay(self.initial, progress)
        if self.shape == "points":
            return piecewise(self.points, env_step, self.kind)
        return self.initial


def parse_schedule(key: str, spec: Any, kind: str, initial: float, *, adaptive: bool = False) -> Schedule:
    """Validate a schedule config value into a :class:`Schedule`.

    Args:
        key: The schedule's config key (e.g. ``lr_schedule``), for messages.
        spec: ``constant``, ``linear``, ``cosine``, (with ``adaptive``) ``adaptive_kl``, or ``[[env_step, value],
            ...]``.
        kind: ``step`` or ``interp``, how a list is read (key ``<key>_kind``).
        initial: The scheduled key's own value.
        adaptive: Whether ``adaptive_kl`` is allowed (learning rates only).

    Raises:
        ConfigError: An unknown name or kind, a malformed list, unsorted steps or a negative value.
    """
    names = [*SHAPES, *(["adaptive_kl"] if adaptive else [])]
    example = "[[0,1e-3],[500000,3e-4]]"
    if isinstance(spec, str):
        if spec not in names:
            raise ConfigError(key, spec, f"one of: {', '.join(names)}, or a list [[env_step, value], ...]",
                              f"pass {key}=linear or {key}={example}")
        return Schedule(initial, spec)
    check_choice(f"{key}_kind", kind, KINDS)
    check(isinstance(spec, Sequence) and len(spec) > 0, key, spec,
          f"one of: {', '.join(names)}, or a non-empty list [[env_step, value], ...]", f"pass {key}={example}")
    points = []
    for pair in spec:
        ok = isinstance(pair, Sequence) and not isinstance(pair, str) and len(pair) == 2 and all(
            isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x) for x in pair)
        check(ok and float(pair[0]).is_integer() and pair[0] >= 0, key, spec,
              "a list of [env_step, value] pairs with integer env_step >= 0", f"pass {key}={example}")
        check(pair[1] >= 0, key, spec, f"values >= 0 (got {pair[1]} at env step {int(pair[0])})",
              f"pass {key}={example}")
        points.append((int(pair[0]), float(pair[1])))
    steps = [s for s, _ in points]
    check(all(a < b for a, b in itertools.pairwise(steps)), key, spec,
          f"env steps in strictly increasing order (got {steps})", f"sort the pairs by env step, e.g. {key}={example}")
    return Schedule(initial, "points", tuple(points), cast(ScheduleKind, kind))  # check_choice allowed only KINDS

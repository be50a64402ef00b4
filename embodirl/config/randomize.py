"""Schemas of domain randomization: ``env.randomize`` entries and ``embodirl-eval``'s held-out ``sweep``.

``env.randomize`` maps an env parameter's name to how it is drawn per env at each reset::

    env:
      randomize:
        table_friction: {range: [0.5, 2.0]}                        # x0.5 .. x2 of the nominal value, uniform
        cube_mass: {range: [0.5, 2.0], dist: log_uniform}          # as likely halved as doubled
        goal_offset: {range: [0.15, 0.3], scale: absolute}         # metres

``scale: relative`` (the default, the robotics habit) multiplies the env's nominal value (its config key, e.g.
``env.table_friction``); ``absolute`` gives the value itself. Each env declares the names it can randomize
(:data:`RandomizableParams`, e.g. ``PushCubeConfig.randomizable``); the env draws the values on its device
(:mod:`embodirl.envs.randomization`). Torch-free, like every schema.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from embodirl.config.schema import Schema, key, suggest
from embodirl.errors import ConfigError

__all__ = ["RandomizableParams", "RandomizeConfig", "SweepConfig", "check_randomize", "extremes"]

#: An env's randomizable parameters: name -> (one-line doc, whether 0 is a valid value). Values must be >= 0
#: (or > 0 when 0 is not valid): every shipped parameter is a mass, a length, a coefficient or a gain.
RandomizableParams = Mapping[str, tuple[str, bool]]


@dataclass(frozen=True, kw_only=True)
class RandomizeConfig(Schema):
    """One ``env.randomize`` entry: the parameter's value is drawn per env at each reset from ``range``."""

    range: tuple[float, float] = key(doc="[low, high] of the draw: multipliers of the nominal value (scale: "
                                     "relative) or the values themselves (scale: absolute)")
    scale: Literal["relative", "absolute"] = key("relative", doc="relative (multiplies the env's nominal value) | "
                                                 "absolute (the value itself)")
    dist: Literal["uniform", "log_uniform"] = key("uniform", doc="uniform | log_uniform (uniform in log: x0.5 "
                                                  "as likely as x2)")

    def check(self) -> None:
        low, high = self.range
        if not low <= high:
            raise ConfigError("range", list(self.range), "[low, high] with low <= high",
                              f"pass range=[{high:g},{low:g}]")
        if low < 0:
            raise ConfigError("range", list(self.range), "values >= 0 (masses, lengths, coefficients, gains)",
                              f"pass range=[0,{high:g}]" if high >= 0 else "pass range=[0.5,2.0]")
        if self.dist == "log_uniform" and not low > 0:
            raise ConfigError("range", list(self.range), "low > 0 with dist=log_uniform (log of 0)",
                              f"pass range=[{high / 4 if high > 0 else 0.5:g},{high if high > 0 else 2:g}] or "
                              "dist=uniform")


def extremes(entry: RandomizeConfig, nominal: float) -> tuple[float, float]:
    """The smallest and largest value ``entry`` draws for a parameter whose nominal value is ``nominal``."""
    factor = nominal if entry.scale == "relative" else 1.0
    return entry.range[0] * factor, entry.range[1] * factor


def check_randomize(randomize: Mapping[str, RandomizeConfig], params: RandomizableParams) -> None:
    """Every ``randomize`` name is one of ``params``, and 0 is drawn only where it is valid.

    Raises:
        ConfigError: Keyed ``randomize.<name>`` (the env's schema adds ``env.``).
    """
    names = ", ".join(params)
    for name, entry in randomize.items():
        if name not in params:
            close = suggest(name, list(params))
            fix = f"use one of those names (the closest to {name} is {close})" if close else \
                f"use one of those names instead of {name}"
            raise ConfigError(f"randomize.{name}", {"range": list(entry.range)}, f"a parameter this env randomizes "
                              f"(one of: {names})", fix)
        if entry.range[0] == 0 and not params[name][1]:
            raise ConfigError(f"randomize.{name}.range", list(entry.range), f"values > 0 ({params[name][0]})",
                              f"pass randomize.{name}.range=[{max(entry.range[1], 1.0) / 4:g},"
                              f"{max(entry.range[1], 1.0):g}]")
        if not all(math.isfinite(v) for v in entry.range):
            raise ConfigError(f"randomize.{name}.range", list(entry.range), "finite numbers", "pass range=[0.5,2.0]")


@dataclass(frozen=True, kw_only=True)
class SweepConfig(Schema):
    """``embodirl-eval``'s held-out sweep: one evaluation per value of one randomizable env parameter."""

    param: str | None = key(None, doc="an env.randomize name (push_cube: table_friction, cube_mass, ...); null = "
                            "no sweep", example="table_friction")
    values: list[float] = key(factory=list, ge=0, doc="the values evaluated, each fixed for every episode of its "
                              "bin: multipliers of the nominal value (scale: relative) or values (absolute)")
    scale: Literal["relative", "absolute"] = key("relative", doc="relative (multiplies the nominal value) | absolute")

    def check(self) -> None:
        if self.param is not None and not self.values:
            raise ConfigError("values", [], "a non-empty list of values with param set",
                              "pass eval.sweep.values=[0.5,0.75,1,1.5,2]")
        if self.param is None and self.values:
            raise ConfigError("param", None, "an env.randomize name when values are given",
                              "pass eval.sweep.param=table_friction")

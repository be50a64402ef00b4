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

__all__ = ["ACTUATOR_PARAMS", "COLOR_PARAMS", "MAX_ACTION_DELAY", "MAX_FACTOR", "VISUAL_PARAMS", "RandomizableParams",
           "RandomizeConfig", "SweepConfig", "check_actuators", "check_randomize", "check_visual", "extremes",
           "range_problem"]

#: An env's randomizable parameters: name -> (one-line doc, whether 0 is a valid value). Values must be >= 0
#: (or > 0 when 0 is not valid): every shipped parameter is a mass, a length, a coefficient or a gain.
RandomizableParams = Mapping[str, tuple[str, bool]]

#: The largest value a randomized parameter may take, as a multiple of its nominal value: x100 already leaves
#: every shipped task (a 10 kg cube, a 50 m pole); beyond it a typo (x1e30) would train on meaningless physics.
MAX_FACTOR = 100.0

#: The colour entries of a rendered view: each channel (r, g, b) is drawn on its own from the entry's range.
COLOR_PARAMS = ("cube_color", "table_color", "goal_color", "floor_color")
#: What a pixel policy's view randomizes (push_cube's top view): colours, lighting, camera pose and field of view.
VISUAL_PARAMS: RandomizableParams = {
    **{name: (f"the {name.split('_')[0]}'s RGB colour, each channel drawn on its own: a multiplier of the nominal "
              "channel (relative) or the channel in 0-255 (absolute)", True) for name in COLOR_PARAMS},
    "light": ("brightness, a multiplier of every colour, nominal 1", True),
    "camera_shift": ("m the camera moves from its nominal pose, in a direction drawn uniformly (scale: absolute)",
                     True),
    "camera_roll": ("degrees the camera turns about its axis, either way with equal odds (scale: absolute)", True),
    "camera_fov": ("the field of view, a multiplier of the nominal one (> 1 sees more, smaller)", False),
}
#: What a position-controlled arm's actuators randomize (push_cube_arm), each the same for every joint of an env.
ACTUATOR_PARAMS: RandomizableParams = {
    "kp": ("the position servos' stiffness (P gain), a multiplier of each joint's own", False),
    "kd": ("the position servos' damping (D gain), a multiplier of each joint's own", True),
    "motor_strength": ("the motors' output torque, a multiplier (gains and torque limits alike)", False),
    "torque_limit": ("the motors' torque limits, a multiplier of each joint's own", False),
    "action_delay": ("control steps between an action and its execution: floor of the drawn value, so [0, 3] gives "
                     "0, 1 and 2 equally often and [d, d] exactly d (scale: absolute)", True),
}
MAX_ACTION_DELAY = 10  #: control steps; half a second at 20 Hz, already far beyond a real robot's latency
#: The largest absolute value of the camera's entries: beyond them the frame shows floor only.
_CAMERA_LIMITS = {"camera_shift": (1.0, "m"), "camera_roll": (180.0, "degrees")}


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
        problem = range_problem(*self.range, log_uniform=self.dist == "log_uniform")  # the env adds its own limits
        if problem is not None:
            raise ConfigError("range", list(self.range), problem[0], f"pass range={problem[1]}")


def range_problem(low: float, high: float, *, zero_ok: bool = True, log_uniform: bool = False,
                  factor: float | None = None) -> tuple[str, str] | None:
    """``(what is valid, a range that is)`` when ``[low, high]`` breaks the rules every ``env.randomize`` range
    keeps (the config's, a curriculum level's, a checkpoint's), else None.

    Args:
        low: Lower end, in the entry's scale (a multiplier when relative).
        high: Upper end.
        zero_ok: Whether 0 is a valid value of the parameter (a friction), or not (a mass, a length).
        log_uniform: The entry draws uniformly in log (then 0 has no log).
        factor: What ``high`` is in multiples of the nominal value per unit (1 relative, ``1 / nominal``
            absolute); None: unknown, no upper bound is checked.
    """
    if not (math.isfinite(low) and math.isfinite(high)):
        return "finite numbers", "[0.5,2.0]"
    if not 0 <= low <= high:
        return "[low, high] with 0 <= low <= high", f"[{min(abs(low), abs(high)):g},{max(abs(low), abs(high)):g}]"
    if low == 0 and (log_uniform or not zero_ok):
        why = "with dist=log_uniform (log of 0)" if log_uniform else "for a parameter for which 0 is not a valid value"
        return f"low > 0 {why}", f"[{max(high, 1.0) / 4:g},{max(high, 1.0):g}]"
    if factor is not None and high * factor > MAX_FACTOR:
        top = MAX_FACTOR / factor
        return (f"values up to x{MAX_FACTOR:g} the nominal value (high <= {top:g})",
                f"[{min(low, top / 4):g},{top / 4:g}]")
    return None


def extremes(entry: RandomizeConfig, nominal: float) -> tuple[float, float]:
    """The smallest and largest value ``entry`` draws for a parameter whose nominal value is ``nominal``."""
    factor = nominal if entry.scale == "relative" else 1.0
    return entry.range[0] * factor, entry.range[1] * factor


def check_randomize(randomize: Mapping[str, RandomizeConfig], params: RandomizableParams,
                    nominal: Mapping[str, float] | None = None) -> None:
    """Every ``randomize`` name is one of ``params``, 0 is drawn only where it is valid, and no value beyond
    :data:`MAX_FACTOR` times the nominal one (of ``nominal``, where an absolute range needs it).

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
        factor = 1.0 if entry.scale == "relative" else (1 / nominal[name] if nominal and nominal.get(name) else None)
        problem = range_problem(*entry.range, factor=factor)
        if problem is not None:
            raise ConfigError(f"randomize.{name}.range", list(entry.range), problem[0],
                              f"pass randomize.{name}.range={problem[1]}")


def check_visual(randomize: Mapping[str, RandomizeConfig]) -> None:
    """The visual entries' own rules: the camera's moves are absolute and bounded, absolute colours lie in 0-255.

    Raises:
        ConfigError: Keyed ``randomize.<name>`` (the env's schema adds ``env.``).
    """
    for name, entry in randomize.items():
        high = entry.range[1]
        if name in _CAMERA_LIMITS:
            top, unit = _CAMERA_LIMITS[name]
            if entry.scale != "absolute":
                raise ConfigError(f"randomize.{name}.scale", entry.scale, f"absolute ({unit}; the nominal camera "
                                  "has none, so a multiplier of it moves nothing)",
                                  f"pass randomize.{name}.scale=absolute")
            if high > top:
                raise ConfigError(f"randomize.{name}.range", list(entry.range), f"values up to {top:g} {unit}",
                                  f"pass randomize.{name}.range=[{min(entry.range[0], top / 4):g},{top / 4:g}]")
        if name in COLOR_PARAMS and entry.scale == "absolute" and high > 255:
            raise ConfigError(f"randomize.{name}.range", list(entry.range), "channel values in 0-255 (scale: absolute)",
                              f"pass randomize.{name}.range=[{min(entry.range[0], 255):g},255]")


def check_actuators(randomize: Mapping[str, RandomizeConfig]) -> None:
    """The delay's own rules: drawn in control steps (scale absolute), at most :data:`MAX_ACTION_DELAY`.

    Raises:
        ConfigError: Keyed ``randomize.action_delay`` (the env's schema adds ``env.``).
    """
    entry = randomize.get("action_delay")
    if entry is None:
        return
    if entry.scale != "absolute":
        raise ConfigError("randomize.action_delay.scale", entry.scale, "absolute (control steps; the nominal delay "
                          "is 0, so a multiplier of it delays nothing)", "pass randomize.action_delay.scale=absolute")
    if entry.range[1] > MAX_ACTION_DELAY:
        raise ConfigError("randomize.action_delay.range", list(entry.range), f"delays up to {MAX_ACTION_DELAY} "
                          "control steps", f"pass randomize.action_delay.range=[0,{MAX_ACTION_DELAY // 2}]")


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

"""What a gymnasium env returns, checked against gymnasium's ``Env`` API, so that a broken env is named in one line.

gymnasium's vector envs copy each sub-env's values into preallocated numpy arrays, which turns a reward of ``"1.0"``
into 1.0 and a ``terminated`` of ``"yes"`` or 2 into True, and fails on the rest with numpy's words ("setting an array
element with a sequence", "too many values to unpack"). So each sub-env is wrapped in :class:`APICheck`, which checks
its values before the vector env copies them: every reset and step of its first episode and the reset after it
(the dry run, the first steps of training), then steps the env directly, at no cost. The adapter checks the vector
env's own arrays on every step (their shape and dtype: nothing measurable) and names the env and the step in an
:class:`EnvError`.

Accepted, per env: an observation of the observation space's shape (each leaf of a Dict space) in a numeric dtype;
a reward that is a number (a Python or numpy int, float or bool, or a 0-d array of one); ``terminated`` and
``truncated`` that are bools, numpy bools or the ints 0 and 1; an info that is a dict.
"""

from __future__ import annotations

import dataclasses
import reprlib
from collections.abc import Callable, Mapping
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.envs.registration import EnvSpec, load_env_creator

from embodirl.errors import ConfigError

__all__ = ["APICheck", "CheckedCreator", "EnvAPIError", "EnvError", "checked_spec", "describe", "flag_problem",
           "observation_problem", "reward_problem", "step_result_problem"]

NUMERIC_KINDS = "biuf"  #: numpy dtype kinds of numbers: bool, signed and unsigned integers, floats
_STEP_FIX = ("return obs, reward, terminated, truncated, info from step (gymnasium's API since 0.26: terminated for "
             "a terminal state, truncated for an episode cut short)")


class EnvAPIError(ValueError):
    """One sub-env's reset or step broke gymnasium's API: ``"<what it returned>, expected <...>. Fix: <...>"``.

    One string argument, so that gymnasium's ``AsyncVectorEnv`` can raise it again in the main process.
    """


class EnvError(ConfigError):
    """A gymnasium env that broke the API or raised, in one line: the key that names it (``env.id`` or ``env.make``),
    its value, when (``reset`` or ``step k``, counted from the adapter's last reset), what went wrong and the fix.

    A :class:`~embodirl.errors.ConfigError` (exit status 2): the env is the user's input.
    """

    def __init__(self, key: str, value: Any, when: str, what: str, fix: str) -> None:
        self.when = when
        super().__init__(key, value, what, fix, absolute=True)

    def _message(self) -> str:
        return f"{self.key}={self.value!r} failed at {self.when}: {self.expected}. Fix: {self.fix}."


def describe(value: Any) -> str:
    """``value`` for a message: an array's shape and dtype, anything else its short repr and type."""
    if hasattr(value, "shape") and hasattr(value, "dtype"):
        return f"an array of shape {tuple(value.shape)} and dtype {value.dtype}"
    kind = type(value).__name__
    return f"{reprlib.repr(value)} ({'an' if kind[0] in 'aeiou' else 'a'} {kind})"


def observation_problem(obs: Any, space: gym.Space, name: str = "observation") -> str | None:
    """What is wrong with one env's ``obs`` for ``space`` (a Box, or a nested Dict of Boxes), or None."""
    if isinstance(space, gym.spaces.Dict):
        if not isinstance(obs, Mapping):
            return f"{name} is {describe(obs)}, expected a dict with the keys {list(space.spaces)} (its Dict space)"
        for key, sub in space.spaces.items():
            if key not in obs:
                return f"{name} lacks the key {key!r}, expected the keys {list(space.spaces)} (its Dict space)"
            problem = observation_problem(obs[key], sub, f"{name}[{key!r}]")
            if problem:
                return problem
        return None
    if not isinstance(space, gym.spaces.Box):  # the adapter refuses other spaces, naming them
        return None
    try:
        array = np.asarray(obs)
    except (TypeError, ValueError):  # a ragged list
        array = np.asarray(None)
    if array.dtype.kind not in NUMERIC_KINDS:
        return f"{name} is {describe(obs)}, expected numbers of shape {space.shape} (its observation_space)"
    if array.shape != space.shape:
        return f"{name} has shape {array.shape}, expected {space.shape} (its observation_space) on every step"
    return None


def reward_problem(reward: Any) -> str | None:
    """What is wrong with one env's ``reward`` (it must be one number), or None."""
    try:
        array = np.asarray(reward)
    except (TypeError, ValueError, RuntimeError):
        array = np.asarray(None)
    if array.ndim == 0 and array.dtype.kind in NUMERIC_KINDS:
        return None
    return f"reward is {describe(reward)}, expected one number per env (a float, an int or a numpy scalar)"


def flag_problem(name: str, flag: Any) -> str | None:
    """What is wrong with one env's ``terminated`` or ``truncated`` flag (a bool, a numpy bool, 0 or 1), or None."""
    if isinstance(flag, bool | np.bool_):
        return None
    if isinstance(flag, int | np.integer | np.ndarray) and np.ndim(flag) == 0:
        kind = np.asarray(flag).dtype.kind
        if kind == "b" or (kind in "iu" and flag in (0, 1)):
            return None
    return f"{name} is {describe(flag)}, expected a bool (True or False; 0 and 1 are accepted)"


def step_result_problem(result: Any) -> str | None:
    """What is wrong with what ``step`` returned as a whole (it must be 5 values), as ``"<what>. Fix: <fix>"``, or
    None."""
    if isinstance(result, tuple) and len(result) == 5:
        return None
    if isinstance(result, tuple) and len(result) == 4:
        return (f"its step returned 4 values (obs, reward, done, info: gym's API before 0.26), expected 5 (obs, "
                f"reward, terminated, truncated, info). Fix: {_STEP_FIX}")
    size = f"{len(result)} values" if isinstance(result, tuple) else describe(result)
    return f"its step returned {size}, expected 5 (obs, reward, terminated, truncated, info). Fix: {_STEP_FIX}"


class APICheck(gym.Wrapper):
    """One sub-env, its resets and steps checked against gymnasium's API until its first episode has ended and
    the reset after it; from then on its own ``reset`` and ``step`` are called directly.

    Raises:
        EnvAPIError: Naming the value that was wrong, what was expected and the fix.
    """

    @property  # gymnasium's Wrapper.spec is a property too (its stubs say attribute)
    def spec(self) -> EnvSpec | None:  # type: ignore[override]
        """The env's own spec: the check adds no wrapper to it (``gymnasium.make`` counts the spec's wrappers)."""
        return self.env.spec

    def __init__(self, env: gym.Env, max_checked_steps: int = 1000) -> None:
        super().__init__(env)
        self._ended = False  # the first episode has ended: the next reset is the last one checked
        self._steps_left = max_checked_steps  # an episode that never ends is checked this long

    def reset(self, **kwargs: Any) -> Any:
        result = self.env.reset(**kwargs)
        if not (isinstance(result, tuple) and len(result) == 2 and isinstance(result[1], Mapping)):
            raise EnvAPIError(f"its reset returned {describe(result)}, expected a tuple (obs, info). Fix: return "
                              "obs, info from reset (gymnasium's API since 0.26; info may be {})")
        problem = observation_problem(result[0], self.observation_space)
        if problem:
            raise EnvAPIError(f"its reset's {problem}. Fix: {_obs_fix(problem)}")
        if self._ended:
            self._stop_checking()
        return result

    def step(self, action: Any) -> Any:
        result = self.env.step(action)
        problem = step_result_problem(result)
        if problem:
            raise EnvAPIError(problem)
        obs, reward, terminated, truncated, info = result
        what = (observation_problem(obs, self.observation_space) or reward_problem(reward)
                or flag_problem("terminated", terminated) or flag_problem("truncated", truncated))
        if what is None and not isinstance(info, Mapping):
            what = f"info is {describe(info)}, expected a dict"
        if what:
            raise EnvAPIError(f"its step's {what}. Fix: {_step_fix(what)}")
        self._ended = self._ended or bool(terminated) or bool(truncated)
        self._steps_left -= 1
        if self._steps_left <= 0:
            self._stop_checking()
        return result

    def _stop_checking(self) -> None:
        """Checked enough: later calls go straight to the env's own methods (an instance attribute beats the
        class's method), so the vector env's steps cost what they cost without the check."""
        self.reset, self.step = self.env.reset, self.env.step  # type: ignore[method-assign, assignment]


class CheckedCreator:
    """An env constructor whose envs come wrapped in :class:`APICheck` (picklable, for ``AsyncVectorEnv``)."""

    def __init__(self, creator: Callable[..., Any]) -> None:
        self.creator = creator
        if hasattr(creator, "metadata"):  # gymnasium.make reads the render modes from the constructor
            self.metadata = creator.metadata

    def __call__(self, **kwargs: Any) -> gym.Env:
        env = self.creator(**kwargs)
        return APICheck(env) if isinstance(env, gym.Env) else env  # gymnasium.make refuses other objects


def checked_spec(spec: EnvSpec) -> EnvSpec:
    """``spec`` whose env is wrapped in :class:`APICheck` right around it, under gymnasium's own wrappers
    (``TimeLimit`` and the env checker read what the env returns first)."""
    entry_point = spec.entry_point
    creator = entry_point if callable(entry_point) else load_env_creator(str(entry_point))
    return dataclasses.replace(spec, entry_point=CheckedCreator(creator))


def _obs_fix(problem: str) -> str:
    if "expected numbers" in problem:
        return "return numbers, e.g. np.asarray(obs, dtype=np.float32) (describe other data as Boxes in a Dict space)"
    return "return an observation of the observation_space's shape on every step, or declare the shape it has"


def _step_fix(what: str) -> str:
    if what.startswith("observation"):
        return _obs_fix(what)
    if what.startswith("reward"):
        return "return the reward as one number, e.g. float(reward) (a sum for several terms)"
    if what.startswith(("terminated", "truncated")):
        return "return the flag as a bool, e.g. bool(flag)"
    return "return a dict as step's last value (it may be {})"

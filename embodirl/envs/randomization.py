"""Domain randomization: per-env values of an env's physical parameters, redrawn at each reset.

``env.randomize`` (:class:`~embodirl.config.randomize.RandomizeConfig`) names the parameters and their ranges; an
env that supports it builds a :class:`Randomization` and, at every reset of env ``i``, draws its values from the
same counter-based stream as its start state (:func:`~embodirl.envs.rng.uniform_from_key`, components from
:data:`FIRST_COMPONENT` on, so the start states are the draws they were without randomization). The draw is
therefore a pure function of ``(seed, env, episode)`` and of the ranges: it runs inside the env's compiled step
with no host sync, the values live in one pre-allocated ``[P, N]`` tensor updated with ``torch.where`` on the done
mask, and the ranges are tensors updated in place (:meth:`Randomization.set_range`: a curriculum widens them
without a recompile).

An env without ``randomize`` entries builds none and runs exactly the maths it ran before.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import torch
from torch import Tensor

from embodirl.config.randomize import MAX_FACTOR, RandomizableParams, RandomizeConfig, range_problem
from embodirl.envs.rng import uniform_from_key
from embodirl.errors import CheckpointError, ConfigError

__all__ = ["DAMAGED_CHECKPOINT_FIX", "FIRST_COMPONENT", "Randomization", "make_randomization", "sample_values"]

FIRST_COMPONENT = 64  #: the reset stream's components from here on are the randomized parameters' (one each)
#: The fix of a checkpoint whose state breaks the config's rules (here and in the curriculum's levels).
DAMAGED_CHECKPOINT_FIX = ("Fix: the file is damaged or was edited: resume from another checkpoint (trainer.resume="
                          "<run>/checkpoints/step_*.pt) or start afresh with hydra.run.dir=<a new directory>")


def sample_values(u: Tensor, low: Tensor, high: Tensor, log_uniform: Tensor) -> Tensor:
    """Values in ``[low, high]`` from uniforms ``u`` in ``[0, 1)``: ``low + (high - low) u``, or
    ``low (high / low)^u`` where ``log_uniform`` (then ``low > 0``).

    Args:
        u: ``[P, M]`` uniforms.
        low: ``[P, 1]`` lower bounds.
        high: ``[P, 1]`` upper bounds.
        log_uniform: ``[P, 1]`` bool, the rows drawn uniformly in log.

    Returns:
        ``[P, M]`` values (``u``'s dtype).
    """
    linear = low + (high - low) * u
    safe_low = torch.where(log_uniform, low, torch.ones_like(low))  # uniform rows may have low = 0: no log of it
    logs = torch.exp(safe_low.log() + (high.log() - safe_low.log()) * u)
    return torch.where(log_uniform, logs, linear)


class Randomization:
    """The randomized parameters of ``num_envs`` envs: ranges, nominal values and each env's current values.

    Args:
        specs: The ``env.randomize`` entries (name -> range, scale, distribution), already checked.
        nominal: Each name's nominal value (the env's config key; 1 for a gain).
        num_envs: Number of envs ``N``.
        device: Device of the env's tensors.
        dtype: The env's physics dtype (of :attr:`values`).
        params: The env's randomizable parameters (whether 0 is a valid value of each); None: every one.

    Attributes:
        names: The rows' names, in the order of :attr:`values`' rows: a parameter's own, ``<param>.<part>`` for each
            part of one drawn in parts (a colour's ``.r``, ``.g``, ``.b``), ``_<name>`` for a hidden row an env adds
            (a direction: neither logged nor a parameter).
        params: The parameters (``env.randomize``'s names, what :meth:`set_range` takes), in order.
        values: ``[P, N]`` each env's values for its current episode (``dtype``), updated in place.
    """

    def __init__(self, specs: Mapping[str, RandomizeConfig], nominal: Mapping[str, float], num_envs: int,
                 device: torch.device, dtype: torch.dtype, params: RandomizableParams | None = None) -> None:
        self.names = tuple(specs)
        self.specs = dict(specs)
        self.nominal = {name: float(nominal[name]) for name in self.names}
        self.zero_ok = {name: params[name][1] if params and name in params else True for name in self.names}
        count = len(self.names)
        f64 = torch.float64
        self.factor = torch.tensor([self.nominal[n] if specs[n].scale == "relative" else 1.0 for n in self.names],
                                   dtype=f64, device=device).view(count, 1)
        self.log_uniform = torch.tensor([specs[n].dist == "log_uniform" for n in self.names],
                                        device=device).view(count, 1)
        self.low = torch.zeros(count, 1, dtype=f64, device=device)  # the ranges as given (multipliers if relative)
        self.high = torch.zeros(count, 1, dtype=f64, device=device)
        self.ranges: dict[str, tuple[float, float]] = {}
        self.params = tuple(dict.fromkeys(name.split(".")[0] for name in self.names if not name.startswith("_")))
        for row, name in enumerate(self.names):
            self._set_rows(name, [row], *specs[name].range)
        self.values = torch.zeros(count, num_envs, dtype=dtype, device=device)
        self._logged = tuple(row for row, name in enumerate(self.names) if not name.startswith("_"))
        self.metric_keys = tuple(f"randomize/{self.names[row]}" for row in self._logged)

    def index(self, name: str) -> int | None:
        """The row of ``name`` in :attr:`values`, None when it is not randomized."""
        return self.names.index(name) if name in self.names else None

    def draw(self, key_hash: Tensor, counter: Tensor) -> Tensor:
        """``[P, M]`` values of rows ``(key_hash, counter)`` of the env's reset stream (in ``values``' dtype)."""
        u = uniform_from_key(key_hash, counter, len(self.names), first=FIRST_COMPONENT).T
        return (sample_values(u, self.low, self.high, self.log_uniform) * self.factor).to(self.values.dtype)

    def set_range(self, name: str, low: float, high: float) -> None:
        """Draw parameter ``name`` (every part of it) from ``[low, high]`` at the next resets (in the entry's
        scale); updates tensors in place.

        Raises:
            ConfigError: ``name`` is not randomized, or the range is empty, negative, or has ``low = 0`` with
                ``log_uniform``.
        """
        rows = [row for row, row_name in enumerate(self.names) if row_name.split(".")[0] == name]
        if name.startswith("_") or not rows:
            raise ConfigError("param", name, f"a randomized parameter (one of env.randomize's: "
                              f"{', '.join(self.params) or 'none'})", f"add env.randomize.{name}.range=[1,1] to "
                              "the env, or name one of those")
        self._set_rows(name, rows, low, high)

    def _set_rows(self, name: str, rows: list[int], low: float, high: float) -> None:
        """Set the range of parameter ``name``'s ``rows``, all checked first."""
        for row in rows:
            problem = self._problem(self.names[row], low, high)
            if problem is not None:
                raise ConfigError(f"env.randomize.{name}.range", [low, high], problem[0],
                                  f"use the range {problem[1]} instead", absolute=True)
        for row in rows:
            self.low[row] = low
            self.high[row] = high
            self.ranges[self.names[row]] = (float(low), float(high))

    def _problem(self, name: str, low: float, high: float) -> tuple[str, str] | None:
        """What is wrong with ``[low, high]`` for ``name`` (:func:`~embodirl.config.randomize.range_problem`)."""
        spec, nominal = self.specs[name], self.nominal[name]
        factor = 1.0 if spec.scale == "relative" else 1 / nominal if nominal > 0 else None
        return range_problem(low, high, zero_ok=self.zero_ok[name], log_uniform=spec.dist == "log_uniform",
                             factor=factor)

    def row(self, name: str, default: Tensor | float) -> Tensor | float:
        """``name``'s ``[N]`` current values, or ``default`` (the nominal float) when it is not randomized."""
        index = self.index(name)
        return default if index is None else self.values[index]

    def info(self) -> dict[str, Tensor]:
        """``{"randomize/<name>": [N] float32}``: this episode's values, fresh tensors (logged as episode metrics)."""
        return {key: self.values[row].to(torch.float32, copy=True)
                for key, row in zip(self.metric_keys, self._logged, strict=True)}

    def state_dict(self) -> dict[str, Tensor]:
        return {"randomize_values": self.values.clone(), "randomize_low": self.low.clone(),
                "randomize_high": self.high.clone()}

    def load_state_dict(self, state: Mapping[str, Tensor]) -> None:
        """Restore :meth:`state_dict` output (a state without it, e.g. from an older checkpoint, keeps the draws).

        Raises:
            CheckpointError: Ranges or values that ``env.randomize`` would refuse (a damaged or edited file).
        """
        if "randomize_values" in state and tuple(state["randomize_values"].shape) == tuple(self.values.shape):
            self._check_state(state)
            self.values.copy_(state["randomize_values"])
            self.low.copy_(state["randomize_low"])
            self.high.copy_(state["randomize_high"])
            for row, name in enumerate(self.names):
                self.ranges[name] = (float(self.low[row]), float(self.high[row]))

    def _check_state(self, state: Mapping[str, Tensor]) -> None:
        """The rules of ``env.randomize`` on a checkpoint's ranges and drawn values (keys ``randomize_*``)."""
        fix = DAMAGED_CHECKPOINT_FIX
        for key in ("randomize_low", "randomize_high"):
            value = state.get(key)
            if not isinstance(value, Tensor) or tuple(value.shape) != tuple(self.low.shape):
                shape = list(value.shape) if isinstance(value, Tensor) else type(value).__name__
                raise CheckpointError(f"the checkpoint's env state {key} is {shape}: expected a tensor of shape "
                                      f"{list(self.low.shape)} (one row per env.randomize entry). {fix}")
        for row, name in enumerate(self.names):
            low, high = float(state["randomize_low"][row]), float(state["randomize_high"][row])
            problem = self._problem(name, low, high)
            if problem is not None:
                raise CheckpointError(f"the checkpoint's env state randomize_low/high of {name}=[{low:g}, {high:g}] "
                                      f"is invalid: expected {problem[0]}, as env.randomize.{name}.range. {fix}")
            values = state["randomize_values"][row].double()
            top = MAX_FACTOR * self.nominal[name] if self.nominal[name] > 0 else math.inf
            bad = ~torch.isfinite(values) | (values < 0) | (values > top) | ((values == 0) & (not self.zero_ok[name]))
            if bool(bad.any()):
                first = float(values[bad][0])
                raise CheckpointError(f"the checkpoint's env state randomize_values of {name} holds {first:g}: "
                                      f"expected values {'>=' if self.zero_ok[name] else '>'} 0 and at most "
                                      f"{top:g} (x{MAX_FACTOR:g} the nominal value). {fix}")


def make_randomization(specs: Mapping[str, RandomizeConfig], nominal: Mapping[str, float], num_envs: int,
                       device: torch.device, dtype: torch.dtype,
                       params: RandomizableParams | None = None) -> Randomization | None:
    """A :class:`Randomization`, or None without entries (the env then runs its nominal maths unchanged)."""
    return Randomization(specs, nominal, num_envs, device, dtype, params) if specs else None

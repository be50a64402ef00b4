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

from embodirl.config.randomize import RandomizeConfig
from embodirl.envs.rng import uniform_from_key
from embodirl.errors import ConfigError

__all__ = ["FIRST_COMPONENT", "Randomization", "make_randomization", "sample_values"]

FIRST_COMPONENT = 64  #: the reset stream's components from here on are the randomized parameters' (one each)


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

    Attributes:
        names: The parameters, in the order of :attr:`values`' rows.
        values: ``[P, N]`` each env's values for its current episode (``dtype``), updated in place.
    """

    def __init__(self, specs: Mapping[str, RandomizeConfig], nominal: Mapping[str, float], num_envs: int,
                 device: torch.device, dtype: torch.dtype) -> None:
        self.names = tuple(specs)
        self.specs = dict(specs)
        self.nominal = {name: float(nominal[name]) for name in self.names}
        count = len(self.names)
        f64 = torch.float64
        self.factor = torch.tensor([self.nominal[n] if specs[n].scale == "relative" else 1.0 for n in self.names],
                                   dtype=f64, device=device).view(count, 1)
        self.log_uniform = torch.tensor([specs[n].dist == "log_uniform" for n in self.names],
                                        device=device).view(count, 1)
        self.low = torch.zeros(count, 1, dtype=f64, device=device)  # the ranges as given (multipliers if relative)
        self.high = torch.zeros(count, 1, dtype=f64, device=device)
        self.ranges: dict[str, tuple[float, float]] = {}
        for name in self.names:
            self.set_range(name, *specs[name].range)
        self.values = torch.zeros(count, num_envs, dtype=dtype, device=device)
        self.metric_keys = tuple(f"randomize/{name}" for name in self.names)

    def index(self, name: str) -> int | None:
        """The row of ``name`` in :attr:`values`, None when it is not randomized."""
        return self.names.index(name) if name in self.names else None

    def draw(self, key_hash: Tensor, counter: Tensor) -> Tensor:
        """``[P, M]`` values of rows ``(key_hash, counter)`` of the env's reset stream (in ``values``' dtype)."""
        u = uniform_from_key(key_hash, counter, len(self.names), first=FIRST_COMPONENT).T
        return (sample_values(u, self.low, self.high, self.log_uniform) * self.factor).to(self.values.dtype)

    def set_range(self, name: str, low: float, high: float) -> None:
        """Draw ``name`` from ``[low, high]`` at the next resets (in the entry's scale); updates tensors in place.

        Raises:
            ConfigError: ``name`` is not randomized, or the range is empty, negative, or has ``low = 0`` with
                ``log_uniform``.
        """
        row = self.index(name)
        if row is None:
            raise ConfigError("param", name, f"a randomized parameter (one of env.randomize's: "
                              f"{', '.join(self.names) or 'none'})", f"add env.randomize.{name}.range=[1,1] to "
                              "the env, or name one of those")
        log = self.specs[name].dist == "log_uniform"
        if not (math.isfinite(low) and math.isfinite(high) and 0 <= low <= high and (low > 0 or not log)):
            raise ConfigError("range", [low, high], "[low, high] with 0 <= low <= high (low > 0 for log_uniform)",
                              "pass range=[0.5,2.0]")
        self.low[row] = low
        self.high[row] = high
        self.ranges[name] = (float(low), float(high))

    def row(self, name: str, default: Tensor | float) -> Tensor | float:
        """``name``'s ``[N]`` current values, or ``default`` (the nominal float) when it is not randomized."""
        index = self.index(name)
        return default if index is None else self.values[index]

    def info(self) -> dict[str, Tensor]:
        """``{"randomize/<name>": [N] float32}``: this episode's values, fresh tensors (logged as episode metrics)."""
        return {key: row.to(torch.float32, copy=True) for key, row in zip(self.metric_keys, self.values, strict=True)}

    def state_dict(self) -> dict[str, Tensor]:
        return {"randomize_values": self.values.clone(), "randomize_low": self.low.clone(),
                "randomize_high": self.high.clone()}

    def load_state_dict(self, state: Mapping[str, Tensor]) -> None:
        """Restore :meth:`state_dict` output (a state without it, e.g. from an older checkpoint, keeps the draws)."""
        if "randomize_values" in state and tuple(state["randomize_values"].shape) == tuple(self.values.shape):
            self.values.copy_(state["randomize_values"])
            self.low.copy_(state["randomize_low"])
            self.high.copy_(state["randomize_high"])
            for row, name in enumerate(self.names):
                self.ranges[name] = (float(self.low[row]), float(self.high[row]))


def make_randomization(specs: Mapping[str, RandomizeConfig], nominal: Mapping[str, float], num_envs: int,
                       device: torch.device, dtype: torch.dtype) -> Randomization | None:
    """A :class:`Randomization`, or None without entries (the env then runs its nominal maths unchanged)."""
    return Randomization(specs, nominal, num_envs, device, dtype) if specs else None

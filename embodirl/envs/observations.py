"""Observations are TensorDicts described by gymnasium spaces.

An env's ``observation_space`` is a ``Box`` or a (possibly nested) ``Dict`` of ``Box`` es. A ``Box`` is the
one-key case: its tensor is the key ``"state"``. Every leaf keeps its own dtype: images stay ``uint8``
(converted to floats only inside the policy's encoder), vectors are ``float32``.

:func:`observation_spec` turns a space into ``{key: (shape, dtype)}`` with nested keys as tuples;
:func:`allocate` makes zeroed TensorDicts of it; :func:`as_tensordict` wraps what an env returns (a tensor
for a ``Box``, a TensorDict for a ``Dict``); :func:`check_observation` is the validator that names the key.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from tensordict import TensorDict
from torch import Tensor

from embodirl.errors import ConfigError

__all__ = ["STATE_KEY", "ObsKey", "ObsSpec", "allocate", "as_tensordict", "check_observation", "key_name",
           "observation_spec"]

STATE_KEY = "state"  #: the key of a Box observation space's tensor
ObsKey = tuple[str, ...]
ObsSpec = dict[ObsKey, tuple[tuple[int, ...], torch.dtype]]


def _torch_dtype(dtype: np.dtype) -> torch.dtype:
    """uint8 stays uint8 (images), bool stays bool, other integers become int64, floats float32."""
    dtype = np.dtype(dtype)
    if dtype == np.uint8:
        return torch.uint8
    if dtype == np.bool_:
        return torch.bool
    if np.issubdtype(dtype, np.integer):
        return torch.int64
    return torch.float32


def _leaves(space: gym.Space, prefix: ObsKey) -> Iterator[tuple[ObsKey, gym.spaces.Box]]:
    if isinstance(space, gym.spaces.Dict):
        for key, sub in space.spaces.items():
            yield from _leaves(sub, (*prefix, str(key)))
    elif isinstance(space, gym.spaces.Box):
        yield prefix, space
    else:
        raise ConfigError("observation_space", space, "a gymnasium Box or a (nested) Dict of Boxes",
                          "describe each observation as a Box (e.g. one-hot a Discrete one) inside a Dict")


def observation_spec(space: gym.Space) -> ObsSpec:
    """``{key: (shape, dtype)}`` of every leaf of ``space`` (a Box is ``{("state",): ...}``)."""
    if isinstance(space, gym.spaces.Box):
        return {(STATE_KEY,): (tuple(space.shape), _torch_dtype(space.dtype))}
    spec = {key: (tuple(box.shape), _torch_dtype(box.dtype)) for key, box in _leaves(space, ())}
    if not spec:
        raise ConfigError("observation_space", space, "a space with at least one Box", "add an observation")
    return spec


def key_name(key: ObsKey) -> str:
    """A nested key as one name, ``("agent", "qpos")`` -> ``"agent.qpos"`` (config keys, messages)."""
    return ".".join(key)


def allocate(spec: ObsSpec, batch_shape: tuple[int, ...], device: torch.device | str) -> TensorDict:
    """A zeroed TensorDict holding one observation per batch element."""
    td = TensorDict({}, batch_size=list(batch_shape), device=device)
    for key, (shape, dtype) in spec.items():
        td.set(key, torch.zeros(*batch_shape, *shape, dtype=dtype, device=device))
    return td


def as_tensordict(obs: Tensor | TensorDict, batch_size: int) -> TensorDict:
    """What an env returned as a TensorDict: a Box tensor becomes the key ``"state"``."""
    if isinstance(obs, Tensor):
        return TensorDict({STATE_KEY: obs}, batch_size=[batch_size], device=obs.device)
    return obs


def check_observation(what: str, obs: Any, spec: ObsSpec, num_envs: int, device: torch.device) -> None:
    """Raise ``TypeError``/``ValueError`` naming ``what`` and the key if ``obs`` does not match ``spec``."""
    leaves: dict[ObsKey, Any]
    if isinstance(obs, Tensor):
        if list(spec) != [(STATE_KEY,)]:
            raise TypeError(f"{what} is a tensor but the observation space is a Dict with keys "
                            f"{[key_name(k) for k in spec]}; return a TensorDict with those keys")
        leaves = {(STATE_KEY,): obs}
    elif isinstance(obs, TensorDict):
        leaves = {key if isinstance(key, tuple) else (key,): value
                  for key, value in obs.items(include_nested=True, leaves_only=True)}
    else:
        raise TypeError(f"{what} must be a torch.Tensor or a TensorDict, got {type(obs).__name__}")
    if set(leaves) != set(spec):
        raise TypeError(f"{what} has keys {sorted(key_name(k) for k in leaves)}; the observation space has "
                        f"{sorted(key_name(k) for k in spec)}")
    for key, (shape, dtype) in spec.items():
        value = leaves[key]
        if tuple(value.shape) != (num_envs, *shape) or value.dtype != dtype:
            raise TypeError(f"{what}[{key_name(key)!r}] has shape {list(value.shape)} and dtype {value.dtype}; "
                            f"the batched-env contract needs shape {[num_envs, *shape]} and dtype {dtype}")
        if value.device != device:
            raise TypeError(f"{what}[{key_name(key)!r}] is on {value.device}; the env's device is {device}")
        if value.is_floating_point() and not bool(torch.isfinite(value).all()):
            raise ValueError(f"{what}[{key_name(key)!r}] contains NaN or infinite values")

"""Counter-based random numbers for batched envs.

Every draw is a pure function of ``(seed, key, counter, component)``: an env's randomness depends
only on its own key (its index, or its group's index for group-shared resets) and how many episodes
it has started, never on how many envs run beside it or on a hidden generator state. This makes
per-env resets reproducible, group-shared resets trivial and env state trivially checkpointable.
The hash is Chris Wellons' ``lowbias32`` applied in int64 arithmetic (values stay below 2**32),
so it runs unchanged on CPU and CUDA without host syncs.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["hash_uniform"]

_MASK32 = 0xFFFFFFFF


def _lowbias32(x: Tensor) -> Tensor:
    x = x & _MASK32
    x = x ^ (x >> 16)
    x = (x * 0x7FEB352D) & _MASK32
    x = x ^ (x >> 15)
    x = (x * 0x846CA68B) & _MASK32
    return x ^ (x >> 16)


def hash_uniform(seed: int, key: Tensor, counter: Tensor, num: int, low: float = 0.0, high: float = 1.0) -> Tensor:
    """Uniform floats in ``[low, high)`` from ``(seed, key, counter)``.

    Args:
        seed: Base seed (any Python int; reduced to 32 bits).
        key: ``[N]`` int64, e.g. the env index or its group's index.
        counter: ``[N]`` int64, e.g. the number of episodes the env has started.
        num: Number of independent components per row.
        low: Lower bound.
        high: Upper bound.

    Returns:
        ``[N, num]`` float64 values on ``key``'s device.
    """
    component = torch.arange(num, device=key.device, dtype=torch.int64)
    h = _lowbias32(torch.full_like(key, seed & _MASK32))
    h = _lowbias32(h ^ key.to(torch.int64))
    h = _lowbias32(h ^ counter.to(torch.int64))
    h = _lowbias32(h.unsqueeze(-1) ^ component)
    # 32 random bits -> [0, 1) with 2**-32 resolution.
    u = h.to(torch.float64) * (1.0 / 4294967296.0)
    return low + (high - low) * u

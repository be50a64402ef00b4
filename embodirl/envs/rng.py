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

from embodirl.errors import check

__all__ = ["EXPLICIT_RESET_COUNTER", "ResetStream", "hash_uniform"]

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


EXPLICIT_RESET_COUNTER = 1 << 31  # counter offset of explicit resets: auto-resets stay below it


class ResetStream:
    """The counters behind per-env reproducible resets, shared by the native batched envs.

    An auto-reset of env ``i`` draws from ``(seed, key=i, counter=episode[i])``. An explicit
    ``reset(seed, group_size=g)`` draws from ``(seed, key=i // g, counter=2**31 + r)``, where ``r``
    counts explicit resets since seeding. The two streams never overlap, group members share their
    key and counter (hence their start), and nothing depends on how many envs run beside env ``i``.

    Args:
        num_envs: Number of envs.
        device: Device of the counters.
        seed: Initial stream seed.
    """

    def __init__(self, num_envs: int, device: torch.device, seed: int) -> None:
        self.num_envs = num_envs
        self.env_ids = torch.arange(num_envs, device=device)
        self.episode = torch.zeros(num_envs, dtype=torch.int64, device=device)  # auto-reset counter per env
        self.num_resets = 0
        self.seed = seed

    def explicit(self, seed: int | None, group_size: int) -> tuple[Tensor, Tensor]:
        """Validate an explicit reset, advance the counters and return its ``(key, counter)`` rows ``[N]``.

        Args:
            seed: New stream seed (counters restart from zero); None continues the stream.
            group_size: Consecutive envs per shared start; must divide ``num_envs``.
        """
        check(seed is None or (_is_int(seed) and -(2**63) <= seed < 2**63), "seed", seed, "an int64 or None")
        check(_is_int(group_size) and group_size >= 1 and self.num_envs % group_size == 0, "group_size", group_size,
              f"an int >= 1 that divides num_envs={self.num_envs}", fix="pick a divisor of num_envs, e.g. group_size=1")
        if seed is not None:
            self.seed = seed
            self.episode.zero_()
            self.num_resets = 0
        else:
            self.episode += 1
        counter = torch.full_like(self.env_ids, EXPLICIT_RESET_COUNTER + self.num_resets)
        self.num_resets += 1
        return self.env_ids // group_size, counter

    def state_dict(self) -> dict[str, Tensor]:
        return {"episode": self.episode.clone(), "num_resets": torch.tensor(self.num_resets),
                "seed": torch.tensor(self.seed, dtype=torch.int64)}

    def load_state_dict(self, state: dict[str, Tensor]) -> None:
        self.seed = int(state["seed"])
        self.num_resets = int(state["num_resets"])
        self.episode.copy_(state["episode"])


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)

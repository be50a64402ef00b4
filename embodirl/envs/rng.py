"""Counter-based random numbers for batched envs.

Every draw is a pure function of ``(seed, key, counter, component)``: an env's randomness depends
only on its own key (its index, or its group's index for group-shared resets) and how many episodes
it has started, never on how many envs run beside it or on a hidden generator state. This makes
per-env resets reproducible, group-shared resets trivial and env state trivially checkpointable.
The hash is Chris Wellons' ``lowbias32`` applied in int64 arithmetic (values stay below 2**32),
so it runs unchanged on CPU and CUDA without host syncs.

:class:`StartDraws` hands an env the start state of each finished episode's successor, drawn when the episode
begins: a few tensor ops, graph-ready. :class:`StartCache` gives the same starts faster when eager: it memoises
the draws of every env's next few episodes (the hash costs more small ops than a CartPole step); while
``torch.compile`` traces the step or a CUDA graph captures it, it draws inline as :class:`StartDraws` does and
touches no Python counter, so the captured step never recompiles and replays correctly. The values are the
same either way: the draws are pure functions of the counters. An env draws with :class:`StartDraws`;
:mod:`embodirl.envs.fast_paths` swaps the memo in.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import torch
from torch import Tensor

from embodirl.errors import check, is_int

__all__ = ["EXPLICIT_RESET_COUNTER", "ResetStream", "StartCache", "StartDraws", "hash_key", "hash_uniform",
           "in_graph", "uniform_from_key"]

_MASK32 = 0xFFFFFFFF


def _lowbias32(x: Tensor) -> Tensor:
    x = x & _MASK32
    x = x ^ (x >> 16)
    x = (x * 0x7FEB352D) & _MASK32
    x = x ^ (x >> 15)
    x = (x * 0x846CA68B) & _MASK32
    return x ^ (x >> 16)


def hash_key(seed: int, key: Tensor) -> Tensor:
    """The part of :func:`hash_uniform`'s hash fixed by ``(seed, key)``; precompute it for keys drawn often.

    Args:
        seed: Base seed (any Python int; reduced to 32 bits).
        key: ``[N]`` int64, e.g. the env index or its group's index.

    Returns:
        ``[N]`` int64 values below ``2**32``.
    """
    return _lowbias32(_lowbias32(torch.full_like(key, seed & _MASK32, dtype=torch.int64)) ^ key.to(torch.int64))


def uniform_from_key(key_hash: Tensor, counter: Tensor, num: int, low: float = 0.0, high: float = 1.0,
                     first: int = 0) -> Tensor:
    """:func:`hash_uniform` from a precomputed :func:`hash_key`; ``key_hash`` and ``counter`` are ``[N]`` int64.

    Components ``first .. first + num - 1`` are drawn: each is independent of the others, so a caller can
    reserve a block (domain randomization draws from component 64 on) without changing the draws below it.

    Returns:
        ``[N, num]`` float64 values in ``[low, high)``.
    """
    component = torch.arange(first, first + num, device=key_hash.device, dtype=torch.int64)
    h = _lowbias32(key_hash ^ counter.to(torch.int64))
    h = _lowbias32(h.unsqueeze(-1) ^ component)
    # 32 random bits -> [0, 1) with 2**-32 resolution.
    u = h.to(torch.float64) * (1.0 / 4294967296.0)
    return low + (high - low) * u


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
    return uniform_from_key(hash_key(seed, key), counter, num, low, high)


EXPLICIT_RESET_COUNTER = 1 << 31  # counter offset of explicit resets: auto-resets stay below it


class ResetStream:
    """The counters behind per-env reproducible resets, shared by the native batched envs.

    An auto-reset of env ``i`` draws from ``(seed, key=i, counter=episode[i])``. An explicit
    ``reset(seed, group_size=g)`` draws from ``(seed, key=i // g, counter=2**31 + r)``, where ``r``
    counts explicit resets since seeding. The two streams never overlap, group members share their
    key and counter (hence their start), and nothing depends on how many envs run beside env ``i``.
    The tensors (``episode``, ``key_hash``) are allocated once and only ever updated in place; :attr:`version`
    counts the changes made outside auto-resets (explicit resets, restores), so a memo of future draws can tell
    that it is out of date.

    Args:
        num_envs: Number of envs.
        device: Device of the counters.
        seed: Initial stream seed.
    """

    def __init__(self, num_envs: int, device: torch.device, seed: int) -> None:
        self.num_envs = num_envs
        self.env_ids = torch.arange(num_envs, device=device)
        self.episode = torch.zeros(num_envs, dtype=torch.int64, device=device)  # auto-reset counter per env
        self.key_hash = hash_key(seed, self.env_ids)  # hash_key(seed, i): auto-resets draw from it
        self.num_resets = 0
        self.seed = seed
        self.version = 0  # explicit resets and restores so far

    def explicit(self, seed: int | None, group_size: int) -> tuple[Tensor, Tensor]:
        """Validate an explicit reset, advance the counters and return its ``(key_hash, counter)`` rows ``[N]``.

        Args:
            seed: New stream seed (counters restart from zero); None continues the stream.
            group_size: Consecutive envs per shared start; must divide ``num_envs``.

        Returns:
            ``hash_key(seed, i // group_size)`` and ``2**31 + r``, both ``[N]`` int64 (for :func:`uniform_from_key`).
        """
        check(seed is None or (is_int(seed) and -(2**63) <= seed < 2**63), "seed", seed, "an int64 or None")
        check(is_int(group_size) and group_size >= 1 and self.num_envs % group_size == 0, "group_size", group_size,
              f"an int >= 1 that divides num_envs={self.num_envs}", fix="pick a divisor of num_envs, e.g. group_size=1")
        if seed is not None:
            self._reseed(seed)
            self.episode.zero_()
            self.num_resets = 0
        else:
            self.episode += 1
        counter = torch.full_like(self.env_ids, EXPLICIT_RESET_COUNTER + self.num_resets)
        self.num_resets += 1
        self.version += 1
        return hash_key(self.seed, self.env_ids // group_size), counter

    def _reseed(self, seed: int) -> None:
        self.seed = seed
        self.key_hash.copy_(hash_key(seed, self.env_ids))

    def state_dict(self) -> dict[str, Tensor]:
        return {"episode": self.episode.clone(), "num_resets": torch.tensor(self.num_resets),
                "seed": torch.tensor(self.seed, dtype=torch.int64)}

    def load_state_dict(self, state: dict[str, Tensor]) -> None:
        self._reseed(int(state["seed"]))
        self.num_resets = int(state["num_resets"])
        self.episode.copy_(state["episode"])
        self.version += 1


def in_graph(device: torch.device) -> bool:
    """Whether the calling code is being traced by ``torch.compile`` or captured into a CUDA graph on ``device``:
    then it must not branch on, or update, Python-side state (a compiled graph or a CUDA graph replays without it)."""
    if torch.compiler.is_compiling():
        return True
    return device.type == "cuda" and torch.cuda.is_current_stream_capturing()


class StartDraws:
    """The start state of every env's next episode, for auto-resets: drawn when the episode begins.

    Args:
        stream: The env's :class:`ResetStream`; :meth:`next` advances its episode counters.
        draw: ``(key_hash [M], counter [M]) -> tuple of tensors`` with ``M`` rows: the starts of episode
            ``counter[m]`` of the env with ``key_hash[m]``.
    """

    def __init__(self, stream: ResetStream, draw: Callable[[Tensor, Tensor], tuple[Tensor, ...]]) -> None:
        self.stream, self.draw = stream, draw

    def next(self, done: Tensor) -> tuple[Tensor, ...]:
        """Advance the episode counters of the ``done`` ``[N]`` envs and return the starts of their new episodes.

        Returns:
            ``draw``'s tensors for all ``N`` envs; only the rows of ``done`` envs are meaningful. Fresh tensors.
        """
        self.stream.episode += done
        return self.draw(self.stream.key_hash, self.stream.episode)


class StartCache(StartDraws):
    """:class:`StartDraws` memoised when eager (see the module docstring): the same starts.

    ``draw``'s tensors have their rows ``m`` along ``dims[j]`` of the ``j``-th. Eager, a memo holds, for every
    env, the draws of its next ``depth`` episodes, refilled every ``depth * min_length`` steps (an env starts at
    most ``depth`` episodes in that time) and whenever the stream changed outside :meth:`next`
    (:attr:`ResetStream.version`) or ``ranges`` changed. In a graph (:func:`in_graph`) every env's next start
    is drawn inline and the memo is marked stale, so the next eager step refills it first.

    Args:
        stream: The env's :class:`ResetStream`; :meth:`next` advances its episode counters.
        draw: ``(key_hash [M], counter [M]) -> tuple of tensors`` with ``M`` rows along ``dims``.
        dims: Row dimension of each tensor ``draw`` returns.
        depth: Episodes memoised per env (memory: ``num_envs * depth`` draws).
        min_length: Fewest steps an episode can last.
        ranges: The randomization ranges ``draw`` reads (:attr:`~embodirl.envs.randomization.Randomization.ranges`),
            if any: a change refills the memo.
    """

    def __init__(self, stream: ResetStream, draw: Callable[[Tensor, Tensor], tuple[Tensor, ...]],
                 dims: tuple[int, ...], depth: int, min_length: int,
                 ranges: Mapping[str, tuple[float, float]] | None = None) -> None:
        super().__init__(stream, draw)
        self.dims, self.depth, self.ranges = dims, depth, ranges
        self.period = depth * min_length  # steps between eager refills
        self._slots = torch.arange(1, depth + 1, device=stream.env_ids.device)
        self._shift = torch.zeros_like(stream.episode)  # memo index of env i's next start = episode[i] + shift[i]
        self._last = stream.env_ids * depth + (depth - 1)  # env i's last memo row
        self._memo = tuple(t.clone() for t in draw(*self._rows(stream.episode)))
        self._version = stream.version  # the stream and ranges the memo was drawn from
        self._ranges: dict[str, tuple[float, float]] | None = None
        self.age = self.period  # steps since the last refill; period = stale

    def invalidate(self) -> None:
        """Mark the memo stale (the counters, the seed or the drawn distribution changed outside :meth:`next`)."""
        self.age = self.period

    def next(self, done: Tensor) -> tuple[Tensor, ...]:
        stream = self.stream
        if in_graph(stream.episode.device):
            self.age = self.period  # a constant store: no guard, and the eager memo refills before its next use
            return super().next(done)
        if self._stale():
            self._refill()
        self.age += 1
        # Every env reads a row, done or not. A memo refilled mid-episode (a restored state, a new randomization
        # range) is out of phase with the episode ends: an env that already started `depth` episodes since would
        # read past its rows (past the memo, for the last env). Only done envs' rows are used, and those are in range.
        slot = torch.minimum(stream.episode + self._shift, self._last)
        stream.episode += done
        return tuple(torch.index_select(memo, dim, slot) for memo, dim in zip(self._memo, self.dims, strict=True))

    def _stale(self) -> bool:
        return (self.age >= self.period or self._version != self.stream.version
                or (self.ranges is not None and self.ranges != self._ranges))

    def _rows(self, base: Tensor) -> tuple[Tensor, Tensor]:
        """``(key_hash, counter)`` of the memo: env ``i``'s episodes ``base[i] + 1 .. base[i] + depth``."""
        counters = (base.unsqueeze(1) + self._slots).view(-1)
        return self.stream.key_hash.repeat_interleave(self.depth), counters

    def _refill(self) -> None:
        base = self.stream.episode
        for memo, new in zip(self._memo, self.draw(*self._rows(base)), strict=True):
            memo.copy_(new)
        torch.sub(self.stream.env_ids * self.depth, base, out=self._shift)
        self._version, self._ranges = self.stream.version, None if self.ranges is None else dict(self.ranges)
        self.age = 0

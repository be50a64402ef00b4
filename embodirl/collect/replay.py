"""A replay buffer on the env's device: a ring of transitions laid out ``[num_envs, capacity // num_envs]``.

Each env writes its own row, so one :meth:`ReplayBuffer.extend` of a collected ``[N, T]`` block is one indexed
copy per key and every row stays in time order (what n-step returns read). The storage is a TensorDict allocated
once, at the first ``extend``, from the block's keys, shapes and dtypes; sampling draws ``batch_size`` (env, slot)
pairs uniformly among the stored transitions and always returns the same shapes (no data-dependent shape or
Python branch: the sampling and the update that reads it can compile to one graph).

With ``n_step > 1`` the returns are computed when sampling (FastTD3's way, so the storage holds plain
transitions): from a sampled transition ``t`` the rewards of up to ``n`` transitions of its env are summed,
``R = r_t + gamma r_{t+1} + ... + gamma^(m-1) r_{t+m-1}``, stopping after the first one that ends an episode
(``done``) or at the newest stored transition; the sample's ``next_obs`` and ``terminated`` are those of
transition ``t + m - 1`` and its ``discount`` is ``gamma^m``, so every sample's target is
``reward + discount * (1 - terminated) * V(next_obs)``. With ``n_step = 1``: ``r_t`` and ``gamma``. A ``bonus`` of
the next observations (curiosity, :class:`~embodirl.algos.rnd.ReplayRND`) is added to each summed transition's
reward when sampling, so it is always the current one, never a stored stale value.

Every key keeps the collected dtype: images stay ``uint8`` (a 64x64 RGB frame is 12 KiB a transition, four times
less than as float32). ``next_obs`` is stored beside ``obs`` although it equals the next slot's ``obs`` except at an
episode's end: there it is the final observation, which no slot holds (the reset replaced it), and the newest
transition's next observation arrives only with the next block; deriving it would need a second store for the
final observations and a pending row per env, for at most half the memory. Instead a ring that would not fit in
the device's available memory is refused when it is allocated (one line naming ``algo.buffer_size`` and a size
that fits), rather than the process being killed by the out-of-memory killer.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from tensordict import TensorDict
from torch import Tensor

from embodirl.errors import ConfigError

__all__ = ["TRANSITION_KEYS", "ReplayBuffer"]

#: What an off-policy algorithm stores of each collected transition (the rollout's keys, :mod:`.rollout`).
TRANSITION_KEYS = ("obs", "action", "reward", "terminated", "done", "next_obs")

#: The share of the device's available memory a ring may take (the networks, the rollout and the batches need the rest).
MEMORY_SHARE = 0.8


def available_memory(device: torch.device) -> int | None:
    """Bytes free on ``device`` (a CUDA device's free memory, the host's ``MemAvailable``); None where unknown."""
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    try:
        with open("/proc/meminfo") as meminfo:
            fields = dict(line.split(":", 1) for line in meminfo)
        return int(fields["MemAvailable"].split()[0]) * 1024
    except (OSError, KeyError, ValueError):
        return None


class ReplayBuffer:
    """A preallocated ring of ``capacity`` transitions (``capacity // num_envs`` per env) on ``device``.

    Args:
        capacity: Transitions kept in all (the oldest are overwritten); at least ``num_envs``.
        num_envs: Rows of the ring (the collector's ``N``).
        device: Where the storage lives (the env's device: no copies between collecting and sampling).
        n_step: Transitions summed into each sampled return (1: one-step TD).
        gamma: Discount of the n-step return and of the sample's ``discount``.
    """

    def __init__(self, capacity: int, num_envs: int, device: torch.device | str, n_step: int = 1,
                 gamma: float = 0.99) -> None:
        if capacity < num_envs:
            raise ValueError(f"capacity={capacity} must be at least num_envs={num_envs} (one slot per env)")
        self.num_envs, self.slots = num_envs, capacity // num_envs
        self.device, self.n_step, self.gamma = torch.device(device), n_step, gamma
        self.storage: TensorDict | None = None  # allocated at the first extend, from the data's layout
        self.flat: TensorDict | None = None
        self.pos = 0  # the slot the next transition goes to (every row advances together)
        self.size = 0  # stored transitions per env
        self._size = torch.zeros((), dtype=torch.long, device=self.device)  # the same, read by sample without a sync
        self._powers = gamma ** torch.arange(n_step, dtype=torch.float32, device=self.device)

    def __len__(self) -> int:
        """Transitions stored, over every env."""
        return self.size * self.num_envs

    def extend(self, steps: TensorDict) -> None:
        """Append a block of ``[num_envs, T]`` transitions (each env's in time order) after the newest ones."""
        if steps.batch_size[0] != self.num_envs or steps.batch_dims != 2:
            raise ValueError(f"extend takes a [num_envs={self.num_envs}, T] block, got {list(steps.batch_size)}")
        if self.storage is None:
            self.check_fits(steps)
            shape = (self.num_envs, self.slots)
            storage = steps[:, :1].apply(lambda x: torch.zeros((*shape, *x.shape[2:]), dtype=x.dtype,
                                                               device=self.device), batch_size=list(shape))
            assert storage is not None
            # flat: the same memory seen as [num_envs * slots], so one index tensor gathers a sample
            self.storage, self.flat = storage, storage.view(-1)
        num_steps = steps.batch_size[1]
        if num_steps > self.slots:  # only the newest fit
            steps, num_steps = steps[:, -self.slots:], self.slots
        index = (self.pos + torch.arange(num_steps, device=self.device)) % self.slots
        self.storage[:, index] = steps
        self.pos = (self.pos + num_steps) % self.slots
        self.size = min(self.size + num_steps, self.slots)
        self._size.fill_(self.size)

    def check_fits(self, steps: TensorDict) -> None:
        """Refuse a ring of ``steps``' transitions larger than :data:`MEMORY_SHARE` of the device's available memory.

        Raises:
            ConfigError: ``algo.buffer_size``, with the largest size that fits (a multiple of ``num_envs``).
        """
        leaves = [x for x in steps.values(True, True) if isinstance(x, Tensor)]
        per_transition = sum(int(x[0, 0].numel()) * x.element_size() for x in leaves)
        available = available_memory(self.device)
        if available is None or per_transition * self.num_envs * self.slots <= MEMORY_SHARE * available:
            return
        fits = int(MEMORY_SHARE * available / per_transition) // self.num_envs * self.num_envs
        raise ConfigError("algo.buffer_size", self.num_envs * self.slots,
                          f"a replay buffer that fits in {MEMORY_SHARE:.0%} of the {available / 2**30:.1f} GiB "
                          f"available on {self.device} ({per_transition} bytes a transition, "
                          f"{per_transition * self.num_envs * self.slots / 2**30:.1f} GiB asked)",
                          f"pass algo.buffer_size={fits} or less", absolute=True)

    def sample(self, batch_size: int, bonus: Callable[[TensorDict], Tensor] | None = None) -> TensorDict:
        """``batch_size`` transitions drawn uniformly with replacement, with their n-step ``reward``, ``next_obs``,
        ``terminated`` and ``discount`` (see the module docstring); the other keys are transition ``t``'s.

        Args:
            batch_size: Transitions to draw.
            bonus: Maps the next observations ``[B, n]`` of the n transitions summed from each sample (column 0: the
                sample's own) to rewards ``[B, n]`` added to theirs before the sum; None: the stored rewards.
        """
        if self.storage is None or self.size == 0:
            raise RuntimeError("sample() before any extend(): the buffer is empty")
        env = torch.randint(0, self.num_envs, (batch_size,), device=self.device)
        oldest = (self.pos - self._size) % self.slots  # the first stored slot of every row
        t = (oldest + (torch.rand(batch_size, device=self.device) * self._size).long().clamp_max(self.slots - 1)) \
            % self.slots
        assert self.flat is not None
        batch = self.flat[env * self.slots + t]
        if self.n_step == 1:
            batch.set("discount", torch.full((batch_size,), self.gamma, device=self.device))
            if bonus is not None:
                batch.set("reward", batch["reward"] + bonus(batch["next_obs"].unsqueeze(1)).squeeze(1))
            return batch
        return self._n_step(batch, env, t, bonus)

    def _n_step(self, batch: TensorDict, env: Tensor, t: Tensor,
                bonus: Callable[[TensorDict], Tensor] | None) -> TensorDict:
        """Replace the one-step ``reward``, ``next_obs``, ``terminated`` of ``batch`` by their n-step values."""
        assert self.flat is not None
        k = torch.arange(self.n_step, device=self.device)
        ahead = env[:, None] * self.slots + (t[:, None] + k) % self.slots  # [B, n] transitions t, t+1, ... (flat)
        stored = (self.pos - 1 - t) % self.slots + 1  # transitions from t to the newest, t's own included
        done = self.flat["done"][ahead]
        # Transition t+k counts if it is stored and no earlier one of the n ended the episode (a prefix of k).
        ended_before = torch.cumsum(done.long(), 1) - done.long() > 0
        counted = (k < stored[:, None]) & ~ended_before
        m = counted.sum(1)  # >= 1: transition t itself always counts
        reward = self.flat["reward"][ahead]
        if bonus is not None:
            reward = reward + bonus(self.flat["next_obs"][ahead])
        reward = (reward * self._powers * counted).sum(1)
        last = ahead.gather(1, (m - 1)[:, None]).squeeze(1)
        batch.set("reward", reward)
        batch.set("next_obs", self.flat["next_obs"][last])
        batch.set("terminated", self.flat["terminated"][last])
        batch.set("discount", self.gamma ** m.float())
        return batch

    def state_dict(self) -> dict[str, Any]:
        """The stored transitions on the CPU (``[num_envs, size]``, oldest first, by ``/``-joined key: plain tensors,
        as ``torch.load(weights_only=True)`` reads them) and their count per env."""
        if self.storage is None or self.size == 0:
            return {"size": 0, "storage": {}}
        order = (self.pos - self.size + torch.arange(self.size, device=self.device)) % self.slots
        stored = self.storage[:, order].cpu().flatten_keys("/")
        return {"size": self.size, "storage": {key: stored.get(key) for key in stored.keys()}}  # noqa: SIM118 (iterating a TensorDict yields rows)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`'s transitions, in order (the next ``extend`` continues after them)."""
        self.storage, self.flat, self.pos, self.size = None, None, 0, 0
        self._size.zero_()
        if state["size"]:
            size = int(state["size"])
            stored = TensorDict(state["storage"], batch_size=[self.num_envs, size]).unflatten_keys("/")
            self.extend(stored.to(self.device))

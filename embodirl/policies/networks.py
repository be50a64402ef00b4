"""MLPs built from config: hidden sizes, activation by name, orthogonal init."""

from __future__ import annotations

import itertools
import math
import os
from collections.abc import Sequence

from torch import Tensor, nn

from embodirl.errors import ConfigError, check

__all__ = ["ACTIVATIONS", "MLP", "available_memory", "build_mlp", "check_fits_in_memory"]

ACTIVATIONS: dict[str, type[nn.Module]] = {
    "relu": nn.ReLU,
    "elu": nn.ELU,
    "tanh": nn.Tanh,
    "gelu": nn.GELU,
    "silu": nn.SiLU,
    "leaky_relu": nn.LeakyReLU,
}


class MLP(nn.Sequential):
    """A :class:`torch.nn.Sequential` of linear and activation layers whose forward calls each layer's ``forward``
    directly.

    The maths, parameters and ``state_dict`` keys (``0.weight``, ``0.bias``, ...) are the Sequential's; what is
    skipped is ``nn.Module.__call__`` per layer (hook dispatch), which on a CPU costs about as much as a small
    batch's matmul: a policy step runs a dozen such layers. Hooks go on the MLP itself, not on its layers.
    """

    def forward(self, x: Tensor) -> Tensor:
        for layer in self:
            x = layer.forward(x)
        return x


def available_memory() -> int:
    """Bytes of memory this machine can still give (Linux: ``MemAvailable``; elsewhere: all physical memory)."""
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def check_fits_in_memory(key: str, hidden_sizes: Sequence[int], num_params: int) -> None:
    """Refuse layers whose float32 weights, gradients and two Adam moments (16 bytes a parameter) exceed the memory
    left, before allocating them: a 40 GB network would otherwise fail deep in torch or be killed by the OS."""
    need = 16 * num_params
    available = available_memory()
    check(need <= available, key, list(hidden_sizes), f"layers that fit in memory ({num_params:,} parameters need "
          f"{need / 1e9:.1f} GB for weights, gradients and Adam's moments; {available / 1e9:.1f} GB are available)",
          f"use smaller layers, e.g. {key}=[256,256]")


def build_mlp(
    in_dim: int, out_dim: int, hidden_sizes: Sequence[int], activation: str, output_gain: float,
    key: str = "hidden_sizes",
) -> MLP:
    """``Linear -> act`` per hidden size, then a linear output; orthogonal weights, zero biases.

    Hidden layers use gain sqrt(2); the output layer ``output_gain`` (0.01 for policy heads so the
    initial policy is near uniform, 1.0 for critics). ``key`` names ``hidden_sizes`` in messages
    (``critic_hidden_sizes`` for a critic).

    Raises:
        ConfigError: ``activation`` is unknown, a hidden size is not a positive int, or the layers do not fit in
            memory.
    """
    if activation not in ACTIVATIONS:
        choices = ", ".join(ACTIVATIONS)
        raise ConfigError("activation", activation, f"one of: {choices}", f"pass activation=relu (or {choices})")
    for size in hidden_sizes:
        check(isinstance(size, int) and not isinstance(size, bool) and size > 0, key,
              list(hidden_sizes), "a list of positive ints, e.g. [64, 64]")
    widths = [in_dim, *hidden_sizes, out_dim]
    check_fits_in_memory(key, hidden_sizes, sum((a + 1) * b for a, b in itertools.pairwise(widths)))
    layers: list[nn.Module] = []
    last = in_dim
    for size in hidden_sizes:
        linear = nn.Linear(last, size)
        nn.init.orthogonal_(linear.weight, gain=math.sqrt(2.0))
        nn.init.zeros_(linear.bias)
        layers += [linear, ACTIVATIONS[activation]()]
        last = size
    head = nn.Linear(last, out_dim)
    nn.init.orthogonal_(head.weight, gain=output_gain)
    nn.init.zeros_(head.bias)
    layers.append(head)
    return MLP(*layers)

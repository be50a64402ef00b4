"""MLPs built from config: hidden sizes, activation by name, orthogonal init."""

from __future__ import annotations

import math
from collections.abc import Sequence

from torch import Tensor, nn

from embodirl.errors import ConfigError, check

__all__ = ["ACTIVATIONS", "MLP", "build_mlp"]

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


def build_mlp(
    in_dim: int, out_dim: int, hidden_sizes: Sequence[int], activation: str, output_gain: float
) -> MLP:
    """``Linear -> act`` per hidden size, then a linear output; orthogonal weights, zero biases.

    Hidden layers use gain sqrt(2); the output layer ``output_gain`` (0.01 for policy heads so the
    initial policy is near uniform, 1.0 for critics).

    Raises:
        ConfigError: ``activation`` is unknown or a hidden size is not a positive int.
    """
    if activation not in ACTIVATIONS:
        choices = ", ".join(ACTIVATIONS)
        raise ConfigError("activation", activation, f"one of: {choices}", f"pass activation=relu (or {choices})")
    for size in hidden_sizes:
        check(isinstance(size, int) and not isinstance(size, bool) and size > 0, "hidden_sizes",
              list(hidden_sizes), "a list of positive ints, e.g. [64, 64]")
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

"""MLPs from config: the fast forward is the Sequential's maths, and checkpoints keep their keys."""

import pytest
import torch
from torch import nn

from embodirl.errors import ConfigError
from embodirl.policies.networks import MLP, build_mlp


@pytest.mark.parametrize("activation", ["relu", "tanh", "elu"])
def test_mlp_computes_what_the_sequential_of_its_layers_computes(activation):
    torch.manual_seed(0)
    mlp = build_mlp(5, 3, [16, 8], activation, 1.0)
    x = torch.randn(7, 5, requires_grad=True)
    reference = nn.Sequential(*mlp)
    assert isinstance(mlp, MLP)
    torch.testing.assert_close(mlp(x), reference(x), rtol=0, atol=0)
    mlp(x).sum().backward()
    assert x.grad is not None and x.grad.abs().sum() > 0


def test_mlp_state_dict_keys_are_those_of_a_sequential():
    mlp = build_mlp(4, 2, [64, 64], "relu", 0.01)
    assert list(mlp.state_dict()) == ["0.weight", "0.bias", "2.weight", "2.bias", "4.weight", "4.bias"]
    nn.Sequential(nn.Linear(4, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 2)).load_state_dict(
        mlp.state_dict())


def test_unknown_activation_names_the_choices():
    with pytest.raises(ConfigError, match=r"activation='swish'.*one of: relu, elu, tanh"):
        build_mlp(4, 2, [8], "swish", 1.0)

"""The example task of ``env=genesis``: CartPole-v1's task on a Genesis cart-pole (``cartpole.xml``).

The functions read the batched simulator through ``env.entity`` (dof 0: the cart's slider, dof 1: the pole's
hinge, 0 rad upright) and return one row per env. They are the three import paths of ``conf/env/genesis.yaml``.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

__all__ = ["observation", "reward", "terminated"]

CART_LIMIT = 2.4  #: m, CartPole-v1's: the cart leaving [-2.4, 2.4] ends the episode
ANGLE_LIMIT = 12 * 2 * math.pi / 360  #: rad, CartPole-v1's: the pole tilting beyond 12 degrees ends it


def observation(env: Any) -> Tensor:
    """``[N, 4]``: cart position and velocity, pole angle and angular velocity (CartPole-v1's order)."""
    q, v = env.entity.get_dofs_position(), env.entity.get_dofs_velocity()
    return torch.stack([q[:, 0], v[:, 0], q[:, 1], v[:, 1]], dim=-1).to(torch.float32)


def reward(env: Any, action: Tensor) -> Tensor:
    """``[N]``: 1 for every step the pole stays up (including the step that ends the episode, as CartPole-v1)."""
    return torch.ones(env.num_envs, dtype=torch.float32, device=env.device)


def terminated(env: Any) -> Tensor:
    """``[N]`` bool: the cart left the track or the pole fell."""
    q = env.entity.get_dofs_position()
    return (q[:, 0].abs() > CART_LIMIT) | (q[:, 1].abs() > ANGLE_LIMIT)

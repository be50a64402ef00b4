"""The example Genesis task's functions: CartPole-v1's observation order, reward and termination limits, on
hand-picked dof states (no Genesis needed: the functions only read ``env.entity``'s dof tensors)."""

from __future__ import annotations

import math
from types import SimpleNamespace

import torch

from embodirl.envs import genesis_cartpole as task


def env_at(q: list[list[float]], v: list[list[float]]) -> SimpleNamespace:
    entity = SimpleNamespace(get_dofs_position=lambda: torch.tensor(q), get_dofs_velocity=lambda: torch.tensor(v))
    return SimpleNamespace(entity=entity, num_envs=len(q), device=torch.device("cpu"))


def test_observation_is_cart_position_and_velocity_then_pole_angle_and_angular_velocity():
    env = env_at([[0.5, -0.1], [0.0, 0.2]], [[1.0, 2.0], [-1.0, -2.0]])
    assert torch.equal(task.observation(env), torch.tensor([[0.5, 1.0, -0.1, 2.0], [0.0, -1.0, 0.2, -2.0]]))


def test_episodes_end_past_2_4_m_or_12_degrees_and_every_step_earns_1():
    limit = 12 * 2 * math.pi / 360
    env = env_at([[2.39, 0.0], [-2.41, 0.0], [0.0, limit - 1e-3], [0.0, -(limit + 1e-3)]], [[0.0, 0.0]] * 4)
    assert task.terminated(env).tolist() == [False, True, False, True]
    assert task.reward(env, torch.zeros(4, 1)).tolist() == [1.0] * 4

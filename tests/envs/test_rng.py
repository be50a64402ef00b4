"""The start-state memo of the native envs (:class:`embodirl.envs.rng.StartCache`) outside its happy path."""

from __future__ import annotations

import pytest
import torch

from embodirl.config.envs import PushCubeConfig
from embodirl.envs.push_cube.env import PushCube


@pytest.mark.slow  # 1,024 envs for 250 steps, twice: the scale at which the memo crashed
def test_an_env_restored_mid_episode_keeps_stepping_and_equals_the_uninterrupted_one():
    """A memo refilled mid-episode (a restored checkpoint, a curriculum's new range) is out of phase with the
    episode ends: the envs still reading their last memo rows must not index past the memo (it crashed 170 steps
    after resuming push_cube at 1,024 envs), and every start drawn must be the uninterrupted env's."""
    config = PushCubeConfig(num_envs=1024)  # 4 memoised episodes per env, 50-step episodes
    original = PushCube(config, seed=0)
    for _ in range(30):
        original.step(torch.zeros(1024, 2))
    restored = PushCube(config, seed=0)
    restored.load_state_dict(original.state_dict())
    gen = torch.Generator().manual_seed(0)
    for _ in range(220):  # past the step where it crashed
        action = torch.rand(1024, 2, generator=gen) * 2 - 1
        a, b = original.step(action), restored.step(action)
        assert torch.equal(a.obs, b.obs)

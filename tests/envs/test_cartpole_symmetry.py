"""CartPole's sign flip (embodirl.envs.cartpole_symmetry): hand values, and a symmetry of the dynamics bit for bit."""

import pytest
import torch
from tensordict import TensorDict

from embodirl.config.envs import CartPoleConfig
from embodirl.envs.cartpole import CartPole
from embodirl.envs.cartpole_symmetry import mirror
from tests.envs.test_cartpole import controller


def _obs(state: torch.Tensor) -> TensorDict:
    return TensorDict({"state": state}, batch_size=state.shape[:1])


def test_the_mirror_negates_the_state_and_swaps_left_and_right_by_hand():
    obs, action = mirror(_obs(torch.tensor([[0.1, -0.2, 0.03, 0.4]])), torch.tensor([1]))
    assert obs["state"].tolist() == [[pytest.approx(-0.1), pytest.approx(0.2), pytest.approx(-0.03),
                                      pytest.approx(-0.4)]]
    assert action.tolist() == [0]
    assert mirror(_obs(torch.tensor([[0.5, -0.25]])), torch.tensor([0]))[0]["state"].tolist() == [[-0.5, 0.25]]
    with pytest.raises(ValueError, match=r"4 .* state columns and integer actions; got 17 columns"):
        mirror(_obs(torch.zeros(2, 17)), torch.zeros(2, 2))  # push_cube's observations and actions


@pytest.mark.parametrize("physics_dtype", ["float64", "float32"])
def test_a_mirrored_start_driven_by_mirrored_actions_is_the_negated_trajectory_bit_for_bit(physics_dtype):
    cfg = CartPoleConfig(num_envs=64, physics_dtype=physics_dtype)
    env, image = CartPole(cfg, seed=4), CartPole(cfg, seed=4)
    obs = env.reset(seed=4)
    snapshot = env.state_dict()
    snapshot["state"] = -snapshot["state"]
    image.load_state_dict(snapshot)
    gen = torch.Generator().manual_seed(4)
    running = torch.ones(64, dtype=torch.bool)  # until its first episode ends (the next start is not mirrored)
    for _ in range(200):
        action = torch.from_numpy(controller(obs.numpy()))
        action = torch.where(torch.rand(64, generator=gen) < 0.15, 1 - action, action)  # some episodes fail
        out, seen = env.step(action), image.step(mirror(_obs(obs), action)[1])
        assert torch.equal(seen.final_obs[running], -out.final_obs[running])
        for name in ("reward", "terminated", "truncated"):
            assert torch.equal(getattr(seen, name)[running], getattr(out, name)[running]), name
        running &= ~(out.terminated | out.truncated)
        obs = out.obs
    assert 0 < int(running.sum()) < 64, "some episodes ended (both bounds checked), others are still running"

"""push_cube's mirror map (embodirl.envs.push_cube.symmetry): hand values, and a real symmetry of the dynamics."""

import pytest
import torch
from tensordict import TensorDict

from embodirl.config.envs import PushCubeConfig
from embodirl.envs.push_cube.env import PushCube
from embodirl.envs.push_cube.symmetry import mirror, mirror_state_features
from tests.envs.push_cube.test_env import JOINT, noisy, scripted_action, scripted_joint_action

# Rows of the [16, N] physics state whose sign flips under y -> -y: p_y, (v_p)_y, c_y, yaw, v_y, omega, g_y, q, q_dot.
STATE_SIGNS = torch.tensor([1, -1, 1, -1, 1, -1, -1, 1, -1, -1, 1, -1, -1, -1, -1, -1], dtype=torch.float64)


def _obs(state: torch.Tensor) -> TensorDict:
    return TensorDict({"state": state}, batch_size=state.shape[:1])


def test_the_mirror_negates_every_y_the_yaw_sine_the_spin_and_the_joints_by_hand():
    features = torch.arange(1.0, 18.0).unsqueeze(0)  # p (1, 2), v_p (3, 4), c (5, 6), cos, sin (7, 8), v (9, 10), ...
    want = [1, -2, 3, -4, 5, -6, 7, -8, 9, -10, -11, 12, -13, 14, -15, 16, -17]  # ... omega 11, g, g - c, c - p
    obs, action = mirror(_obs(features), torch.tensor([[0.3, -0.7]]))
    assert obs["state"][0].tolist() == want
    assert action.tolist() == [[pytest.approx(0.3), pytest.approx(0.7)]]  # ee mode: the tip's v_y flips
    timed = torch.cat([features, torch.tensor([[0.5]])], 1)  # time_obs: t / T is kept
    assert mirror_state_features(timed)[0].tolist() == [*want, 0.5]
    joint = torch.cat([features, torch.tensor([[18.0, 19.0, 20.0, 21.0]])], 1)  # q (2), scaled q_dot (2)
    obs, action = mirror(_obs(joint), torch.tensor([[0.3, -0.7]]))
    assert obs["state"][0].tolist() == [*want, -18, -19, -20, -21]
    assert action.tolist() == [[pytest.approx(-0.3), pytest.approx(0.7)]]  # joint mode: both joints turn the other way
    assert features[0, 1] == 2.0, "the caller's observation is left as it was"


def test_the_mirror_refuses_observations_that_are_not_push_cube_state_features():
    with pytest.raises(ValueError, match=r"17, 18, 21 or 22 columns.*got 4"):
        mirror(_obs(torch.zeros(3, 4)), torch.zeros(3, 2))
    with pytest.raises(ValueError, match=r"obs_mode=state.*\['rgb', 'state'\]"):
        mirror(TensorDict({"state": torch.zeros(3, 17), "rgb": torch.zeros(3, 8, 8, 3)}, batch_size=[3]),
               torch.zeros(3, 2))


@pytest.mark.parametrize("mode", ["ee", "joint"])
def test_a_mirrored_start_driven_by_mirrored_actions_stays_the_mirror_image(mode):
    """The map is a symmetry of the dynamics: from a state and its mirror image, mirrored actions (pushes in and
    out of contact, spinning the cube) give mirrored observations, equal rewards and equal successes at every step."""
    keys = JOINT if mode == "joint" else {}
    cfg = PushCubeConfig(num_envs=64, randomize_yaw=True, **keys)
    env, image = PushCube(cfg, seed=3), PushCube(cfg, seed=3)
    obs = env.reset(seed=3)
    snapshot = env.state_dict()
    snapshot["state"] = snapshot["state"] * STATE_SIGNS.to(snapshot["state"].dtype)[:, None]
    image.load_state_dict(snapshot)
    start = env.state_dict()["state"].clone()
    policy = scripted_joint_action if mode == "joint" else scripted_action
    gen = torch.Generator().manual_seed(3)
    for _ in range(45):  # within the 50-step episode: no auto-reset
        action = noisy(policy(obs), gen, 0.3)
        out = env.step(action)
        seen = image.step(mirror(_obs(obs), action)[1])
        torch.testing.assert_close(seen.obs, mirror_state_features(out.obs), rtol=0, atol=1e-5)
        torch.testing.assert_close(seen.reward, out.reward, rtol=0, atol=1e-5)
        assert torch.equal(seen.info["success"], out.info["success"])
        obs = out.obs
    end = env.state_dict()["state"]
    assert ((end[4:6] - start[4:6]).norm(dim=0) > 0.02).float().mean() > 0.25, "many cubes were pushed"
    assert (end[6] - start[6]).abs().max() > 0.05, "some cubes were spun"

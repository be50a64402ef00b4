"""The batched top view (push_cube_view.py) and PushCube's pixel observations (``obs_mode``, ``image_size``).

Hand-computed frame of the default env at 64x64 (used below): the workspace ``[-0.35, 0.45] x [-0.3, 0.3]``
plus a 5 cm margin gives the view box centre ``(0.05, 0)``, half-width ``0.45``, so the frame's left edge is
``x = -0.4``, its top edge ``y = 0.45`` and a pixel is ``0.9 / 64 = 0.0140625`` m. Pixel ``(row i, col j)`` has
its centre at ``x = -0.4 + (j + 0.5) 0.0140625``, ``y = 0.45 - (i + 0.5) 0.0140625``.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch
from gymnasium.utils.env_checker import check_env

from embodirl.config.envs import PushCubeConfig
from embodirl.envs.adapters.gymnasium_api import SingleEnvAdapter
from embodirl.envs.observations import check_observation, observation_spec
from embodirl.envs.push_cube import physics as phys
from embodirl.envs.push_cube.env import PushCube
from embodirl.envs.push_cube.view import draw_top_view, make_top_view, pack_rgb, unpack_rgb
from tests.envs.push_cube.test_env import set_scene

WORKSPACE = ((-0.35, -0.3), (0.45, 0.3))
COLORS = {name: torch.tensor(rgb, dtype=torch.uint8) for name, rgb in phys.COLORS.items()}


def scene(p=(-0.25, 0.1), c=(0.1, -0.05), theta=0.0, g=(0.3, 0.0)) -> torch.Tensor:
    """One ``[16, 1]`` PushCube state."""
    state = torch.zeros(16, 1)
    state[0:2, 0], state[4:6, 0], state[10:12, 0] = torch.tensor(p), torch.tensor(c), torch.tensor(g)
    state[6, 0] = theta
    return state


def draw(state: torch.Tensor, size: int = 64, **kwargs) -> torch.Tensor:
    view = make_top_view(size, half_size=0.02, radius=0.01, goal_radius=0.1, workspace=WORKSPACE, **kwargs)
    return draw_top_view(state, view)


def pixels_of(frame: torch.Tensor, name: str) -> set[tuple[int, int]]:
    return {tuple(rc) for rc in (frame == COLORS[name]).all(-1).nonzero().tolist()}


def test_the_cube_covers_exactly_the_hand_computed_pixels():
    """Cube centre (0.1, -0.05), h = 0.02: x in [0.08, 0.12] holds the centres of columns 34-36 (0.0852, 0.0992,
    0.1133; column 33 is at 0.0711, 37 at 0.1273); y in [-0.07, -0.03] holds rows 34-36 (-0.0352, -0.0492,
    -0.0633; row 33 at -0.0211, 37 at -0.0773)."""
    frame = draw(scene())[0]
    assert frame.shape == (64, 64, 3) and frame.dtype == torch.uint8
    assert pixels_of(frame, "cube") == {(i, j) for i in range(34, 37) for j in range(34, 37)}
    turned = draw(scene(theta=math.pi / 4))[0]  # the corner pixel (34, 34) is 0.0211 m from the centre along v
    assert (34, 34) not in pixels_of(turned, "cube") and (35, 35) in pixels_of(turned, "cube")


def test_goal_rim_tip_and_table_are_where_the_state_says():
    """Goal (0.3, 0), radius 0.1, rim 1.5 pixels (from 0.0789 m): pixel (32, 49) is at (0.2961, -0.0070), 0.008 m
    from the goal; (32, 56) at (0.3945, -0.0070), 0.0948 m (rim); (32, 57) at (0.4086, ...), 0.1088 m (outside).
    Tip (-0.25, 0.1) drawn with radius max(0.01, 2 pixels) = 0.0281: its pixel is (24, 10) at (-0.2453, 0.1055);
    (24, 13) at (-0.2102, ...) is 0.040 m away. (0, 0) at (-0.393, 0.443) and (10, 5) at (-0.323, 0.3023 > 0.3)
    are floor; (11, 5) at y = 0.2883 is table within a pixel of its edge (border); (12, 5) at y = 0.2742 table."""
    frame = draw(scene())[0]

    def color(i: int, j: int) -> torch.Tensor:
        return frame[i, j]

    assert torch.equal(color(32, 49), COLORS["goal"]) and torch.equal(color(32, 56), COLORS["goal_edge"])
    assert torch.equal(color(32, 57), COLORS["table"])
    assert torch.equal(color(24, 10), COLORS["tip"]) and not torch.equal(color(24, 13), COLORS["tip"])
    assert torch.equal(color(0, 0), COLORS["floor"]) and torch.equal(color(10, 5), COLORS["floor"])
    assert torch.equal(color(11, 5), COLORS["border"]) and torch.equal(color(12, 5), COLORS["table"])


def test_shapes_at_the_frame_edge_are_clipped_not_moved():
    """A cube half outside the frame (centre x = -0.4, the left edge) shows only its inside half: columns 0-1."""
    frame = draw(scene(c=(-0.4, -0.05)))[0]
    assert {j for _, j in pixels_of(frame, "cube")} == {0}


def test_arm_links_are_drawn_between_base_elbow_and_tip():
    state = scene(p=(0.0, 0.2))
    q = phys.arm_inverse((torch.tensor([0.0]), torch.tensor([0.2])), (-0.615, 0.0), 0.45, 0.45)
    state[12:14] = torch.stack(q)
    arm = ((-0.615, 0.0), (0.45, 0.45))
    frame = draw(state, size=128, arm=arm)[0]
    view = phys.view_box(WORKSPACE, arm[0])
    elbow = (-0.615 + 0.45 * math.cos(float(state[12, 0])), 0.45 * math.sin(float(state[12, 0])))
    for x, y in [((-0.615 + elbow[0]) / 2, elbow[1] / 2), ((elbow[0] + 0.0) / 2, (elbow[1] + 0.2) / 2)]:
        assert torch.equal(frame[phys.world_to_pixel(x, y, 128, view)], COLORS["arm"])
    assert pixels_of(draw(state, size=128)[0], "arm") == set(), "no arm outside joint mode"


def test_packed_pixels_round_trip():
    packed = torch.tensor([[pack_rgb((1, 2, 3)), pack_rgb((255, 0, 254))]], dtype=torch.int32)
    assert unpack_rgb(packed).tolist() == [[[1, 2, 3], [255, 0, 254]]]


# --- pixel observations ----------------------------------------------------------------------------------------
@pytest.mark.parametrize(("mode", "keys"), [("rgb", {"rgb"}), ("state_rgb", {"state", "rgb"})])
def test_observation_spaces_shapes_and_dtypes(mode, keys):
    env = PushCube(PushCubeConfig(num_envs=3, obs_mode=mode, image_size=48, max_episode_steps=2))
    spec = observation_spec(env.observation_space)
    assert {key for (key,) in spec} == keys, "rgb alone carries no state vector (the goal is only drawn)"
    assert spec[("rgb",)] == ((48, 48, 3), torch.uint8)
    check_observation("reset", env.reset(seed=1), spec, 3, env.device)
    for _ in range(2):  # the second step truncates and auto-resets
        step = env.step(torch.zeros(3, 2))
        check_observation("obs", step.obs, spec, 3, env.device)
        check_observation("final_obs", step.final_obs, spec, 3, env.device)
    assert PushCube(PushCubeConfig(num_envs=2)).reset().shape == (2, 17), "obs_mode=state keeps the flat vector"


def test_render_is_what_the_pixel_policy_sees():
    env = PushCube(PushCubeConfig(num_envs=4, obs_mode="rgb", goal_direction="random", max_episode_steps=3))
    obs = env.reset(seed=2)["rgb"]
    assert torch.equal(torch.from_numpy(env.render(size=64)), obs)
    gen = torch.Generator().manual_seed(0)
    for _ in range(4):  # an auto-reset among them: render shows the next episode's start, as obs does
        obs = env.step(torch.rand(4, 2, generator=gen) * 2 - 1).obs["rgb"]
        assert torch.equal(torch.from_numpy(env.render(size=64)), obs)
    assert torch.equal(torch.from_numpy(env.render([2], size=64))[0], obs[2])


def test_pictures_follow_the_state_and_final_obs_shows_the_last_state():
    """Two envs from the same seed, time limits 3 and 4: after 3 steps the first one's final_obs is the second
    one's (not yet reset) obs, and its obs is the next episode's first picture."""
    short, long = (PushCube(PushCubeConfig(num_envs=2, obs_mode="state_rgb", max_episode_steps=k),
                            seed=5) for k in (3, 4))
    first = short.reset(seed=5)["rgb"]
    long.reset(seed=5)
    push = torch.tensor([[1.0, 0.0], [1.0, 0.0]])
    for _ in range(3):
        a, b = short.step(push), long.step(push)
    assert not torch.equal(b.obs["rgb"], first), "the tip moved 7.5 cm: the picture changed"
    assert a.truncated.all() and not b.truncated.any()
    assert torch.equal(a.final_obs["rgb"], b.obs["rgb"])
    assert torch.equal(a.final_obs["state"], b.obs["state"])
    assert not torch.equal(a.obs["rgb"], a.final_obs["rgb"])
    assert torch.equal(torch.from_numpy(short.render(size=64)), a.obs["rgb"])


def test_the_goal_is_drawn_where_it_is():
    env = PushCube(PushCubeConfig(num_envs=64, obs_mode="rgb", goal_direction="random"))
    obs = env.reset(seed=0)["rgb"]
    s = env.state_dict()["state"]
    view = phys.view_box(env.workspace)
    clear = (s[0:2] - s[10:12]).square().sum(0).sqrt() > 0.05  # the tip does not cover the goal's centre
    assert clear.sum() > 50
    for i in clear.nonzero().flatten().tolist():
        pixel = obs[i][phys.world_to_pixel(float(s[10, i]), float(s[11, i]), 64, view)]
        assert torch.equal(pixel, COLORS["goal"]), i


def test_group_shared_resets_give_equal_pictures():
    env = PushCube(PushCubeConfig(num_envs=8, obs_mode="rgb", goal_direction="random", randomize_yaw=True))
    obs = env.reset(seed=3, group_size=4)["rgb"]
    assert all(torch.equal(obs[i], obs[0]) for i in range(1, 4))
    assert all(torch.equal(obs[i], obs[4]) for i in range(5, 8))
    assert not torch.equal(obs[0], obs[4])


def test_state_dict_round_trip_continues_with_the_same_pictures():
    cfg = PushCubeConfig(num_envs=4, obs_mode="rgb", max_episode_steps=3)
    env, copy = PushCube(cfg), PushCube(cfg)
    env.step(torch.ones(4, 2))
    copy.load_state_dict(env.state_dict())
    for _ in range(4):
        action = torch.tensor([[1.0, -0.5]]).expand(4, 2)
        assert torch.equal(env.step(action).obs["rgb"], copy.step(action).obs["rgb"])


def test_set_scene_moves_the_drawn_cube():
    env = PushCube(PushCubeConfig(num_envs=2, obs_mode="rgb"))
    set_scene(env, c=[[0.1, -0.05], [0.0, 0.0]], theta=0.0)
    frames = torch.from_numpy(env.render(size=64))
    assert pixels_of(frames[0], "cube") == {(i, j) for i in range(34, 37) for j in range(34, 37)}
    assert pixels_of(frames[1], "cube") != pixels_of(frames[0], "cube")


def test_pixel_env_passes_gymnasium_check_env_through_the_single_env_adapter():
    env = SingleEnvAdapter(PushCube(PushCubeConfig(num_envs=1, obs_mode="state_rgb", image_size=32)), render_size=32)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_env(env)
    expected = ("infinity", "not having a spec")  # unbounded state vector; not registered with gymnasium
    assert [str(w.message) for w in caught if not any(e in str(w.message) for e in expected)] == []
    obs, _ = env.reset(seed=3)
    assert obs["rgb"].dtype == np.uint8 and obs["state"].dtype == np.float32
    assert np.array_equal(obs["rgb"], env.render()), "the observation is the rendered frame"

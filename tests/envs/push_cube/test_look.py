"""Visual randomization of push_cube's top view: colours, lighting, camera pose and field of view per env."""

from __future__ import annotations

import math

import pytest
import torch

from embodirl.config.envs import PushCubeConfig
from embodirl.config.randomize import RandomizeConfig
from embodirl.envs.push_cube import physics as phys
from embodirl.envs.push_cube.env import PushCube
from embodirl.envs.push_cube.view import LABELS, ViewStyle, draw_packed, make_top_view, palette_of, warp_labels
from embodirl.errors import ConfigError


def spec(low: float, high: float, **kwargs) -> RandomizeConfig:
    return RandomizeConfig(range=(low, high), **kwargs)


def make(randomize: dict[str, RandomizeConfig], num_envs: int = 8, seed: int = 0, **kwargs) -> PushCube:
    kwargs.setdefault("obs_mode", "rgb")
    return PushCube(PushCubeConfig(num_envs=num_envs, randomize=randomize, **kwargs), seed=seed)


def test_palette_packs_lit_rounded_and_clipped_colours():
    colors = torch.tensor([[[10.0, 100.0, 200.0], [255.0, 0.0, 1.0]]])  # [1 env, 2 labels, rgb]
    palette = palette_of(colors, torch.tensor([1.5]))
    # 10 x 1.5 = 15, 100 x 1.5 = 150, 200 x 1.5 = 300 -> 255; 255 x 1.5 -> 255, 0, 1.5 -> 2 (round half to even)
    assert palette.tolist() == [[15 | 150 << 8 | 255 << 16, 255 | 0 << 8 | 2 << 16]]


def test_colour_channels_are_drawn_per_env_seeded_and_within_range():
    randomize = {"cube_color": spec(20.0, 240.0, scale="absolute"), "light": spec(0.5, 1.5)}
    env, again, small = (make(randomize, n, obs_mode="state") for n in (256, 256, 4))
    rows = env.randomization.names
    assert rows == ("cube_color.r", "cube_color.g", "cube_color.b", "light")
    values = env.randomization.values.double()
    assert values[:3].min() >= 20.0 and values[:3].max() <= 240.0 and values[3].min() >= 0.5 and values[3].max() <= 1.5
    assert torch.equal(values, again.randomization.values.double())  # seeded
    assert torch.equal(small.randomization.values, env.randomization.values[:, :4])  # per env, whatever num_envs
    assert len({tuple(column.tolist()) for column in values.T}) == 256  # every env its own colour
    assert values[0].std() > 40 and (values[0] - values[1]).abs().mean() > 20  # channels drawn on their own
    assert make(randomize, 4, seed=1, obs_mode="state").randomization.values.ne(env.randomization.values[:, :4]).all()


def cube_and_rest(env: PushCube, frames: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The cube's mask in the env's frames (labels drawn at the nominal camera)."""
    labels = draw_packed(env._state, env._view, labelled=True)
    cube = labels == LABELS.index("cube")
    return cube, ~cube


def test_a_drawn_cube_colour_paints_the_cube_and_nothing_else():
    nominal, coloured = make({}), make({"cube_color": spec(30.0, 30.0, scale="absolute")})
    plain, frames = nominal.reset(seed=0)["rgb"], coloured.reset(seed=0)["rgb"]
    cube, rest = cube_and_rest(coloured, frames)
    assert cube.sum() > 0
    assert (frames[cube] == 30).all()
    assert torch.equal(frames[rest], plain[rest])
    assert (plain[cube] == torch.tensor(phys.COLORS["cube"], dtype=torch.uint8)).all()


def test_light_scales_every_pixel_and_the_goal_rim_keeps_its_ratio():
    plain = make({}).reset(seed=0)["rgb"]
    dim = make({"light": spec(0.5, 0.5)}).reset(seed=0)["rgb"]
    torch.testing.assert_close(dim, (plain.double() * 0.5).round().to(torch.uint8), rtol=0, atol=0)
    goal = make({"goal_color": spec(2.0, 2.0)}).reset(seed=0)["rgb"]
    for part in ("goal", "goal_edge"):
        nominal = torch.tensor(phys.COLORS[part], dtype=torch.uint8)
        where = (plain == nominal).all(-1)
        assert where.sum() > 0
        expected = (torch.tensor(phys.COLORS[part]) * 2.0).clamp(max=255).to(torch.uint8)
        assert (goal[where] == expected).all(), part


def test_nominal_looks_draw_exactly_the_plain_frames():
    """Entries at their nominal values (colours x1, light x1, camera unmoved) take the styled path and must
    draw what the plain path draws, bit for bit."""
    randomize = {"cube_color": spec(1.0, 1.0), "table_color": spec(1.0, 1.0), "goal_color": spec(1.0, 1.0),
                 "floor_color": spec(1.0, 1.0), "light": spec(1.0, 1.0), "camera_fov": spec(1.0, 1.0),
                 "camera_shift": spec(0.0, 0.0, scale="absolute"), "camera_roll": spec(0.0, 0.0, scale="absolute")}
    plain, styled = make({}), make(randomize)
    assert torch.equal(plain.reset(seed=3)["rgb"], styled.reset(seed=3)["rgb"])
    for _ in range(3):
        action = torch.rand(8, 2) * 2 - 1
        a, b = plain.step(action), styled.step(action)
        assert torch.equal(a.obs["rgb"], b.obs["rgb"]) and torch.equal(a.final_obs["rgb"], b.final_obs["rgb"])
    assert torch.equal(torch.from_numpy(plain.render(size=96)), torch.from_numpy(styled.render(size=96)))


def view_and_labels(size: int = 32):
    view = make_top_view(size, half_size=0.02, radius=0.01, goal_radius=0.1, workspace=((-0.35, -0.3), (0.45, 0.3)))
    labels = torch.arange(size * size, dtype=torch.int32).view(1, size, size)  # every pixel its own label
    return view, labels


def test_a_shifted_camera_moves_the_picture_by_whole_pixels_the_other_way():
    view, labels = view_and_labels()
    palette = torch.zeros(1, 1, dtype=torch.int32)
    moved = warp_labels(labels, view, ViewStyle(palette, shift=(torch.tensor([3 * view.pixel]),
                                                                 torch.tensor([-2 * view.pixel]))))
    # camera 3 pixels right and 2 down: output pixel (r, c) shows the nominal pixel (r + 2, c + 3)
    assert torch.equal(moved[0, :-2, :-3], labels[0, 2:, 3:])
    assert (moved[0, -2:, :] == LABELS.index("floor")).all() and (moved[0, :, -3:] == LABELS.index("floor")).all()
    same = warp_labels(labels, view, ViewStyle(palette, shift=(torch.zeros(1), torch.zeros(1)),
                                               roll=torch.zeros(1), zoom=torch.ones(1)))
    assert torch.equal(same, labels)


def test_a_turned_camera_rotates_and_a_wider_view_shrinks_the_picture():
    view, labels = view_and_labels()
    palette = torch.zeros(1, 1, dtype=torch.int32)
    half_turn = warp_labels(labels, view, ViewStyle(palette, roll=torch.tensor([math.pi])))
    assert torch.equal(half_turn, labels.flip(1, 2))
    quarter = warp_labels(labels, view, ViewStyle(palette, roll=torch.tensor([math.pi / 2])))
    assert torch.equal(quarter[0], labels[0].rot90(-1))  # turned counter-clockwise: the scene turns clockwise
    wide = warp_labels(labels, view, ViewStyle(palette, zoom=torch.tensor([2.0])))
    # twice the field of view: output pixel c (centre c + 0.5, 16 the frame's centre) shows the nominal point
    # 2 (c + 0.5 - 16) + 16 = 2c - 15, i.e. nominal pixel 2c - 15
    assert torch.equal(wide[0, 8:24, 8:24], labels[0, 1:32:2, 1:32:2])
    assert (wide[0, :8] == LABELS.index("floor")).all()


def test_camera_entries_move_each_env_s_view_by_its_drawn_amount():
    env = make({"camera_shift": spec(0.05, 0.05, scale="absolute")}, num_envs=64)
    names = env.randomization.names
    assert names == ("camera_shift", "_camera_direction")  # the direction is a hidden row, not logged
    assert env.info_metrics[-1] == "randomize/camera_shift"
    direction = env.randomization.values[1].double()
    assert direction.min() >= 0 and direction.max() < 2 * math.pi and direction.std() > 1.0
    plain = make({}, num_envs=64).reset(seed=0)["rgb"]
    assert not torch.equal(env.reset(seed=0)["rgb"], plain)


def test_set_range_moves_every_channel_of_a_colour():
    env = make({"cube_color": spec(1.0, 1.0)}, max_episode_steps=2)
    env.set_randomize_range("cube_color", 0.5, 0.5)
    for _ in range(2):
        env.step(torch.zeros(8, 2))
    expected = torch.tensor(phys.COLORS["cube"], dtype=torch.float32).view(3, 1) * 0.5
    torch.testing.assert_close(env.randomization.values, expected.expand(3, 8))
    with pytest.raises(ConfigError, match=r"one of env\.randomize's: cube_color"):
        env.set_randomize_range("cube_color.r", 0.5, 0.5)


@pytest.mark.parametrize(("randomize", "match"), [
    ({"camera_shift": spec(0.0, 0.05)}, "camera_shift.scale=absolute"),
    ({"camera_roll": spec(0.0, 200.0, scale="absolute")}, "values up to 180 degrees"),
    ({"cube_color": spec(0.0, 300.0, scale="absolute")}, r"range=\[0,255\]"),
    ({"camera_fov": spec(0.0, 2.0)}, "values > 0"),
])
def test_bad_visual_ranges_are_refused_with_a_fix(randomize, match):
    with pytest.raises(ConfigError, match=match):
        PushCubeConfig(randomize=randomize).check()


def test_a_checkpoint_restores_each_env_s_look():
    randomize = {"table_color": spec(0.3, 1.0), "camera_roll": spec(0.0, 20.0, scale="absolute")}
    env, other = make(randomize, seed=0), make(randomize, seed=5)
    env.step(torch.zeros(8, 2))
    other.load_state_dict(env.state_dict())
    action = torch.rand(8, 2) * 2 - 1
    assert torch.equal(env.step(action).obs["rgb"], other.step(action).obs["rgb"])

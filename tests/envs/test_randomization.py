"""Domain randomization (``env.randomize``): the samplers, per-env draws at resets only, and the physics they change."""

from __future__ import annotations

import math

import pytest
import torch

from embodirl.config.envs import CartPoleConfig, PushCubeConfig
from embodirl.config.randomize import RandomizeConfig
from embodirl.envs.cartpole import CartPole
from embodirl.envs.push_cube.env import PushCube
from embodirl.envs.randomization import sample_values
from embodirl.errors import ConfigError


def spec(low: float, high: float, **kwargs) -> RandomizeConfig:
    return RandomizeConfig(range=(low, high), **kwargs)


def test_sample_values_hand_computed():
    u = torch.tensor([[0.0, 0.5, 0.75], [0.0, 0.5, 0.75]], dtype=torch.float64)
    low = torch.tensor([[0.5], [0.5]], dtype=torch.float64)
    high = torch.tensor([[2.0], [2.0]], dtype=torch.float64)
    log = torch.tensor([[False], [True]])
    got = sample_values(u, low, high, log)
    # uniform: 0.5 + 1.5 u = 0.5, 1.25, 1.625; log-uniform: 0.5 * 4^u = 0.5, 1.0 (the geometric mean), 0.5 * 2^1.5
    want = torch.tensor([[0.5, 1.25, 1.625], [0.5, 1.0, 0.5 * 2**1.5]], dtype=torch.float64)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=0)


def test_a_uniform_row_with_zero_low_stays_finite_beside_a_log_row():
    u = torch.tensor([[0.25], [0.25]], dtype=torch.float64)
    got = sample_values(u, torch.tensor([[0.0], [1.0]], dtype=torch.float64),
                        torch.tensor([[4.0], [16.0]], dtype=torch.float64), torch.tensor([[False], [True]]))
    assert got.flatten().tolist() == pytest.approx([1.0, 2.0])


def test_draws_stay_in_their_bounds_and_log_uniform_is_symmetric_in_log():
    randomize = {"table_friction": spec(0.5, 2.0), "cube_mass": spec(0.5, 2.0, dist="log_uniform"),
                 "goal_offset": spec(0.15, 0.3, scale="absolute")}
    env = PushCube(PushCubeConfig(num_envs=4096, randomize=randomize), seed=0)
    friction, mass, offset = env.randomization.values.double()
    assert friction.min() >= 0.15 and friction.max() <= 0.6  # x0.5 .. x2 of 0.3
    assert friction.mean() == pytest.approx(0.3 * 1.25, rel=0.02)
    assert mass.min() >= 0.032 and mass.max() <= 0.128
    assert (mass / 0.064).log().mean() == pytest.approx(0.0, abs=0.03)  # halved as often as doubled
    assert offset.min() >= 0.15 and offset.max() <= 0.3
    first = env.state_dict()["state"]
    assert torch.allclose((first[10:12] - first[4:6]).norm(dim=0), offset.float(), atol=1e-6)  # the goal distance


def test_each_env_draws_its_own_values_independently_of_num_envs():
    randomize = {"pole_length": spec(0.5, 2.0), "force_mag": spec(0.5, 1.5)}
    big = CartPole(CartPoleConfig(num_envs=64, randomize=randomize), seed=7)
    small = CartPole(CartPoleConfig(num_envs=4, randomize=randomize), seed=7)
    values = big.randomization.values
    assert values[0].unique().numel() == 64  # every env its own draw
    assert torch.corrcoef(values)[0, 1].abs() < 0.4  # the parameters are drawn independently of each other
    torch.testing.assert_close(small.randomization.values, values[:, :4], rtol=0, atol=0)


def test_values_change_only_when_an_episode_ends_and_info_reports_the_ended_ones():
    env = PushCube(PushCubeConfig(num_envs=64, max_episode_steps=5, randomize={"push_friction": spec(0.2, 3.0)}),
                   seed=1)
    gen = torch.Generator().manual_seed(0)
    ends = 0
    for _ in range(12):
        before = env.randomization.values.clone()
        out = env.step(torch.rand(64, 2, generator=gen) * 2 - 1)
        done = out.terminated | out.truncated
        after = env.randomization.values
        assert torch.equal(after[:, ~done], before[:, ~done])  # mid-episode: unchanged
        assert (after[:, done] != before[:, done]).all()  # a new episode: a new draw
        assert torch.equal(out.info["randomize/push_friction"], before[0])  # the episode's own value
        ends += int(done.sum())
    assert ends == 2 * 64


def test_group_resets_share_the_values_of_their_group():
    env = CartPole(CartPoleConfig(num_envs=8, randomize={"cart_mass": spec(0.5, 2.0)}), seed=0)
    env.reset(group_size=4)
    values = env.randomization.values[0]
    assert torch.equal(values[:4], values[:1].expand(4)) and values[4] != values[0]


def test_table_friction_drawn_per_env_sets_each_env_s_deceleration():
    """The friction law (Delta |v| = mu g dt per control step) with each env's own mu."""
    env = PushCube(PushCubeConfig(num_envs=3, randomize={"table_friction": spec(1.0, 1.0)}), seed=0)
    mu = torch.tensor([0.15, 0.3, 0.6])
    snapshot = env.state_dict()
    snapshot["randomize_values"] = mu.view(1, 3).clone()
    rows = snapshot["state"]
    rows[0:2] = torch.tensor([[-0.3], [-0.25]])  # the tip far away
    rows[7:9] = torch.tensor([[0.3], [0.0]])  # the cube sliding at 0.3 m/s along x
    rows[9] = 0.0
    env.load_state_dict(snapshot)
    env.step(torch.zeros(3, 2))
    speed = env.state_dict()["state"][7]
    torch.testing.assert_close(0.3 - speed, mu * 9.81 * 0.05, rtol=1e-5, atol=1e-7)


def test_actuator_gain_scales_the_tip_step():
    env = PushCube(PushCubeConfig(num_envs=2, randomize={"actuator_gain": spec(1.0, 1.0)}), seed=0)
    snapshot = env.state_dict()
    snapshot["randomize_values"] = torch.tensor([[0.5, 1.5]])
    env.load_state_dict(snapshot)
    before = env.state_dict()["state"][0].clone()
    env.step(torch.tensor([[1.0, 0.0], [1.0, 0.0]]))
    moved = env.state_dict()["state"][0] - before
    torch.testing.assert_close(moved, torch.tensor([0.5, 1.5]) * 0.5 * 0.05, rtol=1e-5, atol=1e-7)  # gain v_max dt


def test_randomized_cartpole_dynamics_follow_the_drawn_pole_and_force():
    """With the nominal values drawn (range [1, 1]) the randomized path reproduces the nominal trajectory."""
    ones = {name: spec(1.0, 1.0) for name in ("pole_length", "pole_mass", "cart_mass", "force_mag")}
    randomized, nominal = (CartPole(CartPoleConfig(num_envs=16, randomize=r), seed=2) for r in (ones, {}))
    gen = torch.Generator().manual_seed(0)
    for _ in range(40):
        action = torch.randint(0, 2, (16,), generator=gen)
        a, b = randomized.step(action), nominal.step(action)
        torch.testing.assert_close(a.obs, b.obs, rtol=1e-6, atol=1e-6)
    heavy = CartPole(CartPoleConfig(num_envs=1, randomize={"pole_length": spec(2.0, 2.0)}), seed=2)
    light = CartPole(CartPoleConfig(num_envs=1), seed=2)
    for env in (heavy, light):
        snapshot = env.state_dict()
        snapshot["state"][:] = torch.tensor([[0.0, 0.0, 0.1, 0.0]])
        env.load_state_dict(snapshot)
        env.step(torch.zeros(1, dtype=torch.int64))
    # a longer pole falls more slowly: theta_dot after one step is smaller
    assert 0 < heavy.state_dict()["state"][0, 3] < light.state_dict()["state"][0, 3]


def test_set_randomize_range_applies_from_the_next_resets():
    env = PushCube(PushCubeConfig(num_envs=32, max_episode_steps=3, randomize={"goal_offset": spec(1.0, 1.0)}),
                   seed=0)
    env.step(torch.zeros(32, 2))  # fills the eager memo of future starts with the old range
    env.set_randomize_range("goal_offset", 1.5, 1.5)
    assert torch.allclose(env.randomization.values.double(), torch.tensor(0.2, dtype=torch.float64))  # unchanged
    for _ in range(2):
        out = env.step(torch.zeros(32, 2))
    assert (out.truncated).all()
    torch.testing.assert_close(env.randomization.values, torch.full((1, 32), 0.3), rtol=1e-6, atol=0)


@pytest.mark.parametrize(("name", "low", "high", "match"), [
    ("table_friction", 2.0, 1.0, "low <= high"),
    ("cube_mass", 0.5, 2.0, "a randomized parameter"),
])
def test_set_randomize_range_refuses_bad_input(name, low, high, match):
    env = PushCube(PushCubeConfig(num_envs=2, randomize={"table_friction": spec(1.0, 1.0)}), seed=0)
    with pytest.raises(ConfigError, match=match):
        env.set_randomize_range(name, low, high)


def test_without_randomize_the_env_has_none_and_reports_no_extra_info():
    env = PushCube(PushCubeConfig(num_envs=2), seed=0)
    assert env.randomization is None and env.info_metrics == ("dist_to_goal", "is_reached")
    assert not any(k.startswith("randomize/") for k in env.step(torch.zeros(2, 2)).info)
    with pytest.raises(ConfigError, match="randomizes none"):
        env.set_randomize_range("table_friction", 1.0, 2.0)


def test_relative_extremes_hold_for_the_geometry_rules():
    cfg = PushCubeConfig(randomize={"pusher_radius": spec(0.5, 1.0)})
    assert cfg.randomized_extremes("pusher_radius") == (0.005, 0.01)
    assert cfg.randomized_extremes("actuator_gain") == (1.0, 1.0)
    assert math.isclose(cfg.randomized_extremes("cube_mass")[1], 0.064)


# --- push_cube_arm (MuJoCo, the CPU engine: per-simulation model fields) ----------------------------------------
def arm(randomize: dict, num_envs: int = 4, seed: int = 0):
    from embodirl.config.envs import PushCubeArmConfig
    from embodirl.envs.push_cube.arm import PushCubeArm

    return PushCubeArm(PushCubeArmConfig(num_envs=num_envs, num_threads=1, randomize=randomize), seed=seed)


def arm_actions(num_steps: int, num_envs: int = 4) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    return [torch.rand(num_envs, 6, generator=gen) * 2 - 1 for _ in range(num_steps)]


def test_arm_x1_draws_reproduce_the_nominal_simulation_bit_for_bit():
    ones = {name: spec(1.0, 1.0) for name in ("cube_mass", "cube_friction", "joint_damping")}
    nominal, randomized = arm({}), arm(ones)
    for action in arm_actions(60):  # an auto-reset at step 50 redraws (the same) values
        assert torch.equal(nominal.step(action).obs, randomized.step(action).obs)


def test_arm_values_are_written_into_each_simulation_and_redrawn_at_resets_only():
    env = arm({"cube_mass": spec(0.5, 2.0, dist="log_uniform"), "cube_friction": spec(0.25, 2.0)})
    mass_field = env.engine.model_field("body_mass")[:, env.model.body("cube").id]
    friction_field = env.engine.model_field("geom_friction")[:, env.model.geom("cube").id, 0]
    first = env.randomization.values.clone()
    assert torch.equal(mass_field, first[0]) and torch.equal(friction_field, first[1])
    assert first[0].unique().numel() == 4
    for t, action in enumerate(arm_actions(50)):
        out = env.step(action)
        assert torch.equal(out.info["randomize/cube_mass"].double(), first[0].float().double())
        if t < 49:
            assert torch.equal(env.randomization.values, first)
    assert (env.randomization.values != first).all() and torch.equal(mass_field, env.randomization.values[0])


def test_arm_joint_damping_slows_the_arm():
    nominal, damped = arm({}), arm({"joint_damping": spec(50.0, 50.0)})
    action = torch.ones(4, 6)
    for _ in range(3):
        nominal.step(action)
        damped.step(action)
    speed = [env.state_dict()["sim.qvel"][:, :6].abs().mean() for env in (nominal, damped)]
    assert speed[1] < 0.9 * speed[0]  # the position servo is stiff: x50 damping slows the joints by about 20 %


def test_arm_restored_state_continues_with_the_restored_values():
    randomize = {"cube_friction": spec(0.25, 2.0), "joint_damping": spec(0.5, 4.0)}
    original = arm(randomize)
    actions = arm_actions(80)
    for action in actions[:20]:
        original.step(action)
    restored = arm(randomize, seed=5)  # other draws until the snapshot is loaded
    restored.load_state_dict(original.state_dict())
    for action in actions[20:]:
        assert torch.equal(original.step(action).obs, restored.step(action).obs)


def test_arm_randomization_needs_the_cpu_engine():
    from embodirl.config.envs import PushCubeArmConfig
    from embodirl.config.schema import parse

    with pytest.raises(ConfigError, match=r"engine='warp'.*engine=batch"):
        parse(PushCubeArmConfig, {"engine": "warp", "randomize": {"cube_mass": {"range": [0.5, 2.0]}}})

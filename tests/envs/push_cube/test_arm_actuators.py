"""Actuator randomization of the MuJoCo arm: PD gains, motor strength, torque limits and control latency per env."""

from __future__ import annotations

import pytest
import torch

from embodirl.config.envs import PushCubeArmConfig
from embodirl.config.randomize import RandomizeConfig
from embodirl.envs.push_cube.arm import PushCubeArm
from embodirl.errors import ConfigError

pytest.importorskip("mujoco")


def spec(low: float, high: float, **kwargs) -> RandomizeConfig:
    return RandomizeConfig(range=(low, high), **kwargs)


def make(randomize: dict[str, RandomizeConfig], num_envs: int = 4, seed: int = 3, **kwargs) -> PushCubeArm:
    return PushCubeArm(PushCubeArmConfig(num_envs=num_envs, num_threads=1, randomize=randomize, **kwargs), seed=seed)


def test_drawn_gains_strength_and_limits_are_each_env_s_servo_terms():
    env = make({"kp": spec(0.5, 2.0), "kd": spec(0.5, 2.0), "motor_strength": spec(0.8, 1.2),
                "torque_limit": spec(0.5, 1.0)}, num_envs=16)
    kp, kd, strength, limit = env.randomization.values  # [4, 16]
    assert (kp >= 0.5).all() and (kp <= 2.0).all() and (strength >= 0.8).all() and (strength <= 1.2).all()
    assert kp.unique().numel() == 16  # every env its own draw
    gain = env.engine.model_field("actuator_gainprm")
    bias = env.engine.model_field("actuator_biasprm")
    forces = env.engine.model_field("actuator_forcerange")
    # hand values of the MJCF: kp 4000 and kv 100 at the shoulder (joint 0), 1000 and 25 at the wrists (joint 3),
    # torque limits 330 and 54 N m (elbow 150)
    torch.testing.assert_close(gain[:, 0, 0], 4000 * kp * strength, rtol=1e-12, atol=0)
    torch.testing.assert_close(bias[:, 3, 1], -1000 * kp * strength, rtol=1e-12, atol=0)
    torch.testing.assert_close(bias[:, 0, 2], -100 * kd * strength, rtol=1e-12, atol=0)
    torch.testing.assert_close(forces[:, 2, 1], 150 * limit * strength, rtol=1e-12, atol=0)
    torch.testing.assert_close(forces[:, 4, 0], -54 * limit * strength, rtol=1e-12, atol=0)
    again = make({"kp": spec(0.5, 2.0), "kd": spec(0.5, 2.0), "motor_strength": spec(0.8, 1.2),
                  "torque_limit": spec(0.5, 1.0)}, num_envs=4)
    assert torch.equal(again.randomization.values, env.randomization.values[:, :4])  # seeded, per env


def test_a_weak_motor_moves_its_joints_less():
    nominal, weak = make({}), make({"torque_limit": spec(0.02, 0.02)})
    action = torch.zeros(4, 6)
    action[:, 1] = 1.0  # lift the shoulder: against the arm's inertia
    start = weak._sim["qpos"][:, 1].clone()
    for _ in range(3):
        nominal.step(action)
        weak.step(action)
    moved_nominal = (nominal._sim["qpos"][:, 1] - start).abs()
    moved_weak = (weak._sim["qpos"][:, 1] - start).abs()
    assert (moved_weak < 0.5 * moved_nominal).all()


@pytest.mark.parametrize("delay", [1, 2])
def test_a_delay_executes_each_action_exactly_d_steps_late(delay):
    """Delayed by d, the arm does what an undelayed arm does with d zero actions (hold) put in front."""
    delayed = make({"action_delay": spec(delay, delay, scale="absolute")}, max_episode_steps=6)
    plain = make({}, max_episode_steps=6)
    gen = torch.Generator().manual_seed(0)
    actions = [torch.rand(4, 6, generator=gen) * 2 - 1 for _ in range(9)]
    fed = [torch.zeros(4, 6)] * delay + actions
    for step in range(6):  # one whole episode
        a, b = delayed.step(actions[step]), plain.step(fed[step])
        assert torch.equal(a.obs, b.obs), step
    # the next episode starts from holding again: its first d executed actions are zeros
    fed = [torch.zeros(4, 6)] * delay + actions[6:]
    for step in range(3):
        a, b = delayed.step(actions[6 + step]), plain.step(fed[step])
        assert torch.equal(a.obs, b.obs), step


def test_delays_are_drawn_as_whole_steps_per_env():
    env = make({"action_delay": spec(0.0, 3.0, scale="absolute")}, num_envs=512)
    steps = env.randomization.values[0].floor()
    counts = torch.bincount(steps.long(), minlength=4)
    assert counts[3] == 0 and (counts[:3] > 130).all()  # 0, 1 and 2 about equally often


def test_the_delayed_actions_survive_a_checkpoint():
    env = make({"action_delay": spec(2.0, 2.0, scale="absolute")})
    gen = torch.Generator().manual_seed(1)
    actions = [torch.rand(4, 6, generator=gen) * 2 - 1 for _ in range(4)]
    for action in actions[:2]:
        env.step(action)
    restored = make({"action_delay": spec(2.0, 2.0, scale="absolute")}, seed=9)
    restored.load_state_dict(env.state_dict())
    for action in actions[2:]:
        assert torch.equal(env.step(action).obs, restored.step(action).obs)


@pytest.mark.parametrize(("randomize", "match"), [
    ({"action_delay": spec(0.0, 2.0)}, "action_delay.scale=absolute"),
    ({"action_delay": spec(0.0, 40.0, scale="absolute")}, "delays up to 10 control steps"),
    ({"kp": spec(0.0, 2.0)}, "values > 0"),
])
def test_bad_actuator_ranges_are_refused_with_a_fix(randomize, match):
    with pytest.raises(ConfigError, match=match):
        PushCubeArmConfig(randomize=randomize).check()

"""PushCube: the spec's correctness suite (docs/envs/push_cube.md), resets, snapshots, config, rendering, gymnasium."""

from __future__ import annotations

import itertools
import math
import warnings

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium.utils.env_checker import check_env

from embodirl.config.envs import PushCubeConfig
from embodirl.config.schema import parse
from embodirl.envs.adapters.gymnasium_api import SingleEnvAdapter
from embodirl.envs.base import BatchedEnv, StepResult
from embodirl.envs.push_cube import physics as phys
from embodirl.envs.push_cube.env import PushCube
from embodirl.errors import CheckpointError, ConfigError

H, R, MU, G, DT = 0.02, 0.01, 0.3, 9.81, 0.05
JOINT = {"control_mode": "joint_delta_pos"}
SLOW = pytest.mark.slow  # a table's other cases: its first (or the arm's) stays in the fast tier


# --- helpers ------------------------------------------------------------------------------------------
def set_scene(env: PushCube, **rows: object) -> None:
    """Overwrite state rows (``p``, ``c``, ``theta``, ``v``, ``omega``, ``g``, ``q``) through a snapshot; a value
    is one for every env (a vector ``[2]`` or a scalar) or one per env (``[N, 2]`` or ``[N]``)."""
    index = {"p": slice(0, 2), "c": slice(4, 6), "theta": 6, "v": slice(7, 9), "omega": 9, "g": slice(10, 12),
             "q": slice(12, 14)}
    snapshot = env.state_dict()
    for name, value in rows.items():
        target = snapshot["state"][index[name]]
        value = torch.as_tensor(value, dtype=torch.float32)
        if value.dim() == 2:  # [N, 2] per env
            value = value.T
        elif target.dim() == 2:  # one [2] vector for every env
            value = value.reshape(2, 1)
        target.copy_(value.expand_as(target))
    env.load_state_dict(snapshot)


def state(env: PushCube) -> torch.Tensor:
    return env.state_dict()["state"]


def gap(env: PushCube) -> torch.Tensor:
    """``[N]`` signed tip-cube distance of the current state."""
    s = state(env)
    return phys.box_contact(s[0:2], s[4:6], s[6].cos(), s[6].sin(), env.half_size, env.radius)[0]


def scripted_targets(obs: torch.Tensor, curved: bool = False) -> torch.Tensor:
    """``[2, N]`` tip targets: go to the push point, push along ``u``, hold still once the cube is within 9 cm
    of the goal (it then slides less than 4 cm, so it stays in the goal region). ``curved``: the tip moves on
    arcs (joint mode), so it first lines up 2 cm behind the push point."""
    p, c, rot, g = obs[:, 0:2].T, obs[:, 4:6].T, obs[:, 6:8].T, obs[:, 11:13].T
    p_star, d_goal = phys.push_point(c, g, rot[0], rot[1], H, R)
    p_star = torch.stack(p_star)
    u = (g - c) / d_goal
    offset = p - p_star
    pushing = offset.square().sum(0).sqrt() < 0.004
    target = p_star + u * 0.025 * pushing
    if curved:
        lateral = (offset[0] * u[1] - offset[1] * u[0]).abs()
        target = torch.where(lateral > 0.003, p_star - 0.02 * u, target)
    return torch.where(d_goal < 0.09, p, target)


def scripted_action(obs: torch.Tensor) -> torch.Tensor:
    """P-controller in ee mode (2.5 cm per step at |a| = 1)."""
    return ((scripted_targets(obs) - obs[:, 0:2].T) / 0.025).clamp(-1, 1).T


def scripted_joint_action(obs: torch.Tensor, l1: float = 0.45, l2: float = 0.45) -> torch.Tensor:
    """The same targets reached through the arm's inverse Jacobian (0.05 rad per step at |a| = 1)."""
    dp = scripted_targets(obs, curved=True) - obs[:, 0:2].T
    q = obs[:, 17:19].T
    s1, c1, s12, c12 = q[0].sin(), q[0].cos(), (q[0] + q[1]).sin(), (q[0] + q[1]).cos()
    jac = torch.stack((torch.stack((-l1 * s1 - l2 * s12, -l2 * s12), -1),
                       torch.stack((l1 * c1 + l2 * c12, l2 * c12), -1)), 1)
    jac, dp = jac.double(), dp.T.double().unsqueeze(-1)  # damped least squares (the stretched arm is singular)
    normal = jac.transpose(1, 2) @ jac + 1e-4 * torch.eye(2, dtype=torch.float64)
    dq = torch.linalg.solve(normal, jac.transpose(1, 2) @ dp).squeeze(-1).float() / 0.05
    return dq / dq.abs().amax(1, keepdim=True).clamp(min=1.0)  # scaled, not clipped: keeps the direction


def noisy(action: torch.Tensor, gen: torch.Generator, scale: float = 0.5) -> torch.Tensor:
    return (action + scale * torch.randn(action.shape, generator=gen)).clamp(-1, 1)


def reference_reward(obs: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Dense reward, success, reached and reach term from the spec, in float64 numpy, from observations."""
    obs = obs.astype(np.float64)
    p, c, cos_t, sin_t, g = obs[:, 0:2], obs[:, 4:6], obs[:, 6], obs[:, 7], obs[:, 11:13]
    d_goal = np.linalg.norm(g - c, axis=1)
    u = (g - c) / d_goal[:, None]
    angle = np.arctan2(u[:, 1], u[:, 0]) - np.arctan2(sin_t, cos_t)
    s = H * (np.abs(np.cos(angle)) + np.abs(np.sin(angle))) + R
    d_reach = np.linalg.norm(p - (c - s[:, None] * u), axis=1)
    reach, place, reached, success = 1 - np.tanh(5 * d_reach), 1 - np.tanh(5 * d_goal), d_reach < 0.015, d_goal < 0.1
    return np.where(success, 3.0, reach + place * reached), success, reached, reach


def run_scripted(env: PushCube, policy=scripted_action, steps: int = 50) -> tuple[torch.Tensor, torch.Tensor]:
    """Success at any step and at the last step of the first episode of every env."""
    obs = env.reset(seed=env.seed)
    once = torch.zeros(env.num_envs, dtype=torch.bool)
    for _ in range(steps):
        result = env.step(policy(obs))
        once |= result.info["success"]
        obs = result.obs
        assert (-gap(env)).max() <= 1e-6
    return once, result.info["success"]


# --- 1-2: the scripted push succeeds, nothing ever penetrates ---------------------------------------------
def test_scripted_straight_push_succeeds_without_penetration():
    env = PushCube(PushCubeConfig(num_envs=1024), seed=1)
    once, at_end = run_scripted(env)
    assert once.float().mean() >= 0.99 and at_end.float().mean() >= 0.99, (once.float().mean(), at_end.float().mean())


def test_scripted_push_through_the_arm_succeeds():
    env = PushCube(PushCubeConfig(num_envs=256, **JOINT), seed=2)
    once, at_end = run_scripted(env, scripted_joint_action)
    assert once.float().mean() >= 0.97 and at_end.float().mean() >= 0.95, (once.float().mean(), at_end.float().mean())


@pytest.mark.parametrize("kwargs", [{}, pytest.param(JOINT, marks=SLOW),
                                    pytest.param({"randomize_yaw": True, "goal_direction": "random"}, marks=SLOW)])
def test_no_penetration_under_random_and_pushing_actions(kwargs):
    env = PushCube(PushCubeConfig(num_envs=512, **kwargs), seed=3)
    gen = torch.Generator().manual_seed(0)
    obs, contacts = env.reset(seed=3), 0
    for t in range(120):  # half the envs act randomly, half push noisily
        toward = scripted_joint_action(obs) if kwargs.get("control_mode") else scripted_action(obs)
        action = torch.where(torch.arange(512).unsqueeze(1) % 2 == 0, torch.rand(512, 2, generator=gen) * 2 - 1,
                             noisy(toward, gen, 0.7))
        obs = env.step(action).obs
        phi = gap(env)
        assert (-phi).max() <= 1e-6, f"penetration {(-phi).max():.3g} m after step {t}"
        contacts += int((phi < 1e-4).sum())
    assert contacts > 300, "the test must exercise the contact"


# --- 3: the friction law ---------------------------------------------------------------------------------
def test_table_friction_decelerates_by_mu_g_dt_and_stops_without_reversal():
    direction = torch.tensor([0.6, 0.8])
    env = PushCube(PushCubeConfig(num_envs=1))
    set_scene(env, p=[-0.3, -0.25], c=[0.0, 0.0], v=0.3 * direction, omega=0.0)
    speeds, energies, positions = [0.3], [0.5 * 0.064 * 0.09], [torch.zeros(2)]
    for _ in range(8):
        env.step(torch.zeros(1, 2))
        v = state(env)[7:9, 0]
        assert float(v @ direction) >= 0 and abs(float(v[0] * direction[1] - v[1] * direction[0])) < 1e-7
        speeds.append(float(v.norm()))
        energies.append(0.5 * 0.064 * speeds[-1] ** 2)
        positions.append(state(env)[4:6, 0].clone())
    assert speeds[0] - speeds[1] == pytest.approx(MU * G * DT, rel=1e-5)  # 0.1472 m/s per control step
    assert speeds[2] > 0.0 and speeds[3] == 0.0 and speeds[-1] == 0.0, "the cube stops exactly (no chatter)"
    assert all(b <= a for a, b in itertools.pairwise(energies))
    decel = MU * G * 0.01  # per substep; semi-implicit Euler moves by the post-friction velocity
    exact = sum(max(0.3 - k * decel, 0.0) * 0.01 for k in range(1, 20))
    travelled = float(positions[-1].norm())
    assert travelled == pytest.approx(exact, rel=1e-4)
    assert travelled == pytest.approx(0.3**2 / (2 * MU * G), rel=0.15)  # v0^2 / (2 mu g) in continuous time
    assert torch.equal(positions[-1], positions[-2])


def test_table_friction_torque_uses_the_mean_lever_arm():
    env = PushCube(PushCubeConfig(num_envs=1))
    set_scene(env, p=[-0.3, 0.0], c=[0.0, 0.0], omega=20.0)
    env.step(torch.zeros(1, 2))
    inertia = 0.064 * (2 * H) ** 2 / 6
    alpha = MU * G * H * (math.sqrt(2) + math.log(1 + math.sqrt(2))) / 3 * 0.064 / inertia
    assert 20.0 - float(state(env)[9, 0]) == pytest.approx(alpha * DT, rel=1e-5)


# --- 4: centred and off-centre pushes -------------------------------------------------------------------------
@pytest.mark.parametrize("start_gap", [0.0, 0.005])
def test_centred_push_moves_the_cube_at_the_tip_speed_without_rotation(start_gap):
    env = PushCube(PushCubeConfig(num_envs=1))
    set_scene(env, p=[-H - R - start_gap, 0.0], c=[0.0, 0.0])
    for _ in range(4):
        env.step(torch.tensor([[0.8, 0.0]]))  # 0.4 m/s
    s = state(env)[:, 0]
    assert float(s[7]) == pytest.approx(0.4, rel=1e-5) and float(s[8]) == 0.0
    assert float(s[9]) == 0.0 and float(s[6]) == 0.0
    assert abs(float(gap(env)[0])) <= 1e-6


def test_off_centre_pushes_rotate_the_cube_with_opposite_signs():
    thetas = {}
    for offset in (0.012, -0.012):
        env = PushCube(PushCubeConfig(num_envs=1))
        set_scene(env, p=[-H - R, offset], c=[0.0, 0.0])
        for _ in range(4):  # 0.2 s
            env.step(torch.tensor([[0.8, 0.0]]))
        thetas[offset] = float(state(env)[6, 0])
        assert (-gap(env)).max() <= 1e-6
    assert thetas[0.012] < -0.01 and thetas[-0.012] > 0.01
    assert thetas[0.012] == pytest.approx(-thetas[-0.012], abs=1e-6)


@pytest.mark.parametrize(("action", "ratio"), [((0.8, 0.2), 0.1), ((0.4, 0.8), 0.3), ((0.8, -0.6), -0.3)])
def test_push_friction_sticks_inside_the_cone_and_slides_on_its_edge(action, ratio):
    """Without table friction the cube's momentum is the contact impulse: |J_t| <= mu J_n, = when sliding."""
    for mu in (0.0, 0.3):
        env = PushCube(PushCubeConfig(num_envs=1, table_friction=0.0, push_friction=mu))
        set_scene(env, p=[-H - R, 0.0], c=[0.0, 0.0])
        env.step(torch.tensor([action]))
        v, omega = state(env)[7:9, 0], float(state(env)[9, 0])
        assert float(v[0]) == pytest.approx(0.5 * action[0], rel=1e-5), "the normal impulse matches the tip's speed"
        if mu == 0.0:
            assert float(v[1]) == 0.0 and omega == 0.0
        else:
            assert float(v[1] / v[0]) == pytest.approx(ratio, rel=1e-5)
            assert omega * action[1] < 0, "dragging the back face sideways spins the cube"
    if abs(ratio) < 0.3:  # sticking: the cube's contact point moves with the tip
        contact_velocity = float(v[1]) + omega * -H
        assert contact_velocity == pytest.approx(0.5 * action[1], rel=1e-4)


@pytest.mark.parametrize("baumgarte", [0.2, 1.0])
def test_a_start_in_penetration_is_pushed_out_at_the_baumgarte_rate(baumgarte):
    env = PushCube(PushCubeConfig(num_envs=1, table_friction=0.0, baumgarte=baumgarte))
    set_scene(env, p=[-H - R + 0.002, 0.0], c=[0.0, 0.0])  # 2 mm deep
    env.step(torch.zeros(1, 2))
    assert float(state(env)[7, 0]) == pytest.approx(baumgarte * 0.002 / 0.01, rel=1e-4)
    assert float(gap(env)[0]) >= 0.0


@pytest.mark.parametrize("kwargs", [{}, JOINT])
def test_the_tip_stays_in_the_workspace(kwargs):
    env = PushCube(PushCubeConfig(num_envs=64, **kwargs), seed=5)
    gen = torch.Generator().manual_seed(5)
    push = torch.rand(64, 2, generator=gen) * 2 - 1  # each env keeps one action: the tip runs into a wall
    for _ in range(49):
        env.step(push)
        tip = state(env)[0:2]
        assert (tip[0] >= -0.35).all() and (tip[0] <= 0.45).all() and (tip[1] >= -0.3).all() and (tip[1] <= 0.3).all()
    on_wall = (tip[0] <= -0.34) | (tip[0] >= 0.44) | (tip[1].abs() >= 0.29)
    assert on_wall.float().mean() > 0.5


# --- 5-7: determinism, batch independence, frame invariance ----------------------------------------------------
def rollout(env: PushCube, actions: torch.Tensor) -> list[tuple[torch.Tensor, ...]]:
    return [tuple(env.step(a)[:5]) for a in actions]


def test_same_seed_same_trajectory_and_different_seeds_differ():
    gen = torch.Generator().manual_seed(1)
    actions = torch.rand(45, 64, 2, generator=gen) * 2 - 1  # two auto-resets of 20-step episodes
    cfg = PushCubeConfig(num_envs=64, max_episode_steps=20)
    first, second = rollout(PushCube(cfg, seed=5), actions), rollout(PushCube(cfg, seed=5), actions)
    assert all(torch.equal(x, y) for a, b in zip(first, second, strict=True) for x, y in zip(a, b, strict=True))
    other = rollout(PushCube(cfg, seed=6), actions[:1])
    assert not torch.equal(first[0][0], other[0][0])


@pytest.mark.parametrize("kwargs", [{}, {**JOINT, "randomize_yaw": True, "goal_direction": "random_aligned"}])
def test_env_trajectories_do_not_depend_on_num_envs(kwargs):
    big, small, single = (PushCube(PushCubeConfig(num_envs=n, max_episode_steps=20, **kwargs), seed=9)
                          for n in (256, 4, 1))
    gen = torch.Generator().manual_seed(2)
    obs = big.reset(seed=9)
    assert torch.equal(obs[:4], small.reset(seed=9)) and torch.equal(obs[:1], single.reset(seed=9))
    policy = scripted_joint_action if kwargs else scripted_action
    for _ in range(45):  # two auto-resets
        action = noisy(policy(obs), gen, 0.3)
        out_big, out_small, out_single = big.step(action), small.step(action[:4]), single.step(action[:1])
        for x_big, x_small, x_single in zip(out_big[:5], out_small[:5], out_single[:5], strict=True):
            assert torch.equal(x_big[:4], x_small) and torch.equal(x_big[:1], x_single)
        obs = out_big.obs


def test_rotating_the_scene_rotates_the_trajectory():
    n, angle = 16, 0.6
    gen = torch.Generator().manual_seed(3)
    cube = (torch.rand(n, 2, generator=gen) - 0.5) * 0.1
    theta = (torch.rand(n, generator=gen) - 0.5) * 0.6
    tip = cube + torch.stack((-0.06 + 0.02 * torch.rand(n, generator=gen), 0.03 * torch.randn(n, generator=gen)), 1)
    goal = cube + torch.tensor([0.2, 0.0])
    cos_a, sin_a = math.cos(angle), math.sin(angle)
    rot = torch.tensor([[cos_a, -sin_a], [sin_a, cos_a]])
    envs = [PushCube(PushCubeConfig(num_envs=n)), PushCube(PushCubeConfig(num_envs=n))]
    set_scene(envs[0], p=tip, c=cube, theta=theta, g=goal)
    set_scene(envs[1], p=tip @ rot.T, c=cube @ rot.T, theta=theta + angle, g=goal @ rot.T)
    obs = envs[0].step(torch.zeros(n, 2)).obs
    envs[1].step(torch.zeros(n, 2))
    for _ in range(8):
        action = scripted_action(obs)
        action = action / action.norm(dim=1, keepdim=True).clamp(min=1.0)  # keep R a inside the action box
        obs = envs[0].step(action).obs
        envs[1].step(action @ rot.T)
        s0, s1 = state(envs[0]), state(envs[1])
        for rows in (slice(0, 2), slice(2, 4), slice(4, 6), slice(7, 9)):
            torch.testing.assert_close(s1[rows].T, s0[rows].T @ rot.T, rtol=0, atol=1e-5)
        torch.testing.assert_close(s1[6], s0[6] + angle, rtol=0, atol=1e-5)
        torch.testing.assert_close(s1[9], s0[9], rtol=0, atol=1e-3)  # rad/s
    moved = state(envs[0])[4:6].T - cube
    assert moved.norm(dim=1).min() > 0.05 and state(envs[0])[6].sub(theta).abs().max() > 1e-3, "pushes happened"


# --- 8: the reward contract ---------------------------------------------------------------------------------
def test_rewards_follow_the_staged_formula_in_every_mode():
    envs = {mode: PushCube(PushCubeConfig(num_envs=256, reward_mode=mode),
                           seed=4) for mode in ("normalized_dense", "dense", "sparse")}
    gen = torch.Generator().manual_seed(4)
    obs = {mode: env.reset(seed=4) for mode, env in envs.items()}
    seen = {"success": 0, "reached": 0}
    for _ in range(50):
        action = noisy(scripted_action(obs["dense"]), gen, 0.2)
        out = {mode: env.step(action) for mode, env in envs.items()}
        dense, success, reached, reach = reference_reward(out["dense"].final_obs.numpy())
        np.testing.assert_allclose(out["dense"].reward.numpy(), dense, rtol=0, atol=2e-5)
        normalized = out["normalized_dense"].reward
        assert normalized.min() >= 0 and normalized.max() <= 1
        assert torch.equal(normalized == 1.0, out["dense"].info["success"])
        assert np.array_equal(out["dense"].info["success"].numpy(), success)
        assert np.array_equal(out["dense"].info["is_reached"].numpy(), reached)
        assert (reach[reached] >= 1 - np.tanh(0.075) - 1e-6).all()
        assert torch.equal(out["sparse"].reward, out["dense"].info["success"].float())
        torch.testing.assert_close(out["dense"].reward / 3, normalized)
        seen["success"] += int(success.sum())
        seen["reached"] += int((reached & ~success).sum())
        obs = {mode: o.obs for mode, o in out.items()}
    assert seen["success"] > 1000 and seen["reached"] > 500


# --- 9: spaces, shapes and the gymnasium adapter ------------------------------------------------------------
@pytest.mark.parametrize(("kwargs", "dim"), [({}, 17), (JOINT, 21), ({"time_obs": True}, 18),
                                             ({**JOINT, "time_obs": True}, 22)])
def test_spaces_and_shapes(kwargs, dim):
    env = PushCube(PushCubeConfig(num_envs=8, **kwargs))
    assert env.observation_space.shape == (dim,) and env.observation_space.dtype == np.float32
    assert env.action_space.shape == (2,) and env.action_space.dtype == np.float32
    assert (env.action_space.low == -1).all() and (env.action_space.high == 1).all()
    assert env.solved_metric == "eval/success_rate" and env.solved_threshold == 0.9
    obs = env.reset(seed=0)
    assert obs.shape == (8, dim) and obs.dtype == torch.float32 and obs.is_contiguous()
    out = env.step(torch.zeros(8, 2))
    assert out.obs.shape == out.final_obs.shape == (8, dim) and out.obs.is_contiguous()
    assert out.reward.dtype == torch.float32 and out.terminated.dtype == out.truncated.dtype == torch.bool
    assert out.info["success"].dtype == out.info["is_reached"].dtype == torch.bool
    assert out.info["dist_to_goal"].dtype == torch.float32 and out.info["elapsed_steps"].dtype == torch.int64
    assert all(env.observation_space.contains(o) for o in out.obs.numpy())
    with pytest.raises(ValueError, match="shape"):
        env.step(torch.zeros(8))


def test_actions_are_clipped():
    gen = torch.Generator().manual_seed(5)
    actions = (torch.rand(30, 16, 2, generator=gen) * 2 - 1) * 3
    clipped = rollout(PushCube(PushCubeConfig(num_envs=16)), actions.clamp(-1, 1))
    raw = rollout(PushCube(PushCubeConfig(num_envs=16)), actions)
    assert all(torch.equal(x, y) for a, b in zip(clipped, raw, strict=True) for x, y in zip(a, b, strict=True))


@pytest.mark.parametrize("kwargs", [{}, {**JOINT, "time_obs": True}])
def test_single_env_adapter_passes_gymnasium_check_env(kwargs):
    env = SingleEnvAdapter(PushCube(PushCubeConfig(num_envs=1, **kwargs)), render_size=32)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_env(env)
    expected = ("infinity", "not having a spec")  # unbounded observations; not registered with gymnasium
    assert [str(w.message) for w in caught if not any(e in str(w.message) for e in expected)] == []
    obs, info = env.reset(seed=3)
    assert obs.dtype == np.float32 and info == {} and env.render().shape == (32, 32, 3)
    assert env.metadata["render_fps"] == 20
    for t in range(1, 51):
        obs, reward, terminated, truncated, info = env.step(np.zeros(2, dtype=np.float32))
        assert isinstance(reward, float) and info["elapsed_steps"] == t and not terminated
    assert truncated and np.array_equal(obs[4:6], env.reset(seed=3)[0][4:6]), "the true last obs, cube at rest"
    with pytest.raises(ValueError, match="num_envs=1"):
        SingleEnvAdapter(PushCube(PushCubeConfig(num_envs=2)))


class _CountingEnv(BatchedEnv):
    """A 1-env discrete BatchedEnv that reuses its observation buffer (the adapter must copy)."""

    def __init__(self) -> None:
        self.num_envs, self.device, self.max_episode_steps = 1, torch.device("cpu"), 3
        self.observation_space = gym.spaces.Box(-10.0, 10.0, (2,), np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self._obs, self._t = torch.zeros(1, 2), 0

    def reset(self, seed=None, group_size=1):
        self._t = 0
        self._obs.zero_()
        return self._obs

    def step(self, action):
        self._t += 1
        self._obs += action.view(1, 1).float()
        done = torch.tensor([self._t == 3])
        return StepResult(self._obs, torch.ones(1), done, torch.zeros(1, dtype=torch.bool), self._obs,
                          {"success": done.clone()})


def test_single_env_adapter_is_generic():
    env = SingleEnvAdapter(_CountingEnv())
    obs, _ = env.reset(seed=0)
    first, _, _, _, _ = env.step(1)
    second, reward, terminated, truncated, info = env.step(np.int64(1))
    assert first.tolist() == [1.0, 1.0] and second.tolist() == [2.0, 2.0] and obs.tolist() == [0.0, 0.0]
    assert reward == 1.0 and not terminated and not truncated and info == {"success": False}
    assert env.step(0)[2] is True and env.metadata["render_fps"] == 30
    with pytest.raises(NotImplementedError):
        env.render()


# --- episodes, resets, snapshots ------------------------------------------------------------------------------
def test_time_limit_truncates_and_auto_resets_from_the_reset_distribution():
    env = PushCube(PushCubeConfig(num_envs=32), seed=7)
    gen = torch.Generator().manual_seed(7)
    episodes = 0
    for t in range(1, 101):
        out = env.step(torch.rand(32, 2, generator=gen) * 2 - 1)
        assert not out.terminated.any() and out.truncated.all().item() == (t % 50 == 0)
        assert torch.equal(out.info["elapsed_steps"], torch.full((32,), (t - 1) % 50 + 1))
        if t % 50 == 0:
            assert (out.obs != out.final_obs).any(1).all()
            cube, tip = out.obs[:, 4:6], out.obs[:, 0:2]
            assert cube.abs().max() <= 0.1 and (tip[:, 0] >= -0.3).all() and (tip[:, 0] <= -0.2).all()
            torch.testing.assert_close(out.obs[:, 11:13], cube + torch.tensor([0.2, 0.0]), rtol=0, atol=1e-7)
        else:
            assert torch.equal(out.obs, out.final_obs)
        episodes += int(out.truncated.sum())
    assert episodes == 64


def test_terminate_on_success_ends_the_episode():
    env = PushCube(PushCubeConfig(num_envs=64, terminate_on_success=True), seed=8)
    obs, ended = env.reset(seed=8), torch.zeros(64, dtype=torch.bool)
    for _ in range(50):
        out = env.step(scripted_action(obs))
        assert torch.equal(out.terminated, out.info["success"]) and not (out.terminated & out.truncated).any()
        ended |= out.terminated
        obs = out.obs
    assert ended.float().mean() >= 0.95
    last = PushCube(PushCubeConfig(num_envs=2, terminate_on_success=True, max_episode_steps=1))
    set_scene(last, c=[[0.2, 0.0], [0.0, 0.0]], g=[0.2, 0.0])  # env 0 starts inside the goal region
    out = last.step(torch.zeros(2, 2))
    assert out.terminated.tolist() == [True, False] and out.truncated.tolist() == [False, True]


def test_leaving_the_table_fails_the_episode():
    env = PushCube(PushCubeConfig(num_envs=2, fail_on_leaving_workspace=True, table_half_size=(0.2, 0.5)))
    set_scene(env, p=[-0.3, 0.0], c=[[0.19, 0.0], [0.0, 0.0]], v=[1.0, 0.0])
    out = env.step(torch.zeros(2, 2))
    assert out.terminated.tolist() == [True, False] and out.reward[0] == 0.0 and out.reward[1] > 0.0


@pytest.mark.parametrize("kwargs", [
    {"max_episode_steps": 1}, pytest.param({"terminate_on_success": True, "goal_offset": 0.05}, marks=SLOW),
    pytest.param({"fail_on_leaving_workspace": True, "table_half_size": (1e-4, 1e-4)}, marks=SLOW)])
def test_auto_resets_follow_the_documented_hash_stream_whatever_the_cache_depth(kwargs):
    """Every step ends every episode: env i's k-th auto-reset uses key i and counter k."""
    from embodirl.envs.rng import hash_uniform

    envs = [PushCube(PushCubeConfig(num_envs=n, **kwargs),
                     seed=21) for n in (6, 4100)]  # reset caches of depth 16 and 1
    ids = torch.arange(6)
    for k in range(1, 41):
        small, large = (env.step(torch.zeros(env.num_envs, 2)) for env in envs)
        assert torch.equal(small.obs, large.obs[:6]) and (small.terminated | small.truncated).all()
        u = hash_uniform(21, ids, torch.full((6,), k), 4)
        torch.testing.assert_close(small.obs[:, 4:6], ((2 * u[:, 0:2] - 1) * 0.1).float(), rtol=0, atol=1e-7)
        torch.testing.assert_close(small.obs[:, 0], (-0.3 + 0.1 * u[:, 2]).float(), rtol=0, atol=1e-7)


@pytest.mark.parametrize("direction", ["fixed", "random", "random_aligned"])
@pytest.mark.parametrize("randomize_yaw", [False, True])
def test_reset_distribution(direction, randomize_yaw):
    env = PushCube(PushCubeConfig(num_envs=1024, goal_direction=direction, randomize_yaw=randomize_yaw, **JOINT),
                   seed=12)
    s = state(env)
    tip, cube, yaw, goal = s[0:2], s[4:6], s[6], s[10:12]
    to_goal = goal - cube
    assert cube.abs().max() <= 0.1 and (s[7:10] == 0).all()
    torch.testing.assert_close(to_goal.norm(dim=0), torch.full((1024,), 0.2), rtol=0, atol=1e-6)
    heading = torch.atan2(to_goal[1], to_goal[0])
    if direction == "fixed":
        assert to_goal[1].abs().max() <= 1e-7
    else:
        assert heading.min() < -3.0 and heading.max() > 3.0
    aligned_yaw = heading if direction == "random_aligned" else torch.zeros_like(yaw)
    offset = torch.remainder(yaw - aligned_yaw + math.pi, 2 * math.pi) - math.pi
    assert offset.abs().max() <= (math.pi / 4 if randomize_yaw else 1e-6)
    if randomize_yaw:
        assert offset.abs().max() > 0.7
    behind = ((cube - tip) * to_goal / 0.2).sum(0)  # the tip's distance behind the cube along the push direction
    if direction == "random_aligned":
        assert behind.min() > 0.04 and (behind >= 0.1 - 1e-6).float().mean() > 0.95
    elif direction == "fixed":
        assert behind.min() >= 0.1 - 1e-6 and (tip[0] >= -0.3).all() and (tip[0] <= -0.2).all()
    q = s[12:14]
    reachable = 0.8 if direction == "random_aligned" else 1.0  # rotated scenes may start beyond the arm's reach
    assert (q[1] <= 0).all() and (q[1] < 0).float().mean() >= reachable, "elbow-left (out of reach: arm stretched)"
    torch.testing.assert_close(torch.stack(phys.arm_forward(q, (-0.615, 0.0), 0.45, 0.45)), tip, rtol=0, atol=1e-6)
    elbow_side = (0.45 * q[0].sin() * (tip[0] + 0.615) - (0.45 * q[0].cos()) * tip[1])  # (elbow - base) x (tip - base)
    assert (elbow_side >= -1e-6).all()


@pytest.mark.parametrize("kwargs", [{}, {**JOINT, "randomize_yaw": True, "goal_direction": "random"}])
def test_group_shared_resets(kwargs):
    env = PushCube(PushCubeConfig(num_envs=16, **kwargs), seed=2)
    for seed in (2, None):
        env.reset(seed=seed, group_size=4)
        s = state(env).view(16, 4, 4)
        assert torch.equal(s, s[:, :, :1].expand_as(s)), "group members share the start"
        rows = [0, 1, 4, 5, 10, 11] + ([6, 12, 13] if kwargs else [])  # tip, cube, goal (+ yaw, joints)
        for row in rows:
            assert len(set(s[row, :, 0].tolist())) == 4, f"groups start differently (state row {row})"
    assert len({tuple(x) for x in env.reset(group_size=1)[:, 4:6].tolist()}) == 16


@pytest.mark.parametrize("kwargs", [pytest.param({"terminate_on_success": True}, marks=SLOW),
                                    pytest.param({"max_episode_steps": 1}, marks=SLOW), JOINT])
def test_state_dict_round_trip_continues_bit_identically(kwargs):
    env = PushCube(PushCubeConfig(num_envs=8, **kwargs), seed=11)
    gen = torch.Generator().manual_seed(11)
    actions = torch.rand(140, 8, 2, generator=gen) * 2 - 1
    rollout(env, actions[:37])  # mid-way through a reset-cache period
    snapshot = env.state_dict()
    restored = PushCube(PushCubeConfig(num_envs=8, **kwargs), seed=99)
    restored.load_state_dict(snapshot)
    for a, b in zip(rollout(env, actions[37:]), rollout(restored, actions[37:]), strict=True):
        assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))
    assert torch.equal(env.reset(), restored.reset())
    with pytest.raises(CheckpointError, match="num_envs"):
        PushCube(PushCubeConfig(num_envs=4)).load_state_dict(env.state_dict())


@pytest.mark.parametrize("kwargs", [{}, {**JOINT, "physics_dtype": "float64", "time_obs": True}])
def test_returned_tensors_are_never_changed_by_later_steps(kwargs):
    """Callers keep what reset and step return (the collector stores an observation after the next step)."""
    env = PushCube(PushCubeConfig(num_envs=8, max_episode_steps=5, **kwargs), seed=0)
    first = env.reset(seed=0)
    kept = [(first, first.clone())]
    gen = torch.Generator().manual_seed(0)
    for _ in range(12):
        step = env.step(torch.rand(8, 2, generator=gen) * 2 - 1)
        kept += [(x, x.clone()) for x in (*step[:5], *step.info.values())]
    kept += [(x, x.clone()) for x in env.state_dict().values()]
    env.step(torch.ones(8, 2))
    assert all(torch.equal(x, copy) for x, copy in kept)


@pytest.mark.parametrize("control_mode", ["ee_delta_pos", "joint_delta_pos"])
def test_float64_physics_tracks_float32_for_short_horizons(control_mode):
    """Same starts, and the trajectories stay within float32 rounding amplified over a few contact steps."""
    env32, env64 = (PushCube(PushCubeConfig(num_envs=64, control_mode=control_mode, physics_dtype=dtype), seed=4)
                    for dtype in ("float32", "float64"))
    obs = env32.reset(seed=4)
    torch.testing.assert_close(env64.reset(seed=4), obs, rtol=0, atol=1e-6)  # float32 rounding of the joints
    assert state(env64).dtype == torch.float64 and state(env32).dtype == torch.float32
    policy = scripted_joint_action if control_mode == "joint_delta_pos" else scripted_action
    for _ in range(6):  # the scripted push reaches the cube within a few steps
        out32, out64 = env32.step(policy(obs)), env64.step(policy(obs))
        torch.testing.assert_close(out64.final_obs, out32.final_obs, rtol=0, atol=1e-3)
        assert out64.reward.dtype == out64.info["dist_to_goal"].dtype == torch.float32
        obs = out32.obs
    assert (gap(env64) < 1e-3).any(), "some envs are in contact"


@pytest.mark.parametrize(("kwargs", "key"), [
    ({"num_envs": 0}, "num_envs"), ({"control_mode": "torque"}, "control_mode"),
    ({"reward_mode": "shaped"}, "reward_mode"), ({"goal_direction": "up"}, "goal_direction"),
    ({"terminate_on_success": 1}, "terminate_on_success"), ({"max_episode_steps": 0}, "max_episode_steps"),
    ({"cube_half_size": -0.02}, "cube_half_size"), ({"cube_half_size": 0.07}, "cube_half_size"),
    ({"cube_mass": 0}, "cube_mass"), ({"pusher_radius": float("nan")}, "pusher_radius"),
    ({"table_friction": -0.1}, "table_friction"), ({"substeps": 2.5}, "substeps"), ({"gravity": 0}, "gravity"),
    ({"max_speed": 1.2}, "max_speed"), ({"max_joint_delta": 0.2, **JOINT}, "max_joint_delta"),
    ({"arm_base": [0.0]}, "arm_base"), ({"link_lengths": [0.45, -1.0]}, "link_lengths"),
    ({"workspace_low": [-0.1, -0.3]}, "workspace_low"), ({"workspace_high": [0.45, 0.05]}, "workspace_high"),
    ({"solver_iterations": 0}, "solver_iterations"), ({"baumgarte": 1.5}, "baumgarte"),
    ({"goal_radius": 0}, "goal_radius"), ({"table_half_size": [0.6, 0]}, "table_half_size"),
    ({"speculative_slack": -1e-3}, "speculative_slack"), ({"time_obs": "yes"}, "time_obs"),
    ({"obs_mode": "depth"}, "obs_mode"), ({"image_size": 4}, "image_size"), ({"image_size": 64.5}, "image_size"),
    ({"image_size": True}, "image_size"),
])
def test_bad_config_raises_config_error_naming_the_key(kwargs, key):
    with pytest.raises(ConfigError, match=f"^{key}=") as info:
        parse(PushCubeConfig, kwargs)
    assert info.value.key == key


def test_the_yaml_option_builds_and_its_errors_name_the_env_key():
    from embodirl.app.build import build_env
    from tests.conftest import compose_config

    env = build_env(compose_config(["env=push_cube", "env.num_envs=4"]).env, torch.device("cpu"), seed=0)
    assert isinstance(env, PushCube) and env.num_envs == 4
    with pytest.raises(ConfigError, match=r"^env.max_speed="):
        build_env(compose_config(["env=push_cube", "env.max_speed=2.0"]).env, torch.device("cpu"), seed=0)


# --- rendering ---------------------------------------------------------------------------------------------
def pixel(frame: np.ndarray, env: PushCube, x: float, y: float, size: int) -> tuple[int, ...]:
    row, col = phys.world_to_pixel(x, y, size, phys.view_box(env.workspace, env.arm_base if env.joint_mode else None))
    return tuple(int(v) for v in frame[row, col])


def test_render_draws_cube_goal_and_tip_where_they_are():
    env = PushCube(PushCubeConfig(num_envs=3))
    set_scene(env, p=[-0.25, 0.1], c=[[0.0, 0.0], [0.05, -0.1], [0.3, 0.2]], theta=0.3, g=[0.2, -0.15])
    frames = env.render(size=128)
    assert frames.shape == (3, 128, 128, 3) and frames.dtype == np.uint8
    assert env.render([1], size=16).shape == (1, 16, 16, 3)
    colors = {k: tuple(v) for k, v in phys.COLORS.items()}
    assert pixel(frames[0], env, 0.0, 0.0, 128) == colors["cube"]
    assert pixel(frames[1], env, 0.05, -0.1, 128) == colors["cube"]
    assert pixel(frames[0], env, 0.05, -0.1, 128) != colors["cube"], "the cube moves with its state"
    assert pixel(frames[0], env, 0.2, -0.15, 128) == colors["goal"]
    assert pixel(frames[0], env, -0.25, 0.1, 128) == colors["tip"]
    assert pixel(frames[0], env, 0.0, 0.28, 128) == colors["table"]
    assert pixel(frames[2], env, 0.2, -0.15, 128) == colors["goal"]
    assert pixel(frames[2], env, 0.3, 0.2, 128) == colors["cube"]


def test_render_draws_the_arm_in_joint_mode():
    env = PushCube(PushCubeConfig(num_envs=1, **JOINT))
    s = state(env)[:, 0]
    elbow = (-0.615 + 0.45 * math.cos(float(s[12])), 0.45 * math.sin(float(s[12])))
    frame = env.render(size=256)[0]
    colors = {k: tuple(v) for k, v in phys.COLORS.items()}
    assert pixel(frame, env, -0.615 + (elbow[0] + 0.615) / 2, elbow[1] / 2, 256) == colors["arm"]
    assert pixel(frame, env, float(s[0]), float(s[1]), 256) == colors["tip"]


# --- CUDA ----------------------------------------------------------------------------------------------------
@pytest.mark.gpu
@pytest.mark.parametrize("kwargs", [{}, JOINT])
def test_cuda_steps_without_host_syncs(kwargs):
    """float32 (the default) on CUDA: no host sync in 60 steps, everything on the device, time limits as on the CPU.
    Trajectories are compared in float64 (next test): in float32 CUDA's and the CPU's rounding differ by an ulp
    here and there, and contact amplifies that ~2e4-fold within an episode (to ~1e-3 after 50 steps)."""
    cpu, gpu = PushCube(PushCubeConfig(num_envs=256, **kwargs),
                        seed=3), PushCube(PushCubeConfig(num_envs=256, **kwargs), seed=3, device="cuda")
    torch.testing.assert_close(gpu.reset(seed=3).cpu(), cpu.reset(seed=3), rtol=0, atol=1e-6)
    gen = torch.Generator().manual_seed(8)
    gpu_actions = (torch.rand(60, 256, 2, generator=gen) * 2 - 1).cuda()
    torch.cuda.set_sync_debug_mode("error")
    try:
        steps = [gpu.step(a) for a in gpu_actions]
    finally:
        torch.cuda.set_sync_debug_mode("default")
    for t, step in enumerate(steps, start=1):
        assert step.obs.device.type == step.info["success"].device.type == "cuda"
        assert torch.isfinite(step.final_obs).all()
        assert step.truncated.all().item() == (t % 50 == 0) and not step.terminated.any()
    assert (-gap(gpu)).max() <= 1e-6, "no penetration"


@pytest.mark.gpu
@pytest.mark.parametrize("kwargs", [{}, JOINT])
def test_cuda_matches_cpu_in_float64(kwargs):
    """CUDA and the CPU differ only in rounding: transcendental functions (a few ulp apart) and fused
    multiply-adds (1 ulp). Contact amplifies such differences ~2e4-fold over an episode (measured on the CPU:
    float64 states perturbed by 2 ulp every step drift 4e-12 in 50 steps; float32 ones 2e-3), so in float64 the
    states stay within ~1e-11: 1e-8 bounds them over 60 steps (an auto-reset included), float32 observations
    agree to 1e-6 and every flag exactly (a flip needs a quantity within ~1e-11 of its threshold)."""
    cpu, gpu = (PushCube(PushCubeConfig(num_envs=256, physics_dtype="float64", **kwargs), seed=3, device=device)
                for device in ("cpu", "cuda"))
    torch.testing.assert_close(gpu.reset(seed=3).cpu(), cpu.reset(seed=3), rtol=1e-6, atol=1e-6)
    gen = torch.Generator().manual_seed(8)
    actions = torch.rand(60, 256, 2, generator=gen) * 2 - 1
    for a in actions:
        s_cpu, s_gpu = cpu.step(a), gpu.step(a.cuda())
        for key in ("obs", "final_obs"):
            torch.testing.assert_close(getattr(s_gpu, key).cpu(), getattr(s_cpu, key), rtol=1e-6, atol=1e-6)
        flags = [(s_gpu.terminated, s_cpu.terminated), (s_gpu.truncated, s_cpu.truncated),
                 (s_gpu.info["success"], s_cpu.info["success"]), (s_gpu.info["is_reached"], s_cpu.info["is_reached"])]
        assert all(torch.equal(on_gpu.cpu(), on_cpu) for on_gpu, on_cpu in flags)
        torch.testing.assert_close(gpu.state_dict()["state"].cpu(), cpu.state_dict()["state"], rtol=0, atol=1e-8)


def test_info_reports_success_once_and_at_end():
    # Scripted pushes succeed; success_once must latch within an episode and success_at_end must only
    # be set on the step that ends it (the 50-step truncation), where it equals success.
    env = PushCube(PushCubeConfig(num_envs=64), seed=5)
    obs = env.reset(seed=5)
    once_seen = torch.zeros(64, dtype=torch.bool)
    for _ in range(env.max_episode_steps):
        step = env.step(scripted_action(obs))
        obs = step.obs
        info = step.info
        done = step.terminated | step.truncated
        assert torch.equal(info["success_at_end"], info["success"] & done)
        assert (info["success_once"] >= info["success"]).all()
        assert (info["success_once"] >= once_seen).all()  # latched
        once_seen = info["success_once"].clone()
    assert done.all() and info["success_once"].float().mean() >= 0.95


def test_reward_terms_hand_computed_values():
    """Tip at the push point behind a cube 0.2 m from its goal: reach 1, place 1 - tanh(5 * 0.2), no success.
    The cube 5 cm from the goal: success, and the whole reward (3) is the success term."""
    cos_t, sin_t = torch.ones(2), torch.zeros(2)
    cube = (torch.tensor([0.0, 0.15]), torch.zeros(2))
    tip = (torch.tensor([-H - R, 0.15 - H - R]), torch.zeros(2))  # p* = c - (h + r) u, u = +x
    goal = (torch.tensor([0.2, 0.2]), torch.zeros(2))
    terms, success, reached, _ = phys.staged_reward(tip, cube, goal, cos_t, sin_t, H, R, 0.1)
    assert success.tolist() == [False, True] and reached.tolist() == [True, True]
    torch.testing.assert_close(terms["reach"], torch.tensor([1.0, 0.0]))
    torch.testing.assert_close(terms["place"], torch.tensor([1 - math.tanh(1.0), 0.0]))
    torch.testing.assert_close(terms["success"], torch.tensor([0.0, 3.0]))


@pytest.mark.parametrize("mode", ["normalized_dense", "dense", "sparse"])
def test_the_reward_is_exactly_the_sum_of_its_terms(mode):
    env = PushCube(PushCubeConfig(num_envs=64, reward_mode=mode, fail_on_leaving_workspace=True,
                                  table_half_size=(0.15, 0.15), max_episode_steps=20), device="cpu", seed=0)
    env.reset(seed=0)
    gen, seen_success = torch.Generator().manual_seed(0), False
    for _ in range(40):
        action = torch.rand(64, 2, generator=gen) * 2 - 1
        action[:32] = torch.tensor([1.0, 0.0])  # half the envs push straight ahead: successes
        out = env.step(action)
        terms = [out.info[f"reward/{name}"] for name in env.reward_terms]
        assert all(t.dtype == torch.float32 and t.shape == (64,) for t in terms)
        assert torch.equal(terms[0] + terms[1] + terms[2], out.reward)
        success = out.info["success"]
        seen_success |= bool(success.any())
        assert torch.equal(out.info["reward/success"] > 0, success & (out.reward > 0))  # 0 off the table
    assert seen_success

"""PushCubeArm: the MJCF arm against the UR10's DH parameters, a scripted push, resets, the batched engine against
single ``mj_step``, snapshots, config errors, reward values, rendering and (with the extra) mujoco_warp."""

from __future__ import annotations

import math
import warnings

import mujoco
import numpy as np
import pytest
import torch
from gymnasium.utils.env_checker import check_env

from embodirl.config.envs import PushCubeArmConfig
from embodirl.config.schema import parse
from embodirl.envs.adapters.gymnasium_api import SingleEnvAdapter
from embodirl.envs.push_cube import arm_scene as scene
from embodirl.envs.push_cube import physics as planar
from embodirl.envs.push_cube.arm import OBS_DIM, PushCubeArm
from embodirl.errors import CheckpointError, ConfigError

H, ROD = 0.02, 0.01
# The UR10's published DH table, typed independently of the package: (d, a, alpha) per joint.
UR10_DH = [(0.1273, 0.0, math.pi / 2), (0.0, -0.612, 0.0), (0.0, -0.5723, 0.0), (0.163941, 0.0, math.pi / 2),
           (0.1157, 0.0, -math.pi / 2), (0.0922, 0.0, 0.0)]
CONFIGS = [np.zeros(6), np.array(scene.HOME_QPOS), np.array([0.3, -1.0, 1.2, -0.5, 0.7, 2.0]),
           np.array([-2.5, 0.4, -2.0, 1.9, -1.3, -0.6]), np.array([1.0, -2.2, 0.3, 3.0, 2.2, 1.1])]


# --- helpers ------------------------------------------------------------------------------------------
def dh_flange(q: np.ndarray, base: np.ndarray) -> np.ndarray:
    """4x4 world pose of the flange: ``base @ prod_i Rz(q_i) Tz(d_i) Tx(a_i) Rx(alpha_i)``."""
    pose = base.copy()
    for qi, (d, a, alpha) in zip(q, UR10_DH, strict=True):
        ct, st, ca, sa = math.cos(qi), math.sin(qi), math.cos(alpha), math.sin(alpha)
        pose = pose @ np.array([[ct, -st * ca, st * sa, a * ct], [st, ct * ca, -ct * sa, a * st],
                                [0.0, sa, ca, d], [0.0, 0.0, 0.0, 1.0]])
    return pose


def jacobian(q: torch.Tensor, geometry: scene.ArmGeometry, eps: float = 1e-6) -> torch.Tensor:
    """``[N, 6, 6]`` derivative of (TCP, rod axis) by the joints, by central differences of the FK."""
    cols = []
    for j in range(6):
        dq = torch.zeros_like(q)
        dq[:, j] = eps
        (pp, ap), (pm, am) = scene.forward_kinematics(q + dq, geometry), scene.forward_kinematics(q - dq, geometry)
        cols.append(torch.cat((pp[:, -1] - pm[:, -1], ap - am), 1) / (2 * eps))
    return torch.stack(cols, 2)


def scripted_action(obs: torch.Tensor, env: PushCubeArm) -> torch.Tensor:
    """Line up 1.2 cm behind the push point, then push along the goal direction, holding the rod vertical;
    stop once the cube is within 2 cm of the goal. Cartesian steps of at most 2 cm through damped least squares."""
    obs = obs.double()
    q, tcp, axis, cube, quat, goal = obs[:, 0:6], obs[:, 12:15], obs[:, 15:18], obs[:, 18:21], obs[:, 21:25], \
        obs[:, 25:27]
    cos_t, sin_t = scene.yaw_of(quat)
    p_star, d_goal = planar.push_point(cube[:, :2].T, goal.T, cos_t, sin_t, H, ROD)
    p_star = torch.stack((p_star[0], p_star[1], torch.full_like(d_goal, H)), 1)
    u = torch.cat(((goal - cube[:, :2]) / d_goal[:, None], torch.zeros_like(d_goal)[:, None]), 1)
    offset = tcp - p_star
    along = (offset * u).sum(1)
    lateral = (offset - along[:, None] * u).norm(dim=1)
    pushing = (lateral < 0.006) & (offset[:, 2].abs() < 0.006) & (along > -0.015)
    target = torch.where(pushing[:, None], p_star + 0.03 * u, p_star - 0.012 * u)
    target = torch.where((d_goal < 0.02)[:, None], tcp, target)
    dx = target - tcp
    dx = dx * (0.02 / dx.norm(dim=1, keepdim=True).clamp(min=0.02))
    down = torch.tensor([0.0, 0.0, -1.0], dtype=torch.float64)
    jac, error = jacobian(q, env.geometry), torch.cat((dx, down - axis), 1).unsqueeze(-1)
    normal = jac.transpose(1, 2) @ jac + 1e-4 * torch.eye(6, dtype=torch.float64)
    dq = torch.linalg.solve(normal, jac.transpose(1, 2) @ error).squeeze(-1)
    action = dq / env.action_scale
    return (action / action.abs().amax(1, keepdim=True).clamp(min=1.0)).float()  # scaled, keeps the direction


def random_actions(num_envs: int, steps: int, seed: int = 0) -> torch.Tensor:
    return torch.rand(steps, num_envs, 6, generator=torch.Generator().manual_seed(seed)) * 2 - 1


def run(env: PushCubeArm, actions: torch.Tensor) -> list:
    return [env.step(a) for a in actions]


# --- kinematics ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("q", CONFIGS, ids=[f"q{i}" for i in range(len(CONFIGS))])
def test_mjcf_arm_matches_the_ur10_dh_chain(q):
    model = scene.load_model()
    data = mujoco.MjData(model)
    data.qpos[:6] = q
    mujoco.mj_kinematics(model, data)
    base = np.eye(4)
    base[:3, :3], base[:3, 3] = np.diag([-1.0, -1.0, 1.0]), [-0.8, 0.0, 0.0]  # turned by pi about z
    expected = dh_flange(q, base)
    np.testing.assert_allclose(data.site("flange").xpos, expected[:3, 3], atol=1e-9)
    np.testing.assert_allclose(data.site("flange").xmat.reshape(3, 3), expected[:3, :3], atol=1e-9)
    # The package's batched FK (used for observations, reward and drawing) agrees with MuJoCo's bodies and TCP.
    points, axis = scene.forward_kinematics(torch.tensor(q)[None], scene.ArmGeometry(model))
    names = ["base", "upper_arm", "forearm", "wrist_1", "wrist_2", "wrist_3"]
    mujoco_points = [data.body(n).xpos for n in names] + [data.site("flange").xpos, data.site("tcp").xpos]
    np.testing.assert_allclose(points[0].numpy(), np.array(mujoco_points), atol=1e-12)
    np.testing.assert_allclose(axis[0].numpy(), data.site("tcp").xmat.reshape(3, 3)[:, 2], atol=1e-12)


def test_home_configuration_holds_the_rod_vertically_behind_the_cube():
    points, axis = scene.forward_kinematics(torch.tensor([scene.HOME_QPOS], dtype=torch.float64),
                                            scene.ArmGeometry(scene.load_model()))
    np.testing.assert_allclose(points[0, -1].numpy(), [-0.25, 0.0, 0.06], atol=1e-3)
    assert axis[0, 2] < -math.cos(math.radians(0.1))


# --- the task -----------------------------------------------------------------------------------------
def test_scripted_push_moves_the_cube_into_the_goal():
    env = PushCubeArm(PushCubeArmConfig(num_envs=32, num_threads=1), seed=1)
    obs, once = env.reset(seed=1), torch.zeros(32, dtype=torch.bool)
    for _ in range(50):
        result = env.step(scripted_action(obs, env))
        once |= result.info["success"]
        obs = result.obs
        assert result.info["on_table"].all()
    at_end = result.info["success_at_end"]
    assert once.all() and at_end.float().mean() >= 0.95, (once.float().mean(), at_end.float().mean())
    assert torch.equal(result.reward == 1.0, result.info["success"])  # normalised reward is 1 exactly on success
    terms = [result.info[f"reward/{name}"] for name in env.reward_terms]
    assert torch.equal(terms[0] + terms[1] + terms[2], result.reward)  # the reward is exactly its terms' sum
    assert torch.equal(terms[2] == 1.0, result.info["success"]) and terms[0][result.info["success"]].eq(0).all()
    assert (result.truncated | result.terminated).all(), "the episode ended at the time limit"


def test_terminate_on_success_ends_the_episode_and_starts_the_next():
    env = PushCubeArm(PushCubeArmConfig(num_envs=8, terminate_on_success=True, num_threads=1), seed=1)
    obs, ended = env.reset(seed=1), torch.zeros(8, dtype=torch.bool)
    for _ in range(50):
        result = env.step(scripted_action(obs, env))
        assert torch.equal(result.terminated, result.info["success"]) and not result.truncated[result.terminated].any()
        fresh = result.obs[result.terminated]
        assert (fresh[:, 12] < -0.2).all()  # the next episode's rod starts behind the cube again
        ended |= result.terminated
        obs = result.obs
    assert ended.all()


def test_staged_reward_hand_computed_values():
    # Cube at the origin, goal 0.2 m along +x: push point (-(0.02 + 0.01), 0, 0.02).
    cube = torch.tensor([[0.0, 0.0, H], [0.0, 0.0, H], [0.0, 0.0, H + 0.05], [0.15, 0.0, H], [0.0, 0.0, H]])
    tcp = torch.tensor([[-0.03, 0.0, H], [-0.03, 0.0, H + 0.1], [-0.03, 0.0, H], [0.12, 0.0, H], [-0.03, 0.0, H]])
    goal = torch.tensor([[0.2, 0.0]] * 4 + [[0.2, 0.0]])
    cos_t, sin_t = torch.ones(5), torch.zeros(5)
    cube[4, 2] = H - 0.006  # sunk (fallen off the table's plane): not on the table
    terms, success, reached, on_table, dist = scene.staged_reward(tcp, cube, cos_t, sin_t, goal, H, ROD, 0.1)
    reward = terms["reach"] + terms["place"] + terms["success"]
    torch.testing.assert_close(terms["success"], torch.tensor([0.0, 0.0, 0.0, 3.0, 0.0]))
    torch.testing.assert_close(terms["place"], torch.tensor([1 - math.tanh(5 * 0.2), 0, 0, 0, 0]))
    place = 1 - math.tanh(5 * 0.2)  # = 0.2384
    expected = [1 + place,  # at the push point: reach 1, place gated in
                1 - math.tanh(5 * 0.1),  # 10 cm above it: reach only (0.5379)
                1.0,  # at it but the cube is lifted: no place term
                3.0,  # cube 5 cm from the goal and on the table: success
                1.0]  # sunk cube: no place term
    torch.testing.assert_close(reward, torch.tensor(expected), rtol=1e-6, atol=1e-6)
    assert success.tolist() == [False, False, False, True, False]
    assert reached.tolist() == [True, False, True, True, True]
    assert on_table.tolist() == [True, True, False, True, False]
    torch.testing.assert_close(dist, torch.tensor([0.2, 0.2, 0.2, 0.05, 0.2]))


def test_spaces_truncation_and_true_final_observation():
    env = PushCubeArm(PushCubeArmConfig(num_envs=4, max_episode_steps=5, time_obs=True, num_threads=1))
    assert env.observation_space.shape == (OBS_DIM + 1,) and env.action_space.shape == (6,)
    first = env.reset(seed=3)
    for t in range(5):
        result = env.step(torch.zeros(4, 6))
        assert result.obs.dtype == torch.float32 and result.reward.dtype == torch.float32
        assert not result.terminated.any() and result.truncated.tolist() == [t == 4] * 4
    torch.testing.assert_close(result.final_obs[:, -1], torch.ones(4))  # t / T = 1 at the end
    assert torch.equal(result.obs[:, -1], torch.zeros(4)) and not torch.equal(result.obs, result.final_obs)
    assert not torch.equal(result.obs, first)  # the next episode comes from the next counter of the stream


def test_resets_are_reproducible_per_env_and_independent_of_num_envs():
    small, large = PushCubeArm(PushCubeArmConfig(num_envs=2, num_threads=1),
                               seed=5), PushCubeArm(PushCubeArmConfig(num_envs=6, num_threads=2), seed=5)
    torch.testing.assert_close(small.reset(seed=5), large.reset(seed=5)[:2], rtol=0, atol=0)
    actions = random_actions(6, 60)  # crosses the auto-reset at step 50
    for a in actions:
        s, g = small.step(a[:2]), large.step(a)
        assert torch.equal(s.obs, g.obs[:2]) and torch.equal(s.reward, g.reward[:2])
    other = PushCubeArm(PushCubeArmConfig(num_envs=2, num_threads=1), seed=6)
    assert not torch.equal(other.reset(seed=6), small.reset(seed=5))
    assert not torch.equal(large.reset(seed=5)[0], large.reset(seed=5)[1])  # envs differ from each other


@pytest.mark.parametrize("randomize_yaw", [False, True])
def test_reset_distribution(randomize_yaw):
    env = PushCubeArm(PushCubeArmConfig(num_envs=1024, randomize_yaw=randomize_yaw, num_threads=1), seed=11)
    obs = env.reset(seed=11).double()
    cube, quat, goal, tcp, axis = obs[:, 18:21], obs[:, 21:25], obs[:, 25:27], obs[:, 12:15], obs[:, 15:18]
    assert cube[:, :2].abs().max() < 0.1 and cube[:, :2].abs().max() > 0.098
    torch.testing.assert_close(cube[:, 2], torch.full((1024,), H).double(), rtol=0, atol=1e-7)  # resting on the table
    torch.testing.assert_close(goal - cube[:, :2], torch.tensor([[0.2, 0.0]]).double().expand(1024, 2), rtol=0,
                               atol=1e-6)
    yaw = 2 * torch.atan2(quat[:, 3], quat[:, 0])
    assert (yaw.abs().max() > 0.75 and yaw.abs().max() < math.pi / 4) if randomize_yaw else (yaw == 0).all()
    offsets = obs[:, 0:6].double() - torch.tensor(scene.HOME_QPOS).double()
    half_widths = torch.tensor([0.1, 0.03, 0.03, 0.05, 0.05, 0.1]).double()
    assert (offsets.abs() <= half_widths + 1e-6).all() and (offsets.abs().amax(0) > 0.95 * half_widths).all()
    # The rod starts behind the cube, above the table, close to vertical, and at rest.
    assert tcp[:, 0].max() < -0.2 and (cube[:, 0] - tcp[:, 0]).min() > 0.08 and tcp[:, 2].min() > 0.025
    assert axis[:, 2].max() < -math.cos(math.radians(7)) and (obs[:, 6:12] == 0).all()


def test_group_shared_resets():
    env = PushCubeArm(PushCubeArmConfig(num_envs=8, num_threads=1))
    obs = env.reset(seed=2, group_size=4)
    assert torch.equal(obs[0:4], obs[0:1].expand(4, -1)) and torch.equal(obs[4:8], obs[4:5].expand(4, -1))
    assert not torch.equal(obs[0], obs[4])
    with pytest.raises(ConfigError, match=r"^group_size="):
        env.reset(group_size=3)


def test_batched_engine_equals_single_mj_step():
    env = PushCubeArm(PushCubeArmConfig(num_envs=3, num_threads=2), seed=4)
    env.reset(seed=4)
    actions = random_actions(3, 30, seed=1)
    actions[:, 1] = scripted_action(env.reset(seed=4), env)[1]  # env 1 also drives towards the cube
    model, data = scene.load_model(), None
    data = mujoco.MjData(model)
    sim = {name: value[1].numpy().copy() for name, value in env.state_dict().items() if name.startswith("sim.")}
    data.time = float(sim["sim.time"])
    for name in ("qpos", "qvel", "act", "ctrl", "qacc_warmstart"):
        getattr(data, name)[:] = sim[f"sim.{name}"]
    low, high = model.actuator_ctrlrange[:, 0], model.actuator_ctrlrange[:, 1]
    for a in actions:
        env.step(a)
        data.ctrl[:] = np.clip(data.qpos[:6] + a[1].double().numpy() * env.action_scale, low, high)
        for _ in range(env.substeps):
            mujoco.mj_step(model, data)
        np.testing.assert_array_equal(env.state_dict()["sim.qpos"][1].numpy(), data.qpos)
        np.testing.assert_array_equal(env.state_dict()["sim.qvel"][1].numpy(), data.qvel)


def test_state_dict_round_trip_continues_bit_identically():
    env = PushCubeArm(PushCubeArmConfig(num_envs=4, num_threads=1), seed=7)
    env.reset(seed=7)
    actions = random_actions(4, 80, seed=2)
    run(env, actions[:20])
    snapshot = env.state_dict()
    reference = run(env, actions[20:])  # crosses the auto-reset at step 50
    restored = PushCubeArm(PushCubeArmConfig(num_envs=4, num_threads=2), seed=99)
    restored.load_state_dict(snapshot)
    for ref, res in zip(reference, run(restored, actions[20:]), strict=True):
        for a, b in zip(ref[:5], res[:5], strict=True):
            assert torch.equal(a, b)
        assert all(torch.equal(ref.info[k], res.info[k]) for k in ref.info)
    with pytest.raises(CheckpointError, match="missing keys"):
        restored.load_state_dict({"steps": snapshot["steps"]})
    with pytest.raises(CheckpointError, match="num_envs"):
        PushCubeArm(PushCubeArmConfig(num_envs=2, num_threads=1)).load_state_dict(snapshot)


@pytest.mark.parametrize(("kwargs", "key"), [
    ({"reward_mode": "shaped"}, "reward_mode"),
    ({"action_scale": -0.1}, "action_scale"),
    ({"action_scale": 0.5}, "action_scale"),
    ({"joint_noise": [0.1, 0.1]}, "joint_noise"),
    ({"timestep": 0.05}, "timestep"),
    ({"substeps": 0}, "substeps"),
    ({"engine": "physx"}, "engine"),
    ({"engine": "batch", "device": "cuda"}, "engine"),
    ({"num_threads": -1}, "num_threads"),
    ({"terminate_on_success": "yes"}, "terminate_on_success"),
])
def test_bad_config_raises_config_error_naming_the_key(kwargs, key):
    keys = dict(kwargs)
    device = keys.pop("device", "cpu")
    with pytest.raises(ConfigError, match=f"^{key}=") as info:
        PushCubeArm(parse(PushCubeArmConfig, {"num_envs": 2, **keys}), device=device)
    assert info.value.key == key and "Fix:" in str(info.value) and "\n" not in str(info.value)


def test_warp_engine_without_the_extra_names_the_install(monkeypatch):
    monkeypatch.setitem(__import__("sys").modules, "mujoco_warp", None)  # as if the extra were not installed
    with pytest.raises(ConfigError, match=r"^engine='warp'.*embodirl\[warp\]"):
        PushCubeArm(PushCubeArmConfig(num_envs=2, engine="warp"))


def test_the_yaml_option_builds_and_its_errors_name_the_env_key():
    from embodirl.app.build import build_env
    from tests.conftest import compose_config

    env = build_env(compose_config(["env=push_cube_arm", "env.num_envs=2"]).env, torch.device("cpu"), seed=0)
    assert isinstance(env, PushCubeArm) and env.num_envs == 2
    with pytest.raises(ConfigError, match=r"^env.action_scale="):
        build_env(compose_config(["env=push_cube_arm", "env.action_scale=1.0"]).env, torch.device("cpu"), seed=0)


def test_single_env_adapter_passes_gymnasium_check_env():
    env = SingleEnvAdapter(PushCubeArm(PushCubeArmConfig(num_envs=1, num_threads=1)), render_size=32)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_env(env)
    expected = ("infinity", "not having a spec")  # unbounded observations; not registered with gymnasium
    assert [str(w.message) for w in caught if not any(e in str(w.message) for e in expected)] == []
    assert env.reset(seed=3)[0].shape == (OBS_DIM,) and env.render().shape == (32, 32, 3)


# --- rendering ----------------------------------------------------------------------------------------
def test_top_view_draws_table_goal_cube_and_rod_where_they_are():
    env = PushCubeArm(PushCubeArmConfig(num_envs=2, num_threads=1))
    obs = env.reset(seed=1)
    size = 128
    points, _ = scene.forward_kinematics(obs[:, 0:6].double(), env.geometry)
    yaw = np.zeros(2)
    frames = scene.draw_arm_scene(points.numpy(), obs[:, 18:21].double().numpy(), yaw, obs[:, 25:27].double().numpy(),
                                  size, half_size=H, goal_radius=0.1, table_half_size=(0.6, 0.5))
    assert frames.shape == (2, size, size, 3) and frames.dtype == np.uint8
    view = planar.view_box(((-0.6, -0.5), (0.6, 0.5)), (-0.8, 0.0))

    def at(i: int, x: float, y: float) -> tuple[int, ...]:
        return tuple(int(v) for v in frames[i][planar.world_to_pixel(x, y, size, view)])

    for i in range(2):
        cube, goal, tip = obs[i, 18:20].tolist(), obs[i, 25:27].tolist(), obs[i, 12:14].tolist()
        assert at(i, *cube) == planar.COLORS["cube"]
        assert at(i, goal[0] + 0.05, goal[1]) == planar.COLORS["goal"]
        assert at(i, *tip) == planar.COLORS["tip"]
        assert at(i, 0.55, -0.45) == planar.COLORS["table"]
    rendered = env.render([0, 1], size)  # no OpenGL here: the same top view (MuJoCo's renderer where there is)
    assert rendered.shape == (2, size, size, 3) and rendered.dtype == np.uint8


@pytest.mark.slow
def test_mujoco_renderer_draws_frames_where_egl_is_configured():
    import subprocess
    import sys

    script = ("import numpy as np; from embodirl.envs.push_cube.arm import PushCubeArm; "
              "from embodirl.config.envs import PushCubeArmConfig; "
              "env = PushCubeArm(PushCubeArmConfig(num_envs=2, num_threads=1)); frames = env.render([0, 1], 48); "
              "print(bool(env._renderer), frames.shape, frames.dtype, float(frames.std()))")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                         env={**__import__("os").environ, "MUJOCO_GL": "egl"})
    assert out.returncode == 0, out.stderr
    used_mujoco, *rest = out.stdout.split(" ", 1)
    if used_mujoco != "True":
        pytest.skip("no EGL library on this machine (the top view was drawn instead)")
    assert rest[0].startswith("(2, 48, 48, 3) uint8") and float(rest[0].rsplit(" ", 1)[1]) > 5  # not a blank image


# --- mujoco_warp (the optional [warp] extra) ----------------------------------------------------------
@pytest.mark.slow
def test_warp_engine_on_the_cpu_agrees_with_the_batch_engine():
    pytest.importorskip("mujoco_warp", reason="the [warp] extra is not installed")
    pytest.importorskip("warp", reason="the [warp] extra is not installed")
    batch = PushCubeArm(PushCubeArmConfig(num_envs=4, num_threads=1), seed=3)
    warp = PushCubeArm(PushCubeArmConfig(num_envs=4, engine="warp"),
                       seed=3)  # warp's CPU device (kernels compile once, cached)
    torch.testing.assert_close(warp.reset(seed=3), batch.reset(seed=3), rtol=0, atol=1e-6)
    obs_b = obs_w = batch.reset(seed=3)
    warp.reset(seed=3)
    for _ in range(12):  # short horizon: float32 against float64 drifts apart only slowly
        action = scripted_action(obs_b, batch)
        obs_b, obs_w = batch.step(action).obs, warp.step(action).obs
    torch.testing.assert_close(obs_w, obs_b, rtol=0, atol=2e-3)


def test_warp_engine_prints_no_init_banner():
    """warp-lang 1.19 dropped ``wp.config.quiet`` (setting it does nothing): the banner is kept out with
    ``wp.config.log_level``; a run's console shows embodirl's lines, not warp's."""
    pytest.importorskip("mujoco_warp", reason="the [warp] extra is not installed")
    pytest.importorskip("warp", reason="the [warp] extra is not installed")
    import subprocess
    import sys

    script = ("from embodirl.envs.push_cube.arm import PushCubeArm; "
              "from embodirl.config.envs import PushCubeArmConfig; "
              "PushCubeArm(PushCubeArmConfig(num_envs=2, engine='warp'), seed=0)")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "initialized" not in out.stdout + out.stderr

"""Batched PushCube with a UR10 arm in MuJoCo: the 3D counterpart of :mod:`embodirl.envs.push_cube.env`.

A UR10 (built from its DH parameters, primitive collision geoms, position-controlled joints, gravity
compensated) holds a 15 cm rod with a 1 cm tip and pushes a free 4 cm cube across a table into a goal region
0.2 m ahead (success: the cube's centre within 0.1 m of the goal and the cube on the table). The scene is the
packaged MJCF ``embodirl/envs/push_cube/assets/ur10_push_cube.xml``; kinematics, resets, reward and drawing are pure
functions in :mod:`embodirl.envs.push_cube.arm_scene`; the engines in :mod:`embodirl.envs.push_cube.mujoco_engine`
(``mujoco.batch`` on CPU threads, ``mujoco_warp`` on CUDA). The task is specified in ``docs/envs/push_cube_arm.md``.

Reset states come from :func:`~embodirl.envs.rng.hash_uniform` through a :class:`~embodirl.envs.rng.ResetStream`
exactly as in the planar env: an env's episodes do not depend on ``num_envs``; ``reset(group_size=g)`` gives
groups of ``g`` envs one identical start. Components: cube xy (0-1), yaw (2), joint offsets (3-8).
"""

from __future__ import annotations

import os
import sys
import warnings
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import Tensor

from embodirl.config.envs import PushCubeArmConfig
from embodirl.config.randomize import MAX_ACTION_DELAY
from embodirl.envs.base import BatchedEnv, StepResult
from embodirl.envs.push_cube import arm_scene as scene
from embodirl.envs.push_cube.mujoco_engine import STATE_FIELDS, BatchEngine, WarpEngine
from embodirl.envs.randomization import make_randomization
from embodirl.envs.rng import ResetStream, hash_key, hash_uniform
from embodirl.errors import CheckpointError, check, is_int

__all__ = ["PushCubeArm"]

OBS_DIM = 32
_STATE_KEYS = {"steps", "goal", "ever_success", "episode", "num_resets", "seed", *(f"sim.{k}" for k in STATE_FIELDS)}


def _opengl_configured() -> bool:
    """Whether MuJoCo may find an OpenGL context: ``MUJOCO_GL`` set (egl, osmesa, glfw), a display, or macOS
    or Windows (native windowing)."""
    return bool(os.environ.get("MUJOCO_GL") or os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")
                or sys.platform in ("darwin", "win32"))


class PushCubeArm(BatchedEnv):
    """``num_envs`` UR10 PushCube tasks in MuJoCo, stepped together.

    Observation (float32, 32 dims): joint angles (6), joint velocities times ``control_dt / action_scale`` (6,
    about the action that would keep them), TCP position (3), rod axis (3), cube centre (3) and quaternion
    ``w x y z`` (4), goal xy (2), goal minus cube xy (2), cube minus TCP (3); ``time_obs`` appends ``t / T``.
    Action: ``[-1, 1]^6`` (clipped), joint position deltas: the position actuators' targets are the current
    joint angles plus ``action_scale a`` (ManiSkill's ``pd_joint_delta_pos``); with the actuators' gains a
    constant action moves each joint by about ``action_scale a`` per step. ``action_scale = 0.025`` rad moves
    the tip at most about 2.5 cm per step at the arm's working distances (0.5-1.1 m from the shoulder), under
    the cube's 4 cm; the seed system's 0.1 rad would be about 10 cm.

    Reward: :func:`~embodirl.envs.push_cube.arm_scene.staged_reward` ``r`` (reach the push point behind the
    cube, then place, with the cube on the table; 3 on success); ``normalized_dense`` returns ``r / 3`` (1 iff
    success), ``dense`` ``r``, ``sparse`` the success flag; each step's info holds its terms ``reward/reach``,
    ``reward/place`` and ``reward/success``, summing to it exactly. Episodes are truncated after ``max_episode_steps``
    and by default do not end on success: see the hover trap in :class:`~embodirl.envs.push_cube.env.PushCube`.

    The keys (:class:`~embodirl.config.envs.PushCubeArmConfig`) set the task, the physics step and the engine:
    ``engine=auto`` runs ``mujoco.batch`` on CPU threads and ``mujoco_warp`` (the ``[warp]`` extra) on CUDA;
    ``engine=warp`` on a CPU device is only for testing.

    Args:
        cfg: The env's keys.
        device: Device of every tensor.
        seed: Seed of the reset-state stream.
    """

    solved_metric = "eval/success_rate"
    solved_threshold = 0.9
    info_metrics: tuple[str, ...] = ("dist_to_goal", "is_reached", "on_table")  # episode/metrics/*, eval/metrics/*
    reward_terms = ("reach", "place", "success")  # info["reward/<term>"]: episode/rewards/* and eval/rewards/*

    def __init__(self, cfg: PushCubeArmConfig, *, device: str | torch.device = "cpu", seed: int = 0) -> None:
        num_envs = cfg.num_envs
        self.num_envs, self.max_episode_steps = num_envs, cfg.max_episode_steps
        self.device = torch.device(device)
        check(cfg.engine != "batch" or self.device.type == "cpu", "engine", "batch", f"a CPU device for mujoco.batch "
              f"(device is {self.device})", fix="pass device=cpu, or engine=auto to use mujoco_warp on CUDA")
        self.reward_mode, self.terminate_on_success = cfg.reward_mode, cfg.terminate_on_success
        self.randomize_yaw, self.time_obs = cfg.randomize_yaw, cfg.time_obs
        self.action_scale, self.substeps = float(cfg.action_scale), cfg.substeps
        self.control_dt = cfg.timestep * cfg.substeps
        self.goal_radius, self.goal_offset = float(cfg.goal_radius), float(cfg.goal_offset)
        self.model = scene.load_model(cfg.timestep)
        self.geometry = scene.ArmGeometry(self.model)
        self.engine: BatchEngine | WarpEngine
        if cfg.engine == "warp" or (cfg.engine == "auto" and self.device.type == "cuda"):
            self.engine = WarpEngine(self.model, num_envs, self.device, cfg.warp_nconmax, cfg.warp_njmax)
        else:
            self.engine = BatchEngine(self.model, num_envs, cfg.num_threads)
        self.device = self.engine.device  # e.g. cuda -> cuda:0, the device warp's arrays live on
        self._sim = self.engine.fields
        dtype = self.engine.dtype
        self._ctrl_low, self._ctrl_high = (torch.tensor(self.model.actuator_ctrlrange[:, i], dtype=dtype,
                                                        device=self.device) for i in (0, 1))
        self._joint_noise = torch.tensor(cfg.joint_noise, dtype=torch.float64, device=self.device)
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (OBS_DIM + int(cfg.time_obs),), np.float32)
        self.action_space = gym.spaces.Box(-1.0, 1.0, (scene.NUM_JOINTS,), np.float32)
        self._goal = torch.zeros(num_envs, 2, dtype=dtype, device=self.device)
        self._steps = torch.zeros(num_envs, dtype=torch.int64, device=self.device)
        self._ever_success = torch.zeros(num_envs, dtype=torch.bool, device=self.device)
        self._resets = ResetStream(num_envs, self.device, seed)  # keys, counters and seed of the resets
        self._renderer: Any = None  # MuJoCo's renderer once made; False when no OpenGL context can be made
        self._set_randomization(cfg)
        self.reset(seed=seed)

    # --- resets --------------------------------------------------------------------------------------
    @property
    def seed(self) -> int:
        """Seed of the reset stream (set by ``reset(seed=...)``)."""
        return self._resets.seed

    def reset(self, seed: int | None = None, group_size: int = 1) -> Tensor:
        """Start a fresh episode in every env (see :meth:`BatchedEnv.reset` and the module docstring).

        Returns:
            ``[N, obs_dim]`` float32 first observations.
        """
        key, counter = self._resets.explicit(seed, group_size)
        self._start(torch.ones(self.num_envs, dtype=torch.bool, device=self.device), key, counter)
        self._steps.zero_()
        self._ever_success.zero_()
        if self._history is not None:
            self._history.zero_()
        self._obs = self._observe(*self._kinematics(), self._steps)
        return self._obs

    def _start(self, mask: Tensor, key: Tensor, counter: Tensor) -> None:
        """Write start states drawn from rows ``(key, counter)`` into the ``mask`` envs' simulations."""
        if self.randomization is not None:
            self._draw_parameters(mask, key, counter)
        u = hash_uniform(self._resets.seed, key, counter, 9)
        joints, cube, yaw, goal = scene.spawn_scenes(u, self._joint_noise, self.goal_offset, self.randomize_yaw)
        dtype, half = self.engine.dtype, self.geometry.cube_half_size
        zero, one = torch.zeros_like(yaw), torch.ones_like(yaw)
        qpos = torch.cat((joints, cube, (half * one)[:, None], torch.stack(((yaw / 2).cos(), zero, zero,
                                                                           (yaw / 2).sin()), 1)), 1)
        start = {"qpos": qpos.to(dtype), "ctrl": joints.to(dtype)}  # every other state field starts at zero
        for name, field in self._sim.items():
            value = start.get(name, torch.zeros((), dtype=dtype, device=self.device))
            field.copy_(torch.where(mask.view(-1, *([1] * (field.dim() - 1))), value, field))
        self._goal.copy_(torch.where(mask[:, None], goal.to(dtype), self._goal))

    def _set_randomization(self, cfg: PushCubeArmConfig) -> None:
        """``env.randomize``: the per-simulation model fields it writes (the batch engine's) and their nominal
        values; none without entries."""
        model, cube = self.model, self.model.body("cube").id
        cube_geom, dofs = self.model.geom("cube").id, slice(0, scene.NUM_JOINTS)
        nominal = {"cube_mass": float(model.body_mass[cube]),
                   "cube_friction": float(model.geom_friction[cube_geom, 0]),
                   "joint_damping": 1.0,  # joint damping and the actuators' entries: multipliers of each joint's own
                   **dict.fromkeys(("kp", "kd", "motor_strength", "torque_limit"), 1.0), "action_delay": 0.0}
        self.randomization = make_randomization(cfg.randomize, nominal, self.num_envs, self.device, torch.float64,
                                                cfg.randomizable)
        self._history: Tensor | None = None  # [1 + MAX_ACTION_DELAY, N, 6] the last actions, newest first
        if self.randomization is None:
            return
        if "action_delay" in cfg.randomize:
            self._history = torch.zeros(1 + MAX_ACTION_DELAY, self.num_envs, scene.NUM_JOINTS,
                                        dtype=self.engine.dtype, device=self.device)
        check(isinstance(self.engine, BatchEngine), "engine", cfg.engine, f"the CPU engine (mujoco.batch) with "
              f"env.randomize (device is {self.device})", fix="pass device=cpu engine=batch, or drop env.randomize")
        assert isinstance(self.engine, BatchEngine)
        self.info_metrics = (*type(self).info_metrics, *self.randomization.metric_keys)
        self._fields = {"cube_mass": (self.engine.model_field("body_mass"), (slice(None), cube)),
                        "cube_inertia": (self.engine.model_field("body_inertia"), (slice(None), cube)),
                        "cube_friction": (self.engine.model_field("geom_friction"), (slice(None), cube_geom, 0)),
                        "joint_damping": (self.engine.model_field("dof_damping"), (slice(None), dofs))}
        if cfg.randomize.keys() & {"kp", "kd", "motor_strength", "torque_limit"}:  # the position servos' terms
            gain, bias = self.engine.model_field("actuator_gainprm"), self.engine.model_field("actuator_biasprm")
            self._fields.update({"kp_gain": (gain, (slice(None), slice(None), 0)),
                                 "kp_bias": (bias, (slice(None), slice(None), 1)),
                                 "kd_bias": (bias, (slice(None), slice(None), 2)),
                                 "torque_limit": (self.engine.model_field("actuator_forcerange"), (slice(None),))})
        self._nominal_fields = {name: field[index].clone() for name, (field, index) in self._fields.items()}

    def _draw_parameters(self, mask: Tensor, key: Tensor, counter: Tensor) -> None:
        """Draw the ``mask`` envs' randomized values and write them into their simulations' model fields."""
        rand = self.randomization
        assert rand is not None
        drawn = rand.draw(hash_key(self._resets.seed, key), counter)
        torch.where(mask, drawn, rand.values, out=rand.values)
        mass = rand.row("cube_mass", self._nominal_fields["cube_mass"])
        scale = torch.as_tensor(mass / self._nominal_fields["cube_mass"]).view(-1, 1)  # the inertia follows the mass
        damping = torch.as_tensor(rand.row("joint_damping", 1.0)).view(-1, 1)
        rows = {"cube_mass": mass, "cube_inertia": self._nominal_fields["cube_inertia"] * scale,
                "cube_friction": rand.row("cube_friction", self._nominal_fields["cube_friction"]),
                "joint_damping": self._nominal_fields["joint_damping"] * damping, **self._actuator_rows()}
        for name, (field, index) in self._fields.items():
            field[index] = torch.as_tensor(rows[name], dtype=field.dtype).expand_as(field[index])
        if "cube_mass" in rand.names and isinstance(self.engine, BatchEngine):
            self.engine.set_const()  # the body's derived constants (subtree masses, ...) follow its mass

    def _actuator_rows(self) -> dict[str, Tensor]:
        """The position servos' model terms of each env's drawn gains, strength and torque limit (force = strength
        (kp (target - q) - kd q_dot), clipped at strength x torque_limit x the nominal limit)."""
        if "kp_gain" not in self._fields:
            return {}
        rand, nominal = self.randomization, self._nominal_fields
        assert rand is not None

        def multiplier(name: str) -> Tensor:
            return torch.as_tensor(rand.row(name, 1.0), dtype=torch.float64).view(-1, 1)

        strength = multiplier("motor_strength")
        kp, kd = multiplier("kp") * strength, multiplier("kd") * strength
        limit = (multiplier("torque_limit") * strength).view(-1, 1, 1)
        return {"kp_gain": nominal["kp_gain"] * kp, "kp_bias": nominal["kp_bias"] * kp,
                "kd_bias": nominal["kd_bias"] * kd, "torque_limit": nominal["torque_limit"] * limit}

    def _delayed(self, action: Tensor) -> Tensor:
        """The actions executed now: each env's action of ``action_delay`` steps ago (zero, i.e. hold the joints,
        before its episode's first); ``action`` itself without a delay."""
        if self._history is None or self.randomization is None:
            return action
        self._history = torch.cat((action[None], self._history[:-1]))
        delay = self.randomization.row("action_delay", 0.0)
        assert isinstance(delay, Tensor)
        steps = delay.floor().long().clamp(0, MAX_ACTION_DELAY)
        return self._history[steps, torch.arange(self.num_envs, device=self.device)]

    # --- stepping ------------------------------------------------------------------------------------
    def step(self, action: Tensor) -> StepResult:
        """Advance every env one control step (``substeps`` physics steps) and auto-reset finished ones.

        Args:
            action: ``[N, 6]`` in ``[-1, 1]`` (clipped).

        Returns:
            :class:`StepResult`; ``info`` holds ``success`` (bool, cube in the goal and on the table now),
            ``success_once`` (bool, at any step of this episode so far), ``success_at_end`` (bool, success on
            the step that ends the episode), ``dist_to_goal`` (float, cube to goal in the table plane),
            ``is_reached`` (bool, TCP within 1.5 cm of the push point), ``on_table`` (bool) and
            ``elapsed_steps`` (int64, steps into the episode that this step belongs to), all ``[N]``.
        """
        if action.shape != (self.num_envs, scene.NUM_JOINTS):
            raise ValueError(f"PushCubeArm.step: action has shape {tuple(action.shape)}, "
                             f"expected ({self.num_envs}, {scene.NUM_JOINTS})")
        q = self._sim["qpos"][:, :scene.NUM_JOINTS]
        target = q + self._delayed(action.to(q.dtype).clamp(-1.0, 1.0)) * self.action_scale
        self._sim["ctrl"].copy_(torch.minimum(torch.maximum(target, self._ctrl_low), self._ctrl_high))
        self.engine.step(self.substeps)
        steps = self._steps + 1
        points, axis = self._kinematics()
        final_obs = self._observe(points, axis, steps)
        reward, terms, success, reached, on_table, dist_to_goal = self._reward(points[:, -1])
        terminated = success if self.terminate_on_success else torch.zeros_like(success)
        time_up = steps >= self.max_episode_steps
        truncated = time_up & ~terminated
        done = terminated | time_up

        randomized = self.randomization.info() if self.randomization is not None else {}  # the ending episodes'
        self._resets.episode += done
        self._steps = steps.masked_fill(done, 0)
        if self._history is not None:  # a new episode's delayed actions start from holding the joints
            self._history.masked_fill_(done.view(1, -1, 1), 0.0)
        if self.device.type != "cpu" or bool(done.any()):  # CPU: skip the masked writes when no env ends
            self._start(done, self._resets.env_ids, self._resets.episode)
            self._obs = torch.where(done[:, None], self._observe(*self._kinematics(), self._steps), final_obs)
        else:
            self._obs = final_obs
        once = self._ever_success | success
        self._ever_success = once & ~done
        info = {"success": success, "success_once": once, "success_at_end": success & done,
                "dist_to_goal": dist_to_goal.float(), "is_reached": reached, "on_table": on_table,
                "elapsed_steps": steps, **{f"reward/{name}": term for name, term in terms.items()}, **randomized}
        return StepResult(self._obs, reward, terminated, truncated, final_obs, info)

    def _kinematics(self) -> tuple[Tensor, Tensor]:
        """Arm points ``[N, 8, 3]`` and rod axis ``[N, 3]`` of the current joint angles."""
        return scene.forward_kinematics(self._sim["qpos"][:, :scene.NUM_JOINTS], self.geometry)

    def _reward(self, tcp: Tensor) -> tuple[Tensor, dict[str, Tensor], Tensor, Tensor, Tensor, Tensor]:
        """The reward of ``reward_mode`` and its terms (float32 ``[N]``; the reward is their sum, exactly), then the
        success, reached and on-table flags and the cube's distance to the goal."""
        qpos = self._sim["qpos"]
        cos_t, sin_t = scene.yaw_of(qpos[:, 9:13])
        terms, success, reached, on_table, dist = scene.staged_reward(
            tcp, qpos[:, 6:9], cos_t, sin_t, self._goal, self.geometry.cube_half_size, self.geometry.rod_radius,
            self.goal_radius)
        if self.reward_mode == "normalized_dense":
            terms = {name: term * (1.0 / scene.SUCCESS_REWARD) for name, term in terms.items()}
        elif self.reward_mode == "sparse":
            zero = torch.zeros_like(terms["reach"])
            terms = {"reach": zero, "place": zero, "success": success.to(zero.dtype)}
        terms = {name: term.float() for name, term in terms.items()}
        return terms["reach"] + terms["place"] + terms["success"], terms, success, reached, on_table, dist

    def _observe(self, points: Tensor, axis: Tensor, steps: Tensor) -> Tensor:
        """``[N, obs_dim]`` float32 observations of the current simulations (see the class docstring)."""
        qpos, qvel = self._sim["qpos"], self._sim["qvel"]
        tcp, cube, goal = points[:, -1], qpos[:, 6:9], self._goal
        parts = [qpos[:, :6], qvel[:, :6] * (self.control_dt / self.action_scale), tcp, axis, cube, qpos[:, 9:13],
                 goal, goal - cube[:, :2], cube - tcp]
        if self.time_obs:
            parts.append((steps * (1.0 / self.max_episode_steps)).to(qpos.dtype)[:, None])
        return torch.cat(parts, 1).float()

    # --- pictures and snapshots ----------------------------------------------------------------------
    def render(self, env_ids: list[int] | None = None, size: int = 256) -> np.ndarray:
        """Frames of the current states of the given envs (all when None) as uint8 ``[k, size, size, 3]``.

        MuJoCo's renderer draws them when an OpenGL context is configured (``MUJOCO_GL=egl`` or ``osmesa``, a
        display) and can be made; otherwise :func:`~embodirl.envs.push_cube.arm_scene.draw_arm_scene` draws top
        views with numpy.
        """
        check(is_int(size) and size >= 8, "size", size, "an int >= 8 (pixels)")
        ids = list(range(self.num_envs)) if env_ids is None else list(env_ids)
        index = torch.as_tensor(ids, dtype=torch.int64, device=self.device)
        qpos = self._sim["qpos"][index].double().cpu().numpy()
        goal = self._goal[index].double().cpu().numpy()
        frames = self._mujoco_frames(qpos, goal, size)
        if frames is not None:
            return frames
        points, _ = scene.forward_kinematics(torch.from_numpy(qpos[:, :6]), self.geometry)
        yaw = np.arctan2(*(t.numpy() for t in reversed(scene.yaw_of(torch.from_numpy(qpos[:, 9:13])))))
        return scene.draw_arm_scene(points.numpy(), qpos[:, 6:9], yaw, goal, size,
                                    half_size=self.geometry.cube_half_size, goal_radius=self.goal_radius,
                                    table_half_size=self.geometry.table_half_size)

    def _mujoco_frames(self, qpos: np.ndarray, goal: np.ndarray, size: int) -> np.ndarray | None:
        """MuJoCo's rendering of ``qpos`` rows ``[k, nq]`` with goals ``[k, 2]``, or None without OpenGL."""
        import mujoco

        if self._renderer and self._renderer.height != size:
            self._renderer.close()
            self._renderer = None
        if self._renderer is None and not _opengl_configured():
            self._renderer = False  # trying would abort the process on some machines without a display
        if self._renderer is None:
            try:
                with warnings.catch_warnings():  # glfw warns before failing without a display
                    warnings.simplefilter("ignore")
                    self._renderer = mujoco.Renderer(self.model, size, size)
            except Exception:  # no OpenGL context of any kind: draw top views instead
                self._renderer = False
        if not self._renderer:
            return None
        data, goal_site = mujoco.MjData(self.model), self.model.site("goal").id
        camera = self.model.camera("overview").id
        frames = np.empty((qpos.shape[0], size, size, 3), dtype=np.uint8)
        for i in range(qpos.shape[0]):
            data.qpos[:] = qpos[i]
            self.model.site_pos[goal_site, :2] = goal[i]  # the engines simulate their own copies of the model
            mujoco.mj_forward(self.model, data)
            self._renderer.update_scene(data, camera=camera)
            frames[i] = self._renderer.render()
        return frames

    def state_dict(self) -> dict[str, Tensor]:
        """MuJoCo's integration state (time, qpos, qvel, act, ctrl, warm start), goals, counters and
        episode statistics (all cloned)."""
        state = {f"sim.{name}": value.clone() for name, value in self._sim.items()}
        state.update({"steps": self._steps.clone(), "goal": self._goal.clone(),
                      "ever_success": self._ever_success.clone()})
        state.update(self._resets.state_dict())
        if self.randomization is not None:
            state.update(self.randomization.state_dict())
        if self._history is not None:
            state["action_history"] = self._history.clone()
        return state

    def load_state_dict(self, state: dict[str, Tensor]) -> None:
        """Restore :meth:`state_dict` output; on the CPU engine the env then continues bit-identically."""
        missing = sorted(_STATE_KEYS - state.keys())
        if missing:
            raise CheckpointError(f"PushCubeArm.load_state_dict: missing keys {missing}; "
                                  "pass a PushCubeArm.state_dict()")
        if tuple(state["sim.qpos"].shape) != tuple(self._sim["qpos"].shape):
            raise CheckpointError(f"PushCubeArm.load_state_dict: qpos shape {tuple(state['sim.qpos'].shape)} "
                                  f"differs from this env's {tuple(self._sim['qpos'].shape)}; build the env "
                                  "with the checkpoint's num_envs")
        for name, field in self._sim.items():
            field.copy_(state[f"sim.{name}"])
        self._goal.copy_(state["goal"])
        self._steps.copy_(state["steps"])
        self._ever_success.copy_(state["ever_success"])
        self._resets.load_state_dict(state)
        if self.randomization is not None and "randomize_values" in state:
            self.randomization.load_state_dict(state)
            self._draw_parameters(torch.zeros(self.num_envs, dtype=torch.bool), self._resets.env_ids,
                                  self._resets.episode)  # write the restored values into the simulations
        if self._history is not None and "action_history" in state:
            self._history.copy_(state["action_history"])
        self._obs = self._observe(*self._kinematics(), self._steps)

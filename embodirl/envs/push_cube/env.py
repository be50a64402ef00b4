"""Batched planar PushCube: a tool tip pushes a 4 cm cube into a goal region (ManiSkill PushCube-v1 style).

A kinematic disk (the tool tip) pushes a square cube sliding on a table with Coulomb friction; the contact
is solved with normal + friction impulses, then projected out of penetration (the maths, the reward and the
drawing are pure functions in :mod:`embodirl.envs.push_cube.physics`; the task is specified in
``docs/envs/push_cube.md``).
Limitations: planar (no lifting or tipping), a kinematic tip instead of a 7-DoF arm (or a 2-link SCARA arm
whose links pass above the cube), no gripper, and decoupled ("box" limit-surface) table friction.

State is component-major, ``[16, N]`` in ``physics_dtype`` (float32 by default): tip ``p`` (rows 0-1), tip
velocity ``v_p`` (2-3), cube centre ``c`` (4-5), yaw (6), cube velocity ``v`` (7-8), ``omega`` (9), goal ``g``
(10-11), joint angles ``q`` (12-13) and the last step's mean joint velocity (14-15; both zero in ee mode).

Reset states come from :func:`~embodirl.envs.rng.hash_uniform` as in :mod:`embodirl.envs.cartpole`: auto-reset
of env ``i`` uses key ``i`` and counter = its episode number; ``reset(group_size=g)`` uses key ``i // g`` and
counter ``2**31 + r`` (``r`` = explicit resets since seeding). Components: cube xy (0-1), tip xy (2-3), yaw
(4), goal direction (5). An env's trajectory does not depend on ``num_envs``; group members share starts.
Eager, the starts (and first observations) of every env's next episodes are memoised; under ``torch.compile``
or CUDA-graph capture they are drawn inline (:class:`~embodirl.envs.rng.StartCache`), with the same values.

``step`` is compile- and CUDA-graph-ready (``torch.compile(env.step, fullgraph=True)``, no recompiles, state
updated in place, no host syncs); every tensor it returns is freshly allocated.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import torch
from tensordict import TensorDict
from torch import Tensor

from embodirl.config.envs import PushCubeConfig
from embodirl.config.randomize import VISUAL_PARAMS
from embodirl.envs.base import BatchedEnv, StepResult, mark_static
from embodirl.envs.push_cube import look
from embodirl.envs.push_cube import physics as phys
from embodirl.envs.push_cube.view import TopView, draw_packed, draw_styled, make_top_view, unpack_rgb
from embodirl.envs.randomization import make_randomization
from embodirl.envs.rng import ResetStream, StartCache, uniform_from_key
from embodirl.errors import CheckpointError, check, is_int

__all__ = ["PushCube"]

STATE_ROWS = 16
_STATE_KEYS = {"state", "obs", "steps", "episode", "num_resets", "seed", "ever_success"}


class PushCube(BatchedEnv):
    """``num_envs`` planar PushCube tasks stepped as tensors on one device.

    Observation (float32): ``[p(2), v_p(2), c(2), cos theta, sin theta, v(2), omega, g(2), g - c(2), c - p(2)]``
    (17 dims); joint mode appends ``[q(2), q_dot dt / max_joint_delta (2)]``; ``time_obs`` appends ``t / T``.
    Action: ``[-1, 1]^2`` (clipped), a tip velocity ``max_speed a`` (``ee_delta_pos``) or joint steps
    ``max_joint_delta a`` per control step (``joint_delta_pos``; a substep that would take the tip out of the
    workspace is rejected, there are no other joint limits).

    Reward: :func:`~embodirl.envs.push_cube.physics.staged_reward` ``r`` (reach the push point, then place;
    3 on success, ``|c - g| < goal_radius``); ``normalized_dense`` returns ``r / 3`` (1 iff success),
    ``dense`` returns ``r``, ``sparse`` the success flag. Each step's info holds the reward's terms,
    ``reward/reach``, ``reward/place`` and ``reward/success`` (in the reward's units; they sum to it exactly), logged
    as ``episode/rewards/<term>`` (their sums over an episode).

    **Hover trap.** With ``terminate_on_success=True`` and a short horizon (gamma 0.8), hovering at the push
    point (about 0.41 per step, worth 2.06) beats pushing to success and ending the episode (about 1.8):
    PPO first learns to push, then unlearns it (96 % -> 0 % success in the reference runs). The default
    therefore does not terminate on success: the goal is absorbing and pays the maximum every step. For
    ManiSkill parity with termination, give success a terminal value of at least ``1/(1 - gamma)`` times
    the per-step maximum.

    The keys (:class:`~embodirl.config.envs.PushCubeConfig`) set the task (``control_mode``, ``reward_mode``,
    ``goal_direction``, ...), the physics (cube, tip, friction, substeps, the contact solver), the arm of joint mode
    and the observation (``obs_mode``: ``state`` is the vector above, a ``Box``; ``rgb`` a ``Dict`` with ``rgb``,
    the top view the videos show, ``uint8`` ``[image_size, image_size, 3]``, where the goal is only in the picture;
    ``state_rgb`` a ``Dict`` with both). ``physics_dtype=float64`` makes CPU, CUDA and compiled runs agree closely
    over long horizons (contact amplifies float32 rounding); observations, rewards and ``dist_to_goal`` are float32
    either way.

    Args:
        cfg: The env's keys.
        device: Device of every tensor.
        seed: Seed of the reset-state stream.
    """

    solved_metric = "eval/success_rate"
    solved_threshold = 0.9
    info_metrics: tuple[str, ...] = ("dist_to_goal", "is_reached")  # logged as episode/metrics/* and eval/metrics/*
    reward_terms = ("reach", "place", "success")  # info["reward/<term>"]: episode/rewards/* and eval/rewards/*

    def __init__(self, cfg: PushCubeConfig, *, device: str | torch.device = "cpu", seed: int = 0) -> None:
        self.num_envs, self.max_episode_steps = cfg.num_envs, cfg.max_episode_steps
        self.device = torch.device(device)
        self.control_mode, self.reward_mode, self.goal_direction = cfg.control_mode, cfg.reward_mode, cfg.goal_direction
        self.terminate_on_success = cfg.terminate_on_success
        self.fail_on_leaving_workspace = cfg.fail_on_leaving_workspace
        self.randomize_yaw, self.time_obs = cfg.randomize_yaw, cfg.time_obs
        self.physics_dtype = getattr(torch, cfg.physics_dtype)
        self.joint_mode = cfg.control_mode == "joint_delta_pos"
        self._set_physics(cfg)
        self.obs_mode, self.image_size = cfg.obs_mode, cfg.image_size
        self._set_spaces(cfg)

        n, dev, dtype = cfg.num_envs, self.device, self.physics_dtype
        specs, nominal = {}, {}
        for name, spec in cfg.randomize.items():  # the view's entries add their rows (look.visual_rows)
            rows, values = look.visual_rows(name, spec) if name in VISUAL_PARAMS else \
                ({name: spec}, {name: cfg.nominal(name)})
            specs.update(rows)
            nominal.update(values)
        self.randomization = make_randomization(specs, nominal, n, dev, dtype, cfg.randomizable)
        self._look = look.nominal_colors(dev) if look.is_visual(cfg.randomize) else None  # None: nominal view
        if self.randomization is not None:  # each episode's values are logged as episode/metrics/randomize/<name>
            self.info_metrics = (*type(self).info_metrics, *self.randomization.metric_keys)
        self._state = torch.zeros(STATE_ROWS, n, dtype=dtype, device=dev)
        self._steps = torch.zeros(n, dtype=torch.int64, device=dev)  # steps into the current episode
        self._ever_success = torch.zeros(n, dtype=torch.bool, device=dev)  # success at some step of this episode
        self._resets = ResetStream(n, dev, seed)  # seed and episode counters of the reset stream
        self._views: dict[int, TopView] = {}  # frame geometry and background per size (rgb, render)
        self._view = self._top_view(cfg.image_size)
        # Eager memo of the next starts (state columns, observation rows); episodes last at least `min_length`.
        min_length = 1 if cfg.terminate_on_success or cfg.fail_on_leaving_workspace else cfg.max_episode_steps
        dims = (1,) + (0,) * len(self._parts) + ((1,) if self.randomization is not None else ())
        self._starts = StartCache(self._resets, self._draw_starts, dims=dims, depth=max(1, min(16, 4096 // n)),
                                  min_length=min_length)
        mark_static(dev, self._state, self._steps, self._ever_success, self._resets.episode, self._resets.key_hash,
                    self._view.background, self._view.offsets)
        if self.randomization is not None:
            mark_static(dev, self.randomization.values, self.randomization.low, self.randomization.high)
        if self._look is not None:
            mark_static(dev, self._look, self._view.labels)
        self.reset(seed=seed)

    def _set_physics(self, cfg: PushCubeConfig) -> None:
        """The physical constants as floats, and the contact solver's and table friction's per-substep terms."""
        delta = cfg.substep_dt
        self.half_size, self.radius = float(cfg.cube_half_size), float(cfg.pusher_radius)
        self.mass = float(cfg.cube_mass)
        self.inertia = cfg.cube_mass * (2 * cfg.cube_half_size) ** 2 / 6
        self.push_friction, self.control_dt = float(cfg.push_friction), float(cfg.control_dt)
        self.substeps = cfg.substeps
        self.max_speed, self.max_joint_delta = float(cfg.max_speed), float(cfg.max_joint_delta)
        self.arm_base = (float(cfg.arm_base[0]), float(cfg.arm_base[1]))
        self.link_lengths = (float(cfg.link_lengths[0]), float(cfg.link_lengths[1]))
        self.workspace = ((float(cfg.workspace_low[0]), float(cfg.workspace_low[1])),
                          (float(cfg.workspace_high[0]), float(cfg.workspace_high[1])))
        self.table_half_size = (float(cfg.table_half_size[0]), float(cfg.table_half_size[1]))
        self.goal_radius, self.goal_offset = float(cfg.goal_radius), float(cfg.goal_offset)
        margin = cfg.max_tip_speed() * delta + cfg.speculative_slack  # the speculative contact margin
        self._solver = {"mass": self.mass, "inertia": self.inertia, "friction": self.push_friction, "dt": delta,
                        "baumgarte": float(cfg.baumgarte), "margin": margin}
        self._solver_iterations = cfg.solver_iterations
        self._delta = delta
        self._friction_dv = cfg.table_friction * cfg.gravity * delta  # speed lost per substep, then the angular one:
        self._friction_dw = self._friction_dv * phys.MEAN_LEVER_ARM * cfg.cube_half_size * self.mass / self.inertia
        self._table_friction = float(cfg.table_friction)
        self._gravity, self._speculative = float(cfg.gravity), (cfg.max_tip_speed() * delta, cfg.speculative_slack)

    def _set_spaces(self, cfg: PushCubeConfig) -> None:
        """The observation space of ``obs_mode`` (with the order of its pieces) and the action space."""
        obs_dim = 17 + 4 * self.joint_mode + int(cfg.time_obs)
        state_space = gym.spaces.Box(-np.inf, np.inf, (obs_dim,), np.float32)
        rgb_space = gym.spaces.Box(0, 255, (cfg.image_size, cfg.image_size, 3), np.uint8)
        modes: dict[str, dict[str, gym.Space]] = {"state": {"state": state_space}, "rgb": {"rgb": rgb_space},
                                                  "state_rgb": {"state": state_space, "rgb": rgb_space}}
        spaces = modes[cfg.obs_mode]
        self.observation_space = state_space if cfg.obs_mode == "state" else gym.spaces.Dict(spaces)
        self._parts: tuple[str, ...] = tuple(spaces)  # the observation's pieces, in the order _observe returns them
        self.action_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)

    # --- resets --------------------------------------------------------------------------------------
    @property
    def seed(self) -> int:
        """Seed of the reset stream (set by ``reset(seed=...)``)."""
        return self._resets.seed

    def reset(self, seed: int | None = None, group_size: int = 1) -> Tensor | TensorDict:
        """Start a fresh episode in every env (see :meth:`BatchedEnv.reset` and the module docstring).

        Returns:
            The first observations: ``[N, obs_dim]`` float32 (``obs_mode=state``) or a TensorDict with
            ``state`` and/or ``rgb`` (``uint8`` ``[N, S, S, 3]``).
        """
        rows = self._resets.explicit(seed, group_size)
        params = None
        if self.randomization is not None:
            params = self.randomization.draw(*rows)
            self.randomization.values.copy_(params)
        self._state.copy_(self._initial_states(*rows, params))
        self._reset_starts = (self._state.clone(), params)  # what restart() returns envs to
        self._steps.zero_()
        self._ever_success.zero_()
        self._starts.invalidate()
        return self._pack(self._observe(self._state, self._steps))

    def restart(self, mask: Tensor) -> Tensor | TensorDict:
        """Start the ``mask`` envs over from the last :meth:`reset`'s scene (see :meth:`BatchedEnv.restart`)."""
        state, params = self._reset_starts
        torch.where(mask, state, self._state, out=self._state)
        if self.randomization is not None and params is not None:
            torch.where(mask, params, self.randomization.values, out=self.randomization.values)
        self._steps.masked_fill_(mask, 0)
        self._ever_success.masked_fill_(mask, False)
        return self._pack(self._observe(self._state, self._steps))

    def _initial_states(self, key_hash: Tensor, counter: Tensor, params: Tensor | None = None) -> Tensor:
        """``[16, M]`` start states for rows ``(key_hash, counter)`` (drawn in float64, stored in ``physics_dtype``);
        ``params`` ``[P, M]``: their randomized values (the goal distance may be one)."""
        num = 6 if self.randomize_yaw or self.goal_direction != "fixed" else 4
        u = uniform_from_key(key_hash, counter, num).T  # [num, M] in [0, 1)
        offset: Tensor | float = self.goal_offset
        row = self.randomization.index("goal_offset") if self.randomization is not None else None
        if params is not None and row is not None:
            offset = params[row].double()
        tip, cube, yaw, goal = phys.spawn_scenes(u, offset, self.goal_direction, self.randomize_yaw)
        dtype, (low, high) = self.physics_dtype, self.workspace
        tip = (tip[0].clamp(low[0], high[0]).to(dtype), tip[1].clamp(low[1], high[1]).to(dtype))
        zero = torch.zeros_like(yaw, dtype=dtype)
        q = (zero, zero)
        if self.joint_mode:  # the joints reaching the stored tip, then the tip those joints reach
            q0, q1 = phys.arm_inverse((tip[0].double(), tip[1].double()), self.arm_base, *self.link_lengths)
            q = (q0.to(dtype), q1.to(dtype))
            tip = phys.arm_forward(q, self.arm_base, *self.link_lengths)
        rows = (*tip, zero, zero, *cube, yaw, zero, zero, zero, *goal, *q, zero, zero)
        return torch.stack([row.to(dtype) for row in rows])

    def _draw_starts(self, key_hash: Tensor, counter: Tensor) -> tuple[Tensor, ...]:
        """``[16, M]`` start states and the pieces of the first observations (:meth:`_observe`) of rows
        ``(key_hash, counter)``."""
        params = self.randomization.draw(key_hash, counter) if self.randomization is not None else None
        state = self._initial_states(key_hash, counter, params)
        parts = self._observe(state, torch.zeros_like(counter), params=params)
        return state, *parts, *(() if params is None else (params,))

    # --- stepping ------------------------------------------------------------------------------------
    def step(self, action: Tensor) -> StepResult:
        """Advance every env one control step (``substeps`` physics substeps) and auto-reset finished ones.

        Args:
            action: ``[N, 2]`` in ``[-1, 1]`` (clipped).

        Returns:
            :class:`StepResult`; ``info`` holds ``success`` (bool, cube within ``goal_radius`` now),
            ``success_once`` (bool, at any step of this episode so far), ``success_at_end`` (bool, success
            on the step that ends the episode), ``dist_to_goal`` (float), ``is_reached`` (bool, tip within 1.5 cm of
            the push point), ``elapsed_steps`` (int64, steps into the episode that this step belongs to) and the
            reward's terms ``reward/reach``, ``reward/place``, ``reward/success`` (float32, summing to the reward), all
            ``[N]``.
        """
        if action.shape != (self.num_envs, 2):
            raise ValueError(f"PushCube.step: action has shape {tuple(action.shape)}, expected ({self.num_envs}, 2)")
        constants = self._constants()
        state = self._physics(action.to(self._state.dtype).clamp(-1.0, 1.0).T, constants)
        cos_t, sin_t = state[6].cos(), state[6].sin()
        steps = self._steps + 1
        final_parts = self._observe(state, steps, cos_t, sin_t)
        terms, success, reached, dist_to_goal = phys.staged_reward(
            state[0:2], state[4:6], state[10:12], cos_t, sin_t, constants["half_size"], constants["radius"],
            self.goal_radius)
        terminated = success if self.terminate_on_success else torch.zeros_like(success)
        if self.fail_on_leaving_workspace:
            left = (state[4].abs() > self.table_half_size[0]) | (state[5].abs() > self.table_half_size[1])
            terminated = terminated | left
            terms = {name: term.masked_fill(left, 0.0) for name, term in terms.items()}
        reward, terms = self._reward(terms, success)
        dist_to_goal = dist_to_goal.to(torch.float32)
        time_up = steps >= self.max_episode_steps
        truncated = time_up & ~terminated
        done = terminated | time_up

        start, *start_parts = self._starts.next(done)
        randomized = {}
        if self.randomization is not None:  # the ended episodes' values go into info, then the new episodes' are drawn
            randomized = self.randomization.info()
            *start_parts, params = start_parts
            torch.where(done, params, self.randomization.values, out=self.randomization.values)
        torch.where(done, start, state, out=self._state)
        obs = self._pack([torch.where(done.view(-1, *[1] * (final.dim() - 1)), first, final)
                          for first, final in zip(start_parts, final_parts, strict=True)])
        final_obs = self._pack(final_parts)
        self._steps.copy_(steps).masked_fill_(done, 0)
        once = self._ever_success | success
        torch.logical_and(once, ~done, out=self._ever_success)
        info = {"success": success, "success_once": once, "success_at_end": success & done,
                "dist_to_goal": dist_to_goal, "is_reached": reached, "elapsed_steps": steps,
                **{f"reward/{name}": term for name, term in terms.items()}, **randomized}
        return StepResult(obs, reward, terminated, truncated, final_obs, info)

    def _reward(self, terms: dict[str, Tensor], success: Tensor) -> tuple[Tensor, dict[str, Tensor]]:
        """The reward of ``reward_mode`` and its terms (float32 ``[N]``; the reward is their sum, exactly)."""
        if self.reward_mode == "normalized_dense":
            terms = {name: term * (1.0 / phys.SUCCESS_REWARD) for name, term in terms.items()}
        elif self.reward_mode == "sparse":
            zero = torch.zeros_like(terms["reach"])
            terms = {"reach": zero, "place": zero, "success": success.to(zero.dtype)}
        terms = {name: term.to(torch.float32) for name, term in terms.items()}
        return terms["reach"] + terms["place"] + terms["success"], terms

    def _constants(self) -> dict[str, Any]:
        """The physics constants of this step: the nominal floats, or ``[N]`` per-env tensors where randomized
        (with the terms that follow from them: inertia, the friction's per-substep losses, the contact margin)."""
        if self.randomization is None:
            return {"half_size": self.half_size, "radius": self.radius, "friction_dv": self._friction_dv,
                    "friction_dw": self._friction_dw, "gain": 1.0, "solver": self._solver}
        rand = self.randomization
        half, mass = rand.row("cube_half_size", self.half_size), rand.row("cube_mass", self.mass)
        gain = rand.row("actuator_gain", 1.0)
        inertia = mass * (2 * half) ** 2 / 6
        friction_dv = rand.row("table_friction", self._table_friction) * (self._gravity * self._delta)
        travel, slack = self._speculative
        solver = {**self._solver, "mass": mass, "inertia": inertia, "friction": rand.row("push_friction",
                  self.push_friction), "margin": gain * travel + slack}
        return {"half_size": half, "radius": rand.row("pusher_radius", self.radius), "friction_dv": friction_dv,
                "friction_dw": friction_dv * phys.MEAN_LEVER_ARM * half * mass / inertia, "gain": gain,
                "solver": solver}

    def _physics(self, action: Tensor, constants: dict[str, Any]) -> Tensor:
        """Run the substeps from ``self._state`` for ``[2, N]`` clipped actions under :meth:`_constants`; return
        the new ``[16, N]``.

        Works on ``[N]`` components only (see :mod:`.push_cube_physics`), so a compiled step fuses."""
        s = self._state
        p, c, theta, v, omega, q = (s[0], s[1]), (s[4], s[5]), s[6], (s[7], s[8]), s[9], (s[12], s[13])
        h, r, delta = constants["half_size"], constants["radius"], self._delta
        (x_low, y_low), (x_high, y_high) = self.workspace
        phi, n, r_c = phys.box_contact(p, c, theta.cos(), theta.sin(), h, r)
        step = self.max_joint_delta / self.substeps if self.joint_mode else self.max_speed * delta
        if self.randomization is not None:
            step = constants["gain"] * step
        d = (action[0] * step, action[1] * step)  # joint (joint mode) or tip (ee mode) motion per substep
        q_start = q
        for _ in range(self.substeps):
            if self.joint_mode:  # integrate the joints, tip = FK(q); reject steps leaving the workspace
                q_new = (q[0] + d[0], q[1] + d[1])
                p_new = phys.arm_forward(q_new, self.arm_base, *self.link_lengths)
                inside = (p_new[0] >= x_low) & (p_new[0] <= x_high) & (p_new[1] >= y_low) & (p_new[1] <= y_high)
                q = (torch.where(inside, q_new[0], q[0]), torch.where(inside, q_new[1], q[1]))
                p_new = (torch.where(inside, p_new[0], p[0]), torch.where(inside, p_new[1], p[1]))
            else:
                p_new = ((p[0] + d[0]).clamp(x_low, x_high), (p[1] + d[1]).clamp(y_low, y_high))
            v_p = ((p_new[0] - p[0]) * (1.0 / delta), (p_new[1] - p[1]) * (1.0 / delta))
            v, omega = phys.table_friction(v, omega, constants["friction_dv"], constants["friction_dw"])
            v, omega = phys.solve_contact(v_p, v, omega, phi, n, r_c, iterations=self._solver_iterations,
                                          **constants["solver"])
            c = (c[0] + v[0] * delta, c[1] + v[1] * delta)
            theta = theta + omega * delta
            p = p_new
            phi, n, r_c = phys.box_contact(p, c, theta.cos(), theta.sin(), h, r)
            depth = (-phi).clamp(min=0.0)
            c = (c[0] - n[0] * depth, c[1] - n[1] * depth)  # position projection: no penetration left
            phi = phi.clamp(min=0.0)  # the projected geometry: same n and r_c, zero gap (exactly, in reals)
        if self.joint_mode:
            q_dot = ((q[0] - q_start[0]) * (1.0 / self.control_dt), (q[1] - q_start[1]) * (1.0 / self.control_dt))
        else:
            q_dot = (s[14], s[15])
        return torch.stack((*p, *v_p, *c, theta, *v, omega, s[10], s[11], *q, *q_dot))

    def _observe(self, state: Tensor, steps: Tensor, cos_t: Tensor | None = None, sin_t: Tensor | None = None,
                 params: Tensor | None = None) -> list[Tensor]:
        """The observation pieces of ``[16, M]`` states with ``steps`` ``[M]`` into the episode, in ``obs_mode``'s
        order: ``[M, obs_dim]`` float32 state features and/or ``[M, S, S]`` packed top views (:meth:`_pack`
        unpacks them), drawn in the look of the randomized values ``params`` ``[P, M]`` (None: the current
        episodes')."""
        return [self._features(state, steps, cos_t, sin_t) if part == "state" else self._draw(state, self._view, params)
                for part in self._parts]

    def _draw(self, state: Tensor, view: TopView, params: Tensor | None = None) -> Tensor:
        """``[M, S, S]`` packed top views of ``[16, M]`` states, in the look of ``params`` (None: the current
        episodes') when the view is randomized."""
        if self._look is None or self.randomization is None:
            return draw_packed(state, view)
        values = self.randomization.values if params is None else params
        return draw_styled(state, view, look.style_of(self.randomization, values, self._look))

    def _pack(self, parts: list[Tensor]) -> Tensor | TensorDict:
        """The observation of :meth:`_observe`'s pieces: the tensor itself (``obs_mode=state``) or a TensorDict."""
        if self.obs_mode == "state":
            return parts[0]
        leaves = {key: unpack_rgb(part) if key == "rgb" else part for key, part in zip(self._parts, parts, strict=True)}
        return TensorDict(leaves, batch_size=[self.num_envs], device=self.device)

    def _features(self, state: Tensor, steps: Tensor, cos_t: Tensor | None = None,
                  sin_t: Tensor | None = None) -> Tensor:
        """``[M, obs_dim]`` float32 state features of ``[16, M]`` states with ``steps`` ``[M]`` into the episode."""
        if cos_t is None or sin_t is None:
            cos_t, sin_t = state[6].cos(), state[6].sin()
        s = state
        columns = [*s[0:6], cos_t, sin_t, *s[7:12], s[10] - s[4], s[11] - s[5], s[4] - s[0], s[5] - s[1]]
        if self.joint_mode:
            scale = self.control_dt / self.max_joint_delta
            columns += [s[12], s[13], s[14] * scale, s[15] * scale]
        if self.time_obs:
            columns.append((steps * (1.0 / self.max_episode_steps)).to(state.dtype))
        return torch.stack(columns, dim=1).to(torch.float32)

    # --- pictures and snapshots ----------------------------------------------------------------------
    def _top_view(self, size: int) -> TopView:
        """The (memoised) frame geometry and background of ``size`` x ``size`` top views of this env."""
        if size not in self._views:
            arm = (self.arm_base, self.link_lengths) if self.joint_mode else None
            self._views[size] = make_top_view(size, half_size=self.half_size, radius=self.radius,
                                              goal_radius=self.goal_radius, workspace=self.workspace, arm=arm,
                                              device=self.device)
        return self._views[size]

    def render(self, env_ids: list[int] | None = None, size: int = 256) -> np.ndarray:
        """Top views of the current states of the given envs (all when None) as uint8 ``[k, size, size, 3]``;
        after an auto-reset, the next episode's start. The picture is the ``rgb`` observation's
        (:func:`.push_cube_view.draw_top_view`, in each env's look when the view is randomized), drawn at ``size``:
        at ``size=image_size`` exactly what a pixel policy sees."""
        check(is_int(size) and 8 <= size <= 4096, "size", size, "an int in [8, 4096] (pixels)")
        ids = list(range(self.num_envs)) if env_ids is None else list(env_ids)
        index = torch.as_tensor(ids, dtype=torch.int64, device=self.device)
        params = self.randomization.values[:, index] if self.randomization is not None else None
        return unpack_rgb(self._draw(self._state[:, index], self._top_view(size), params)).cpu().numpy()

    def state_dict(self) -> dict[str, Tensor]:
        """Physics, counters, seed and episode statistics (all cloned), and the current state features (for
        reference: they follow from them, and :meth:`load_state_dict` only checks their shape)."""
        state = {"state": self._state.clone(), "obs": self._features(self._state, self._steps),
                 "steps": self._steps.clone(), "ever_success": self._ever_success.clone()}
        state.update(self._resets.state_dict())
        if self.randomization is not None:
            state.update(self.randomization.state_dict())
        return state

    def load_state_dict(self, state: dict[str, Tensor]) -> None:
        """Restore :meth:`state_dict` output; the env then continues bit-identically."""
        missing = sorted(_STATE_KEYS - state.keys())
        if missing:
            raise CheckpointError(f"PushCube.load_state_dict: missing keys {missing}; pass a PushCube.state_dict()")
        features = self._features(self._state[:, :1], self._steps[:1]).shape[1]
        shapes, own = (tuple(state["state"].shape), tuple(state["obs"].shape)), (self._state.shape,
                                                                                 (self.num_envs, features))
        if shapes != tuple(tuple(x) for x in own):
            raise CheckpointError(f"PushCube.load_state_dict: state/obs shapes {shapes} differ from this env's "
                                  f"{own}; build the env with the checkpoint's num_envs, control_mode and time_obs")
        self._resets.load_state_dict(state)
        self._state.copy_(state["state"])
        self._steps.copy_(state["steps"])
        self._ever_success.copy_(state["ever_success"])
        if self.randomization is not None:
            self.randomization.load_state_dict(state)
        self._starts.invalidate()

    def randomization_changed(self) -> None:
        self._starts.invalidate()  # the memoised starts were drawn from the old ranges

"""Schemas of the envs (``env=cartpole|push_cube|push_cube_arm|gym|gym_vector|torch_vector|playground|genesis``).

The key every env class takes (how many copies) is declared once in :class:`EnvConfig`; the keys of every ``env``
node that the build applies around the env (what counts as solved, the wrappers) once in :class:`EnvSetupConfig`.
Rules that need the device or the simulator (a CUDA-only engine, a gymnasium id's spaces) stay in the envs'
constructors; everything else is checked here, before torch is imported.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from importlib.resources import files
from typing import Any, ClassVar, Literal

import yaml

from embodirl.config.randomize import (
    ACTUATOR_PARAMS,
    VISUAL_PARAMS,
    RandomizableParams,
    RandomizeConfig,
    check_actuators,
    check_randomize,
    check_visual,
    extremes,
)
from embodirl.config.schema import Node, Schema, check_finite_values, key
from embodirl.errors import ConfigError, is_int

__all__ = ["CUBE_SPAWN", "TIP_SPAWN_HIGH", "TIP_SPAWN_LOW", "WRAPPER_KEYS", "CartPoleConfig", "EnvConfig", "EnvNode",
           "EnvSetupConfig", "GenesisConfig", "GymConfig", "GymVectorConfig", "PlaygroundConfig", "PushCubeArmConfig",
           "PushCubeConfig", "TorchVectorConfig", "WrapperConfig", "recipes_for", "threshold_source"]

RewardMode = Literal["normalized_dense", "dense", "sparse"]
Pair = tuple[float, float]

# The planar push_cube task's reset distribution (drawn by embodirl.envs.push_cube.physics.spawn_scenes): declared
# here, torch-free, so PushCubeConfig can check a workspace against it.
CUBE_SPAWN = 0.1  #: cube centre ~ U([-0.1, 0.1]^2)
TIP_SPAWN_LOW, TIP_SPAWN_HIGH = (-0.30, -0.10), (-0.20, 0.10)  #: tip ~ U(box), >= 5 cm behind the cube


Std = float | list[float]  # one standard deviation, or one per dimension

# Bounds of the wrappers' keys: far beyond any useful setting, low enough that a typo (1e30, 1e6) is refused in one
# line instead of drowning every observation (then blamed on algo.learning_rate), stepping for hours, or allocating
# an action history of that length (then blamed on env.num_envs).
MAX_OBS_NOISE = 100.0  #: observations are O(1) to O(100): a larger std leaves no signal
MAX_ACTION_REPEAT = 100  #: 5 s of a 20 Hz task per action; Atari and Isaac Lab repeat 2 to 8
MAX_ACTION_DELAY = 100  #: 5 s of latency at 20 Hz; an episode rarely lasts longer
MAX_OBS_HISTORY = 100  #: 5 s at 20 Hz; proprioceptive histories hold 3 to 50 steps (RMA's adaptation reads 50)


@dataclass(frozen=True, kw_only=True)
class WrapperConfig(Schema):
    """Observation noise, action delay, action noise, action repeat, frame stacking and observation history: wrappers
    around any env, all off by default (:mod:`embodirl.envs.wrappers`; docs/guides/observation-action-wrappers.md)."""

    obs_noise: Std | dict[str, Std] = key(0.0, ge=0, le=MAX_OBS_NOISE, doc="Gaussian noise std added to the "
                                          "observation: one number for every float key, or {key: std} per key (a std "
                                          "per dimension as a list); 0 = off", example="{state: 0.01}")
    action_delay: int = key(0, ge=0, le=MAX_ACTION_DELAY, doc="the env executes the action of this many policy "
                            "steps ago (a new episode pads its history with its first action); 0 = off")
    action_noise: Std = key(0.0, ge=0, doc="Gaussian noise std added to Box actions before the env clips them, per "
                            "env step (a list: one per action dimension); 0 = off")
    action_repeat: int = key(1, ge=1, le=MAX_ACTION_REPEAT, doc="env steps per policy step with the same action, "
                             "rewards summed, stopping at the end of an episode; 1 = off")
    frame_stack: int = key(1, ge=1, le=16, doc="stack the last k frames of every image key along its channels "
                           "(reset per env at an episode start); 1 = off")
    obs_history: int | dict[str, int] = key(1, ge=1, le=MAX_OBS_HISTORY, doc="keep the last k observations of "
                                            "every vector (1-D) key, [D] becoming [k D] oldest first, or {key: k} "
                                            "per key (restarted per env at an episode start); 1 = off",
                                            example="{state: 3}")

    def check(self) -> None:
        if isinstance(self.obs_noise, dict):
            for name, std in self.obs_noise.items():
                check_finite_values(f"obs_noise.{name}", std, 0.01)
                if any(not 0 <= value <= MAX_OBS_NOISE for value in (std if isinstance(std, list) else [std])):
                    raise ConfigError(f"obs_noise.{name}", std, f"a float in [0, {MAX_OBS_NOISE:g}] (a standard "
                                      "deviation), or a list of them (one per dimension)",
                                      f"pass obs_noise.{name}=0.01, or 0 for no noise")
        for name, length in (self.obs_history if isinstance(self.obs_history, dict) else {}).items():
            if not (is_int(length) and 1 <= length <= MAX_OBS_HISTORY):
                raise ConfigError(f"obs_history.{name}", length, f"an int in [1, {MAX_OBS_HISTORY}] (observations "
                                  "of the key kept; 1 = the key as it is)", f"pass obs_history.{name}=3")


#: The keys of :class:`WrapperConfig`: every env takes them; the build wraps the env it made with them.
WRAPPER_KEYS = ("obs_noise", "action_delay", "action_noise", "action_repeat", "frame_stack", "obs_history")


@dataclass(frozen=True, kw_only=True)
class EnvSetupConfig(WrapperConfig):
    """The keys of every env node that the build applies around the env it made: what counts as solved, and the
    observation and action wrappers; the env class never sees them."""

    solved_metric: str | None = key(None, doc="eval metric that decides \"solved\" (null = the env's own, e.g. "
                                    "eval/return_mean or eval/success_rate)", example="eval/return_mean")
    solved_threshold: float | None = key(None, doc="its value that counts as solved (null = the env's own: CartPole "
                                         "475, push_cube 0.9 success, a gymnasium id's reward_threshold)",
                                         example=400)

    def check(self) -> None:
        super().check()
        if self.solved_metric is not None and not self.solved_metric.startswith("eval/"):
            raise ConfigError("solved_metric", self.solved_metric, "null (the env's own) or an evaluation metric "
                              "such as eval/return_mean", "pass solved_metric=eval/return_mean (or eval/success_rate "
                              "for envs that report success)")


class EnvNode(Node):
    """An ``env`` node: the env class's keys, and the setup keys (:class:`EnvSetupConfig`) the build applies."""

    setup_schema = EnvSetupConfig


@dataclass(frozen=True, kw_only=True)
class EnvConfig(Schema):
    """What every env class takes: its number of copies (the setup keys of :class:`EnvSetupConfig` are the
    build's)."""

    num_envs: int = key(256, ge=1, doc="parallel envs on the device")


@dataclass(frozen=True, kw_only=True)
class CartPoleConfig(EnvConfig):
    """Batched pure-torch CartPole with gymnasium CartPole-v1's dynamics, termination and 500-step limit."""

    target = "embodirl.envs.cartpole.CartPole"
    num_envs: int = key(64, ge=1, doc="parallel envs on the device (the default PPO is tuned for 64: "
                        "algo/ppo_sizing/cartpole.yaml)")
    max_episode_steps: int = key(500, ge=1, doc="time limit (truncation); gymnasium's CartPole-v1 uses 500")
    physics_dtype: Literal["float64", "float32"] = key("float64", doc="float64 matches gymnasium bit for bit; "
                                                       "float32 is a little faster on GPUs")
    hide_velocities: bool = key(False, doc="observe only cart position and pole angle (partially observed: needs "
                                "policy=actor_critic_rnn)")
    randomize: dict[str, RandomizeConfig] = key(factory=dict, doc="parameters drawn per env at each reset: "
                                                "pole_length, pole_mass, cart_mass, force_mag (guides/"
                                                "domain-randomization.md)",
                                                example={"pole_length": {"range": [0.5, 2.0]}})
    randomizable: ClassVar[RandomizableParams] = {
        "pole_length": ("the pole's half-length, gymnasium's length (0.5 m)", False),
        "pole_mass": ("gymnasium's masspole (0.1 kg)", False),
        "cart_mass": ("gymnasium's masscart (1.0 kg)", False),
        "force_mag": ("the push's force (10 N)", True),
    }

    def check(self) -> None:
        super().check()
        check_randomize(self.randomize, self.randomizable)


@dataclass(frozen=True, kw_only=True)
class PushCubeConfig(EnvConfig):
    """Batched planar PushCube: a tool tip pushes a 4 cm cube into a goal 0.2 m ahead (success: within 0.1 m)."""

    target = "embodirl.envs.push_cube.env.PushCube"
    num_envs: int = key(2048, ge=1, doc="parallel envs on the device")
    control_mode: Literal["ee_delta_pos", "joint_delta_pos"] = key(
        "ee_delta_pos", doc="ee_delta_pos (tip velocity) | joint_delta_pos (2-link arm joint steps)")
    reward_mode: RewardMode = key("normalized_dense", doc="normalized_dense (staged reward / 3, 1 iff success) | "
                                  "dense | sparse")
    terminate_on_success: bool = key(False, doc="end episodes on success: beware the hover trap "
                                     "(docs/envs/push_cube.md)")
    fail_on_leaving_workspace: bool = key(False, doc="terminate (reward 0) when the cube leaves table_half_size")
    goal_direction: Literal["fixed", "random", "random_aligned"] = key(
        "fixed", doc="fixed (+x) | random (the tip may go around the cube) | random_aligned (rotated scene)")
    randomize_yaw: bool = key(False, doc="initial cube yaw ~ U(-pi/4, pi/4) instead of 0")
    time_obs: bool = key(False, doc="append elapsed_steps / max_episode_steps to the observation")
    max_episode_steps: int = key(50, ge=1, doc="time limit (truncation), ManiSkill's")
    cube_half_size: float = key(0.02, gt=0, doc="cube half-size h (m)")
    cube_mass: float = key(0.064, gt=0, doc="cube mass (kg); the inertia is m (2h)^2 / 6")
    pusher_radius: float = key(0.01, gt=0, doc="tool-tip disk radius (m)")
    table_friction: float = key(0.3, ge=0, doc="cube-table Coulomb coefficient")
    push_friction: float = key(0.3, ge=0, doc="tip-cube Coulomb coefficient")
    gravity: float = key(9.81, gt=0, doc="gravity (m/s^2)")
    control_dt: float = key(0.05, gt=0, doc="seconds per action (20 Hz)")
    substeps: int = key(5, ge=1, doc="physics substeps per action")
    max_speed: float = key(0.5, gt=0, doc="tip speed per action component at |a| = 1 (m/s, ee mode)")
    max_joint_delta: float = key(0.05, gt=0, doc="joint step per action at |a| = 1 (rad, joint mode)")
    arm_base: Pair = key((-0.615, 0.0), doc="shoulder of the 2-link arm (m, joint mode)")
    link_lengths: Pair = key((0.45, 0.45), gt=0, doc="upper-arm and forearm lengths (m)")
    workspace_low: Pair = key((-0.35, -0.3), doc="tip workspace lower corner (m; ee mode clamps, joint mode rejects)")
    workspace_high: Pair = key((0.45, 0.3), doc="tip workspace upper corner (m)")
    solver_iterations: int = key(4, ge=1, doc="contact solver sweeps per substep")
    baumgarte: float = key(0.2, gt=0, le=1, doc="fraction of a penetration the solver removes per substep")
    speculative_slack: float = key(0.001, ge=0, doc="added to the tip's largest per-substep travel: the "
                                   "speculative contact margin (m)")
    goal_radius: float = key(0.1, gt=0, doc="success radius (m)")
    goal_offset: float = key(0.2, gt=0, doc="goal distance from the cube's start (m)")
    table_half_size: Pair = key((0.6, 0.5), gt=0, doc="half extents of the table (m): leaving it fails the episode "
                                "with fail_on_leaving_workspace")
    physics_dtype: Literal["float32", "float64"] = key("float32", doc="float64 makes CPU, CUDA and compiled runs "
                                                       "agree closely (slower)")
    obs_mode: Literal["state", "rgb", "state_rgb"] = key("state", doc="state (vector) | rgb (top-view picture only; "
                                                         "the goal is drawn) | state_rgb (both)")
    image_size: int = key(64, ge=8, le=1024, doc="pixels per side of the rgb observation (uint8 [H, W, 3], the "
                          "videos' picture)")
    randomize: dict[str, RandomizeConfig] = key(factory=dict, doc="parameters drawn per env at each reset: "
                                                "cube_mass, table_friction, push_friction, cube_half_size, "
                                                "pusher_radius, goal_offset, actuator_gain; the view's cube_color, "
                                                "table_color, goal_color, floor_color, light, camera_shift, "
                                                "camera_roll, camera_fov (guides/domain-randomization.md)",
                                                example={"table_friction": {"range": [0.5, 2.0]}})
    randomizable: ClassVar[RandomizableParams] = {
        "cube_mass": ("cube_mass, kg (the inertia follows)", False),
        "table_friction": ("table_friction, cube-table Coulomb coefficient", True),
        "push_friction": ("push_friction, tip-cube Coulomb coefficient", True),
        "cube_half_size": ("cube_half_size, m (the inertia follows)", False),
        "pusher_radius": ("pusher_radius, m", False),
        "goal_offset": ("goal_offset, m from the cube's start", False),
        "actuator_gain": ("multiplier of max_speed (ee mode) or max_joint_delta (joint mode), nominal 1", False),
        **VISUAL_PARAMS,
    }

    @property
    def substep_dt(self) -> float:
        """Seconds per physics substep."""
        return self.control_dt / self.substeps

    def max_tip_speed(self) -> float:
        """Largest tip speed an action can command: ``sqrt(2) max_speed`` (ee mode) or the bound
        ``max_joint_delta / control_dt (l1 + 2 l2)`` of ``|J(q) q_dot|`` (joint mode)."""
        if self.control_mode == "joint_delta_pos":
            return self.max_joint_delta / self.control_dt * (self.link_lengths[0] + 2 * self.link_lengths[1])
        return math.sqrt(2.0) * self.max_speed

    def check(self) -> None:
        super().check()
        spawn = "(the tip's spawn box must lie in the workspace)"
        if not all(low <= spawn_low for low, spawn_low in zip(self.workspace_low, TIP_SPAWN_LOW, strict=True)):
            raise ConfigError("workspace_low", list(self.workspace_low), f"at most {list(TIP_SPAWN_LOW)} {spawn}",
                              "pass workspace_low=[-0.35,-0.3] (the default)")
        if not all(high >= spawn_high for high, spawn_high in zip(self.workspace_high, TIP_SPAWN_HIGH, strict=True)):
            raise ConfigError("workspace_high", list(self.workspace_high), f"at least {list(TIP_SPAWN_HIGH)} {spawn}",
                              "pass workspace_high=[0.45,0.3] (the default)")
        delta, radius, half = self.substep_dt, self.pusher_radius, self.cube_half_size
        if not self.max_speed * delta < radius:
            raise ConfigError("max_speed", self.max_speed, "max_speed * control_dt / substeps < "
                              f"pusher_radius={radius} (no tunnelling)", "lower max_speed or raise substeps")
        if self.control_mode == "joint_delta_pos" and not self.max_tip_speed() * delta < half:
            # the speculative margin covers the travel; it must stay below the cube's half-size
            raise ConfigError("max_joint_delta", self.max_joint_delta, "a tip travel per substep, max_joint_delta "
                              f"(l1 + 2 l2) / substeps, below cube_half_size={half}",
                              "lower max_joint_delta or raise substeps")
        clearance = -CUBE_SPAWN - TIP_SPAWN_HIGH[0]  # 0.1 m between the spawn boxes of cube centre and tip
        if not half * math.sqrt(2.0) + radius < clearance:
            raise ConfigError("cube_half_size", half, f"sqrt(2) cube_half_size + pusher_radius < {clearance} (cube "
                              "and tip never overlap at the start)", "pass cube_half_size=0.02 (the default)")
        check_randomize(self.randomize, self.randomizable, {name: self.nominal(name) for name in self.randomizable})
        check_visual(self.randomize)
        self._check_randomized_geometry(clearance)

    def nominal(self, name: str) -> float:
        """The nominal value of randomizable parameter ``name`` (its config key; 1 for the gain, the light and the
        field of view; 0 for a colour, whose channels have their own, and for the camera's moves)."""
        if name in VISUAL_PARAMS:
            return 1.0 if name in ("light", "camera_fov") else 0.0
        return 1.0 if name == "actuator_gain" else float(getattr(self, name))

    def randomized_extremes(self, name: str) -> tuple[float, float]:
        """The smallest and largest value of parameter ``name`` (its nominal value twice when not randomized)."""
        nominal = self.nominal(name)
        entry = self.randomize.get(name)
        return extremes(entry, nominal) if entry is not None else (nominal, nominal)

    def _check_randomized_geometry(self, clearance: float) -> None:
        """The no-tunnelling and start-clearance rules hold at the extremes of the randomized ranges."""
        radius_low, radius_high = self.randomized_extremes("pusher_radius")
        gain_high = self.randomized_extremes("actuator_gain")[1]
        half_high = self.randomized_extremes("cube_half_size")[1]
        joint = self.control_mode == "joint_delta_pos"  # joint mode: the tip's travel must stay below the half-size
        travel = (self.max_tip_speed() if joint else self.max_speed) * gain_high * self.substep_dt
        limit, what = (self.randomized_extremes("cube_half_size")[0], "cube_half_size") if joint else \
            (radius_low, "pusher_radius")
        moved = self.randomize.keys() & {"pusher_radius", "actuator_gain", "cube_half_size"}
        if moved and not travel < limit:
            name = "actuator_gain" if "actuator_gain" in self.randomize else sorted(moved)[0]
            raise ConfigError(f"randomize.{name}.range", list(self.randomize[name].range),
                              f"a tip step per substep below the smallest {what} (largest step {travel:g} m, smallest "
                              f"{what} {limit:g} m: the tip would tunnel through the cube)",
                              f"narrow the range, or raise substeps to "
                              f"{math.floor(self.substeps * travel / limit) + 1}")
        if self.randomize.keys() & {"pusher_radius", "cube_half_size"} and \
                not half_high * math.sqrt(2.0) + radius_high < clearance:
            name = "cube_half_size" if "cube_half_size" in self.randomize else "pusher_radius"
            raise ConfigError(f"randomize.{name}.range", list(self.randomize[name].range),
                              f"sqrt(2) cube_half_size + pusher_radius < {clearance} at the largest values (cube and "
                              "tip never overlap at the start)", "narrow the range, e.g. range=[0.5,2.0]")


@dataclass(frozen=True, kw_only=True)
class PushCubeArmConfig(EnvConfig):
    """PushCube with a UR10 arm in MuJoCo: the arm's rod pushes a free 4 cm cube into a goal 0.2 m ahead."""

    target = "embodirl.envs.push_cube.arm.PushCubeArm"
    num_envs: int = key(512, ge=1, doc="parallel simulations")
    reward_mode: RewardMode = key("normalized_dense", doc="normalized_dense (staged reward / 3, 1 iff success) | "
                                  "dense | sparse")
    terminate_on_success: bool = key(False, doc="end episodes on success: beware the hover trap "
                                     "(docs/envs/push_cube.md)")
    randomize_yaw: bool = key(False, doc="initial cube yaw ~ U(-pi/4, pi/4) instead of 0")
    time_obs: bool = key(False, doc="append elapsed_steps / max_episode_steps to the observation")
    max_episode_steps: int = key(50, ge=1, doc="time limit (truncation): 2.5 s at 20 Hz")
    action_scale: float = key(0.025, gt=0, le=0.2, doc="rad of joint target offset per step at |a| = 1 (0.025: about "
                              "2.5 cm of tip motion)")
    joint_noise: list[float] = key(factory=lambda: [0.1, 0.03, 0.03, 0.05, 0.05, 0.1], ge=0, le=0.2,
                                   doc="rad, half-widths of the uniform start offsets of the 6 joints")
    timestep: float = key(0.01, gt=0, le=0.02, doc="s, physics step (the arm's stiff position control and the "
                          "contacts are unstable beyond 0.02)")
    substeps: int = key(5, ge=1, doc="physics steps per action (20 Hz control)")
    goal_radius: float = key(0.1, gt=0, doc="success radius (m)")
    goal_offset: float = key(0.2, gt=0, doc="goal distance from the cube's start along +x (m)")
    engine: Literal["auto", "batch", "warp"] = key("auto", doc="auto (batch on CPU, warp on CUDA) | batch "
                                                   "(mujoco.batch) | warp (mujoco_warp)")
    num_threads: int = key(0, ge=0, doc="threads of the CPU engine; 0 = one per core")
    warp_nconmax: int = key(16, ge=1, doc="contacts allocated per world (warp engine)")
    warp_njmax: int = key(64, ge=1, doc="constraint rows allocated per world (warp engine)")
    randomize: dict[str, RandomizeConfig] = key(factory=dict, doc="parameters drawn per env at each reset (engine="
                                                "batch): cube_mass, cube_friction, joint_damping; the actuators' kp, "
                                                "kd, motor_strength, torque_limit, action_delay (guides/"
                                                "domain-randomization.md)",
                                                example={"cube_friction": {"range": [0.5, 2.0]}})
    randomizable: ClassVar[RandomizableParams] = {
        "cube_mass": ("the cube body's mass (kg), its inertia scaled with it", False),
        "cube_friction": ("the cube geom's sliding friction, 0.3 (a contact takes the larger of its two geoms': "
                          "below x1 nothing changes)", True),
        "joint_damping": ("the damping of the arm's 6 joints", True),
        **ACTUATOR_PARAMS,
    }

    def check(self) -> None:
        super().check()
        check_randomize(self.randomize, self.randomizable)
        check_actuators(self.randomize)
        if self.randomize and self.engine == "warp":
            raise ConfigError("engine", self.engine, "engine=batch or auto on a CPU device with env.randomize "
                              "(per-world model fields are set through mujoco.batch)",
                              "pass engine=batch device=cpu, or drop env.randomize")
        if len(self.joint_noise) != 6:
            raise ConfigError("joint_noise", list(self.joint_noise), "6 numbers in [0, 0.2] (rad, one per joint; "
                              "larger offsets can start the rod inside the table or the cube)",
                              "pass joint_noise=[0.1,0.03,0.03,0.05,0.05,0.1]")


@dataclass(frozen=True, kw_only=True)
class GymConfig(EnvConfig):
    """Any gymnasium environment by id through its vector API, e.g. ``env=gym env.id=Pendulum-v1``."""

    target = "embodirl.envs.adapters.gym.GymEnv"
    id: str = key("CartPole-v1", doc="gymnasium id; module:Env-v0 imports the module that registers it first")
    num_envs: int = key(8, ge=1, le=65_536, doc="copies in the vector env (Python objects stepped one by one on the "
                        "host; for more, write a batched torch env)")
    vectorization_mode: Literal["sync", "async"] = key("sync", doc="sync (in this process) | async (a subprocess "
                                                       "per copy)")
    max_episode_steps: int | None = key(None, ge=1, doc="time limit; null = the id's registered limit", example=1000)
    env_kwargs: dict[str, Any] = key(factory=dict, doc="extra keyword arguments for gymnasium.make")
    info_metrics: list[str] = key(factory=list, doc="info keys logged as episode/metrics/<key> and eval/metrics/<key> "
                                  "(each episode's value on its last step; numbers or bools per env); each must be in "
                                  "the info of the reset or the first step", example="[is_success]")

    def check(self) -> None:
        super().check()
        check_finite_values("env_kwargs", self.env_kwargs)


@dataclass(frozen=True, kw_only=True)
class GymVectorConfig(GymConfig):
    """Any gymnasium vector env, numpy or torch, in SameStep, NextStep or Disabled autoreset: built from an ``id`` or
    by your own constructor (``make``), e.g. ``env=gym_vector env.id=HalfCheetah-v5``."""

    target = "embodirl.envs.adapters.gym_vector.GymVectorEnv"
    id: str | None = key(None, doc="gymnasium id made with gymnasium.make_vec (or set make)",  # type: ignore[assignment]
                         example="HalfCheetah-v5")  # null: make names the env
    make: str | dict[str, Any] | None = key(None, doc="your vector env's constructor instead of id: an import path, "
                                            "or a _target_ node whose other keys are its arguments (called with "
                                            "num_envs)", example="mypkg.envs.make_vec_env")
    autoreset_mode: Literal["SameStep", "NextStep"] = key("SameStep", doc="the mode make_vec builds an id's "
                                                          "vector env in (a make's env states its own in metadata)")
    wrappers: list[Any] = key(factory=list, doc="vector wrappers applied in order, each a _target_ "
                                         "node called with the env, e.g. gymnasium.wrappers.vector.NumpyToTorch")

    def check(self) -> None:
        super().check()  # exactly one of id and make: checked by the env (the shipped option sets neither)
        if self.make is not None and self.env_kwargs:
            raise ConfigError("env_kwargs", self.env_kwargs, "empty with make (they are gymnasium.make's arguments "
                              "for an id)", "pass your constructor's arguments in the env.make node instead")
        check_finite_values("make", self.make)
        for i, wrapper in enumerate(self.wrappers):
            if not (isinstance(wrapper, dict) and isinstance(wrapper.get("_target_"), str)):
                raise ConfigError(f"wrappers[{i}]", wrapper, "a _target_ node naming a vector wrapper (called with the "
                                  "vector env first)", "pass e.g. env.wrappers='[{_target_: "
                                  "gymnasium.wrappers.vector.NumpyToTorch}]'")


@dataclass(frozen=True, kw_only=True)
class TorchVectorConfig(EnvConfig):
    """A torch-batched vector simulator (ManiSkill3, Isaac Lab, ...) that returns tensors on the device and resets
    finished envs itself."""

    target = "embodirl.envs.adapters.torch_vector.TorchVectorEnv"
    make: str | dict[str, Any] | None = key(None, doc="the simulator's constructor: an import path, or a _target_ "
                                            "node whose other keys are its arguments (called with num_envs)",
                                            example="mypkg.sims.make_sim")
    num_envs: int = key(16, ge=1, doc="parallel envs, passed to the constructor as num_envs")
    max_episode_steps: int | None = key(None, ge=1, doc="null = the simulator's limit (spec.max_episode_steps, or "
                                        "Isaac Lab's max_episode_length)", example=1000)
    success_key: str | None = key("success", doc="info key of per-env success flags (ManiSkill3: success); null = no "
                                  "success notion")
    final_obs: Literal["info", "acted_on"] = key("info", doc="info (ManiSkill3, gymnasium: info[\"final_observation\"]"
                                                 " / [\"final_obs\"]) | acted_on (Isaac Lab: none given)")
    per_env_seeds: bool = key(False, doc="reset(seed=[s_0, ..., s_N-1]) makes env i's start depend on s_i alone "
                              "(GRPO group-shared resets)")
    info_metrics: list[str] = key(factory=list, doc="info keys logged as episode/metrics/<key> and eval/metrics/<key> "
                                  "(each episode's value on its last step; numbers or bools per env); each must be in "
                                  "the info of the reset or the first step", example="[is_success]")

    def check(self) -> None:
        super().check()
        check_finite_values("make", self.make)


@dataclass(frozen=True, kw_only=True)
class PlaygroundConfig(EnvConfig):
    """A MuJoCo Playground task on MJX (jax), batched and auto-reset inside jax, e.g. ``env=playground
    env.id=CartpoleBalance`` (needs ``pip install "embodirl[playground]"``)."""

    target = "embodirl.envs.adapters.playground.PlaygroundEnv"
    id: str = key("CartpoleBalance", doc="MuJoCo Playground task name (mujoco_playground.registry.ALL_ENVS)")
    num_envs: int = key(64, ge=1, doc="parallel envs, one jax batch (vmap)")
    impl: Literal["jax", "warp"] = key("jax", doc="MJX implementation: jax (fast on CPU) | warp (NVIDIA GPUs; slow "
                                       "on a CPU)")
    max_episode_steps: int | None = key(None, ge=1, doc="time limit in env steps; null = the task's "
                                        "episode_length", example=1000)
    config_overrides: dict[str, Any] = key(factory=dict, doc="values replacing the task's default config (e.g. "
                                           "ctrl_dt, reward_config.*)")
    jax_cache_dir: str | None = key(None, doc="persistent jax compilation cache (the second run skips the jit); "
                                    "null = $XDG_CACHE_HOME/embodirl/jax (~/.cache/embodirl/jax)",
                                    example="/scratch/jax_cache")
    jax_cache: bool = key(True, doc="keep compiled steps in jax_cache_dir across runs")

    def check(self) -> None:
        super().check()
        check_finite_values("config_overrides", self.config_overrides)
        if "impl" in self.config_overrides:
            raise ConfigError("config_overrides.impl", self.config_overrides["impl"], "absent: env.impl sets it",
                              "remove env.config_overrides.impl and set env.impl")


_CARTPOLE = "embodirl.envs.genesis_cartpole"


@dataclass(frozen=True, kw_only=True)
class GenesisConfig(EnvConfig):
    """A batched Genesis scene built from one MJCF or URDF file, with the task declared by import paths of its
    observation, reward and termination functions (needs ``pip install "embodirl[genesis]"``)."""

    target = "embodirl.envs.adapters.genesis.GenesisEnv"
    model: str = key(f"pkg://{_CARTPOLE}/cartpole.xml", doc="the robot: an .xml (MJCF) or .urdf file; "
                     "pkg://<package>/<file> names a file shipped in a Python package")
    num_envs: int = key(64, ge=1, doc="parallel envs in the scene (Genesis's n_envs)")
    observation: str = key(f"{_CARTPOLE}.observation", doc="import path of observation(env) -> [N, obs_dim] tensor")
    reward: str = key(f"{_CARTPOLE}.reward", doc="import path of reward(env, action) -> [N] tensor")
    termination: str | None = key(f"{_CARTPOLE}.terminated", doc="import path of terminated(env) -> [N] bool; "
                                  "null = episodes end at the time limit only")
    action_joints: list[str] = key(factory=lambda: ["slider"], doc="joints driven by the action, one action "
                                   "component each")
    action_scale: float = key(10.0, gt=0, doc="force (N or N m) at action 1; actions are clipped to [-1, 1]")
    reset_noise: float = key(0.05, ge=0, doc="half-width of the uniform offsets of every joint's position and "
                             "velocity at a reset (around the model's initial pose)")
    dt: float = key(0.02, gt=0, doc="seconds per physics step")
    substeps: int = key(1, ge=1, doc="physics steps per action")
    max_episode_steps: int = key(500, ge=1, doc="time limit (truncation)")

    def check(self) -> None:
        super().check()
        if not self.model.endswith((".xml", ".urdf")):
            raise ConfigError("model", self.model, "an .xml (MJCF) or .urdf file", "pass env.model=<path>/robot.xml")
        if not self.action_joints:
            raise ConfigError("action_joints", [], "at least one joint name", "pass env.action_joints=[slider]")


def threshold_source(env: Mapping[str, Any]) -> str:
    """Where an ``env`` node's solved threshold comes from, for the log line that says how the run stops."""
    if env.get("solved_threshold") is not None:
        return "env.solved_threshold"
    if env.get("_target_") in (GymConfig.target, GymVectorConfig.target) and isinstance(env.get("id"), str):
        return f"gymnasium's reward_threshold for {env['id']}"
    return "the env's own"


def recipes_for(env: Mapping[str, Any]) -> list[str]:
    """The ``experiment=`` recipes (``conf/experiment/*.yaml``) that train the gymnasium id of an ``env`` node."""
    env_id = env.get("id")
    if not isinstance(env_id, str):
        return []
    folder = files("embodirl.conf").joinpath("experiment")
    names = []
    for path in sorted(folder.iterdir(), key=lambda p: p.name):
        recipe = yaml.safe_load(path.read_text()) if path.name.endswith(".yaml") else None
        if isinstance(recipe, dict) and isinstance(recipe.get("env"), dict) and recipe["env"].get("id") == env_id:
            names.append(path.name.removesuffix(".yaml"))
    return names

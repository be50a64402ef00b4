"""A fake ManiSkill3 task behind ManiSkill3's own vector-env API, so CI can test the torch vector-env adapter.

ManiSkill3 cannot run here (it needs a Vulkan device even on the CPU), so this module reproduces, in plain
torch, what a user gets from ``ManiSkillVectorEnv("PushCube-v1", num_envs, ...)``: the wrapper
``mani_skill/vector/wrappers/gymnasium.py`` around ``BaseEnv`` (``mani_skill/envs/sapien_env.py``) and its
``TimeLimitWrapper`` (``mani_skill/utils/registration.py``), read at haosulab/ManiSkill commits 07e17a0,
3958362 and 1337dea. What is reproduced exactly:

- Constructor ``(env, num_envs, auto_reset=True, ignore_terminations=False, record_metrics=False, **kwargs)``;
  ``kwargs`` are the task's (``obs_mode``, ``max_episode_steps``, ``sim_backend``...).
- ``reset(*, seed=None | int | list[int], options=None)`` with ``options["env_idx"]`` for partial resets;
  returns ``(obs, info)`` where ``info`` is ``get_info()`` (``elapsed_steps``, ``success``) plus ``reconfigure``.
- ``step(action) -> (obs, reward, terminated, truncated, info)``, batched torch tensors on ``device``:
  ``terminated`` = success (``BaseEnv.step``; no ``fail`` in this task), ``truncated`` = ``elapsed_steps >=
  max_episode_steps`` (``TimeLimitWrapper``), both may be true; ``ignore_terminations`` zeroes ``terminated``.
- Auto-reset inside ``step`` when any env is done (``if dones.any()``, a host sync inside ManiSkill's own
  wrapper): ``info["final_observation"]`` is the pre-reset observation of *every* env, ``info["final_info"]``
  a clone of the pre-reset info, ``info["_final_observation"]``, ``info["_final_info"]`` and
  ``info["_elapsed_steps"]`` are the ``dones`` mask; ``info`` itself is the reset's.
- ``record_metrics`` adds ``info["episode"]`` (``success_once``, ``return``, ``episode_len``, ``reward``).
- Observation modes: ``state`` (one float32 vector), ``state_dict`` (nested ``agent``/``extra`` dicts), ``rgb``
  (``agent``, ``extra``, ``sensor_param/base_camera/{extrinsic_cv, cam2world_gl, intrinsic_cv}`` and
  ``sensor_data/base_camera/rgb`` as uint8 ``[N, H, W, 3]``); ``single_observation_space`` is built from the
  first observation the way ``gym_utils.convert_observation_to_space`` does (floats unbounded).
- Seeding: a list seeds env ``i`` with ``seed[i]``; an int seeds env 0 and derives the others. With
  ``rng="torch"`` the episode is drawn with ``torch.rand`` under ``torch.manual_seed`` of the first reset env's
  episode seed, as ManiSkill's PushCube-v1 does (``BaseEnv.reset`` seeds with ``episode_seed[0]``), so envs
  given equal seeds do *not* start equal; with ``rng="batched"`` each env draws from its own seed, like tasks
  using ``self._batched_episode_rng``.

The task ("reach"): a tool tip at ``qpos`` in the unit square moves by ``0.2 * action`` (actions clipped to
[-1, 1], like ManiSkill's controllers) towards a goal; success within 0.1; the normalised dense reward is
``1 - tanh(3 * distance)``, 1 on success. ``sim_backend`` is ``"physx_cpu"`` (CPU tensors, any ``num_envs``,
unlike real ManiSkill) or ``"physx_cuda"``.
"""

from __future__ import annotations

from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
import torch
from gymnasium.envs.registration import EnvSpec
from gymnasium.vector.utils import batch_space

__all__ = ["SUCCESS_RADIUS", "FakeManiSkillVectorEnv"]

SUCCESS_RADIUS = 0.1
_OBS_MODES = ("state", "state_dict", "rgb")


def _clone(tree: Any) -> Any:
    """``mani_skill.utils.common.torch_clone_dict``."""
    if isinstance(tree, dict):
        return {key: _clone(value) for key, value in tree.items()}
    return tree.clone() if isinstance(tree, torch.Tensor) else tree


def _to_space(obs: Any) -> gym.Space:
    """``gym_utils.convert_observation_to_space(..., unbatched=True)`` for torch tensors."""
    if isinstance(obs, dict):
        return gym.spaces.Dict([(key, _to_space(value)) for key, value in obs.items()])
    array = obs.cpu().numpy()
    if np.issubdtype(array.dtype, np.floating):
        return gym.spaces.Box(-np.inf, np.inf, shape=array.shape[1:], dtype=array.dtype)
    info = np.iinfo(array.dtype)
    return gym.spaces.Box(info.min, info.max, shape=array.shape[1:], dtype=array.dtype)


class FakeManiSkillVectorEnv(gym.vector.VectorEnv):
    """ManiSkill3's ``ManiSkillVectorEnv`` API around a batched torch reach task (see the module docstring).

    Args:
        env: Task id (only ``"FakeReach-v1"``), as ``ManiSkillVectorEnv`` takes ``"PushCube-v1"``.
        num_envs: Parallel envs ``N``.
        auto_reset: Reset finished envs inside ``step``.
        ignore_terminations: Episodes end only by the time limit (``terminated`` is always False).
        record_metrics: Add ``info["episode"]``.
        obs_mode: ``state``, ``state_dict`` or ``rgb``.
        max_episode_steps: Time limit (ManiSkill's registered value for PushCube-v1 is 50).
        sim_backend: ``physx_cpu`` or ``physx_cuda`` (the device of every tensor).
        camera_size: Height and width of the ``rgb`` camera.
        rng: ``torch`` (PushCube-v1's seeding) or ``batched`` (per-env seeds honoured).
    """

    metadata: ClassVar[dict[str, Any]] = {"render_modes": []}

    def __init__(self, env: str = "FakeReach-v1", num_envs: int = 1, auto_reset: bool = True,
                 ignore_terminations: bool = False, record_metrics: bool = False, obs_mode: str = "state",
                 max_episode_steps: int = 50, sim_backend: str = "physx_cpu", camera_size: int = 64,
                 rng: str = "torch") -> None:
        if env != "FakeReach-v1":
            raise gym.error.UnregisteredEnv(f"Environment `{env}` doesn't exist.")
        if obs_mode not in _OBS_MODES:
            raise NotImplementedError(f"Unsupported obs mode: {obs_mode}. Must be one of {_OBS_MODES}")
        self.num_envs = num_envs
        self.auto_reset, self.ignore_terminations, self.record_metrics = auto_reset, ignore_terminations, record_metrics
        self.obs_mode, self.camera_size, self.rng = obs_mode, camera_size, rng
        self.max_episode_steps = max_episode_steps
        self.device = torch.device("cuda" if sim_backend == "physx_cuda" else "cpu")
        self.spec = EnvSpec("FakeReach-v1", entry_point=None, max_episode_steps=max_episode_steps)
        self.qpos = torch.zeros(num_envs, 2, device=self.device)
        self.qvel = torch.zeros(num_envs, 2, device=self.device)
        self.goal = torch.zeros(num_envs, 2, device=self.device)
        self.elapsed_steps = torch.zeros(num_envs, dtype=torch.int32, device=self.device)
        self._main_seed = np.arange(2022, 2022 + num_envs, dtype=np.int64)
        self._main_rng = [np.random.RandomState(s) for s in self._main_seed]
        self._episode_seed = self._main_seed.copy()
        self.num_resets = 0  # calls of reset(), partial ones included (for tests)
        obs, _ = self.reset(seed=[2022 + i for i in range(num_envs)])
        self.single_observation_space = _to_space(obs)
        self.single_action_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.action_space = batch_space(self.single_action_space, num_envs)
        if record_metrics:
            self.success_once = torch.zeros(num_envs, dtype=torch.bool, device=self.device)
            self.returns = torch.zeros(num_envs, device=self.device)

    # --- BaseEnv ------------------------------------------------------------------------------------
    def _set_seeds(self, seed: int | list[int] | None, env_idx: np.ndarray) -> None:
        if seed is None:  # continue each env's main stream
            self._episode_seed[env_idx] = [self._main_rng[i].randint(2**31) for i in env_idx]
            return
        seeds = list(seed) if np.iterable(seed) else [seed]
        if len(seeds) == 1 and self.num_envs > 1:
            seeds += np.random.RandomState(seeds[0]).randint(2**31, size=self.num_envs - 1).tolist()
        self._main_seed = np.asarray(seeds, dtype=np.int64)
        self._main_rng = [np.random.RandomState(s) for s in self._main_seed]
        self._episode_seed = self._main_seed.copy()

    def _initialize_episode(self, env_idx: np.ndarray) -> None:
        if self.rng == "torch":  # PushCube-v1: torch.rand under the first episode seed
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(int(self._episode_seed[env_idx[0]]))
                draws = torch.rand(len(env_idx), 4) * 1.6 - 0.8
        else:
            draws = torch.tensor(np.stack([np.random.RandomState(self._episode_seed[i]).uniform(-0.8, 0.8, 4)
                                           for i in env_idx]), dtype=torch.float32)
        idx = torch.as_tensor(env_idx, device=self.device)
        draws = draws.to(self.device)
        self.qpos[idx], self.goal[idx] = draws[:, :2], draws[:, 2:]
        self.qvel[idx] = 0.0
        self.elapsed_steps[idx] = 0

    def get_info(self) -> dict[str, torch.Tensor]:
        return {"elapsed_steps": self.elapsed_steps.clone(),
                "success": torch.linalg.norm(self.qpos - self.goal, dim=1) < SUCCESS_RADIUS}

    def get_obs(self) -> Any:
        state = {"agent": {"qpos": self.qpos.clone(), "qvel": self.qvel.clone()},
                 "extra": {"goal_pos": self.goal.clone(), "tcp_to_goal_pos": self.goal - self.qpos}}
        if self.obs_mode == "state":
            return torch.cat([state["agent"]["qpos"], state["agent"]["qvel"], state["extra"]["goal_pos"],
                              state["extra"]["tcp_to_goal_pos"]], dim=1)
        if self.obs_mode == "state_dict":
            return state
        n = self.num_envs
        eye = torch.eye(4, device=self.device)
        camera = {"extrinsic_cv": eye[:3].expand(n, 3, 4).clone(), "cam2world_gl": eye.expand(n, 4, 4).clone(),
                  "intrinsic_cv": eye[:3, :3].expand(n, 3, 3).clone()}
        return {**state, "sensor_param": {"base_camera": camera},
                "sensor_data": {"base_camera": {"rgb": self.render_rgb()}}}

    def render_rgb(self) -> torch.Tensor:
        """A top view: tip red, goal green, on grey; uint8 ``[N, H, W, 3]``."""
        axis = torch.linspace(-1.0, 1.0, self.camera_size, device=self.device)
        pixels = torch.stack(torch.meshgrid(axis, axis, indexing="xy"), dim=-1)  # [H, W, 2]
        near_tip = torch.linalg.norm(pixels - self.qpos[:, None, None], dim=-1) < 0.15
        near_goal = torch.linalg.norm(pixels - self.goal[:, None, None], dim=-1) < 0.15
        image = torch.full((self.num_envs, self.camera_size, self.camera_size, 3), 64, dtype=torch.uint8,
                           device=self.device)
        image[..., 0] = torch.where(near_tip, 255, image[..., 0])
        image[..., 1] = torch.where(near_goal, 255, image[..., 1])
        return image

    def _base_reset(self, seed: int | list[int] | None, options: dict) -> tuple[Any, dict]:
        self.num_resets += 1
        env_idx = options.get("env_idx", torch.arange(self.num_envs))
        env_idx = np.asarray(env_idx.cpu() if isinstance(env_idx, torch.Tensor) else env_idx, dtype=np.int64)
        if len(env_idx) == 0:
            raise RuntimeError("reset with an empty env_idx")
        self._set_seeds(seed, env_idx)
        self._initialize_episode(env_idx)
        info = self.get_info()
        obs = self.get_obs()
        info["reconfigure"] = False
        return obs, info

    def _base_step(self, action: torch.Tensor) -> tuple[Any, torch.Tensor, torch.Tensor, torch.Tensor, dict]:
        action = torch.as_tensor(action, device=self.device, dtype=torch.float32).clip(-1.0, 1.0)
        self.qvel = 0.2 * action
        self.qpos = (self.qpos + self.qvel).clip(-1.0, 1.0)
        self.elapsed_steps += 1
        info = self.get_info()
        obs = self.get_obs()
        reward = 1.0 - torch.tanh(3.0 * torch.linalg.norm(self.qpos - self.goal, dim=1))
        reward = torch.where(info["success"], 1.0, reward)
        terminated = info["success"].clone()
        truncated = self.elapsed_steps >= self.max_episode_steps  # TimeLimitWrapper
        return obs, reward, terminated, truncated, info

    # --- ManiSkillVectorEnv ----------------------------------------------------------------------------
    def reset(self, *, seed: int | list[int] | None = None, options: dict | None = None) -> tuple[Any, dict]:
        obs, info = self._base_reset(seed, options or {})
        if self.record_metrics:
            mask = torch.zeros(self.num_envs, dtype=torch.bool, device=self.device)
            mask[(options or {}).get("env_idx", slice(None))] = True
            self.success_once[mask] = False
            self.returns[mask] = 0
        return obs, info

    def step(self, actions: torch.Tensor) -> tuple[Any, torch.Tensor, torch.Tensor, torch.Tensor, dict]:
        obs, rew, terminations, truncations, infos = self._base_step(actions)
        if self.record_metrics:
            self.returns += rew
            self.success_once = self.success_once | infos["success"]
            infos["episode"] = {"success_once": self.success_once.clone(), "return": self.returns.clone(),
                                "episode_len": self.elapsed_steps.clone(),
                                "reward": self.returns / self.elapsed_steps}
        if self.ignore_terminations:
            terminations[:] = False
        dones = torch.logical_or(terminations, truncations)
        if dones.any() and self.auto_reset:
            final_obs = _clone(obs)
            env_idx = torch.arange(0, self.num_envs, device=self.device)[dones]
            final_info = _clone(infos)
            obs, infos = self.reset(options={"env_idx": env_idx})
            infos["final_observation"] = final_obs
            infos["final_info"] = final_info
            infos["_final_info"] = dones
            infos["_final_observation"] = dones
            infos["_elapsed_steps"] = dones
        return obs, rew, terminations, truncations, infos

    def close_extras(self, **kwargs: Any) -> None:
        self.closed = True

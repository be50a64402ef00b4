"""A batched Genesis scene from one MJCF or URDF file: ``env=genesis`` (the shipped cart-pole by default).

Genesis (``pip install "embodirl[genesis]"``) simulates ``num_envs`` copies of a scene in one batch and returns
torch tensors. A task is the robot's file plus three functions named by import path, so a new task is one module
and one config file:

- ``observation(env) -> [N, obs_dim]`` float tensor,
- ``reward(env, action) -> [N]`` float tensor (``action`` as the policy gave it, clipped to ``[-1, 1]``),
- ``termination(env) -> [N]`` bool tensor (optional: without it episodes end at the time limit only).

Each reads the simulator through ``env.entity`` (Genesis's ``RigidEntity``: ``get_dofs_position()``,
``get_dofs_velocity()``, link poses ...) and ``env.elapsed`` (``[N]`` steps into the episode).
:mod:`embodirl.envs.genesis_cartpole` is the example. Actions are forces on the ``action_joints`` (one component
each, ``action_scale`` at 1). Finished envs restart in the same step at the model's initial pose plus uniform
noise (``reset_noise``); their last observation is ``StepResult.final_obs``.

Building the scene compiles Genesis's kernels: minutes on a CPU the first time, faster when Genesis's own kernel
cache (under the user's cache folder) has them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import Tensor

from embodirl.config.envs import GenesisConfig
from embodirl.config.instantiate import import_callable
from embodirl.envs.base import BatchedEnv, StepResult
from embodirl.errors import ConfigError, check, is_int

__all__ = ["GenesisEnv", "model_path"]

log = logging.getLogger(__name__)

_INSTALL = 'pip install "embodirl[genesis]"'
_FUNCTIONS = {"observation": "observation(env)", "reward": "reward(env, action)", "termination": "terminated(env)"}


def model_path(model: str) -> Path:
    """The file ``model`` names: a path, or ``pkg://<package>/<file>`` for a file shipped in a Python package.

    Raises:
        ConfigError: the file does not exist.
    """
    if model.startswith("pkg://"):
        package, _, name = model.removeprefix("pkg://").partition("/")
        try:
            path = Path(str(resources.files(package).joinpath(name)))
        except (ModuleNotFoundError, TypeError, ValueError):
            path = Path(model)
    else:
        path = Path(model).expanduser()
    check(path.is_file(), "model", model, "an existing .xml (MJCF) or .urdf file", "check the path (relative "
          "paths start at the directory embodirl-train was started in)")
    return path


def _function(key: str, path: str) -> Callable[..., Tensor]:
    """The callable ``path`` names, refused in one line naming the key when it cannot be imported."""
    return import_callable(key, path, f"an import path of a function {_FUNCTIONS[key]}",
                           f"correct the path; the example is embodirl.envs.genesis_cartpole.{key}")


def _import_genesis(device: torch.device, seed: int) -> Any:
    """Genesis, initialised once per process on the backend matching ``device`` (CPU, or CUDA for cuda)."""
    try:
        import genesis as gs
    except ImportError as exc:
        raise ConfigError("env", "genesis", f"an installed Genesis; importing it failed ({exc})", _INSTALL,
                          absolute=True) from None
    if not getattr(gs, "_initialized", False):
        gs.init(backend=gs.gpu if device.type == "cuda" else gs.cpu, seed=seed, logging_level="warning")
    return gs


class GenesisEnv(BatchedEnv):
    """``num_envs`` copies of a Genesis scene holding one robot, with a task declared by functions.

    The keys are :class:`~embodirl.config.envs.GenesisConfig`'s; the module docstring says what the functions take.

    Args:
        cfg: The env's keys.
        device: ``cpu`` (Genesis's CPU backend) or ``cuda`` (its GPU backend).
        seed: Seed of the first reset and of Genesis.

    Attributes:
        entity: Genesis's ``RigidEntity`` of the robot (what the task's functions read).
        elapsed: ``[N]`` int64, steps into each env's episode.
    """

    def __init__(self, cfg: GenesisConfig, *, device: str | torch.device = "cpu", seed: int = 0) -> None:
        self.num_envs, self.device = cfg.num_envs, torch.device(device)
        self._cfg = cfg
        # Everything a config can get wrong is checked before the scene build, which takes minutes.
        path = model_path(cfg.model)
        self._observation = _function("observation", cfg.observation)
        self._reward = _function("reward", cfg.reward)
        self._termination = _function("termination", cfg.termination) if cfg.termination else None
        gs = _import_genesis(self.device, seed)
        self.scene = gs.Scene(sim_options=gs.options.SimOptions(dt=cfg.dt), show_viewer=False)
        morph = gs.morphs.MJCF(file=str(path)) if path.suffix == ".xml" else gs.morphs.URDF(file=str(path))
        self.entity = self.scene.add_entity(morph)
        log.info("building the Genesis scene of %s with %d envs (minutes on a CPU the first time)", path.name,
                 self.num_envs)
        self.scene.build(n_envs=self.num_envs)
        self._action_dofs = self._dofs_of(cfg.action_joints)
        self.action_space = gym.spaces.Box(-1.0, 1.0, (len(self._action_dofs),), np.float32)
        self.max_episode_steps = cfg.max_episode_steps
        self._initial_q = self.entity.get_dofs_position()[0].clone()
        self.elapsed = torch.zeros(self.num_envs, dtype=torch.int64, device=self.device)
        self._generator = torch.Generator(self.device)
        first = self.reset(seed)
        check(first.dim() == 2 and first.shape[0] == self.num_envs, "observation", cfg.observation,
              f"a function returning [num_envs={self.num_envs}, obs_dim] (it returned {list(first.shape)})",
              "return one row per env")
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (first.shape[1],), np.float32)

    def _dofs_of(self, joints: list[str]) -> list[int]:
        """The local dof index of each named joint (one dof each), refused in one line when a name is unknown."""
        names = [joint.name for joint in self.entity.joints]
        dofs = []
        for name in joints:
            check(name in names, "action_joints", list(joints), f"joints of the model ({', '.join(names)})",
                  "name joints of the model")
            dofs.extend(self.entity.get_joint(name).dofs_idx_local)
        return dofs

    def reset(self, seed: int | None = None, group_size: int = 1) -> Tensor:
        """Reset every env (see :meth:`BatchedEnv.reset`); envs of one group draw one start."""
        check(seed is None or is_int(seed), "seed", seed, "an int or None")
        check(is_int(group_size) and group_size >= 1 and self.num_envs % group_size == 0, "group_size", group_size,
              f"an int >= 1 that divides num_envs={self.num_envs}", "pick a divisor of num_envs, e.g. group_size=1")
        if seed is not None:
            self._generator.manual_seed(seed)
        self._restart(torch.arange(self.num_envs, device=self.device), group_size)
        return self._observation(self)

    def _restart(self, envs: Tensor, group_size: int = 1) -> None:
        """Put ``envs`` at the initial pose plus uniform noise in position and velocity (shared within groups)."""
        count, dofs = envs.numel() // group_size, self._initial_q.numel()
        noise = (torch.rand(2, count, dofs, generator=self._generator, device=self.device) * 2 - 1)
        noise = (noise * self._cfg.reset_noise).repeat_interleave(group_size, dim=1)
        self.entity.set_dofs_position(self._initial_q + noise[0], envs_idx=envs, zero_velocity=False)
        self.entity.set_dofs_velocity(noise[1], envs_idx=envs)
        self.elapsed[envs] = 0

    def step(self, action: Tensor) -> StepResult:
        """Apply the action's forces for ``substeps`` physics steps, score the step, and restart finished envs.

        Args:
            action: ``[N, len(action_joints)]`` floats, clipped to ``[-1, 1]``.
        """
        action = torch.clamp(action, -1.0, 1.0)
        self.entity.control_dofs_force(action * self._cfg.action_scale, dofs_idx_local=self._action_dofs)
        for _ in range(self._cfg.substeps):
            self.scene.step()
        self.elapsed += 1
        final_obs = self._observation(self)
        reward = self._reward(self, action).to(torch.float32)
        terminated = (self._termination(self).to(torch.bool) if self._termination is not None
                      else torch.zeros(self.num_envs, dtype=torch.bool, device=self.device))
        truncated = (self.elapsed >= self.max_episode_steps) & ~terminated
        done = terminated | truncated
        obs = final_obs
        if bool(done.any()):  # Genesis's CPU backend syncs anyway; skipping restarts saves a second observation
            self._restart(done.nonzero().squeeze(-1))
            obs = torch.where(done[:, None], self._observation(self), final_obs)
        return StepResult(obs, reward, terminated, truncated, final_obs, {})

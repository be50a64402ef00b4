"""A single-env ``gymnasium.Env`` view of a 1-env :class:`~embodirl.envs.base.BatchedEnv` (numpy in and out).

Use it to hand an embodirl env to gymnasium tooling (``gymnasium.utils.env_checker.check_env``, wrappers,
recorders, other libraries' single-env loops)::

    env = SingleEnvAdapter(PushCube(PushCubeConfig(num_envs=1)))
    obs, info = env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step(env.action_space.sample())

The batched env auto-resets when an episode ends; the adapter hides that: ``step`` returns the episode's
true last observation (``StepResult.final_obs``) and the caller resets, as gymnasium expects. Every array
returned is a fresh copy, and info values become Python scalars.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import torch
from tensordict import TensorDict

from embodirl.envs.base import BatchedEnv

__all__ = ["SingleEnvAdapter"]

NumpyObs = np.ndarray | dict[str, Any]  #: a Box observation as an array; a Dict one as a (nested) dict of arrays


class SingleEnvAdapter(gym.Env):
    """gymnasium's ``Env`` API over a :class:`BatchedEnv` with ``num_envs == 1``.

    Args:
        env: The batched env (exactly one copy); its spaces become this env's spaces.
        render_size: Width and height of the frames returned by :meth:`render`.
        render_fps: Frames per second recorders should use; defaults to ``1 / env.control_dt`` when the env
            has a ``control_dt`` attribute, else 30.

    Raises:
        ValueError: ``env`` holds more than one copy.
    """

    metadata: dict[str, Any] = {"render_modes": ["rgb_array"], "render_fps": 30}  # noqa: RUF012 - gymnasium's way

    def __init__(self, env: BatchedEnv, render_size: int = 256, render_fps: float | None = None) -> None:
        if env.num_envs != 1:
            raise ValueError(f"SingleEnvAdapter wraps a BatchedEnv with num_envs=1, got num_envs={env.num_envs}; "
                             "build the env with num_envs=1")
        self.env = env
        self.observation_space = env.observation_space
        self.action_space = env.action_space
        self.render_mode = "rgb_array"
        self.render_size = render_size
        control_dt = getattr(env, "control_dt", None)
        fps = render_fps if render_fps is not None else (1.0 / control_dt if control_dt else 30)
        self.metadata = {**type(self).metadata, "render_fps": fps}

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[NumpyObs, dict]:
        """Start a new episode; ``seed`` restarts the env's reset stream (None continues it).

        Returns:
            The first observation (a fresh float32 array; for a Dict space a dict of fresh arrays, images
            ``uint8``) and an empty info dict.
        """
        super().reset(seed=seed)
        obs = self.env.reset(seed=seed)
        return self._to_numpy(obs[0]), {}

    def step(self, action: Any) -> tuple[NumpyObs, float, bool, bool, dict[str, Any]]:
        """Apply one action (clipped by the env for Box spaces).

        Returns:
            ``(obs, reward, terminated, truncated, info)`` with the episode's true last observation when it
            ended, Python scalars for reward, flags and every ``[1]`` info tensor.
        """
        if isinstance(self.action_space, gym.spaces.Discrete):
            batched = torch.as_tensor(np.asarray(action), dtype=torch.int64, device=self.env.device).reshape(1)
        else:
            batched = torch.as_tensor(np.asarray(action, dtype=np.float32), device=self.env.device).reshape(1, -1)
        result = self.env.step(batched)
        info = {key: value.reshape(-1)[0].item() for key, value in result.info.items()
                if isinstance(value, torch.Tensor) and value.numel() == 1}
        return (self._to_numpy(result.final_obs[0]), float(result.reward[0]), bool(result.terminated[0]),
                bool(result.truncated[0]), info)

    def render(self) -> np.ndarray:
        """The current frame, uint8 ``[render_size, render_size, 3]``."""
        return self.env.render([0], self.render_size)[0]

    def close(self) -> None:
        """Close the batched env (safe to call twice)."""
        self.env.close()

    @staticmethod
    def _to_numpy(obs: torch.Tensor | TensorDict) -> NumpyObs:
        """A Box observation as a float32 array; a Dict one as a dict of arrays, each in its own dtype."""
        if isinstance(obs, TensorDict):
            return {key: SingleEnvAdapter._leaf(value) for key, value in obs.items()}
        return obs.detach().cpu().numpy().astype(np.float32, copy=True)

    @staticmethod
    def _leaf(value: Any) -> NumpyObs:
        if isinstance(value, TensorDict) or value.is_floating_point():
            return SingleEnvAdapter._to_numpy(value)
        return value.detach().cpu().numpy().copy()

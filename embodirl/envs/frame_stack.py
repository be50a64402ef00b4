"""Frame history for pixel policies: ``env.frame_stack: k`` stacks the last ``k`` frames of every image key.

One frame shows where things are, not where they go; a policy seeing the last ``k`` frames can read velocities
(Mnih et al. 2015 stack 4). :class:`FrameStack` wraps any batched env: each image key (``uint8`` ``[H, W, C]``)
becomes ``[H, W, k C]``, the frames concatenated along the channels, oldest first (channels ``(k-1) C ..`` are
the newest frame). Other keys pass unchanged (a privileged state vector stays one vector). Per env, a fresh
episode starts with its first frame repeated ``k`` times: after an auto-reset no frame of the finished episode
remains, and ``final_obs`` holds the finished episode's last ``k`` frames (for bootstrapping).
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch
from tensordict import TensorDict
from torch import Tensor

from embodirl.envs.base import BatchedEnv, StepResult, mark_static
from embodirl.envs.observations import STATE_KEY, ObsKey, key_name, observation_spec
from embodirl.envs.wrappers import EnvWrapper
from embodirl.errors import CheckpointError, ConfigError, is_int

__all__ = ["MAX_FRAMES", "FrameStack", "image_keys"]

MAX_FRAMES = 16  #: the most frames a stack holds (images have at most 4 channels per frame)
_PREFIX = "frame_stack."  # state_dict entries of the stacks, next to the wrapped env's own


def image_keys(space: gym.Space) -> list[ObsKey]:
    """The keys of ``space`` holding camera images: ``uint8`` ``[H, W, C]`` leaves."""
    return [key for key, (shape, dtype) in observation_spec(space).items() if len(shape) == 3 and dtype == torch.uint8]


def _stacked_box(box: gym.spaces.Box, num_frames: int) -> gym.spaces.Box:
    return gym.spaces.Box(np.concatenate([box.low] * num_frames, axis=-1),
                          np.concatenate([box.high] * num_frames, axis=-1), dtype=box.dtype)


def _stacked_space(space: gym.Space, keys: list[ObsKey], num_frames: int, prefix: ObsKey = ()) -> gym.Space:
    """``space`` with the image leaves ``keys`` widened to ``num_frames`` frames."""
    if isinstance(space, gym.spaces.Dict):
        return gym.spaces.Dict({name: _stacked_space(sub, keys, num_frames, (*prefix, name))
                                for name, sub in space.spaces.items()})
    assert isinstance(space, gym.spaces.Box)  # observation_spec accepted the space: its leaves are Boxes
    return _stacked_box(space, num_frames) if (prefix or (STATE_KEY,)) in keys else space


class FrameStack(EnvWrapper):
    """``env`` with the image keys' last ``num_frames`` frames stacked along the channels (module docstring).

    Attributes the wrapper does not define (an env's ``seed``, a gymnasium ``id``) are the wrapped env's.

    Args:
        env: The env to wrap; it must have at least one image key.
        num_frames: Frames per stack, in ``[1, MAX_FRAMES]``.

    Raises:
        ConfigError: (``env.frame_stack``) a bad ``num_frames``, or an env without image keys.
    """

    def __init__(self, env: BatchedEnv, num_frames: int) -> None:
        if not (is_int(num_frames) and 1 <= num_frames <= MAX_FRAMES):
            raise ConfigError("env.frame_stack", num_frames, f"an int in [1, {MAX_FRAMES}] (frames per image stack)",
                              "pass env.frame_stack=3", absolute=True)
        keys = image_keys(env.observation_space)
        if not keys:
            spec = observation_spec(env.observation_space)
            listed = ", ".join(f"{key_name(k)} {list(shape)}" for k, (shape, _) in spec.items())
            raise ConfigError("env.frame_stack", num_frames, f"an env with image observations, uint8 [H, W, C] keys "
                              f"(this env has: {listed})", "pass env.frame_stack=1, or an env with pixels "
                              "(push_cube: env.obs_mode=rgb or state_rgb)", absolute=True)
        super().__init__(env)
        self.num_frames, self.image_keys = num_frames, keys
        self.observation_space = _stacked_space(env.observation_space, keys, num_frames)
        self._stacks: dict[ObsKey, Tensor] = {}

    def _leaf(self, obs: Tensor | TensorDict, key: ObsKey) -> Tensor:
        return obs if isinstance(obs, Tensor) else obs.get(key)

    def _with(self, obs: Tensor | TensorDict, stacks: dict[ObsKey, Tensor]) -> Tensor | TensorDict:
        """``obs`` with its image keys replaced by ``stacks``."""
        if isinstance(obs, Tensor):
            return stacks[(STATE_KEY,)]
        out = obs.copy()
        for key, stack in stacks.items():
            out.set(key, stack)
        return out

    def _fresh(self, frame: Tensor) -> Tensor:
        """A stack of ``frame`` ``[N, H, W, C]`` repeated: the start of an episode."""
        return frame.repeat(1, 1, 1, self.num_frames)

    def _push(self, stack: Tensor, frame: Tensor) -> Tensor:
        """``stack`` without its oldest frame, ``frame`` appended as the newest."""
        return torch.cat([stack[..., frame.shape[-1]:], frame], dim=-1)

    def _store(self, stacks: dict[ObsKey, Tensor]) -> None:
        """Keep ``stacks`` in the buffers allocated at the first reset, in place: a compiled or CUDA-graph-captured
        step reads and writes them at fixed addresses (see :mod:`embodirl.envs.base`)."""
        for key, stack in stacks.items():
            buffer = self._stacks.get(key)
            if buffer is None or buffer.shape != stack.shape:
                self._stacks[key] = buffer = stack.clone()
                mark_static(self.device, buffer)
            buffer.copy_(stack)

    def reset(self, seed: int | None = None, group_size: int = 1) -> Tensor | TensorDict:
        obs = self.env.reset(seed=seed, group_size=group_size)
        stacks = {key: self._fresh(self._leaf(obs, key)) for key in self.image_keys}
        self._store(stacks)
        return self._with(obs, stacks)

    def step(self, action: Tensor) -> StepResult:
        out = self.env.step(action)
        done = (out.terminated | out.truncated).view(-1, 1, 1, 1)
        stacks, finals = {}, {}
        for key in self.image_keys:
            frame, final = self._leaf(out.obs, key), self._leaf(out.final_obs, key)
            finals[key] = self._push(self._stacks[key], final)
            stacks[key] = torch.where(done, self._fresh(frame), self._push(self._stacks[key], frame))
        self._store(stacks)
        return out._replace(obs=self._with(out.obs, stacks), final_obs=self._with(out.final_obs, finals))

    def render(self, env_ids: list[int] | None = None, size: int = 256) -> np.ndarray:
        return self.env.render(env_ids, size)

    def state_dict(self) -> dict[str, Tensor]:
        """The wrapped env's state and the current stacks (``frame_stack.<key>``)."""
        return {**self.env.state_dict(), **{_PREFIX + key_name(k): s.clone() for k, s in self._stacks.items()}}

    def load_state_dict(self, state: dict[str, Tensor]) -> None:
        missing = [_PREFIX + key_name(k) for k in self.image_keys if _PREFIX + key_name(k) not in state]
        if missing:
            raise CheckpointError(f"FrameStack.load_state_dict: missing {missing}; the snapshot was taken without "
                                  "env.frame_stack: resume with the checkpoint's env.frame_stack")
        self.env.load_state_dict({name: value for name, value in state.items() if not name.startswith(_PREFIX)})
        self._store({key: state[_PREFIX + key_name(key)].to(self.device) for key in self.image_keys})

    def close(self) -> None:
        self.env.close()

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
        # Per image key the last k frames, frame-major [k, N, H, W, C], oldest first. Kept apart, not as the
        # observation's [N, H, W, k C]: there a frame is C bytes every k C, and shifting, restarting or
        # repeating frames in place of one another copies a few bytes at a time (several times slower).
        # Until the first reset they hold zeros: the wrapped env is ready to step once built, so is the stack.
        spec = observation_spec(env.observation_space)
        self._frames: dict[ObsKey, Tensor] = {}
        for key in keys:
            self._buffer(key, torch.zeros(env.num_envs, *spec[key][0], dtype=spec[key][1], device=env.device))
        self._rows = torch.arange(env.num_envs, device=env.device)

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

    @staticmethod
    def _stacked(frames: list[Tensor]) -> Tensor:
        """``[N, H, W, k C]`` of ``k`` frames ``[N, H, W, C]``, oldest first: one pass, a new tensor."""
        stack = torch.stack(frames, dim=-2)
        return stack.view(*stack.shape[:-2], -1)

    def _buffer(self, key: ObsKey, frame: Tensor) -> Tensor:
        """The frames of ``key``, allocated when the wrapper is built (again only if a reset brings frames of
        another shape) and then kept at one address: a compiled or CUDA-graph-captured step reads and writes them
        there (see :mod:`embodirl.envs.base`)."""
        buffer = self._frames.get(key)
        if buffer is None or buffer.shape[1:] != frame.shape:
            self._frames[key] = buffer = frame.new_zeros(self.num_frames, *frame.shape)
            mark_static(self.device, buffer)
        return buffer

    def reset(self, seed: int | None = None, group_size: int = 1) -> Tensor | TensorDict:
        obs = self.env.reset(seed=seed, group_size=group_size)
        stacks = {}
        for key in self.image_keys:
            frame = self._leaf(obs, key)
            buffer = self._buffer(key, frame)
            buffer.copy_(frame.expand_as(buffer))  # the first frame in every slot
            stacks[key] = self._stacked(list(buffer.unbind(0)))
        return self._with(obs, stacks)

    def step(self, action: Tensor) -> StepResult:
        out = self.env.step(action)
        done = out.terminated | out.truncated
        # Row i of cat([frames, frame]): the env's own row, or the new frame's where its episode ended. A row
        # gather copies whole frames, where torch.where would copy a few bytes at a time on a CPU.
        restart = self._rows + done.to(torch.int64) * self.num_envs
        stacks, finals = {}, {}
        for key in self.image_keys:
            frame, final = self._leaf(out.obs, key), self._leaf(out.final_obs, key)
            buffer = self._frames[key]
            finals[key] = self._stacked([*buffer[1:].unbind(0), final])
            newer = torch.cat([buffer[1:], frame.expand_as(buffer[1:])], dim=1)  # [k-1, 2N, ...]
            buffer[:-1].copy_(newer.index_select(1, restart))  # the oldest frame dropped
            buffer[-1].copy_(frame)
            stacks[key] = self._stacked(list(buffer.unbind(0)))
        return out._replace(obs=self._with(out.obs, stacks), final_obs=self._with(out.final_obs, finals))

    def render(self, env_ids: list[int] | None = None, size: int = 256) -> np.ndarray:
        return self.env.render(env_ids, size)

    def state_dict(self) -> dict[str, Tensor]:
        """The wrapped env's state and the current stacks (``frame_stack.<key>``, ``[N, H, W, k C]`` as observed)."""
        stacks = {_PREFIX + key_name(k): self._stacked(list(f.unbind(0))) for k, f in self._frames.items()}
        return {**self.env.state_dict(), **stacks}

    def load_state_dict(self, state: dict[str, Tensor]) -> None:
        missing = [_PREFIX + key_name(k) for k in self.image_keys if _PREFIX + key_name(k) not in state]
        if missing:
            raise CheckpointError(f"FrameStack.load_state_dict: missing {missing}; the snapshot was taken without "
                                  "env.frame_stack: resume with the checkpoint's env.frame_stack")
        self.env.load_state_dict({name: value for name, value in state.items() if not name.startswith(_PREFIX)})
        for key in self.image_keys:
            stack = state[_PREFIX + key_name(key)].to(self.device)  # [N, H, W, k C]
            frames = stack.view(*stack.shape[:-1], self.num_frames, -1).movedim(-2, 0)
            self._buffer(key, frames[0]).copy_(frames)

    def close(self) -> None:
        self.env.close()

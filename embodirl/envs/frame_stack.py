"""Observation history: ``env.frame_stack: k`` for image keys, ``env.obs_history`` for vector keys.

One observation shows where things are, not where they go; a policy seeing the last ``k`` can read velocities
(Mnih et al. 2015 stack 4 frames) and, on a robot, the lag and the strength of its actuators (the proprioceptive
history of legged and manipulation policies, Isaac Lab's and mjlab's ``history_length``). :class:`History` wraps
any batched env and keeps, for some keys, their last ``k`` values (``k`` per key), concatenated along the key's last
axis, oldest first: an image ``[H, W, C]`` becomes ``[H, W, k C]`` (channels ``(k-1) C ..`` are the newest frame),
a vector ``[D]`` becomes ``[k D]`` (``[(k-1) D, k D)`` is the newest). Other keys pass unchanged. Per env, a fresh
episode starts with its first observation repeated ``k`` times: after an auto-reset nothing of the finished episode
remains, and ``final_obs`` holds the finished episode's last ``k`` observations (for bootstrapping).

:class:`FrameStack` holds every image key's frames (one ``k`` for all); :class:`ObservationHistory` the vector
keys' (``uint8`` ``[H, W, C]`` images are the frame stack's).
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

__all__ = ["MAX_FRAMES", "FrameStack", "History", "ObservationHistory", "history_lengths", "image_keys",
           "vector_keys"]

MAX_FRAMES = 16  #: the most frames a stack holds (images have at most 4 channels per frame)


def image_keys(space: gym.Space) -> list[ObsKey]:
    """The keys of ``space`` holding camera images: ``uint8`` ``[H, W, C]`` leaves."""
    return [key for key, (shape, dtype) in observation_spec(space).items() if len(shape) == 3 and dtype == torch.uint8]


def vector_keys(space: gym.Space) -> list[ObsKey]:
    """The keys of ``space`` holding one vector per env: 1-D ``[D]`` leaves."""
    return [key for key, (shape, _) in observation_spec(space).items() if len(shape) == 1]


def _stacked_box(box: gym.spaces.Box, num_frames: int) -> gym.spaces.Box:
    return gym.spaces.Box(np.concatenate([box.low] * num_frames, axis=-1),
                          np.concatenate([box.high] * num_frames, axis=-1), dtype=box.dtype)


def _stacked_space(space: gym.Space, lengths: dict[ObsKey, int], prefix: ObsKey = ()) -> gym.Space:
    """``space`` with each leaf of ``lengths`` widened to its number of frames."""
    if isinstance(space, gym.spaces.Dict):
        return gym.spaces.Dict({name: _stacked_space(sub, lengths, (*prefix, name))
                                for name, sub in space.spaces.items()})
    assert isinstance(space, gym.spaces.Box)  # observation_spec accepted the space: its leaves are Boxes
    length = lengths.get(prefix or (STATE_KEY,))
    return _stacked_box(space, length) if length is not None else space


class History(EnvWrapper):
    """``env`` with the last ``lengths[key]`` observations of each key concatenated along its last axis, oldest
    first (module docstring). :class:`FrameStack` and :class:`ObservationHistory` choose and check the keys.

    Attributes the wrapper does not define (an env's ``seed``, a gymnasium ``id``) are the wrapped env's.

    Args:
        env: The env to wrap.
        lengths: ``{key: k}``, ``k >= 2`` observations kept per key (keys of ``observation_spec``).
    """

    prefix = "history"  # state_dict entries (``<prefix>.<key>``), next to the wrapped env's own

    def __init__(self, env: BatchedEnv, lengths: dict[ObsKey, int]) -> None:
        super().__init__(env)
        self.lengths = dict(lengths)
        self.observation_space = _stacked_space(env.observation_space, self.lengths)
        # Per key the last k frames (a frame: one step's observation of the key), frame-major [k, N, *shape].
        # Kept apart, not as the observation's [N, ..., k C]: there an image's frame is C bytes every k C, and
        # shifting, restarting or repeating frames in place of one another copies a few bytes at a time (several
        # times slower).
        # Until the first reset they hold zeros: the wrapped env is ready to step once built, so is the history.
        spec = observation_spec(env.observation_space)
        self._frames: dict[ObsKey, Tensor] = {}
        for key in self.lengths:
            self._buffer(key, torch.zeros(env.num_envs, *spec[key][0], dtype=spec[key][1], device=env.device))
        self._rows = torch.arange(env.num_envs, device=env.device)

    def _leaf(self, obs: Tensor | TensorDict, key: ObsKey) -> Tensor:
        return obs if isinstance(obs, Tensor) else obs.get(key)

    def _with(self, obs: Tensor | TensorDict, stacks: dict[ObsKey, Tensor]) -> Tensor | TensorDict:
        """``obs`` with the keys of ``stacks`` replaced by them."""
        if isinstance(obs, Tensor):
            return stacks[(STATE_KEY,)]
        out = obs.copy()
        for key, stack in stacks.items():
            out.set(key, stack)
        return out

    @staticmethod
    def _stacked(frames: list[Tensor]) -> Tensor:
        """``[N, ..., k C]`` of ``k`` frames ``[N, ..., C]`` (an image's ``[N, H, W, C]``, a vector's ``[N, D]``),
        oldest first: one pass, a new tensor."""
        stack = torch.stack(frames, dim=-2)
        return stack.view(*stack.shape[:-2], -1)

    def _buffer(self, key: ObsKey, frame: Tensor) -> Tensor:
        """The frames of ``key``, allocated when the wrapper is built (again only if a reset brings frames of
        another shape) and then kept at one address: a compiled or CUDA-graph-captured step reads and writes them
        there (see :mod:`embodirl.envs.base`)."""
        buffer = self._frames.get(key)
        if buffer is None or buffer.shape[1:] != frame.shape:
            self._frames[key] = buffer = frame.new_zeros(self.lengths[key], *frame.shape)
            mark_static(self.device, buffer)
        return buffer

    def reset(self, seed: int | None = None, group_size: int = 1) -> Tensor | TensorDict:
        obs = self.env.reset(seed=seed, group_size=group_size)
        stacks = {}
        for key in self.lengths:
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
        for key in self.lengths:
            frame, final = self._leaf(out.obs, key), self._leaf(out.final_obs, key)
            buffer = self._frames[key]
            finals[key] = self._stacked([*buffer[1:].unbind(0), final])
            newer = torch.cat([buffer[1:], frame.expand_as(buffer[1:])], dim=1)  # [k-1, 2N, ...]
            buffer[:-1].copy_(newer.index_select(1, restart))  # the oldest frame dropped
            buffer[-1].copy_(frame)
            stacks[key] = self._stacked(list(buffer.unbind(0)))
        return out._replace(obs=self._with(out.obs, stacks), final_obs=self._with(out.final_obs, finals))

    def restart(self, mask: Tensor) -> Tensor | TensorDict:
        """Restart the ``mask`` envs in the wrapped env and their histories with it: their first frame in every
        slot, as after a reset; the other envs' histories stay (every env's stacked observation is returned)."""
        obs = self.env.restart(mask)
        rows = self._rows + mask.to(torch.int64) * self.num_envs  # a row gather, as in step()
        stacks = {}
        for key in self.lengths:
            frame, buffer = self._leaf(obs, key), self._frames[key]
            buffer.copy_(torch.cat([buffer, frame.expand_as(buffer)], dim=1).index_select(1, rows))
            stacks[key] = self._stacked(list(buffer.unbind(0)))
        return self._with(obs, stacks)

    def render(self, env_ids: list[int] | None = None, size: int = 256) -> np.ndarray:
        return self.env.render(env_ids, size)

    def state_dict(self) -> dict[str, Tensor]:
        """The wrapped env's state and the current histories (``<prefix>.<key>``, ``[N, ..., k C]`` as observed)."""
        mine = f"{self.prefix}."
        stacks = {mine + key_name(k): self._stacked(list(f.unbind(0))) for k, f in self._frames.items()}
        return {**self.env.state_dict(), **stacks}

    def load_state_dict(self, state: dict[str, Tensor]) -> None:
        mine = f"{self.prefix}."
        missing = [mine + key_name(k) for k in self.lengths if mine + key_name(k) not in state]
        if missing:
            raise CheckpointError(f"{type(self).__name__}.load_state_dict: missing {missing}; the snapshot was taken "
                                  f"without env.{self.prefix}: resume with the checkpoint's env.{self.prefix}")
        self.env.load_state_dict({name: value for name, value in state.items() if not name.startswith(mine)})
        for key, length in self.lengths.items():
            stack = state[mine + key_name(key)].to(self.device)  # [N, ..., k C]
            frames = stack.view(*stack.shape[:-1], length, -1).movedim(-2, 0)
            self._buffer(key, frames[0]).copy_(frames)

    def close(self) -> None:
        self.env.close()


class FrameStack(History):
    """``env`` with every image key's last ``num_frames`` frames stacked along the channels (``env.frame_stack``).

    Args:
        env: The env to wrap; it must have at least one image key.
        num_frames: Frames per stack, in ``[1, MAX_FRAMES]``.

    Raises:
        ConfigError: (``env.frame_stack``) a bad ``num_frames``, or an env without image keys.
    """

    prefix = "frame_stack"

    def __init__(self, env: BatchedEnv, num_frames: int) -> None:
        if not (is_int(num_frames) and 1 <= num_frames <= MAX_FRAMES):
            raise ConfigError("env.frame_stack", num_frames, f"an int in [1, {MAX_FRAMES}] (frames per image stack)",
                              "pass env.frame_stack=3", absolute=True)
        keys = image_keys(env.observation_space)
        if not keys:
            raise ConfigError("env.frame_stack", num_frames, f"an env with image observations, uint8 [H, W, C] keys "
                              f"(this env has: {_listed(env)})", "pass env.frame_stack=1, or an env with pixels "
                              "(push_cube: env.obs_mode=rgb or state_rgb)", absolute=True)
        super().__init__(env, dict.fromkeys(keys, num_frames))
        self.num_frames, self.image_keys = num_frames, keys


class ObservationHistory(History):
    """``env`` with the last ``k`` observations of vector keys, ``[D]`` becoming ``[k D]`` (``env.obs_history``).

    Args:
        env: The env to wrap.
        lengths: ``k`` for every vector key, or ``{key name: k}`` (``agent.qpos`` for a nested key, ``state`` for a
            Box observation); ``k >= 1`` observations kept (1: the key as it is).

    Raises:
        ConfigError: (``obs_history``) an int for an env without vector keys; (``obs_history.<key>``) a key the
            env lacks, or one that is not a vector (an image).
    """

    prefix = "obs_history"

    def __init__(self, env: BatchedEnv, lengths: int | dict[str, int]) -> None:
        names = {key_name(k): k for k in vector_keys(env.observation_space)}
        if not isinstance(lengths, dict):
            if not names:
                raise ConfigError("obs_history", lengths, f"an env with vector (1-D) observations (this env has: "
                                  f"{_listed(env)})", "pass env.obs_history=1, and env.frame_stack="
                                  f"{lengths} for its images")
            lengths = dict.fromkeys(names, lengths)
        for name, length in lengths.items():
            if name not in names:
                _refuse(env, name, length, list(names))
        super().__init__(env, {names[name]: length for name, length in lengths.items() if length > 1})


def _listed(env: BatchedEnv) -> str:
    spec = observation_spec(env.observation_space)
    return ", ".join(f"{key_name(k)} {list(shape)}" for k, (shape, _) in spec.items())


def _refuse(env: BatchedEnv, name: str, length: int, vectors: list[str]) -> None:
    """The :class:`ConfigError` for ``env.obs_history.<name>``, a key that is no vector key of ``env``."""
    spec = {key_name(k): shape for k, (shape, _) in observation_spec(env.observation_space).items()}
    image = name in {key_name(k) for k in image_keys(env.observation_space)}
    if image:
        why = f"{name} is an image: env.frame_stack={length} stacks its frames"
    else:
        why = f"{name} {list(spec[name])} is not 1-D" if name in spec else f"this env has no key {name}"
    fix = f"pass env.obs_history={{{vectors[0]}: {length}}}" if vectors else "pass env.obs_history=1"
    fix += f" and env.frame_stack={length} for {name}" if image else ", or env.obs_history=1 for none"
    raise ConfigError(f"obs_history.{name}", length, f"a vector (1-D) observation key of this env ({why}; this env "
                      f"has: {_listed(env)})", fix)


def history_lengths(env: BatchedEnv) -> dict[ObsKey, int]:
    """``{key: k}`` of every key whose observation holds its last ``k`` values (``env.frame_stack``,
    ``env.obs_history``), read from the wrappers around ``env``: what a driver of an export must feed."""
    lengths: dict[ObsKey, int] = {}
    while isinstance(env, EnvWrapper):
        if isinstance(env, History):
            lengths.update(env.lengths)
        env = env.env
    return lengths

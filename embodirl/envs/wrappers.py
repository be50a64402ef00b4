"""Wrappers that make any batched env look more like a robot: observation noise, action delay, action noise and
action repeat (``env.obs_noise``, ``env.action_delay``, ``env.action_noise``, ``env.action_repeat``;
:class:`~embodirl.config.envs.WrapperConfig`).

Each wrapper is a :class:`~embodirl.envs.base.BatchedEnv` around another one and works with any env (the native
envs, the gymnasium and torch-vector adapters). Their steps are graph-ready like the native envs': state lives in
tensors allocated once and updated in place, nothing syncs with the host, and the noise is counter-based
(:func:`normal_from_key`: a pure function of ``(seed, env index, draw number)``, as the envs' resets in
:mod:`embodirl.envs.rng`), so a compiled step equals the eager one, a checkpoint holds the noise streams as two
counters, and an env's noise does not depend on how many envs run beside it.

:func:`embodirl.envs.wrapping.wrap_env` applies them (and :class:`~embodirl.envs.frame_stack.FrameStack`) as the
env's keys say.
"""

from __future__ import annotations

import math
import typing
from typing import Any

import gymnasium as gym
import torch
from tensordict import TensorDict
from torch import Tensor

from embodirl.envs.base import BatchedEnv, StepResult, mark_static
from embodirl.envs.observations import STATE_KEY, ObsKey, key_name, observation_spec
from embodirl.envs.rng import hash_key, uniform_from_key
from embodirl.errors import ConfigError

__all__ = ["ActionDelay", "ActionNoise", "ActionRepeat", "EnvWrapper", "ObservationNoise", "normal_from_key"]

# Added to the env's seed, so the noise streams differ from each other and from the env's reset stream.
_OBS_NOISE_SALT, _ACTION_NOISE_SALT = 0x0B5E_0B5E, 0xAC7_0AC7


def normal_from_key(key_hash: Tensor, counter: Tensor, num: int) -> Tensor:
    """Standard normal draws ``[N, num]`` float32 from :func:`~embodirl.envs.rng.uniform_from_key` (Box-Muller).

    Args:
        key_hash: ``[N]`` int64, :func:`~embodirl.envs.rng.hash_key` of the seed and each env's index.
        counter: ``[N]`` int64, the number of the draw (advance it after each).
        num: Values per env.
    """
    u = uniform_from_key(key_hash, counter, 2 * num)
    radius = torch.sqrt(-2.0 * torch.log1p(-u[:, :num]))  # 1 - u is in (0, 1]: a finite logarithm
    return (radius * torch.cos(2.0 * math.pi * u[:, num:])).to(torch.float32)


def _where(mask: Tensor, a: Tensor | TensorDict, b: Tensor | TensorDict) -> Any:
    """Per env: ``a`` where ``mask`` ``[N]``, else ``b`` (tensors or TensorDicts shaped alike)."""
    if isinstance(a, Tensor):
        return torch.where(mask.view(-1, *[1] * (a.dim() - 1)), a, b)
    return a.apply(lambda x, y: torch.where(mask.view(-1, *[1] * (x.dim() - 1)), x, y), typing.cast(TensorDict, b))


class EnvWrapper(BatchedEnv):
    """A batched env around another one (:attr:`env`), passing everything through unless a subclass changes it.

    Attributes the wrapper does not have are read from the wrapped env (``id``, ``seed``, ...); the solved criterion
    is the wrapped env's. :meth:`state_dict` adds the wrapper's own tensors (``_state()``) under ``prefix``.
    """

    prefix = "wrapper"

    def __init__(self, env: BatchedEnv) -> None:
        self.env = env
        self.num_envs, self.device = env.num_envs, env.device
        self.observation_space, self.action_space = env.observation_space, env.action_space
        self.max_episode_steps = env.max_episode_steps
        self.info_metrics = tuple(getattr(env, "info_metrics", ()))
        self.reward_terms = tuple(getattr(env, "reward_terms", ()))
        self.randomization = env.randomization  # the same draws: BatchedEnv's class default would hide them

    def __getattr__(self, name: str) -> Any:
        if name == "env":  # not set yet (unpickling): no recursion
            raise AttributeError(name)
        return getattr(self.env, name)

    @property
    def unwrapped(self) -> BatchedEnv:
        return self.env.unwrapped

    def set_randomize_range(self, name: str, low: float, high: float) -> None:
        self.env.set_randomize_range(name, low, high)

    @property
    def solved_metric(self) -> str:
        return self.env.solved_metric

    @solved_metric.setter
    def solved_metric(self, value: str) -> None:
        self.env.solved_metric = value

    @property
    def solved_threshold(self) -> float | None:
        return self.env.solved_threshold

    @solved_threshold.setter
    def solved_threshold(self, value: float | None) -> None:
        self.env.solved_threshold = value

    def reset(self, seed: int | None = None, group_size: int = 1) -> Tensor | TensorDict:
        return self.env.reset(seed=seed, group_size=group_size)

    def step(self, action: Tensor) -> StepResult:
        return self.env.step(action)

    def restart(self, mask: Tensor) -> Tensor | TensorDict:
        """The wrapped env's :meth:`~embodirl.envs.base.BatchedEnv.restart`; a wrapper that keeps something per
        episode (an action history, observation frames) or changes observations overrides it to do so too."""
        return self.env.restart(mask)

    def render(self, env_ids: list[int] | None = None, size: int = 256) -> Any:
        return self.env.render(env_ids, size)

    def _state(self) -> dict[str, Tensor]:
        return {}

    def state_dict(self) -> dict[str, Tensor]:
        own = {f"{self.prefix}.{k}": v.clone() for k, v in self._state().items()}
        return {**self.env.state_dict(), **own}

    def load_state_dict(self, state: dict[str, Tensor]) -> None:
        mine = f"{self.prefix}."
        for name, value in self._state().items():
            value.copy_(state[mine + name])
        self.env.load_state_dict({k: v for k, v in state.items() if not k.startswith(mine)})

    def close(self) -> None:
        self.env.close()


class _NoiseStream:
    """Counter-based Gaussian draws for ``num_envs`` envs: one key per env, one counter per env."""

    def __init__(self, num_envs: int, device: torch.device, seed: int, salt: int) -> None:
        self.salt = salt
        self.env_ids = torch.arange(num_envs, device=device)
        self.key_hash = hash_key(seed + salt, self.env_ids)
        self.counter = torch.zeros(num_envs, dtype=torch.int64, device=device)
        mark_static(device, self.key_hash, self.counter)

    def draw(self, num: int) -> Tensor:
        """``[N, num]`` standard normals; advances every env's counter (in place: graph-ready)."""
        z = normal_from_key(self.key_hash, self.counter, num)
        self.counter += 1
        return z

    def reseed(self, seed: int) -> None:
        self.key_hash.copy_(hash_key(seed + self.salt, self.env_ids))
        self.counter.zero_()


class ObservationNoise(EnvWrapper):
    """Adds zero-mean Gaussian noise to float observation keys: a sensor's measurement noise.

    Noise is drawn for every observation returned (``obs`` and, independently, ``final_obs`` where an episode
    ended; ``reset``'s too). ``reset(seed=...)`` restarts the noise stream from that seed, so evaluations with
    one seed see the same noise.

    Args:
        env: The wrapped env.
        std: ``{observation key: std}`` (a number, or a list with one per dimension of the key's flattened
            shape); a Box observation's key is ``state``.
        seed: Seed of the noise stream.
    """

    prefix = "obs_noise"

    def __init__(self, env: BatchedEnv, std: dict[str, float | list[float]], seed: int) -> None:
        super().__init__(env)
        spec = observation_spec(env.observation_space)
        self.std: dict[ObsKey, Tensor] = {}
        for name, value in std.items():
            obs_key = _obs_key(name, value, spec)
            shape, _ = spec[obs_key]
            self.std[obs_key] = _std_tensor(f"obs_noise.{name}", value, shape, env.device)
        self.width = sum(s.numel() for s in self.std.values())
        self.noise = _NoiseStream(env.num_envs, env.device, seed, _OBS_NOISE_SALT)

    def _noisy(self, obs: Tensor | TensorDict) -> Tensor | TensorDict:
        z, start = self.noise.draw(self.width), 0
        if isinstance(obs, Tensor):
            std = self.std[(STATE_KEY,)]
            return obs + (z * std.reshape(-1)).view_as(obs)
        out = TensorDict({}, batch_size=obs.batch_size, device=obs.device)  # new leaves; the env's stay as they are
        for name, leaf in obs.items(include_nested=True, leaves_only=True):
            out.set(name, leaf)
        for obs_key, std in self.std.items():
            leaf = obs.get(obs_key)
            stop = start + std.numel()
            out.set(obs_key, leaf + (z[:, start:stop] * std.reshape(-1)).view_as(leaf))
            start = stop
        return out

    def reset(self, seed: int | None = None, group_size: int = 1) -> Tensor | TensorDict:
        if seed is not None:
            self.noise.reseed(seed)
        return self._noisy(self.env.reset(seed=seed, group_size=group_size))

    def step(self, action: Tensor) -> StepResult:
        out = self.env.step(action)
        done = out.terminated | out.truncated
        obs = self._noisy(out.obs)
        final_obs = _where(done, self._noisy(out.final_obs), obs)  # equal to obs where no episode ended
        return out._replace(obs=obs, final_obs=final_obs)

    def restart(self, mask: Tensor) -> Tensor | TensorDict:
        """Every env's observation with fresh noise: the restarted envs' first, the others' current one measured
        again (the collector acts on what this returns, so no env sees an observation without noise)."""
        return self._noisy(self.env.restart(mask))

    def _state(self) -> dict[str, Tensor]:
        return {"counter": self.noise.counter, "key_hash": self.noise.key_hash}


class ActionDelay(EnvWrapper):
    """The env executes the action the policy chose ``steps`` policy steps ago: a robot's control latency.

    A ring of the last ``steps`` actions per env, shifted in place. When an episode starts (an explicit reset, or an
    auto-reset at the end of the previous one) the env's history is filled with the new episode's first action, so
    an episode never executes actions chosen in the one before; its first ``steps + 1`` steps execute its first
    action.

    Args:
        env: The wrapped env.
        steps: The delay ``k >= 1`` in policy steps.
    """

    prefix = "action_delay"

    def __init__(self, env: BatchedEnv, steps: int) -> None:
        super().__init__(env)
        n, dev = env.num_envs, env.device
        if isinstance(env.action_space, gym.spaces.Discrete):
            self.history = torch.zeros(steps, n, dtype=torch.int64, device=dev)
        else:
            shape = tuple(typing.cast(gym.spaces.Box, env.action_space).shape)
            self.history = torch.zeros(steps, n, *shape, dtype=torch.float32, device=dev)
        self.fresh = torch.ones(n, dtype=torch.bool, device=dev)  # the env's next action starts an episode
        mark_static(dev, self.history, self.fresh)

    def reset(self, seed: int | None = None, group_size: int = 1) -> Tensor | TensorDict:
        self.fresh.fill_(True)
        return self.env.reset(seed=seed, group_size=group_size)

    def step(self, action: Tensor) -> StepResult:
        action = action.reshape(self.history.shape[1:]).to(self.history.dtype)
        fresh = self.fresh.view(1, -1, *[1] * (action.dim() - 1))
        self.history.copy_(torch.where(fresh, action.unsqueeze(0), self.history))
        executed = self.history[0].clone()
        self.history[:-1] = self.history[1:].clone()
        self.history[-1] = action
        out = self.env.step(executed)
        torch.logical_or(out.terminated, out.truncated, out=self.fresh)
        return out

    def restart(self, mask: Tensor) -> Tensor | TensorDict:
        """The ``mask`` envs start an episode: their next action fills their history, as after a reset."""
        torch.logical_or(self.fresh, mask, out=self.fresh)
        return self.env.restart(mask)

    def _state(self) -> dict[str, Tensor]:
        return {"history": self.history, "fresh": self.fresh}


class ActionNoise(EnvWrapper):
    """Adds zero-mean Gaussian noise to Box actions before the env (which clips them): actuator noise.

    Args:
        env: The wrapped env (Box actions).
        std: One std, or one per action dimension.
        seed: Seed of the noise stream.
    """

    prefix = "action_noise"

    def __init__(self, env: BatchedEnv, std: float | list[float], seed: int) -> None:
        super().__init__(env)
        if not isinstance(env.action_space, gym.spaces.Box):
            raise ConfigError("action_noise", std, f"0 for an env with {env.action_space} actions (noise is added to "
                              "Box actions only)", "pass env.action_noise=0")
        self.shape = tuple(env.action_space.shape)
        self.std = _std_tensor("action_noise", std, self.shape, env.device)
        self.noise = _NoiseStream(env.num_envs, env.device, seed, _ACTION_NOISE_SALT)

    def reset(self, seed: int | None = None, group_size: int = 1) -> Tensor | TensorDict:
        if seed is not None:
            self.noise.reseed(seed)
        return self.env.reset(seed=seed, group_size=group_size)

    def step(self, action: Tensor) -> StepResult:
        z = self.noise.draw(self.std.numel()).view(self.num_envs, *self.shape)
        return self.env.step(action + z * self.std)

    def _state(self) -> dict[str, Tensor]:
        return {"counter": self.noise.counter, "key_hash": self.noise.key_hash}


class ActionRepeat(EnvWrapper):
    """Steps the env ``repeat`` times per policy step with the same action: a policy slower than its controller.

    The reward is the sum over the env steps, and so is every reward term (``info["reward/<term>"]``). An env whose
    episode ends at env step ``j`` reports that step's ``terminated``, ``truncated``, ``final_obs`` and info, and
    the rewards up to it. A batched env cannot pause one copy, so that env has already begun its next episode with
    the remaining ``repeat - 1 - j`` steps of the same action, and ``obs`` is where they left it (an episode that
    also ends inside those steps goes unreported). The time limit is ``ceil(max_episode_steps / repeat)`` policy
    steps.

    Args:
        env: The wrapped env.
        repeat: Env steps per policy step, ``>= 2``.
    """

    def __init__(self, env: BatchedEnv, repeat: int) -> None:
        super().__init__(env)
        self.repeat = repeat
        self.max_episode_steps = math.ceil(env.max_episode_steps / repeat)
        self.summed = {f"reward/{term}" for term in self.reward_terms}

    def step(self, action: Tensor) -> StepResult:
        out = self.env.step(action)
        ended = out.terminated | out.truncated
        reward, info = out.reward, dict(out.info)
        terminated, truncated, final_obs = out.terminated, out.truncated, out.final_obs
        for _ in range(self.repeat - 1):
            out = self.env.step(action)
            running = ~ended  # envs whose episode has not ended within this policy step: this step counts
            reward = reward + torch.where(running, out.reward, 0.0)
            terminated = torch.where(running, out.terminated, terminated)
            truncated = torch.where(running, out.truncated, truncated)
            final_obs = _where(running, out.final_obs, final_obs)
            for name, value in out.info.items():
                if name in self.summed:
                    info[name] = info[name] + torch.where(running, value, 0.0)
                else:
                    info[name] = _where(running, value, info[name])
            ended = ended | out.terminated | out.truncated
        return StepResult(out.obs, reward, terminated, truncated, final_obs, info)


def _obs_key(name: str, std: Any, spec: dict[ObsKey, Any]) -> ObsKey:
    """The observation key named ``name`` (``agent.qpos`` for a nested one), or a :class:`ConfigError`."""
    names = {key_name(k): k for k in spec}
    floats = [n for n, k in names.items() if spec[k][1].is_floating_point]
    if name not in names or name not in floats:
        what = "an image or integer key: noise is added to float keys only" if name in names else "no such key"
        raise ConfigError(f"obs_noise.{name}", std, f"a float observation key of this env ({what}; one of: "
                          f"{', '.join(floats) or 'none'})", f"pass env.obs_noise={{{floats[0] if floats else 'state'}:"
                          "0.01}, or env.obs_noise=0 for none")
    return names[name]


def _std_tensor(key: str, std: float | list[float], shape: tuple[int, ...], device: torch.device) -> Tensor:
    """``std`` (one number, or one per element of ``shape``) as a float32 tensor of ``shape``."""
    size = math.prod(shape)
    if isinstance(std, list):
        if len(std) != size:
            raise ConfigError(key, std, f"one number, or a list of {size} (one per dimension of shape {list(shape)})",
                              f"pass env.{key}={std[0] if std else 0.01}")
        return torch.tensor(std, dtype=torch.float32, device=device).reshape(shape)
    return torch.full(shape, float(std), dtype=torch.float32, device=device)

"""Adapter for MuJoCo Playground's tasks on MJX: ``env=playground env.id=CartpoleBalance``.

MuJoCo Playground (``pip install "embodirl[playground]"``) writes each task as a pure jax function pair
``reset(key) -> State`` and ``step(State, action) -> State`` for one env. This adapter batches them with
``jax.vmap`` and compiles one step of the whole batch with ``jax.jit``: the task's step, the time limit, and the
reset of every finished env all run inside jax, so nothing but the action goes in and nothing but the results
come out. The results cross to torch without a copy (``torch.from_dlpack``), on the device jax computed them on.

How a Playground ``State`` maps onto the contract of :class:`~embodirl.envs.base.BatchedEnv`:

=========================================  ==================================================================
MuJoCo Playground                          embodirl
=========================================  ==================================================================
``State.obs`` ``[obs_size]`` array         ``StepResult.obs`` ``[N, obs_size]`` float32 (a dict of arrays,
                                           e.g. ``state``/``privileged_state``, becomes a TensorDict)
``State.obs`` of the step that ended       ``StepResult.final_obs`` (elsewhere ``obs``)
``State.done`` (1.0: the task ended)       ``terminated``
``config.episode_length``                  ``max_episode_steps``; reaching it is ``truncated`` (never both)
``State.reward``                           ``reward`` float32
``action_size``, actions in ``[-1, 1]``    ``action_space`` ``Box(-1, 1)``; actions are clipped to it
=========================================  ==================================================================

Finished envs restart from ``reset`` with a fresh random key each (brax's training wrapper instead restarts
every env from its own first state). Jax allocates most GPU memory up front by default, which would starve
torch beside it, so ``XLA_PYTHON_CLIENT_PREALLOCATE=false`` is set before jax is first imported (a value the
user exported wins). Compiling the step takes minutes on a CPU; the persistent compilation cache
(``env.jax_cache_dir``) keeps the compiled step for the next run with the same task, batch size and jax.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import typing
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from tensordict import TensorDict
from torch import Tensor

from embodirl.config.envs import PlaygroundConfig
from embodirl.envs.base import BatchedEnv, StepResult
from embodirl.errors import ConfigError, check, is_int

__all__ = ["PlaygroundEnv", "default_cache_dir"]

log = logging.getLogger(__name__)

_INSTALL = 'pip install "embodirl[playground]"'


def default_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/embodirl/jax``, or ``~/.cache/embodirl/jax`` when XDG_CACHE_HOME is unset."""
    root = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(root) / "embodirl" / "jax"


def _import_jax(cfg: PlaygroundConfig) -> Any:
    """Import jax with GPU preallocation off, and point its persistent compilation cache at the configured folder."""
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    try:
        import jax
    except ImportError:
        raise ConfigError("env", "playground", f"an installed jax; it is missing ({_INSTALL})", _INSTALL,
                          absolute=True) from None
    if cfg.jax_cache:
        folder = Path(cfg.jax_cache_dir).expanduser() if cfg.jax_cache_dir else default_cache_dir()
        folder.mkdir(parents=True, exist_ok=True)
        jax.config.update("jax_compilation_cache_dir", str(folder))
        # Cache every compilation: the step and the reset are the slow ones, and both are wanted next run.
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
        jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    return jax


def _load_task(cfg: PlaygroundConfig) -> tuple[Any, Any, Any, Any]:
    """The Playground task ``cfg.id`` with ``cfg.impl`` and ``cfg.config_overrides`` (refused in one line if
    unknown), its config, and its jitted batched reset and step (:func:`_compiled`)."""
    try:
        from mujoco_playground import registry
    except ImportError as exc:
        raise ConfigError("env", "playground", f"an installed MuJoCo Playground; importing it failed ({exc})",
                          _INSTALL, absolute=True) from None
    names = sorted(registry.ALL_ENVS)
    check(cfg.id in names, "id", cfg.id, f"a MuJoCo Playground task ({', '.join(names[:8])}, ... {len(names)} "
          "in all: mujoco_playground.registry.ALL_ENVS)", "pass env.id=CartpoleBalance")
    config = registry.get_default_config(cfg.id)
    for name, value in cfg.config_overrides.items():
        check(name.split(".")[0] in config, f"config_overrides.{name}", value,
              f"a key of {cfg.id}'s config ({', '.join(sorted(config.keys()))})", "remove it or correct its spelling")
    check("impl" not in cfg.config_overrides, "config_overrides.impl", cfg.config_overrides.get("impl"),
          "absent: env.impl sets it", "remove env.config_overrides.impl and set env.impl")
    return _compiled(cfg.id, cfg.impl, json.dumps(cfg.config_overrides, sort_keys=True),
                     cfg.max_episode_steps or int(config.episode_length))


@functools.lru_cache(maxsize=8)
def _compiled(name: str, impl: str, overrides: str, limit: int) -> tuple[Any, Any, Any, Any]:
    """The task, its config, and its jitted batched ``reset(keys)`` and ``step(state, elapsed, key, action)`` with
    auto-reset. Kept per task and limit, so an eval env of the training env's size reuses the compiled step."""
    import jax
    import jax.numpy as jnp
    from mujoco_playground import registry

    config = registry.get_default_config(name)
    chosen = {"impl": impl} if "impl" in config else {}  # tasks written before MJX had implementations lack the key
    task = registry.load(name, config=config, config_overrides={**json.loads(overrides), **chosen})

    v_reset, v_step = jax.vmap(task.reset), jax.vmap(task.step)

    def reset(keys: Any) -> tuple[Any, Any]:
        return v_reset(keys), jnp.zeros(keys.shape[0], jnp.int32)

    def where(mask: Any, a: Any, b: Any) -> Any:
        return jnp.where(mask.reshape(mask.shape + (1,) * (b.ndim - 1)), a, b)

    def step(state: Any, elapsed: Any, key: Any, action: Any) -> tuple[Any, ...]:
        after = v_step(state, action)
        elapsed = elapsed + 1
        terminated = after.done > 0.5
        truncated = (elapsed >= limit) & ~terminated
        done = terminated | truncated
        key, sub = jax.random.split(key)

        def restart(finished: Any) -> Any:  # a fresh start where done, the stepped state elsewhere
            fresh = v_reset(jax.random.split(sub, done.shape[0]))
            return jax.tree.map(lambda a, b: where(done, a, b), fresh, finished)

        # Reset only when some env finished: most steps skip the reset's cost.
        nxt = jax.lax.cond(done.any(), restart, lambda finished: finished, after)
        elapsed = jnp.where(done, 0, elapsed)
        # The next observation is the carried state's own (nxt.obs): returned once, shared with torch from there.
        return (nxt, elapsed, key), (after.reward.astype(jnp.float32), terminated, truncated, after.obs)

    return task, config, jax.jit(reset), jax.jit(step)


class PlaygroundEnv(BatchedEnv):
    """A MuJoCo Playground task, ``num_envs`` copies batched in jax, behind the batched-env contract.

    The keys (:class:`~embodirl.config.envs.PlaygroundConfig`): ``id`` names the task, ``impl`` MJX's
    implementation (``jax`` on CPUs), ``max_episode_steps`` overrides the task's ``episode_length``,
    ``config_overrides`` replace entries of the task's default config, and ``jax_cache``/``jax_cache_dir`` keep
    compiled steps across runs. ``reset(seed=s, group_size=g)`` gives the envs of one group one jax key, so they
    start from one state (GRPO's group-shared resets).

    Args:
        cfg: The env's keys.
        device: Device of the tensors; jax's default device must be the same one (``cpu`` with ``jax[cpu]``).
        seed: Seed of the first reset.
    """

    def __init__(self, cfg: PlaygroundConfig, *, device: str | torch.device = "cpu", seed: int = 0) -> None:
        self.num_envs, self.device = cfg.num_envs, torch.device(device)
        self._jax = _import_jax(cfg)
        self._task, task_config, self._reset_fn, self._step_fn = _load_task(cfg)
        self.max_episode_steps = int(cfg.max_episode_steps or task_config.episode_length)
        self.action_space = gym.spaces.Box(-1.0, 1.0, (int(self._task.action_size),), np.float32)
        self.seed, self._num_resets = seed, 0
        log.info("compiling %s's batched reset and step for %d envs (minutes on a CPU the first time; cached in %s)",
                 cfg.id, self.num_envs, (cfg.jax_cache_dir or default_cache_dir()) if cfg.jax_cache else "no cache")
        first = self.reset(seed)
        self.observation_space = _space(first)

    def reset(self, seed: int | None = None, group_size: int = 1) -> Tensor | TensorDict:
        """Reset every env (see :meth:`BatchedEnv.reset`); the envs of one group share a jax key, so one start.

        Returns:
            The first observations ``[N, obs_size]`` (a TensorDict for a task with dict observations).
        """
        jax = self._jax
        check(seed is None or is_int(seed), "seed", seed, "an int or None")
        check(is_int(group_size) and group_size >= 1 and self.num_envs % group_size == 0, "group_size", group_size,
              f"an int >= 1 that divides num_envs={self.num_envs}", "pick a divisor of num_envs, e.g. group_size=1")
        if seed is not None:
            self.seed, self._num_resets = seed, 0
        self._num_resets += 1
        base = jax.random.fold_in(jax.random.PRNGKey(self.seed % 2**32), self._num_resets)
        starts, auto = jax.random.split(base)
        keys = jax.random.split(starts, self.num_envs // group_size)
        if group_size > 1:
            keys = keys.repeat(group_size, axis=0)
        state, elapsed = self._reset_fn(keys)
        self._carry = (state, elapsed, auto)  # auto: the key stream of later restarts, distinct per reset
        return self._to_torch(state.obs)

    def step(self, action: Tensor) -> StepResult:
        """Step every env once inside jax (finished envs restart there); the results are shared, not copied.

        Args:
            action: ``[N, action_size]`` floats, clipped to ``[-1, 1]``.
        """
        action = torch.clamp(action, -1.0, 1.0).to(torch.float32).contiguous()
        self._carry, (reward, terminated, truncated, final_obs) = self._step_fn(*self._carry, self._from_torch(action))
        return StepResult(self._to_torch(self._carry[0].obs), self._to_torch(reward), self._to_torch(terminated),
                          self._to_torch(truncated), self._to_torch(final_obs), {})

    def _from_torch(self, tensor: Tensor) -> Any:
        return self._jax.dlpack.from_dlpack(tensor)

    def _to_torch(self, value: Any) -> Tensor | TensorDict:
        """A jax array (or dict of them) as torch tensors sharing its memory, checked to be on ``self.device``."""
        if isinstance(value, typing.Mapping):
            return TensorDict({k: self._to_torch(v) for k, v in value.items()}, batch_size=[self.num_envs],
                              device=self.device)
        tensor = torch.from_dlpack(value)
        if tensor.device != self.device:
            raise ConfigError("device", str(self.device), f"the device jax computes on ({tensor.device})",
                              f"pass device={tensor.device}, or install jax for {self.device.type} "
                              "(jax[cuda12] for CUDA)", absolute=True)
        return tensor


def _space(obs: Tensor | TensorDict) -> gym.Space:
    """The single-env observation space of a first observation: a Box, or a Dict of Boxes per key."""
    if isinstance(obs, Tensor):
        return gym.spaces.Box(-np.inf, np.inf, tuple(obs.shape[1:]), np.float32)
    return gym.spaces.Dict({k: _space(typing.cast(Tensor, v)) for k, v in obs.items()})

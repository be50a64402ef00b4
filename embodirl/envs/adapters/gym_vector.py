"""Adapter for any gymnasium vector env, numpy or torch, in either of gymnasium's autoreset modes.

``env=gym_vector`` builds the vector env from a gymnasium ``id`` (``gymnasium.make_vec``, sync or async) or from
your own constructor (``make``, called with ``num_envs``), wraps it in the vector ``wrappers`` listed (e.g.
``gymnasium.wrappers.vector.NumpyToTorch``), and reads ``env.metadata["autoreset_mode"]`` to map it onto the
batched-env contract (:class:`~embodirl.envs.base.BatchedEnv`), in which a step that ends an episode returns the
next episode's first observation and the finished one's last observation apart (``StepResult.final_obs``):

===============  ==============================================================================================
gymnasium mode   how a finished episode reaches the contract
===============  ==============================================================================================
``SameStep``     the step resets the finished env itself: ``obs`` is the next episode's first observation and
                 ``info["final_obs"]`` the true last one (bootstraps a truncation).
``NextStep``     the step returns the true last observation, and gymnasium would spend the env's next step on
                 the reset (zero reward, the action ignored). The adapter resets the finished envs at once with
                 ``reset(options={"reset_mask": done})``, so that reset step never happens and never becomes a
                 transition of the ``[N, T+1]`` rollout.
``Disabled``     as ``NextStep``: the finished envs are reset with ``reset_mask`` right after the step.
===============  ==============================================================================================

A vector env that states no mode is refused. gymnasium's ``NumpyToTorch`` cannot convert ``SameStep``'s
``info["final_obs"]`` (an object array, one observation per env) and raises inside ``step``; the adapter converts
numpy itself, so it steps the env under an outermost array-conversion wrapper directly and refuses one further down.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, Literal

import gymnasium as gym
import torch
from gymnasium.vector import AutoresetMode
from gymnasium.wrappers.vector import ArrayConversion
from hydra.utils import instantiate
from torch import Tensor

from embodirl.config.envs import GymVectorConfig
from embodirl.envs.adapters.gym import GymEnv, make_vec, to_numpy, wrapped_chain
from embodirl.envs.adapters.gym_checks import APICheck
from embodirl.envs.adapters.torch_vector import build_simulator
from embodirl.envs.base import StepResult
from embodirl.errors import ConfigError, check

__all__ = ["GymVectorEnv", "autoreset_mode"]

log = logging.getLogger(__name__)

_MODES = ", ".join(mode.value for mode in AutoresetMode)


def autoreset_mode(vec: Any, key: str, name: str) -> AutoresetMode:
    """The autoreset mode ``vec.metadata["autoreset_mode"]`` states, or a :class:`ConfigError` on ``key``."""
    metadata = getattr(vec, "metadata", None)
    stated = metadata.get("autoreset_mode") if isinstance(metadata, Mapping) else None
    try:
        return AutoresetMode(stated)
    except ValueError:
        raise ConfigError(key, name, f"a gymnasium vector env whose metadata['autoreset_mode'] is one of {_MODES}; "
                          f"it states {stated!r}", "set metadata['autoreset_mode'] in your vector env (gymnasium's "
                          "SyncVectorEnv and AsyncVectorEnv set it), or build it with env.id") from None


class GymVectorEnv(GymEnv):
    """A gymnasium vector env (numpy or torch, ``SameStep``, ``NextStep`` or ``Disabled`` autoreset) behind the
    batched-env contract.

    Args:
        cfg: The env's keys (:class:`~embodirl.config.envs.GymVectorConfig`): a gymnasium ``id`` (with
            ``vectorization_mode``, ``autoreset_mode`` and ``env_kwargs`` for ``gymnasium.make_vec``) or ``make``,
            your vector env's constructor; ``wrappers`` applied in order; the time limit (None: the spec's).
        device: Device of the tensors going out (and of the actions going into a torch env).
        seed: Seed of the first reset.
        render_mode: ``"rgb_array"``: the sub-envs draw (an env built from ``id`` only).
    """

    _env_device: torch.device | None  # where a torch env wants its actions (None: a numpy env)

    def __init__(self, cfg: GymVectorConfig, *, device: str | torch.device = "cpu", seed: int = 0,
                 render_mode: Literal["rgb_array"] | None = None) -> None:
        super().__init__(cfg, device=device, seed=seed, render_mode=render_mode)

    def _build(self, cfg: Any, render_mode: str | None) -> tuple[Any, Any]:
        """Make the vector env, wrap it, read its autoreset mode and decide how to step it."""
        self._torch_io, self._env_device = False, None  # set by the first observation (_to_tensor)
        spec: Any
        if (cfg.id is None) == (cfg.make is None):
            raise ConfigError("id", cfg.id, "a gymnasium id, or null with make set (exactly one of the two)",
                              "pass env.id=CartPole-v1, or env.make=<your vector env's constructor> without env.id")
        if cfg.make is None:
            vec, spec = make_vec(cfg, render_mode, autoreset_mode=AutoresetMode(cfg.autoreset_mode))
            key, name = "id", cfg.id
        else:
            vec = build_simulator(cfg.make, cfg.num_envs)
            key, name = self._source(cfg)
            spec = getattr(vec, "spec", None)
            _check_sub_envs(vec)
        try:
            vec = self._wrap(vec, cfg.wrappers)
            self._mode = autoreset_mode(vec, key, name)
            vec = self._unconvert(vec, key, name)
            size = getattr(vec, "num_envs", None)
            check(size == cfg.num_envs, key, name, f"a vector env of num_envs={cfg.num_envs} envs (it has {size})",
                  "check how make passes num_envs on")
        except ConfigError:
            vec.close()
            raise
        return vec, spec

    @staticmethod
    def _source(cfg: Any) -> tuple[str, str]:
        if cfg.make is None:
            return "id", cfg.id
        target = cfg.make if isinstance(cfg.make, str) else cfg.make.get("_target_")
        return "make", str(target)

    @staticmethod
    def _wrap(vec: Any, wrappers: list[Any]) -> Any:
        for wrapper in wrappers:  # _target_ nodes (GymVectorConfig.check)
            vec = instantiate(dict(wrapper), vec, _convert_="all")
        return vec

    def _unconvert(self, vec: Any, key: str, name: str) -> Any:
        """In ``SameStep`` mode, the env under an outermost array-conversion wrapper (which fails on the object array
        of final observations); the adapter converts to tensors itself."""
        if self._mode is not AutoresetMode.SAME_STEP:
            return vec
        chain = wrapped_chain(vec)
        converters = [i for i, env in enumerate(chain) if isinstance(env, ArrayConversion)]
        if not converters:
            return vec
        if converters != [0]:
            raise ConfigError(key, name, f"a SameStep vector env without {type(chain[converters[-1]]).__name__} under "
                              "other wrappers (gymnasium's array conversion fails on info['final_obs'])",
                              "make the array conversion the last wrapper, drop it (the adapter converts numpy "
                              "itself), or use autoreset_mode NextStep")
        log.info("stepping the env under %s directly in SameStep mode: the adapter converts to tensors itself",
                 type(vec).__name__)
        return vec.env

    def step(self, action: Tensor) -> StepResult:
        """Step every sub-env once; in ``NextStep``/``Disabled`` mode reset the finished ones right away.

        Args:
            action: Discrete: ``[N]`` (or ``[N, 1]``) integer indices. Box: ``[N, *act_shape]`` floats, clipped to
                the space's bounds.

        Returns:
            :class:`StepResult` (``obs`` the next episode's first observation where one ended, ``final_obs`` the
            true last one); ``info["success"]`` ``[N]`` bool when the env reports ``is_success`` or ``success``.
        """
        if self._mode is AutoresetMode.SAME_STEP:
            return super().step(action)
        obs, reward, terminated, truncated, info = self._step_vec(self._to_env_action(action))
        terminated_np, truncated_np = to_numpy(terminated), to_numpy(truncated)
        done = terminated_np | truncated_np
        final_obs = next_obs = self._to_tensor(obs)
        if done.any():  # the reset gymnasium would spend the envs' next step on, done now
            reset_obs, _ = self._reset_vec(options={"reset_mask": done})
            next_obs = self._to_tensor(reset_obs)
        return StepResult(next_obs, torch.as_tensor(to_numpy(reward), dtype=torch.float32).to(self.device),
                          torch.as_tensor(terminated_np, dtype=torch.bool).to(self.device),
                          torch.as_tensor(truncated_np & ~terminated_np, dtype=torch.bool).to(self.device),
                          final_obs, self._extras(info))

    def _to_env_action(self, action: Tensor) -> Any:
        """The action as the env takes it: numpy for a numpy env, a tensor for a torch one (on its device)."""
        array = self._to_numpy(action)
        return torch.as_tensor(array, device=self._env_device) if self._torch_io else array

    def _to_tensor(self, obs: Any) -> Any:
        """As :meth:`GymEnv._to_tensor`; the first observation also tells a torch env from a numpy one."""
        leaf = obs if not isinstance(obs, Mapping) else next(iter(_leaves(obs)), None)
        if isinstance(leaf, Tensor) and not self._torch_io:
            self._torch_io, self._env_device = True, leaf.device
        return super()._to_tensor(obs)


def _check_sub_envs(vec: Any) -> None:
    """Wrap each sub-env of a ``SyncVectorEnv`` (the user's, under any wrappers) in :class:`APICheck`, which refuses
    values the vector env would coerce silently (a reward of ``"1.0"``, ``terminated`` of 2); an ``AsyncVectorEnv``'s
    sub-envs live in other processes, out of reach."""
    for env in wrapped_chain(vec):
        if isinstance(env, gym.vector.SyncVectorEnv):
            env.envs = [sub if isinstance(sub, APICheck) else APICheck(sub) for sub in env.envs]


def _leaves(tree: Mapping) -> Any:
    for value in tree.values():
        if isinstance(value, Mapping):
            yield from _leaves(value)
        else:
            yield value


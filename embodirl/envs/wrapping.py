"""Putting an env inside the wrappers its keys turn on (:class:`~embodirl.config.envs.WrapperConfig`), in this order
from the policy inwards::

    policy -> FrameStack -> ObservationHistory -> ObservationNoise -> ActionDelay -> ActionRepeat -> ActionNoise -> env

so the delay counts policy steps, the actuator noise is drawn afresh for every env step of a repeated action, and
the frames stacked and the history kept are the noisy observations the policy sees (each drawn once, as a robot's
sensor reading is). With every key at its default :func:`wrap_env` returns the env
itself: no wrapper, no cost. The wrappers are :mod:`embodirl.envs.wrappers` and :mod:`embodirl.envs.frame_stack`.
"""

from __future__ import annotations

from typing import Any

from embodirl.config.envs import WrapperConfig
from embodirl.envs.base import BatchedEnv
from embodirl.envs.frame_stack import FrameStack, ObservationHistory
from embodirl.envs.observations import key_name, observation_spec
from embodirl.envs.wrappers import ActionDelay, ActionNoise, ActionRepeat, ObservationNoise

__all__ = ["wrap_env"]


def wrap_env(env: BatchedEnv, cfg: WrapperConfig, seed: int) -> BatchedEnv:
    """``env`` inside the wrappers ``cfg`` turns on (the module docstring gives the order); ``env`` itself when
    none is on.

    Args:
        env: The env to wrap.
        cfg: The wrapper keys.
        seed: The env's seed; the noise streams derive theirs from it.

    Raises:
        ConfigError: A key the env cannot take (an observation key it lacks, noise on Discrete actions, a list of
            stds of the wrong length), named relative to the env node (``obs_noise.state``).
    """
    if _positive(cfg.action_noise):
        env = ActionNoise(env, cfg.action_noise, seed)
    if cfg.action_repeat > 1:
        env = ActionRepeat(env, cfg.action_repeat)
    if cfg.action_delay > 0:
        env = ActionDelay(env, cfg.action_delay)
    obs_noise = _obs_noise_by_key(cfg.obs_noise, env)
    if obs_noise:
        env = ObservationNoise(env, obs_noise, seed)
    if cfg.obs_history != 1:
        history = ObservationHistory(env, cfg.obs_history)  # checks the keys named, also those kept at 1
        env = history if history.lengths else env
    if cfg.frame_stack > 1:
        env = FrameStack(env, cfg.frame_stack)
    return env


def _positive(std: float | list[float]) -> bool:
    return any(v > 0 for v in std) if isinstance(std, list) else std > 0


def _obs_noise_by_key(std: Any, env: BatchedEnv) -> dict[str, float | list[float]]:
    """``env.obs_noise`` as ``{key: std}``: one number applies to every float key; keys with no noise are dropped."""
    if isinstance(std, dict):
        return {name: value for name, value in std.items() if _positive(value) or name not in _float_keys(env)}
    if not _positive(std):
        return {}
    return {name: std for name in _float_keys(env)}


def _float_keys(env: BatchedEnv) -> list[str]:
    return [key_name(k) for k, (_, dtype) in observation_spec(env.observation_space).items()
            if dtype.is_floating_point]

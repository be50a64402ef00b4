"""Config -> objects, in order, each option checked against its class's signature, then a dry run.

Every config group option names its class with ``_target_`` and ``_partial_: true``; objects that only
exist at run time (device, seed, spaces, the policy) are passed here in code. Before a class is
called, every YAML/command-line value is checked against the type annotations of its ``__init__``,
so ``trainer.total_env_steps=abc`` fails with the key, the value and an example, not a traceback.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import logging
import types
import typing
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from hydra.utils import instantiate
from omegaconf import DictConfig

from embodirl.algos.base import BaseAlgorithm
from embodirl.collector import Collector
from embodirl.distributed import broadcast_module
from embodirl.envs.base import BatchedEnv, StepResult
from embodirl.errors import ConfigError
from embodirl.policies.base import Policy
from embodirl.video import VideoSettings

__all__ = ["Components", "build", "rank_seed", "wants_cuda", "build_env", "build_policy", "build_video_settings", "configure_torch",
           "instantiate_checked", "resolve_device"]

log = logging.getLogger(__name__)


@dataclass
class Components:
    """Everything a training run is made of."""

    env: BatchedEnv
    eval_env: BatchedEnv
    policy: Policy
    algo: BaseAlgorithm
    collector: Collector
    device: torch.device
    video: VideoSettings


def wants_cuda(device: str) -> bool:
    """Whether ``device`` resolves to CUDA on this machine (decides NCCL vs gloo before building)."""
    return str(device).startswith("cuda") or (device == "auto" and torch.cuda.is_available())


def resolve_device(device: str, local_rank: int = 0) -> torch.device:
    """``auto`` -> CUDA when available, else CPU; anything else must exist on this machine.

    In a multi-process run ``auto``/``cuda`` mean this process's GPU, ``cuda:<local_rank>``.
    """
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise ConfigError("device", device, "auto, cpu, cuda or cuda:N", "pass device=auto") from exc
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError("device", device, "a device present on this machine (no CUDA device is visible)",
                          "pass device=cpu (or device=auto)")
    if dev.type not in ("cpu", "cuda"):
        raise ConfigError("device", device, "auto, cpu, cuda or cuda:N", "pass device=auto")
    if dev.type == "cuda" and dev.index is None:
        dev = torch.device("cuda", local_rank if local_rank else torch.cuda.current_device())
    return dev


@contextlib.contextmanager
def torch_threads(num_threads: int | None):
    """Run a block with ``num_threads`` intra-op threads (None: leave as is), then restore."""
    previous = torch.get_num_threads()
    if num_threads is not None and num_threads != previous:
        torch.set_num_threads(num_threads)
    try:
        yield
    finally:
        if torch.get_num_threads() != previous:
            torch.set_num_threads(previous)


def check_threads(key: str, value: Any, allow_none: bool = False) -> None:
    if allow_none and value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(key, value, "an int >= 1" + (" or null" if allow_none else ""),
                          f"pass {key}=1 (best for small nets on CPU)")


def configure_torch(seed: int, num_threads: int) -> None:
    """Seed torch and cap intra-op threads (small nets on small machines run fastest on one)."""
    check_threads("num_threads", num_threads)
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ConfigError("seed", seed, "an int", "pass seed=0")
    torch.set_num_threads(num_threads)
    torch.manual_seed(seed)


# --- checked instantiation ----------------------------------------------------------------------------
def _matches(value: Any, annotation: Any) -> bool:
    origin = typing.get_origin(annotation)
    if annotation is Any or annotation is inspect.Parameter.empty:
        return True
    if origin in (typing.Union, types.UnionType):
        return any(_matches(value, arg) for arg in typing.get_args(annotation))
    if origin is typing.Literal:
        return value in typing.get_args(annotation)
    if annotation is type(None):
        return value is None
    if annotation is bool:
        return isinstance(value, bool)
    if annotation is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if annotation is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if annotation is str:
        return isinstance(value, str)
    if origin in (list, tuple, Sequence, typing.Sequence) or annotation in (list, tuple):
        args = typing.get_args(annotation)
        return isinstance(value, list | tuple) and (not args or all(_matches(v, args[0]) for v in value))
    if origin is dict or annotation is dict:
        return isinstance(value, dict)
    return True


def _describe(annotation: Any) -> str:
    if typing.get_origin(annotation) is typing.Literal:
        return "one of: " + ", ".join(str(a) for a in typing.get_args(annotation))
    text = str(annotation).replace("typing.", "").replace("collections.abc.", "")
    return getattr(annotation, "__name__", text) if not typing.get_args(annotation) else text


def instantiate_checked(node: DictConfig, prefix: str, **runtime: Any) -> Any:
    """Instantiate a ``_partial_`` config node with runtime arguments, after checking every value.

    Args:
        node: A config group node with ``_target_``.
        prefix: The node's key path for messages, e.g. ``"algo."``.
        **runtime: Arguments that exist only at run time (device, spaces, policy, ...).

    Raises:
        ConfigError: Unknown key, wrong type, or a value the class rejects; keys carry ``prefix``.
    """
    partial = instantiate(node, _partial_=True, _convert_="all")
    func = partial.func if isinstance(partial, functools.partial) else partial
    kwargs = dict(partial.keywords) if isinstance(partial, functools.partial) else {}
    target = func.__init__ if inspect.isclass(func) else func
    params = inspect.signature(target).parameters
    hints = typing.get_type_hints(target)
    for key, value in kwargs.items():
        if key not in params:
            valid = ", ".join(k for k in params if k not in ("self", *runtime))
            raise ConfigError(prefix + key, value, f"a known key of {node._target_} (one of: {valid})",
                              f"remove {prefix}{key} or correct its spelling")
        annotation = hints.get(key, inspect.Parameter.empty)
        if not _matches(value, annotation):
            default = params[key].default
            example = f", e.g. {prefix}{key}={default}" if default is not inspect.Parameter.empty else ""
            raise ConfigError(prefix + key, value, f"{_describe(annotation)}",
                              f"pass a value of that type{example}")
    try:
        return partial(**runtime)
    except ConfigError as exc:
        raise exc.with_prefix(prefix) from None


# --- components ---------------------------------------------------------------------------------------
def build_env(env_cfg: DictConfig, device: torch.device, seed: int, num_envs: int | None = None) -> BatchedEnv:
    """Instantiate an env from the ``env`` group, optionally overriding ``num_envs`` (eval envs)."""
    node = env_cfg.copy()
    if num_envs is not None:
        node.num_envs = num_envs
    return instantiate_checked(node, "env.", device=device, seed=seed)


def build_policy(policy_cfg: DictConfig, env: BatchedEnv, device: torch.device) -> Policy:
    policy = instantiate_checked(policy_cfg, "policy.", observation_space=env.observation_space,
                                 action_space=env.action_space)
    return policy.to(device)


RANK_SEED_STRIDE = 1_000_003  # rank r's envs and sampling use seed + r * stride


def rank_seed(seed: int, rank: int) -> int:
    return seed + RANK_SEED_STRIDE * rank


def build(cfg: DictConfig, rank: int = 0, local_rank: int = 0) -> Components:
    """Build env, eval env, policy, algorithm and collector from a composed config; dry-run them.

    Every rank builds the same policy (same seed, then rank 0's weights broadcast); envs and action
    sampling get per-rank seeds.
    """
    configure_torch(cfg.seed, cfg.num_threads)
    check_threads("num_update_threads", cfg.num_update_threads, allow_none=True)
    device = resolve_device(cfg.device, local_rank)
    env = build_env(cfg.env, device, rank_seed(cfg.seed, rank))
    eval_env = build_env(cfg.env, device, cfg.seed + 1_000_003, num_envs=cfg.trainer.num_eval_envs)
    policy = build_policy(cfg.policy, env, device)
    broadcast_module(policy)
    if rank:
        torch.manual_seed(rank_seed(cfg.seed, rank))
    algo = instantiate_checked(cfg.algo, "algo.", policy=policy, device=device,
                               total_env_steps=_total_env_steps(cfg))
    plan = algo.collect_plan(env)
    collector = Collector(env, policy, plan)
    video = build_video_settings(cfg.eval, eval_env)
    dry_run(env, policy)
    dry_run(eval_env, policy)
    return Components(env, eval_env, policy, algo, collector, device, video)


def build_video_settings(eval_cfg: DictConfig, env: BatchedEnv) -> VideoSettings:
    """Video settings from the ``eval`` node; refuses ``eval.video=true`` for an env without frames."""
    settings = instantiate_checked(eval_cfg, "eval.")
    if settings.video:
        try:
            env.render([0], 16)
        except NotImplementedError as exc:
            raise ConfigError("eval.video", True, f"an env that renders frames ({exc})",
                              "pass eval.video=false, or use an env that renders (e.g. env=push_cube)") from None
    return settings


def _total_env_steps(cfg: DictConfig) -> int:
    value = cfg.trainer.total_env_steps
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError("trainer.total_env_steps", value, "an int >= 1", "pass e.g. trainer.total_env_steps=1000000")
    return value


def dry_run(env: BatchedEnv, policy: Policy) -> None:
    """One reset/act/step with shape, dtype and finiteness checks, so a bad setup fails in its first second."""
    obs = env.reset(seed=0)
    _check_tensor("reset() observation", obs, (env.num_envs, *env.observation_space.shape), torch.float32, env)
    action, _, _ = policy.act(obs)
    step = env.step(action)
    if not isinstance(step, StepResult):
        raise TypeError(f"{type(env).__name__}.step must return embodirl.envs.StepResult, got {type(step).__name__}")
    n = env.num_envs
    _check_tensor("step().obs", step.obs, (n, *env.observation_space.shape), torch.float32, env)
    _check_tensor("step().final_obs", step.final_obs, (n, *env.observation_space.shape), torch.float32, env)
    _check_tensor("step().reward", step.reward, (n,), torch.float32, env)
    _check_tensor("step().terminated", step.terminated, (n,), torch.bool, env)
    _check_tensor("step().truncated", step.truncated, (n,), torch.bool, env)
    env.episode_stats.pop()


def _check_tensor(what: str, value: Any, shape: tuple[int, ...], dtype: torch.dtype, env: BatchedEnv) -> None:
    name = type(env).__name__
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{name}.{what} must be a torch.Tensor, got {type(value).__name__}")
    if tuple(value.shape) != shape or value.dtype != dtype:
        raise TypeError(f"{name}.{what} has shape {list(value.shape)} and dtype {value.dtype}; "
                        f"the batched-env contract needs shape {list(shape)} and dtype {dtype}")
    if value.device != env.device:
        raise TypeError(f"{name}.{what} is on {value.device}; the env's device is {env.device}")
    if value.is_floating_point() and not bool(torch.isfinite(value).all()):
        raise ValueError(f"{name}.{what} contains NaN or infinite values after one step")

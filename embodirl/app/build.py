"""The composition root: config -> a ready :class:`~embodirl.training.trainer.Trainer` (:func:`build`).

:func:`build` takes the typed config that :func:`embodirl.config.run.check_run_config` made before torch was
imported (every key checked there, once, by its schema) and reads as the pipeline: build the env, the evaluation
env, the policy, the algorithm, the collector and the evaluator (:func:`build_components`, which also dry-runs the
envs and compiles the hot steps), then the periodic evaluation, the loggers and the trainer. Every configured
component is built by :func:`embodirl.config.instantiate.instantiate` from its node; what exists only at run time
(the device, seeds, spaces, the policy, the other components) is passed here in code. The checks that need run-time
facts live here, and only they: the device, allocations that cannot fit, the dry run, videos on an env that renders.
"""

from __future__ import annotations

import contextlib
import copy
import inspect
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from hydra.utils import get_class
from omegaconf import DictConfig, OmegaConf

from embodirl.accel.allocator import keep_freed_memory
from embodirl.accel.compile import Acceleration, Stopwatch, configure_cache, resolve_acceleration
from embodirl.algos.base import Algorithm
from embodirl.collect.collector import Collector
from embodirl.collect.evaluator import Evaluator
from embodirl.config.envs import EnvNode, EnvSetupConfig, recipes_for, threshold_source
from embodirl.config.instantiate import instantiate, to_node
from embodirl.config.policies import PolicyNode, PolicySetupConfig
from embodirl.config.run import RunConfig, check_run_config
from embodirl.config.schema import Node
from embodirl.config.training import EvalConfig, VideoConfig
from embodirl.envs.base import BatchedEnv, StepResult
from embodirl.envs.fast_paths import add_fast_paths
from embodirl.envs.observations import as_tensordict, check_observation, observation_spec
from embodirl.envs.wrapping import wrap_env
from embodirl.errors import ConfigError, check
from embodirl.policies.base import Policy
from embodirl.policies.distributions import Chunked
from embodirl.policies.pretrained import freeze, load_pretrained
from embodirl.runtime.distributed import DistInfo, broadcast_module
from embodirl.training.console import StopGoal
from embodirl.training.stopping import goal_note
from embodirl.training.trainer import Trainer

__all__ = [
    "Components",
    "allocation_guard",
    "build",
    "build_components",
    "build_env",
    "build_eval_env",
    "build_policy",
    "check_video",
    "checked",
    "configure_torch",
    "eval_seed",
    "rank_seed",
    "resolve_device",
    "resolved_config",
    "wants_cuda",
]

log = logging.getLogger(__name__)

@dataclass
class Components:
    """Everything a training run is made of."""

    env: BatchedEnv
    eval_env: BatchedEnv
    policy: Policy
    algo: Algorithm
    collector: Collector
    evaluator: Evaluator
    device: torch.device
    run: RunConfig  # the checked config; build() builds its trainer, eval and logger nodes
    accel: Acceleration
    compile_s: float


def wants_cuda(device: str) -> bool:
    """Whether ``device`` resolves to CUDA on this machine (decides NCCL vs gloo before building)."""
    return str(device).startswith("cuda") or (device == "auto" and torch.cuda.is_available())


def resolve_device(device: str, local_rank: int = 0) -> torch.device:
    """``auto`` -> CUDA when available, else CPU; a CUDA device must exist on this machine (its spelling, ``auto``,
    ``cpu``, ``cuda`` or ``cuda:N``, is the schema's rule: :func:`embodirl.config.run.check_device`).

    In a multi-process run ``auto``/``cuda`` mean this process's GPU, ``cuda:<local_rank>``.
    """
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    dev = torch.device(device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError("device", device, "a device present on this machine (no CUDA device is visible)",
                          "pass device=cpu (or device=auto)")
    if dev.type == "cuda" and dev.index is None:
        dev = torch.device("cuda", local_rank if local_rank else torch.cuda.current_device())
    return dev


def configure_torch(seed: int, num_threads: int) -> None:
    """Seed torch, cap intra-op threads (small nets on small machines run fastest on one) and keep freed memory
    in the process (:mod:`embodirl.accel.allocator`); both values are checked by the config's schema."""
    torch.set_num_threads(num_threads)
    torch.manual_seed(seed)
    keep_freed_memory()


# --- components ---------------------------------------------------------------------------------------
def build_env(env_cfg: Any, device: torch.device, seed: int, num_envs: int | None = None,
              render: bool = False) -> BatchedEnv:
    """The env an ``env`` node names (a parsed :class:`EnvNode`, or a ``DictConfig`` or mapping, parsed here),
    optionally with another ``num_envs`` (eval envs), inside the wrappers its setup keys turn on.

    ``render=True`` (videos requested) passes ``render_mode="rgb_array"`` to envs whose class takes a
    ``render_mode`` (gymnasium ids); the native envs always draw. The setup keys (:class:`EnvSetupConfig`) are
    applied here: ``env.solved_metric`` and ``env.solved_threshold`` replace the class's own
    :attr:`BatchedEnv.solved_metric` / :attr:`BatchedEnv.solved_threshold` when not null, and the wrapper keys wrap
    the env (:func:`embodirl.envs.wrapping.wrap_env`).
    """
    if num_envs is not None and isinstance(env_cfg, DictConfig):  # before the parse: the node's own may be null
        env_cfg = {**OmegaConf.to_container(env_cfg, resolve=True), "num_envs": num_envs}  # type: ignore[dict-item]
    node = to_node(env_cfg, "env.", EnvNode)
    if num_envs is not None and num_envs != node.values.get("num_envs"):
        node = to_node({**node.written(), "num_envs": num_envs}, "env.", EnvNode)
    setup = node.setup
    assert isinstance(setup, EnvSetupConfig)  # an EnvNode's setup_schema
    runtime: dict[str, Any] = {"device": device, "seed": seed}
    if render and _takes_render_mode(node.target):
        runtime["render_mode"] = "rgb_array"
    env = add_fast_paths(instantiate(node, "env.", **runtime))  # the same numbers, faster (envs/fast_paths.py)
    env.override_solved(setup.solved_metric, setup.solved_threshold)
    try:
        return wrap_env(env, setup, seed)
    except ConfigError as exc:
        env.close()
        raise exc.with_prefix("env.") from None


def build_eval_env(env_cfg: Any, evaluation: EvalConfig, device: torch.device, seed: int) -> BatchedEnv:
    """The periodic-evaluation env: ``eval.num_envs`` copies of ``env`` with ``eval.env_overrides`` applied, each
    checked like an env key (errors name ``eval.env_overrides.<key>``); it renders when videos are on."""
    overrides = evaluation.env_overrides or {}
    node: dict[str, Any] = env_cfg.written() if isinstance(env_cfg, Node) else resolved_config(env_cfg) \
        if isinstance(env_cfg, DictConfig) else dict(env_cfg)
    for key, value in overrides.items():
        check(key not in ("num_envs", "_target_", "_partial_"), f"eval.env_overrides.{key}", value,
              "an env key other than num_envs and _target_", "set the number with eval.num_envs; "
              "evaluate another env with embodirl-eval", absolute=True)
        node[key] = value
    try:
        return build_env(node, device, seed, num_envs=evaluation.num_envs, render=evaluation.video)
    except ConfigError as exc:
        key = exc.key.removeprefix("env.")
        if key not in overrides:
            raise
        raise ConfigError(f"eval.env_overrides.{key}", exc.value, exc.expected,
                          (exc.fix or "").replace(f"env.{key}", f"eval.env_overrides.{key}"),
                          absolute=True) from None


def _takes_render_mode(target: str) -> bool:
    try:
        return "render_mode" in inspect.signature(get_class(target)).parameters
    except Exception:  # a bad _target_ is reported by instantiate
        return False


def build_policy(policy_cfg: Any, env: BatchedEnv, device: torch.device) -> Policy:
    """The policy a ``policy`` node names (a parsed :class:`PolicyNode`, or a ``DictConfig`` or mapping, parsed here)
    for ``env``'s spaces on ``device``; then its setup keys: ``policy.init_from`` (pretrained weights) and
    ``policy.freeze`` (parameter patterns)."""
    node = to_node(policy_cfg, "policy.", PolicyNode)
    setup = node.setup
    assert isinstance(setup, PolicySetupConfig)  # a PolicyNode's setup_schema
    policy = instantiate(node, "policy.", observation_space=env.observation_space,
                         action_space=env.action_space).to(device)
    if setup.init_from is not None:
        log.info("%s", load_pretrained(policy, setup.init_from))
    if setup.freeze:
        log.info("frozen policy parameters: %s", ", ".join(freeze(policy, setup.freeze)))
    return policy


# Seeds: rank r trains with ``seed + r * RANK_SEED_STRIDE``; evaluation uses ``seed + EVAL_SEED_OFFSET``.
# The offset is no multiple of the stride (and far from any small one), so evaluation episodes never start
# from the states of some rank's training episodes.
RANK_SEED_STRIDE = 1_000_003
EVAL_SEED_OFFSET = 7_919_000_017


def rank_seed(seed: int, rank: int) -> int:
    """Seed of rank ``rank``'s training envs and action sampling."""
    return seed + RANK_SEED_STRIDE * rank


def eval_seed(seed: int) -> int:
    """Seed of the evaluation envs of a run seeded with ``seed``."""
    return seed + EVAL_SEED_OFFSET


@contextlib.contextmanager
def allocation_guard(key: str, value: Any, fix: str):
    """Turn an allocation that cannot succeed (out of memory) into a one-line :class:`ConfigError` on ``key``."""
    try:
        yield
    except (MemoryError, RuntimeError) as exc:
        if isinstance(exc, MemoryError | torch.OutOfMemoryError) or "allocate" in str(exc):
            first = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
            raise ConfigError(key, value, f"a size whose tensors fit in memory (allocation failed: {first[:160]})",
                              fix, absolute=True) from None
        raise


def resolved_config(cfg: DictConfig) -> dict[str, Any]:
    """The composed config as plain dicts and lists, interpolations resolved (stored in checkpoints)."""
    resolved = OmegaConf.to_container(cfg, resolve=True)
    if not isinstance(resolved, dict):
        raise TypeError(f"a composed config is a mapping, not {type(resolved).__name__}")
    return {str(k): v for k, v in resolved.items()}


def checked(cfg: RunConfig | DictConfig) -> RunConfig:
    """The typed config: ``cfg`` itself when checked already (``embodirl-train`` checks it before importing torch),
    else a composed config checked now (:func:`embodirl.config.run.check_run_config`)."""
    return cfg if isinstance(cfg, RunConfig) else check_run_config(cfg)


def build(cfg: RunConfig | DictConfig, run_dir: str | Path, config: dict | None = None,
          run_name: tuple[str, str] = ("", ""), dist: DistInfo | None = None) -> Trainer:
    """A ready trainer for ``cfg`` writing into ``run_dir``: components, periodic evaluation, loggers, trainer.

    Args:
        cfg: The checked config (or a composed one, checked here).
        run_dir: The run directory (checkpoints, metrics, videos).
        config: The resolved config saved with checkpoints and sent to wandb (default: a composed ``cfg``
            resolved; required with a checked one).
        run_name: Default wandb ``(name, group)``.
        dist: This process's rank layout (None: a single process).
    """
    if config is None:
        if isinstance(cfg, RunConfig):
            raise TypeError("build(RunConfig) needs the resolved config it was checked from (config=...)")
        config = resolved_config(cfg)
    run_dir, dist = Path(run_dir), dist or DistInfo()
    parts = build_components(cfg, dist.rank, dist.local_rank, dist.world_size)
    run, trainer_cfg = parts.run, parts.run.trainer_config()
    evaluation = instantiate(run.eval, "eval.", evaluator=parts.evaluator, run_dir=run_dir, seed=eval_seed(run.seed),
                             is_solved=parts.env.is_solved)
    goal = StopGoal(trainer_cfg.total_env_steps, parts.env.solved_metric, parts.env.solved_threshold,
                    trainer_cfg.stop_on_solved, trainer_cfg.max_wall_time_s)
    if dist.is_main:  # how the run stops, and where its threshold comes from (or the recipes, when it has none)
        env_node = run.env.written()
        log.log(*goal_note(goal, env_label(parts.env), threshold_source(env_node), recipes_for(env_node)))
    loggers = instantiate(run.logger, "logger.", run_dir=run_dir, config=config, goal=goal, run_name=run_name,
                          enabled=dist.is_main)  # only rank 0 writes metrics, TensorBoard and wandb
    trainer = instantiate(run.trainer, "trainer.", collector=parts.collector, algo=parts.algo, evaluation=evaluation,
                          loggers=loggers, run_dir=run_dir, config=config, seed=rank_seed(run.seed, dist.rank),
                          num_update_threads=run.num_update_threads, compile_s=parts.compile_s)
    log.info("training %s with %s on %s (%d envs x %d ranks, device %s, compile %s, CUDA graphs %s); run dir %s",
             type(parts.policy).__name__, type(parts.algo).__name__, env_label(parts.env),
             parts.env.num_envs, dist.world_size, parts.device, parts.accel.compile, parts.accel.cuda_graphs, run_dir)
    return trainer


def build_components(cfg: RunConfig | DictConfig, rank: int = 0, local_rank: int = 0,
                     world_size: int = 1) -> Components:
    """Build env, eval env, policy, algorithm, collector and evaluator from a checked config; dry-run them.

    Every rank builds the same policy (same seed, then rank 0's weights broadcast) and the same algorithm
    networks (critics); envs and action sampling get per-rank seeds. With ``compile`` on, the hot steps are
    compiled here by a warm-up (:func:`warm_up`), whose time is ``compile_s``.
    """
    run = checked(cfg)
    evaluation = run.eval_config()
    configure_torch(run.seed, run.num_threads)
    device = resolve_device(run.device, local_rank)
    accel = resolve_acceleration(run.compile, run.cuda_graphs, device, world_size)
    num_envs = run.env.values.get("num_envs")
    with allocation_guard("env.num_envs", num_envs, "lower env.num_envs"):
        env = build_env(run.env, device, rank_seed(run.seed, rank))
    with allocation_guard("eval.num_envs", evaluation.num_envs, "lower eval.num_envs"):
        eval_env = build_eval_env(run.env, evaluation, device, eval_seed(run.seed))
    policy = build_policy(run.policy, env, device)
    assert isinstance(policy, torch.nn.Module)  # build_policy moved it to the device: it is a module
    broadcast_module(policy)
    # Built before the ranks' seeds part: an algorithm's own networks (SAC's critics) start equal on every rank.
    algo = instantiate(run.algo, "algo.", policy=policy, device=device, accel=accel,
                       total_env_steps=run.trainer_config().total_env_steps)
    if rank:
        torch.manual_seed(rank_seed(run.seed, rank))
    check_objective_metric(run.objective, algo)
    algo.env_name = env_label(env)
    plan = algo.collect_plan(env)
    with allocation_guard("env.num_envs", num_envs, "lower env.num_envs or algo.num_steps (the rollout holds "
                          "num_envs x (num_steps + 1) transitions)"):
        collector = Collector(env, policy, plan, accel)
    evaluator = Evaluator(eval_env, policy, accel, deterministic=evaluation.deterministic)
    check_video(evaluation, eval_env, "eval.num_envs")
    for built, key in ((env, "env"), (eval_env, "eval.env_overrides" if evaluation.env_overrides else "env")):
        with dry_run_guard(built, key):
            dry_run(built, policy)
    compile_s = warm_up(collector, algo, evaluator) if accel.compile else 0.0
    return Components(env, eval_env, policy, algo, collector, evaluator, device, run, accel, compile_s)


def warm_up(collector: Collector, algo: Algorithm, evaluator: Evaluator) -> float:
    """Compile the hot steps by running them once, then restore every state they touched; return the seconds.

    One rollout, one update and one evaluation episode per eval env run on throw-away state: the policy,
    the algorithm (optimizer, counters, normaliser) and the random generators are restored afterwards,
    and the collector forgets the warm-up's episodes (:meth:`Collector.restart`: training resets or restores the
    envs before it starts).
    """
    policy = algo.policy
    saved = copy.deepcopy((policy.state_dict(), algo.state_dict()))
    devices = [collector.env.device] if collector.env.device.type == "cuda" else []
    with Stopwatch(collector.env.device) as watch, torch.random.fork_rng(devices=devices):
        algo.update(collector.collect())
        evaluator.evaluate(evaluator.env.num_envs, seed=0)
    policy.load_state_dict(saved[0])
    algo.load_state_dict(saved[1])
    collector.restart()
    log.info("compiled the collection, update and evaluation steps in %.1f s (cache: %s)", watch.seconds,
             configure_cache())
    return watch.seconds


def check_video(video: VideoConfig, env: BatchedEnv, count_key: str) -> None:
    """Refuse ``eval.video=true`` for an env without frames, and more filmed envs than ``env`` has (``count_key``
    names the key that sets its number)."""
    count = video.video_num_envs
    check(not video.video or count is None or count <= env.num_envs, "eval.video_num_envs", count,
          f"an int in [1, {env.num_envs}] (the evaluation envs: {count_key}={env.num_envs})",
          f"pass eval.video_num_envs={env.num_envs} (or null), or raise {count_key}", absolute=True)
    if video.video:
        try:
            env.render([0], 16)
        except NotImplementedError as exc:
            raise ConfigError("eval.video", True, f"an env that renders frames ({exc})",
                              "pass eval.video=false, or use an env that renders (cartpole, push_cube, gym ids with "
                              "rgb_array frames)") from None


def check_objective_metric(objective: Any, algo: Algorithm) -> None:
    """A ``loss/*`` or ``diag/*`` objective must be a metric the algorithm logs (when it declares ``metric_names``)."""
    names = getattr(algo, "metric_names", None)
    if names is None or not isinstance(objective, str) or not objective.startswith(("loss/", "diag/")):
        return
    check(objective in names, "objective", objective, f"a summary key such as eval/return_mean, or a metric "
          f"{type(algo).__name__} logs: {', '.join(names)}", "pass objective=eval/return_mean (or one of those)")


def env_label(env: BatchedEnv) -> str:
    """``GymEnv Pendulum-v1`` or ``PushCube``: the env class (inside any wrappers), and the gymnasium id when it has
    one."""
    env_id, name = getattr(env, "id", None), type(env.unwrapped).__name__
    return f"{name} {env_id}" if isinstance(env_id, str) else name


@contextlib.contextmanager
def dry_run_guard(env: BatchedEnv, key: str):
    """Turn a failed dry run (the env's first reset/step broke the batched-env contract, or the policy could not act
    on it) into one :class:`ConfigError` on ``key`` naming the env and what failed."""
    try:
        yield
    except (TypeError, ValueError, IndexError, KeyError, AssertionError, RuntimeError) as exc:
        if isinstance(exc, ConfigError | torch.OutOfMemoryError):
            raise
        what = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ConfigError(key, env_label(env), f"an env whose first reset and step follow the batched-env contract "
                          f"({what})", f"check the {key}.* values that shape the env (or the env's code: "
                          "embodirl.envs.base documents the contract)", absolute=True) from None


def dry_run(env: BatchedEnv, policy: Policy) -> None:
    """One reset/act/step with shape, dtype and finiteness checks, so a bad setup fails in its first second."""
    spec = observation_spec(env.observation_space)
    name, n = type(env).__name__, env.num_envs
    obs = env.reset(seed=0)
    check_observation(f"{name}.reset() observation", obs, spec, n, env.device)
    action, _, _, _ = policy.act(as_tensordict(obs, n), policy.initial_state(n))
    step = env.step(action[:, 0] if isinstance(policy.dist, Chunked) else action)  # a chunk's first action
    if not isinstance(step, StepResult):
        raise TypeError(f"{name}.step must return embodirl.envs.StepResult, got {type(step).__name__}")
    check_observation(f"{name}.step().obs", step.obs, spec, n, env.device)
    check_observation(f"{name}.step().final_obs", step.final_obs, spec, n, env.device)
    _check_tensor("step().reward", step.reward, (n,), torch.float32, env)
    _check_tensor("step().terminated", step.terminated, (n,), torch.bool, env)
    _check_tensor("step().truncated", step.truncated, (n,), torch.bool, env)


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

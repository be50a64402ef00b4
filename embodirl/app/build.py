"""The composition root: config -> a ready :class:`~embodirl.training.trainer.Trainer` (:func:`build`).

:func:`build` reads as the pipeline: check the top-level keys and parse the nodes of the run (trainer, eval,
logger) by their schemas, build the env, the evaluation env, the policy, the algorithm, the collector and the
evaluator (:func:`build_components`, which also dry-runs the envs and compiles the hot steps), then the periodic
evaluation, the loggers and the trainer. Every configured component is built by
:func:`embodirl.config.instantiate.instantiate` from its node; what exists only at run time (the device, seeds,
spaces, the policy, the other components) is passed here in code. The checks that need run-time facts live here:
the device, allocations that cannot fit, the dry run, videos on an env that renders.
"""

from __future__ import annotations

import contextlib
import copy
import inspect
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import torch
from hydra.utils import get_class
from omegaconf import DictConfig, ListConfig, OmegaConf, open_dict

from embodirl.accel.allocator import keep_freed_memory
from embodirl.accel.compile import Acceleration, Stopwatch, configure_cache, resolve_acceleration
from embodirl.algos.base import Algorithm
from embodirl.collect.collector import Collector
from embodirl.collect.evaluator import Evaluator
from embodirl.config.envs import WRAPPER_KEYS, WrapperConfig, recipes_for, threshold_source
from embodirl.config.instantiate import check_finite_values, instantiate, to_node
from embodirl.config.schema import NO_MATCH, Node, Schema, conform, parse
from embodirl.config.training import EvalConfig, LoggerConfig, TrainerConfig, VideoConfig
from embodirl.envs.base import BatchedEnv, StepResult
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
    "ENV_BUILD_KEYS",
    "Components",
    "RunSettings",
    "allocation_guard",
    "build",
    "build_components",
    "build_env",
    "build_eval_env",
    "build_policy",
    "check_top_level",
    "check_video",
    "configure_torch",
    "eval_seed",
    "parse_node",
    "rank_seed",
    "resolve_device",
    "resolved_config",
    "wants_cuda",
]

log = logging.getLogger(__name__)

S = TypeVar("S", bound=Schema)


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
    settings: RunSettings
    accel: Acceleration
    compile_s: float
    trainer: Node  # the nodes build() builds, each checked by its schema (TrainerConfig, EvalConfig, LoggerConfig)
    eval: Node
    logger: Node


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
    if dev.type == "cpu" and dev.index not in (None, 0):
        raise ConfigError("device", device, "auto, cpu, cuda or cuda:N (the CPU is one device: it takes no index)",
                          "pass device=cpu")
    if dev.type == "cuda" and dev.index is None:
        dev = torch.device("cuda", local_rank if local_rank else torch.cuda.current_device())
    return dev


def configure_torch(seed: int, num_threads: int) -> None:
    """Seed torch, cap intra-op threads (small nets on small machines run fastest on one) and keep freed memory
    in the process (:mod:`embodirl.accel.allocator`)."""
    num_threads = _int_at_least("num_threads", num_threads, 1, "pass num_threads=1 (best for small nets on CPU)")
    converted = conform(seed, int)
    check(converted is not NO_MATCH and abs(converted) <= MAX_SEED, "seed", seed, SEED_RANGE, "pass seed=0")
    torch.set_num_threads(num_threads)
    torch.manual_seed(converted)
    keep_freed_memory()


# --- components ---------------------------------------------------------------------------------------
def build_env(env_cfg: DictConfig, device: torch.device, seed: int, num_envs: int | None = None,
              render: bool = False) -> BatchedEnv:
    """Instantiate an env from the ``env`` group, optionally overriding ``num_envs`` (eval envs).

    ``render=True`` (videos requested) passes ``render_mode="rgb_array"`` to envs whose class takes a
    ``render_mode`` (gymnasium ids); the native envs always draw.

    ``env.solved_metric`` and ``env.solved_threshold``, which every env accepts through the config, replace
    the class's own :attr:`BatchedEnv.solved_metric` / :attr:`BatchedEnv.solved_threshold` when not null. The
    wrapper keys (``env.obs_noise``, ``env.action_delay``, ``env.action_noise``, ``env.action_repeat``,
    ``env.frame_stack``), which every env accepts too, wrap the env (:func:`embodirl.envs.wrapping.wrap_env`).
    """
    node = env_cfg.copy()
    if num_envs is not None:
        node.num_envs = num_envs
    with open_dict(node):
        solved = {key: node.pop(key, None) for key in ENV_BUILD_KEYS}
        wrapper_keys = {key: node.pop(key) for key in WRAPPER_KEYS if key in node}
    _check_solved(**solved)
    wrappers = parse(WrapperConfig, {k: OmegaConf.to_object(v) if isinstance(v, DictConfig | ListConfig) else v
                                     for k, v in wrapper_keys.items()}, "env.")
    runtime: dict[str, Any] = {"device": device, "seed": seed}
    if render and _takes_render_mode(node):
        runtime["render_mode"] = "rgb_array"
    env = instantiate(node, "env.", **runtime)
    for key, value in solved.items():
        if value is not None:
            setattr(env, key, float(value) if key == "solved_threshold" else value)
    try:
        return wrap_env(env, wrappers, seed)
    except ConfigError as exc:
        env.close()
        raise exc.with_prefix("env.") from None


def build_eval_env(env_cfg: DictConfig, evaluation: EvalConfig, device: torch.device, seed: int) -> BatchedEnv:
    """The periodic-evaluation env: ``eval.num_envs`` copies of ``env`` with ``eval.env_overrides`` applied, each
    checked like an env key (errors name ``eval.env_overrides.<key>``); it renders when videos are on."""
    overrides = evaluation.env_overrides or {}
    node = env_cfg.copy()
    with open_dict(node):
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


def _takes_render_mode(node: DictConfig) -> bool:
    try:
        return "render_mode" in inspect.signature(get_class(node._target_)).parameters
    except Exception:  # a bad _target_ is reported by instantiate
        return False


def _check_solved(solved_metric: Any, solved_threshold: Any) -> None:
    check(solved_metric is None or (isinstance(solved_metric, str) and solved_metric.startswith("eval/")),
          "env.solved_metric", solved_metric, "null (the env's own) or an evaluation metric such as eval/return_mean",
          "pass env.solved_metric=eval/return_mean (or eval/success_rate for envs that report success)", absolute=True)
    check(solved_threshold is None or conform(solved_threshold, float) is not NO_MATCH, "env.solved_threshold",
          solved_threshold, "null (the env's own) or a number", "pass e.g. env.solved_threshold=400", absolute=True)
    check_finite_values("env.solved_threshold", solved_threshold, 400)


def build_policy(policy_cfg: DictConfig, env: BatchedEnv, device: torch.device) -> Policy:
    """Instantiate the policy for ``env``'s spaces on ``device``; then apply ``policy.init_from`` (pretrained
    weights) and ``policy.freeze`` (parameter patterns), which any policy class accepts through the config."""
    node = policy_cfg.copy()
    with open_dict(node):
        init_from = node.pop("init_from", None)
        patterns = node.pop("freeze", [])
    check(init_from is None or isinstance(init_from, str), "policy.init_from", init_from,
          "null or the path of a checkpoint or state_dict file", "pass policy.init_from=<run_dir>/checkpoints/last.pt",
          absolute=True)
    patterns = list(patterns) if isinstance(patterns, ListConfig | list) else patterns
    check(isinstance(patterns, list) and all(isinstance(p, str) for p in patterns), "policy.freeze", patterns,
          "a list of fnmatch patterns over parameter names", "pass policy.freeze=['encoders.*']", absolute=True)
    policy = instantiate(node, "policy.", observation_space=env.observation_space,
                                 action_space=env.action_space).to(device)
    if init_from is not None:
        log.info("%s", load_pretrained(policy, init_from))
    if patterns:
        log.info("frozen policy parameters: %s", ", ".join(freeze(policy, patterns)))
    return policy


# Seeds: rank r trains with ``seed + r * RANK_SEED_STRIDE``; evaluation uses ``seed + EVAL_SEED_OFFSET``.
# The offset is no multiple of the stride (and far from any small one), so evaluation episodes never start
# from the states of some rank's training episodes.
RANK_SEED_STRIDE = 1_000_003
EVAL_SEED_OFFSET = 7_919_000_017
# Seeds plus these offsets must stay int64 (torch and numpy seeds); 2^62 leaves room for any number of ranks.
MAX_SEED = 2**62
SEED_RANGE = "an int in [-2^62, 2^62] (evaluation and other ranks add offsets to it, which must fit in 64 bits)"

# Keys every env option accepts besides its class's arguments; build_env applies them to the built env.
ENV_BUILD_KEYS = ("solved_metric", "solved_threshold")
TOP_LEVEL_KEYS = ("policy", "algo", "env", "trainer", "logger", "eval", "seed", "device", "num_threads",
                  "num_update_threads", "objective", "compile", "cuda_graphs")


def rank_seed(seed: int, rank: int) -> int:
    """Seed of rank ``rank``'s training envs and action sampling."""
    return seed + RANK_SEED_STRIDE * rank


def eval_seed(seed: int) -> int:
    """Seed of the evaluation envs of a run seeded with ``seed``."""
    return seed + EVAL_SEED_OFFSET


@dataclass(frozen=True)
class RunSettings:
    """The checked top-level keys of a training config."""

    seed: int
    device: str
    num_threads: int
    num_update_threads: int | None


def check_top_level(cfg: DictConfig) -> RunSettings:
    """Refuse unknown top-level keys (``+foo=1``) and check the top-level scalars; integral floats accepted."""
    for key in map(str, cfg):
        if key not in TOP_LEVEL_KEYS:
            raise ConfigError(key, cfg[key], f"a known top-level key (one of: {', '.join(TOP_LEVEL_KEYS)})",
                              f"remove +{key}=... or correct its spelling")
    seed = conform(cfg.seed, int)
    check(seed is not NO_MATCH and abs(seed) <= MAX_SEED, "seed", cfg.seed,
          "an int" if seed is NO_MATCH else SEED_RANGE, "pass seed=0")
    check(isinstance(cfg.device, str), "device", cfg.device, "auto, cpu, cuda or cuda:N", "pass device=auto")
    threads = _int_at_least("num_threads", cfg.num_threads, 1, "pass num_threads=1 (best for small nets on CPU)")
    update_threads = None if cfg.num_update_threads is None else _int_at_least(
        "num_update_threads", cfg.num_update_threads, 1, "pass num_update_threads=null (same as num_threads)")
    return RunSettings(seed, cfg.device, threads, update_threads)


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


def _int_at_least(key: str, value: Any, minimum: int, fix: str) -> int:
    """An int value (integral floats accepted) of at least ``minimum``, or a :class:`ConfigError`."""
    converted = conform(value, int)
    check(converted is not NO_MATCH and converted >= minimum, key, value, f"an int >= {minimum}", fix)
    return converted


def resolved_config(cfg: DictConfig) -> dict[str, Any]:
    """The composed config as plain dicts and lists, interpolations resolved (stored in checkpoints)."""
    resolved = OmegaConf.to_container(cfg, resolve=True)
    if not isinstance(resolved, dict):
        raise TypeError(f"a composed config is a mapping, not {type(resolved).__name__}")
    return {str(k): v for k, v in resolved.items()}


def parse_node(node: Any, prefix: str, schema: type[S]) -> tuple[Node, S]:
    """A node checked by its class's schema, which must be ``schema`` or extend it (the run reads its keys)."""
    parsed = to_node(node, prefix)
    if not isinstance(parsed.cfg, schema):
        raise ConfigError(f"{prefix}_target_", parsed.target, f"a class whose constructor takes a {schema.__name__}",
                          f"pass {prefix}_target_={schema.target}, or a subclass of it", absolute=True)
    return parsed, parsed.cfg


def build(cfg: DictConfig, run_dir: str | Path, config: dict | None = None, run_name: tuple[str, str] = ("", ""),
          dist: DistInfo | None = None) -> Trainer:
    """A ready trainer for ``cfg`` writing into ``run_dir``: components, periodic evaluation, loggers, trainer.

    Args:
        cfg: The composed config.
        run_dir: The run directory (checkpoints, metrics, videos).
        config: The resolved config saved with checkpoints and sent to wandb (default: ``cfg`` resolved).
        run_name: Default wandb ``(name, group)``.
        dist: This process's rank layout (None: a single process).
    """
    run_dir, dist = Path(run_dir), dist or DistInfo()
    parts = build_components(cfg, dist.rank, dist.local_rank, dist.world_size)
    config = resolved_config(cfg) if config is None else config
    seed, (_, trainer_cfg) = parts.settings.seed, parse_node(parts.trainer, "trainer.", TrainerConfig)
    evaluation = instantiate(parts.eval, "eval.", evaluator=parts.evaluator, run_dir=run_dir, seed=eval_seed(seed),
                             is_solved=parts.env.is_solved)
    goal = StopGoal(trainer_cfg.total_env_steps, parts.env.solved_metric, parts.env.solved_threshold,
                    trainer_cfg.stop_on_solved, trainer_cfg.max_wall_time_s)
    if dist.is_main:  # how the run stops, and where its threshold comes from (or the recipes, when it has none)
        log.log(*goal_note(goal, env_label(parts.env), threshold_source(cfg.env), recipes_for(cfg.env)))
    loggers = instantiate(parts.logger, "logger.", run_dir=run_dir, config=config, goal=goal, run_name=run_name,
                          enabled=dist.is_main)  # only rank 0 writes metrics, TensorBoard and wandb
    trainer = instantiate(parts.trainer, "trainer.", collector=parts.collector, algo=parts.algo, evaluation=evaluation,
                          loggers=loggers, run_dir=run_dir, config=config, seed=rank_seed(seed, dist.rank),
                          num_update_threads=parts.settings.num_update_threads, compile_s=parts.compile_s)
    log.info("training %s with %s on %s (%d envs x %d ranks, device %s, compile %s, CUDA graphs %s); run dir %s",
             type(parts.policy).__name__, type(parts.algo).__name__, env_label(parts.env),
             parts.env.num_envs, dist.world_size, parts.device, parts.accel.compile, parts.accel.cuda_graphs, run_dir)
    return trainer


def build_components(cfg: DictConfig, rank: int = 0, local_rank: int = 0, world_size: int = 1) -> Components:
    """Build env, eval env, policy, algorithm, collector and evaluator from a composed config; dry-run them.

    Every rank builds the same policy (same seed, then rank 0's weights broadcast) and the same algorithm
    networks (critics); envs and action sampling get per-rank seeds. With ``compile`` on, the hot steps are
    compiled here by a warm-up (:func:`warm_up`), whose time is ``compile_s``.
    """
    top = check_top_level(cfg)
    # The nodes built last are checked first: a bad key fails before anything is built (or compiled).
    trainer_node, trainer_cfg = parse_node(cfg.trainer, "trainer.", TrainerConfig)
    eval_node, evaluation = parse_node(cfg.eval, "eval.", EvalConfig)
    logger_node, _ = parse_node(cfg.logger, "logger.", LoggerConfig)
    configure_torch(top.seed, top.num_threads)
    device = resolve_device(top.device, local_rank)
    accel = resolve_acceleration(cfg.compile, cfg.cuda_graphs, device, world_size)
    num_envs = cfg.env.get("num_envs")
    with allocation_guard("env.num_envs", num_envs, "lower env.num_envs"):
        env = build_env(cfg.env, device, rank_seed(top.seed, rank))
    with allocation_guard("eval.num_envs", evaluation.num_envs, "lower eval.num_envs"):
        eval_env = build_eval_env(cfg.env, evaluation, device, eval_seed(top.seed))
    policy = build_policy(cfg.policy, env, device)
    assert isinstance(policy, torch.nn.Module)  # build_policy moved it to the device: it is a module
    broadcast_module(policy)
    # Built before the ranks' seeds part: an algorithm's own networks (SAC's critics) start equal on every rank.
    algo = instantiate(cfg.algo, "algo.", policy=policy, device=device, total_env_steps=trainer_cfg.total_env_steps,
                       accel=accel)
    if rank:
        torch.manual_seed(rank_seed(top.seed, rank))
    check_objective_metric(cfg.get("objective"), algo)
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
    return Components(env, eval_env, policy, algo, collector, evaluator, device, top, accel, compile_s,
                      trainer_node, eval_node, logger_node)


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

"""The one training loop shared by every algorithm: collect -> update -> log -> evaluate -> checkpoint."""

from __future__ import annotations

import contextlib
import logging
import math
import os
import re
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import torch

from embodirl.algos.base import BaseAlgorithm
from embodirl.collect.collector import Collector
from embodirl.collect.evaluator import Evaluator
from embodirl.envs.base import BatchedEnv, env_mode
from embodirl.errors import CheckpointError, DivergedError, NonFiniteLossError, check, check_choice
from embodirl.runtime.checkpoint import (
    check_optimizer_state,
    load_checkpoint,
    rng_state,
    serialize_checkpoint,
    set_rng_state,
)
from embodirl.runtime.distributed import allreduce_max, allreduce_sum, broadcast_object, get_info, sync_report
from embodirl.runtime.files import atomic_write_bytes, atomic_write_json
from embodirl.runtime.preemption import Interrupted, StopSignals
from embodirl.runtime.status import fate_of
from embodirl.training.callbacks import Callbacks
from embodirl.training.divergence import check_divergence, parse_divergence
from embodirl.training.loggers import MetricLoggers
from embodirl.training.stopping import MetricNames, StopConditions, parse_stop_on
from embodirl.training.video import VideoSettings, record_episode, save_video

__all__ = ["Trainer", "TrainState"]

log = logging.getLogger(__name__)

EVAL_KEYS = ("eval/return_mean", "eval/return_std", "eval/length_mean", "eval/success_rate",
             "eval/success_once", "eval/success_at_end")
SUMMARY_KEYS = ("episode/return_mean", "episode/length_mean", "episode/success_rate", *EVAL_KEYS)
# Metrics every run logs (every iteration, or at every evaluation); others depend on the algorithm or the env.
ALWAYS_LOGGED = ("iteration", "env_steps", "wall_time_s", "sps", "perf/collect_sps", "perf/update_sps",
                 "episode/count", "episode/return_mean", "episode/length_mean", "eval/return_mean",
                 "eval/return_std", "eval/length_mean", "eval/num_episodes")
SUCCESS_KEYS = ("episode/success_rate", "eval/success_rate", "eval/success_once", "eval/success_at_end")


@dataclass
class TrainState:
    """Trainer counters, checkpointed and restored on resume."""

    iteration: int = 0
    env_steps: int = 0
    wall_time_s: float = 0.0
    next_eval: int = 0
    next_checkpoint: int = 0
    solved_env_steps: int | None = None
    solved_wall_time_s: float | None = None
    last: dict[str, Any] = field(default_factory=dict)
    stop_condition: str | None = None  # the trainer.stop_on condition that held
    stop_state: dict[str, list] = field(default_factory=dict)  # plateau bookkeeping of trainer.stop_on
    best_metric: str | None = None  # the metric checkpoints/best.pt was chosen by, its value and env steps
    best_value: float | None = None
    best_env_steps: int | None = None


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


_PERIODIC = re.compile(r"step_(\d+)\.pt")


def _periodic_checkpoints(folder: Path) -> dict[int, Path]:
    """``env_steps -> path`` of the periodic checkpoints ``step_<env_steps>.pt`` in ``folder``."""
    found = {}
    for path in folder.glob("step_*.pt"):
        match = _PERIODIC.fullmatch(path.name)
        if match:
            found[int(match.group(1))] = path
    return found


def _close_quietly(loggers: MetricLoggers) -> None:
    """Close the loggers while another error is propagating: a second failure is only logged."""
    try:
        loggers.close()
    except Exception as exc:
        log.error("closing the metric loggers failed as well: %s: %s", type(exc).__name__, exc)


def _end_reason(exc: BaseException, status: str, reason: str | None) -> str:
    """The ``stop_reason`` of a run that ``exc`` ended in ``status``."""
    if isinstance(exc, NonFiniteLossError):
        return "non_finite_loss"
    if isinstance(exc, DivergedError):
        return "diverged"
    return "aborted" if status == "interrupted" else reason or type(exc).__name__


def next_threshold(value: int, every: int) -> int:
    """The first multiple of ``every`` strictly above ``value`` (cadences fire on crossing)."""
    return (value // every + 1) * every


class Trainer:
    """Trains ``algo``'s policy on ``collector``'s env until a stop condition holds.

    Args:
        collector: Fills rollouts from the training env.
        algo: The algorithm (owns the policy and optimizer).
        evaluator: Deterministic evaluation on separate env instances.
        run_dir: Output directory (metrics, checkpoints, summary).
        config: The resolved run config, stored in checkpoints.
        seed: This rank's seed (training env reset stream).
        eval_seed: Seed of the evaluation episodes (``embodirl.app.build.eval_seed``).
        make_loggers: ``f(start_env_steps) -> MetricLoggers`` (0 for a fresh start, the checkpoint's count
            on resume).
        video: Evaluation video settings (None or ``video=False``: no videos).
        compile_s: Seconds the compile warm-up took before training (reported as ``perf/compile_s``).
        num_update_threads: torch intra-op threads during ``algo.update`` (None: unchanged).
        total_env_steps: Stop after this many env steps.
        eval_every_env_steps: Evaluate whenever a multiple of this is crossed (and at the end).
        num_eval_episodes: Episodes per evaluation.
        checkpoint_every_env_steps: Save ``last.pt`` and a periodic checkpoint when crossing a multiple.
        keep_checkpoints: Periodic checkpoints kept (oldest deleted first); ``last.pt`` is always kept.
        stop_on_solved: Stop once deterministic evaluation meets the env's solved criterion.
        stop_on: More stop conditions on logged metrics, thresholds ``{metric, op, value}`` and plateaus
            ``{metric, plateau: {patience_evals, min_delta, mode}}`` (see :mod:`embodirl.training.stopping`).
        max_wall_time_s: Stop after this much training wall time (None = no limit).
        best_metric: ``checkpoints/best.pt`` holds the state with the best value of this metric so far (None:
            the env's ``solved_metric``); saved whenever a record improves on it.
        best_mode: ``max`` (higher is better) or ``min``.
        callbacks: Objects with ``on_iteration``, ``on_evaluation``, ``on_checkpoint``, ``on_end`` (see
            :mod:`embodirl.training.callbacks`), called on rank 0.
        eval_env_overrides: Env keys that differ for the evaluation envs (applied by
            :func:`embodirl.app.build.build`, which builds them; kept here as the schema of the ``trainer`` node).
        resume: Checkpoint to continue from when the run directory has none of its own; the run directory's
            ``checkpoints/last.pt``, when present, always wins (a requeued job keeps its progress).
        allow_config_change: Continue a run directory whose checkpoint was trained with a different config
            (outside the budget, stop and output keys); checked by :func:`embodirl.app.run.run_training`
            before anything is written (see :mod:`embodirl.runtime.rundir`).
        divergence: Limits on an update's metrics beyond which the run fails as diverged, e.g.
            ``{max_approx_kl: 100, max_value_loss: 1e10}`` (see :mod:`embodirl.training.divergence`); None: no check.
    """

    def __init__(self, collector: Collector, algo: BaseAlgorithm, evaluator: Evaluator, run_dir: Path,
                 config: dict, seed: int, eval_seed: int, make_loggers: Callable[[int], MetricLoggers], *,
                 video: VideoSettings | None = None, num_update_threads: int | None = None, compile_s: float = 0.0,
                 total_env_steps: int = 1_000_000, eval_every_env_steps: int = 50_000, num_eval_envs: int = 20,
                 num_eval_episodes: int = 20, checkpoint_every_env_steps: int = 250_000, keep_checkpoints: int = 3,
                 stop_on_solved: bool = True, stop_on: list[dict] | None = None, max_wall_time_s: float | None = None,
                 best_metric: str | None = None, best_mode: Literal["max", "min"] = "max",
                 callbacks: list[Any] | None = None, eval_env_overrides: dict | None = None,
                 resume: str | None = None, allow_config_change: bool = False, divergence: dict | None = None) -> None:
        check(total_env_steps >= 1, "total_env_steps", total_env_steps, "an int >= 1")
        check(eval_every_env_steps >= 1, "eval_every_env_steps", eval_every_env_steps, "an int >= 1")
        check(num_eval_envs >= 1, "num_eval_envs", num_eval_envs, "an int >= 1")
        check(num_eval_episodes >= 1, "num_eval_episodes", num_eval_episodes, "an int >= 1")
        check(checkpoint_every_env_steps >= 1, "checkpoint_every_env_steps", checkpoint_every_env_steps, "an int >= 1")
        check(keep_checkpoints >= 0, "keep_checkpoints", keep_checkpoints, "an int >= 0")
        check(max_wall_time_s is None or max_wall_time_s > 0, "max_wall_time_s", max_wall_time_s, "null or a float > 0")
        self.collector, self.algo, self.evaluator = collector, algo, evaluator
        self.eval_env = evaluator.env
        self.env, self.policy = collector.env, algo.policy
        self.run_dir = Path(run_dir)
        self.ckpt_dir = self.run_dir / "checkpoints"
        self.config, self.seed, self.eval_seed, self.make_loggers = config, seed, eval_seed, make_loggers
        self.total_env_steps = total_env_steps
        self.eval_every = eval_every_env_steps
        self.num_eval_episodes = num_eval_episodes
        self.checkpoint_every = checkpoint_every_env_steps
        self.keep_checkpoints = keep_checkpoints
        self.stop_on_solved = stop_on_solved
        self.stops = StopConditions(parse_stop_on(stop_on))
        check(best_metric is None or bool(best_metric), "best_metric", best_metric, "null or a metric name")
        check_choice("best_mode", best_mode, ["max", "min"])
        self.best_metric = best_metric or self.env.solved_metric
        self.best_mode = best_mode
        self.callbacks = Callbacks(callbacks)
        self.eval_env_overrides = dict(eval_env_overrides or {})
        info = [f"{family}/metrics/{key}" for family in ("episode", "eval") for key in getattr(self.env, "info_metrics", ())]
        self.metric_names = MetricNames(
            [(f"trainer.stop_on[{i}].metric", c.metric) for i, c in enumerate(self.stops.conditions)]
            + [("trainer.best_metric" if best_metric else "env.solved_metric", self.best_metric)],
            known=(*ALWAYS_LOGGED, *info), after_record=("loss/", "diag/", "perf/"), after_evaluation=SUCCESS_KEYS)
        self.max_wall_time_s = max_wall_time_s
        self.divergence = parse_divergence(divergence)
        self.resume_path = resume
        self.allow_config_change = allow_config_change
        self.video = video
        self.num_update_threads = num_update_threads
        self.compile_s = compile_s
        self.loggers: MetricLoggers | None = None
        self.dist = get_info()
        self.sync: dict[str, Any] | None = None
        self.state = TrainState(next_eval=eval_every_env_steps, next_checkpoint=checkpoint_every_env_steps)

    # --- the loop ------------------------------------------------------------------------------------
    def train(self) -> dict[str, Any]:
        """Train until a stop condition holds; write ``summary.json`` and return the summary.

        Raises:
            PreemptedError: Stopped on SIGTERM/SIGUSR2 after saving (after submitit's requeue handler ran).
            Interrupted: Stopped on Ctrl-C after finishing the iteration and saving ``last.pt``.
            KeyboardInterrupt: A second Ctrl-C aborted at once (``last.pt`` keeps the last saved state).
        """
        resumed = self._resume()
        if not resumed:
            self.collector.reset(seed=self.seed)
        self._first_iteration = self.state.iteration + 1
        for part in (self.collector, self.algo, self.evaluator):
            part.use_cuda_graphs()  # recorded at their next calls; every buffer they read is final by now
        status, reason = "running", None
        loggers = self.loggers = self.make_loggers(self.state.env_steps)
        origin = time.perf_counter() - self.state.wall_time_s
        with StopSignals(defer=True) as signals:
            try:
                while (reason := self._agreed_stop(signals)) is None:
                    record = self._iteration(origin)
                    loggers.log(record)
                    self._account(record)
                    if self.state.env_steps >= self.state.next_checkpoint:
                        self.state.next_checkpoint = next_threshold(self.state.env_steps, self.checkpoint_every)
                        self._saved(self.save(periodic=True), record)
                self._saved(self.save(), self.state.last)
                status = reason if reason in ("preempted", "interrupted") else "completed"
                self.sync = sync_report(self.policy, self.collector.rollout["obs"])
                if not self.sync["params_identical"]:
                    log.error("ranks hold different parameters after training: %s", self.sync)
                if reason == "stop_on":
                    loggers.note_stop_condition(self.state.stop_condition)
                loggers.close()
            except BaseException as exc:
                status = fate_of(exc)
                reason = _end_reason(exc, status, reason)
                _close_quietly(loggers)
                raise
            finally:
                summary = self._write_summary(status, reason)
                if self.dist.is_main and sys.exc_info()[0] is not None:
                    self.callbacks.end_quietly(summary)
                elif self.dist.is_main:
                    self.callbacks.call("on_end", summary)
            if status == "preempted":
                signals.hand_over(call_previous=self.dist.is_main)  # submitit: requeue + exit; else PreemptedError
        if status == "interrupted":
            raise Interrupted(f"stopped on Ctrl-C after saving checkpoints/last.pt at env_steps="
                              f"{self.state.env_steps:,}; train again in {self.run_dir} (hydra.run.dir) to resume")
        return summary

    def _write_summary(self, status: str, reason: str | None) -> dict[str, Any]:
        """Write ``summary.json`` (rank 0); while an exception is propagating, a failed write only logs."""
        summary = self.summary(status, reason)
        if self.dist.is_main:
            try:
                atomic_write_json(self.run_dir / "summary.json", summary)
            except OSError as exc:
                if exc.__context__ is None:  # nothing else is propagating: this failure is the run's
                    raise
                log.error("could not write %s: %s", self.run_dir / "summary.json", exc)
        return summary

    def _agreed_stop(self, signals: StopSignals) -> str | None:
        """The stop decision every rank takes: ``preempted`` or ``interrupted`` if any rank was signalled,
        else rank 0's stop reason."""
        reason = self.stop_reason() if self.dist.is_main else None
        flags = [float(signals.requested), float(signals.interrupted)]
        if self.dist.world_size > 1:
            flags = allreduce_max(torch.tensor(flags, device=self.env.device)).tolist()
            reason = broadcast_object(reason)
        if flags[0]:
            return "preempted"
        return "interrupted" if flags[1] else reason

    def _iteration(self, origin: float) -> dict[str, Any]:
        t0 = time.perf_counter()
        rollout = self.collector.collect()
        if self.env.device.type == "cuda":
            torch.cuda.synchronize(self.env.device)  # time the collection, not its launch
        t1 = time.perf_counter()
        with torch_threads(self.num_update_threads):
            metrics = self.algo.update(rollout)
        check_divergence(self.divergence, metrics, self.state.iteration + 1, lambda: self.algo.learning_rate)
        t2 = time.perf_counter()
        steps = rollout.batch_size[0] * rollout.get_non_tensor("num_steps_collected")
        if self.dist.world_size > 1:
            steps = int(allreduce_sum(torch.tensor([steps], device=self.env.device)).item())
        st = self.state
        st.env_steps += steps
        st.iteration += 1
        record: dict[str, Any] = {"iteration": st.iteration, "env_steps": st.env_steps,
                                  "episode/return_mean": None, "episode/length_mean": None}
        record.update(self.collector.pop_metrics(reduce=allreduce_sum))
        record.update(metrics)
        out_of_time = self.max_wall_time_s is not None and time.perf_counter() - origin >= self.max_wall_time_s
        if st.env_steps >= st.next_eval or st.env_steps >= self.total_env_steps or out_of_time:
            st.next_eval = next_threshold(st.env_steps, self.eval_every)
            if self.dist.is_main:  # one evaluation per iteration; its stop decision is broadcast
                record.update(self._evaluate(origin))
        now = time.perf_counter()
        iteration_s = now - (origin + st.wall_time_s)
        st.wall_time_s = now - origin
        record.update({"wall_time_s": st.wall_time_s, "sps": steps / iteration_s,
                       "perf/collect_sps": steps / (t1 - t0), "perf/update_sps": steps / (t2 - t1)})
        if self.compile_s and st.iteration == self._first_iteration:
            record["perf/compile_s"] = self.compile_s
        st.last.update({k: v for k, v in record.items() if v is not None})
        return record

    def _account(self, record: dict[str, Any]) -> None:
        """After a logged record: check the configured metric names, update the stop conditions, keep
        ``best.pt``, call the callbacks."""
        evaluated = record.get("eval/return_mean") is not None
        self.metric_names.observe(record, evaluated)
        met = self.stops.update(record, self.state.stop_state)
        if met is not None and self.state.stop_condition is None:
            self.state.stop_condition = met
        if self.dist.is_main:
            if evaluated:
                self.callbacks.call("on_evaluation", record)
            self.callbacks.call("on_iteration", record)
        value, st = record.get(self.best_metric), self.state
        if isinstance(value, int | float) and math.isfinite(value) and (
                st.best_value is None or (value > st.best_value if self.best_mode == "max" else value < st.best_value)):
            st.best_metric, st.best_value, st.best_env_steps = self.best_metric, float(value), st.env_steps
            self._saved(self.save(best=True), record)

    def _saved(self, paths: list[Path], record: dict[str, Any]) -> None:
        for path in paths:
            self.callbacks.call("on_checkpoint", path, record)

    def _evaluate(self, origin: float) -> dict[str, Any]:
        metrics = self.evaluator.evaluate(self.num_eval_episodes, seed=self.eval_seed)
        out = {key: None for key in EVAL_KEYS}
        out.update(metrics)
        if self.video is not None and self.video.video:
            self._record_video(self.eval_seed)
        st = self.state
        if st.solved_env_steps is None and self.env.is_solved(metrics):
            st.solved_env_steps = st.env_steps
            st.solved_wall_time_s = time.perf_counter() - origin
        return out

    def _record_video(self, seed: int) -> None:
        v = self.video
        frames = record_episode(self.eval_env, self.policy, v.video_num_envs, v.video_size, seed)
        path = save_video(frames, self.run_dir / "videos" / f"eval_{self.state.env_steps:012d}.{v.video_format}",
                          v.video_fps)
        if self.loggers is not None:
            self.loggers.log_video("eval/video", frames, path, self.state.env_steps, v.video_fps)

    def stop_reason(self) -> str | None:
        """Why training should stop now, or None to go on."""
        if self.stop_on_solved and self.state.solved_env_steps is not None:
            return "solved"
        if self.state.stop_condition is not None:
            return "stop_on"
        if self.state.env_steps >= self.total_env_steps:
            return "total_env_steps"
        if self.max_wall_time_s is not None and self.state.wall_time_s >= self.max_wall_time_s:
            return "max_wall_time_s"
        return None

    # --- checkpoints ---------------------------------------------------------------------------------
    def checkpoint_state(self) -> dict[str, Any]:
        """Everything a resume needs (see :mod:`embodirl.runtime.checkpoint`)."""
        try:
            env_state = self.env.state_dict()
        except NotImplementedError:
            env_state = None
        return {
            "config": self.config,
            "policy": self.policy.state_dict(),
            "algo": self.algo.state_dict(),
            "trainer": asdict(self.state),
            "env": env_state,
            "collector": self.collector.state_dict() if env_state is not None else {},
            "rng": rng_state(),
        }

    def save(self, periodic: bool = False, best: bool = False) -> list[Path]:
        """Atomically write ``checkpoints/last.pt`` (and a periodic ``step_*.pt``), or only ``best.pt``; prune
        old periodic ones; return the files written.

        Rank 0 only. Pruning keeps the ``keep_checkpoints`` highest step counts; periodic checkpoints from
        beyond a resumed run's start were moved aside when it resumed, so they are never counted.
        """
        if not self.dist.is_main:
            return []
        data = serialize_checkpoint(self.checkpoint_state())
        written = [self.ckpt_dir / ("best.pt" if best else "last.pt")]
        atomic_write_bytes(written[0], data)
        if periodic and self.keep_checkpoints > 0:
            written.append(self.ckpt_dir / f"step_{self.state.env_steps:012d}.pt")
            atomic_write_bytes(written[1], data)
            periodic_files = sorted(_periodic_checkpoints(self.ckpt_dir).items())
            for _, old in periodic_files[: -self.keep_checkpoints]:
                old.unlink()
        return written

    def _resume(self) -> bool:
        """Continue from the run directory's ``last.pt`` if present, else from ``resume``; False if neither."""
        own = self.ckpt_dir / "last.pt"
        if own.exists():
            path, key = own, "checkpoint"
            if self.resume_path:
                log.info("%s exists: continuing this run directory's own progress (trainer.resume=%s is only used "
                         "to start a run directory that has none)", own, self.resume_path)
        elif self.resume_path:
            path, key = Path(self.resume_path), "trainer.resume"
        else:
            return False
        state = load_checkpoint(path, key=key)
        try:
            self.policy.load_state_dict(state["policy"])
            self.algo.load_state_dict(state["algo"])
            trainer_state = TrainState(**state["trainer"])
        except (RuntimeError, KeyError, ValueError, TypeError) as exc:
            raise CheckpointError(
                f"{key}={str(path)!r} does not fit this run's policy/algorithm ({str(exc).splitlines()[0]}). "
                "Fix: resume with the same policy, env and algo settings the checkpoint was trained with "
                "(they are stored in the run's .hydra/config.yaml)."
            ) from exc
        check_optimizer_state(self.algo.optimizer, f"{key}={str(path)!r}")
        if state["env"] is not None and self.dist.is_main:  # the checkpoint holds rank 0's env
            with env_mode():  # the mode the env is stepped in (its tensors may be inference tensors)
                self.env.load_state_dict(state["env"])
            self.collector.load_state_dict(state["collector"])
        else:
            if self.dist.is_main:
                log.warning("%s cannot restore its env state: resumed training starts fresh episodes",
                            type(self.env).__name__)
            self.collector.reset(seed=self.seed + trainer_state.iteration)
        if self.dist.is_main:
            set_rng_state(state["rng"])
            self._set_aside_checkpoints_after(trainer_state.env_steps)
        if trainer_state.stop_condition and not any(trainer_state.stop_condition.startswith(c.describe())
                                                     for c in self.stops.conditions):
            trainer_state.stop_condition = None  # trainer.stop_on changed: the condition that held is gone
        if trainer_state.best_metric != self.best_metric:
            trainer_state.best_value = trainer_state.best_env_steps = None  # trainer.best_metric changed
        self.state = trainer_state
        log.info("resumed from %s at env_steps=%d (iteration %d)", path, self.state.env_steps, self.state.iteration)
        return True

    def _set_aside_checkpoints_after(self, env_steps: int) -> None:
        """Move periodic checkpoints from beyond ``env_steps`` (an abandoned future) to ``checkpoints/superseded/``."""
        for steps, old in _periodic_checkpoints(self.ckpt_dir).items():
            if steps > env_steps:
                aside = self.ckpt_dir / "superseded"
                aside.mkdir(exist_ok=True)
                os.replace(old, aside / old.name)
                log.info("moved %s (beyond the resumed env_steps=%d) to %s", old.name, env_steps, aside)

    def summary(self, status: str, reason: str | None) -> dict[str, Any]:
        """The run's final record (``summary.json``)."""
        st = self.state
        out: dict[str, Any] = {"status": status, "stop_reason": reason,
                               "stop_condition": st.stop_condition if reason == "stop_on" else None,
                               "env_steps": st.env_steps,
                               "iterations": st.iteration, "wall_time_s": st.wall_time_s,
                               "sps": st.env_steps / st.wall_time_s if st.wall_time_s > 0 else None}
        out.update({k: st.last.get(k) for k in SUMMARY_KEYS})
        out.update({k: v for k, v in st.last.items() if k.startswith(("loss/", "diag/"))})
        out.update({"solved_metric": self.env.solved_metric, "solved_threshold": self.env.solved_threshold,
                    "solved_env_steps": st.solved_env_steps,
                    "solved_wall_time_s": st.solved_wall_time_s, "compile_s": self.compile_s,
                    "best_metric": self.best_metric, "best_value": st.best_value, "best_env_steps": st.best_env_steps,
                    "best_checkpoint": str((self.ckpt_dir / "best.pt").resolve()) if st.best_value is not None else None,
                    "run_dir": str(self.run_dir.resolve()),
                    "checkpoint": str((self.ckpt_dir / "last.pt").resolve()),
                    "distributed": self.sync or {"world_size": self.dist.world_size}})
        return out

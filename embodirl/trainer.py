"""The one training loop shared by every algorithm: collect -> update -> log -> evaluate -> checkpoint."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from embodirl.algos.base import BaseAlgorithm
from embodirl.build import torch_threads
from embodirl.checkpoint import (
    atomic_write_bytes,
    atomic_write_json,
    load_checkpoint,
    rng_state,
    serialize_checkpoint,
    set_rng_state,
)
from embodirl.collector import Collector
from embodirl.distributed import allreduce_max, allreduce_sum, broadcast_object, get_info, sync_report
from embodirl.envs.base import BatchedEnv
from embodirl.errors import CheckpointError, NonFiniteLossError, check
from embodirl.evaluation import evaluate_policy
from embodirl.loggers import MetricLoggers
from embodirl.preemption import PreemptionGuard
from embodirl.video import VideoSettings, record_episode, save_video

__all__ = ["Trainer", "TrainState"]

log = logging.getLogger(__name__)

EVAL_KEYS = ("eval/return_mean", "eval/return_std", "eval/length_mean", "eval/success_rate",
             "eval/success_once", "eval/success_at_end")
SUMMARY_KEYS = ("episode/return_mean", "episode/length_mean", "episode/success_rate", *EVAL_KEYS)


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


def next_threshold(value: int, every: int) -> int:
    """The first multiple of ``every`` strictly above ``value`` (cadences fire on crossing)."""
    return (value // every + 1) * every


class Trainer:
    """Trains ``algo``'s policy on ``collector``'s env until a stop condition holds.

    Args:
        collector: Fills rollouts from the training env.
        algo: The algorithm (owns the policy and optimizer).
        eval_env: Separate env instances for deterministic evaluation.
        run_dir: Output directory (metrics, checkpoints, summary).
        config: The resolved run config, stored in checkpoints.
        seed: Run seed (training env; the eval env uses a derived seed).
        make_loggers: ``f(resume_env_steps or None) -> MetricLoggers``.
        video: Evaluation video settings (None or ``video=False``: no videos).
        num_update_threads: torch intra-op threads during ``algo.update`` (None: unchanged).
        total_env_steps: Stop after this many env steps.
        eval_every_env_steps: Evaluate whenever a multiple of this is crossed (and at the end).
        num_eval_episodes: Episodes per evaluation.
        checkpoint_every_env_steps: Save ``last.pt`` and a periodic checkpoint when crossing a multiple.
        keep_checkpoints: Periodic checkpoints kept (oldest deleted first); ``last.pt`` is always kept.
        stop_on_solved: Stop once deterministic evaluation meets the env's solved criterion.
        max_wall_time_s: Stop after this much training wall time (None = no limit).
        resume: Checkpoint to resume from; None resumes ``run_dir/checkpoints/last.pt`` when present.
    """

    def __init__(self, collector: Collector, algo: BaseAlgorithm, eval_env: BatchedEnv, run_dir: Path,
                 config: dict, seed: int, make_loggers: Callable[[int | None], MetricLoggers], *,
                 video: VideoSettings | None = None, num_update_threads: int | None = None,
                 total_env_steps: int = 1_000_000, eval_every_env_steps: int = 50_000, num_eval_envs: int = 20,
                 num_eval_episodes: int = 20, checkpoint_every_env_steps: int = 250_000, keep_checkpoints: int = 3,
                 stop_on_solved: bool = True, max_wall_time_s: float | None = None, resume: str | None = None) -> None:
        check(total_env_steps >= 1, "total_env_steps", total_env_steps, "an int >= 1")
        check(eval_every_env_steps >= 1, "eval_every_env_steps", eval_every_env_steps, "an int >= 1")
        check(num_eval_envs >= 1, "num_eval_envs", num_eval_envs, "an int >= 1")
        check(num_eval_episodes >= 1, "num_eval_episodes", num_eval_episodes, "an int >= 1")
        check(checkpoint_every_env_steps >= 1, "checkpoint_every_env_steps", checkpoint_every_env_steps, "an int >= 1")
        check(keep_checkpoints >= 0, "keep_checkpoints", keep_checkpoints, "an int >= 0")
        check(max_wall_time_s is None or max_wall_time_s > 0, "max_wall_time_s", max_wall_time_s, "null or a float > 0")
        self.collector, self.algo, self.eval_env = collector, algo, eval_env
        self.env, self.policy = collector.env, algo.policy
        self.run_dir = Path(run_dir)
        self.ckpt_dir = self.run_dir / "checkpoints"
        self.config, self.seed, self.make_loggers = config, seed, make_loggers
        self.total_env_steps = total_env_steps
        self.eval_every = eval_every_env_steps
        self.num_eval_episodes = num_eval_episodes
        self.checkpoint_every = checkpoint_every_env_steps
        self.keep_checkpoints = keep_checkpoints
        self.stop_on_solved = stop_on_solved
        self.max_wall_time_s = max_wall_time_s
        self.resume_path = resume
        self.video = video
        self.num_update_threads = num_update_threads
        self.loggers: MetricLoggers | None = None
        self.dist = get_info()
        self.sync: dict[str, Any] | None = None
        self.state = TrainState(next_eval=eval_every_env_steps, next_checkpoint=checkpoint_every_env_steps)

    # --- the loop ------------------------------------------------------------------------------------
    def train(self) -> dict[str, Any]:
        """Train until a stop condition holds; write ``summary.json`` and return the summary."""
        resumed = self._resume()
        if not resumed:
            self.collector.reset(seed=self.seed)
        loggers = self.loggers = self.make_loggers(self.state.env_steps if resumed else None)
        status, reason = "running", None
        origin = time.perf_counter() - self.state.wall_time_s
        with PreemptionGuard() as guard:
            try:
                while (reason := self._agreed_stop(guard)) is None:
                    loggers.log(self._iteration(origin))
                    if self.state.env_steps >= self.state.next_checkpoint:
                        self.state.next_checkpoint = next_threshold(self.state.env_steps, self.checkpoint_every)
                        self.save(periodic=True)
                self.save()
                status = "preempted" if reason == "preempted" else "completed"
                self.sync = sync_report(self.policy, self.collector.rollout["obs"])
                if not self.sync["params_identical"]:
                    log.error("ranks hold different parameters after training: %s", self.sync)
            except NonFiniteLossError:
                status, reason = "failed", "non_finite_loss"
                raise
            except KeyboardInterrupt:
                status, reason = "interrupted", "keyboard_interrupt"
                self.save(name="interrupted.pt")  # last.pt stays at the last consistent iteration
                raise
            finally:
                loggers.close()
                summary = self.summary(status, reason)
                if self.dist.is_main:
                    atomic_write_json(self.run_dir / "summary.json", summary)
            if status == "preempted":
                guard.hand_over(call_previous=self.dist.is_main)  # submitit: requeue + exit; else PreemptedError
        return summary

    def _agreed_stop(self, guard: PreemptionGuard) -> str | None:
        """The stop decision every rank takes: rank 0's stop reason, or ``preempted`` if any rank was signalled."""
        reason = self.stop_reason() if self.dist.is_main else None
        preempted = guard.requested
        if self.dist.world_size > 1:
            preempted = bool(allreduce_max(torch.tensor([float(preempted)], device=self.env.device)).item())
            reason = broadcast_object(reason)
        return "preempted" if preempted else reason

    def _iteration(self, origin: float) -> dict[str, Any]:
        t0 = time.perf_counter()
        rollout = self.collector.collect()
        t1 = time.perf_counter()
        with torch_threads(self.num_update_threads):
            metrics = self.algo.update(rollout)
        t2 = time.perf_counter()
        steps = rollout.batch_size[0] * rollout.get_non_tensor("num_steps_collected")
        if self.dist.world_size > 1:
            steps = int(allreduce_sum(torch.tensor([steps], device=self.env.device)).item())
        st = self.state
        st.env_steps += steps
        st.iteration += 1
        record: dict[str, Any] = {"iteration": st.iteration, "env_steps": st.env_steps,
                                  "episode/return_mean": None, "episode/length_mean": None}
        record.update(self.env.episode_stats.pop(reduce=allreduce_sum))
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
        st.last.update({k: v for k, v in record.items() if v is not None})
        return record

    def _evaluate(self, origin: float) -> dict[str, Any]:
        eval_seed = self.seed + 1_000_003
        metrics = evaluate_policy(self.eval_env, self.policy, self.num_eval_episodes, seed=eval_seed)
        out = {key: None for key in EVAL_KEYS}
        out.update(metrics)
        if self.video is not None and self.video.video:
            self._record_video(eval_seed)
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
        if self.state.env_steps >= self.total_env_steps:
            return "total_env_steps"
        if self.max_wall_time_s is not None and self.state.wall_time_s >= self.max_wall_time_s:
            return "max_wall_time_s"
        return None

    # --- checkpoints ---------------------------------------------------------------------------------
    def checkpoint_state(self) -> dict[str, Any]:
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

    def save(self, periodic: bool = False, name: str = "last.pt") -> Path:
        """Atomically write ``checkpoints/<name>`` (and a periodic copy); prune old periodic ones. Rank 0 only."""
        path = self.ckpt_dir / name
        if not self.dist.is_main:
            return path
        data = serialize_checkpoint(self.checkpoint_state())
        atomic_write_bytes(path, data)
        if periodic and self.keep_checkpoints > 0:
            atomic_write_bytes(self.ckpt_dir / f"step_{self.state.env_steps:012d}.pt", data)
            for old in sorted(self.ckpt_dir.glob("step_*.pt"))[: -self.keep_checkpoints]:
                old.unlink()
        return path

    def _resume(self) -> bool:
        path = Path(self.resume_path) if self.resume_path else self.ckpt_dir / "last.pt"
        if self.resume_path is None and not path.exists():
            return False
        state = load_checkpoint(path, key="trainer.resume")
        try:
            self.policy.load_state_dict(state["policy"])
            self.algo.load_state_dict(state["algo"])
        except (RuntimeError, KeyError, ValueError) as exc:
            raise CheckpointError(
                f"trainer.resume={str(path)!r} does not fit this run's policy/algorithm ({str(exc).splitlines()[0]}). "
                "Fix: resume with the same policy, env and algo settings the checkpoint was trained with "
                "(they are stored in the run's .hydra/config.yaml)."
            ) from exc
        if state["env"] is not None and self.dist.is_main:  # the checkpoint holds rank 0's env
            self.env.load_state_dict(state["env"])
            self.collector.load_state_dict(state["collector"])
        else:
            if self.dist.is_main:
                log.warning("%s cannot restore its env state: resumed training starts fresh episodes",
                            type(self.env).__name__)
            self.collector.reset(seed=self.seed + state["trainer"]["iteration"])
        if self.dist.is_main:
            set_rng_state(state["rng"])
        self.state = TrainState(**state["trainer"])
        log.info("resumed from %s at env_steps=%d (iteration %d)", path, self.state.env_steps, self.state.iteration)
        return True

    def summary(self, status: str, reason: str | None) -> dict[str, Any]:
        """The run's final record (``summary.json``)."""
        st = self.state
        out: dict[str, Any] = {"status": status, "stop_reason": reason, "env_steps": st.env_steps,
                               "iterations": st.iteration, "wall_time_s": st.wall_time_s,
                               "sps": st.env_steps / st.wall_time_s if st.wall_time_s > 0 else None}
        out.update({k: st.last.get(k) for k in SUMMARY_KEYS})
        out.update({k: v for k, v in st.last.items() if k.startswith(("loss/", "diag/"))})
        out.update({"solved_metric": self.env.solved_metric, "solved_threshold": self.env.solved_threshold,
                    "solved_env_steps": st.solved_env_steps,
                    "solved_wall_time_s": st.solved_wall_time_s, "run_dir": str(self.run_dir.resolve()),
                    "checkpoint": str((self.ckpt_dir / "last.pt").resolve()),
                    "distributed": self.sync or {"world_size": self.dist.world_size}})
        return out

"""The one training loop shared by every algorithm: collect -> update -> log -> evaluate -> checkpoint.

The Trainer runs the loop and nothing else; each other job is a part it composes: checkpoints and resuming
(:class:`~embodirl.training.checkpointing.Checkpointer`), periodic evaluation, videos and "solved"
(:class:`~embodirl.training.evaluation.PeriodicEvaluation`), ``best.pt``
(:class:`~embodirl.training.best.BestTracker`), stop conditions (:mod:`embodirl.training.stopping`), callbacks
(:mod:`embodirl.training.callbacks`), the loggers (:mod:`embodirl.training.loggers`) and ``summary.json``
(:mod:`embodirl.training.summary`). Whatever differs between algorithms lives behind ``algo.update``.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from tensordict import TensorDict

from embodirl.algos.base import Algorithm
from embodirl.collect.collector import Collector
from embodirl.config.instantiate import instantiate
from embodirl.config.training import TrainerConfig
from embodirl.runtime.distributed import allreduce_max, allreduce_sum, broadcast_object, get_info, sync_report
from embodirl.runtime.preemption import Interrupted, StopSignals
from embodirl.runtime.status import fate_of
from embodirl.training.best import BestTracker
from embodirl.training.cadence import RecordWindow
from embodirl.training.callbacks import Callbacks
from embodirl.training.checkpointing import Checkpointer
from embodirl.training.curriculum import Curriculum
from embodirl.training.divergence import check_divergence
from embodirl.training.evaluation import PeriodicEvaluation
from embodirl.training.loggers import Loggers, MetricLoggers
from embodirl.training.state import TrainState, next_threshold
from embodirl.training.stopping import StopConditions, metric_names, stop_conditions, stop_reason, success_stop
from embodirl.training.summary import end_reason, run_summary, write_summary

__all__ = ["TrainState", "Trainer"]

log = logging.getLogger(__name__)


@contextlib.contextmanager
def torch_threads(num_threads: int | None) -> Iterator[None]:
    """Run a block with ``num_threads`` intra-op threads (None: leave as is), then restore."""
    previous = torch.get_num_threads()
    if num_threads is not None and num_threads != previous:
        torch.set_num_threads(num_threads)
    try:
        yield
    finally:
        if torch.get_num_threads() != previous:
            torch.set_num_threads(previous)


class Trainer:
    """Trains ``algo``'s policy on ``collector``'s env until a stop condition holds.

    Args:
        cfg: The ``trainer`` node.
        collector: Fills rollouts from the training env.
        algo: The algorithm (owns the policy and optimizer).
        evaluation: Evaluates when due, films, notes when the run is solved.
        loggers: Where metrics go, opened when training starts.
        run_dir: Output directory (metrics, checkpoints, summary).
        config: The resolved run config, stored in checkpoints.
        seed: This rank's seed (training env reset stream).
        num_update_threads: torch intra-op threads during ``algo.update`` (None: unchanged).
        compile_s: Seconds the compile warm-up took before training (reported as ``perf/compile_s``).
    """

    def __init__(self, cfg: TrainerConfig, *, collector: Collector, algo: Algorithm,
                 evaluation: PeriodicEvaluation, loggers: Loggers, run_dir: Path, config: dict, seed: int,
                 num_update_threads: int | None = None, compile_s: float = 0.0) -> None:
        self.cfg, self.collector, self.algo, self.evaluation, self.loggers = cfg, collector, algo, evaluation, loggers
        self.env = collector.env
        self.run_dir, self.seed = Path(run_dir), seed
        self.num_update_threads, self.compile_s = num_update_threads, compile_s
        self.dist = get_info()
        self.checkpointer = Checkpointer(self.run_dir / "checkpoints", collector=collector, algo=algo, config=config,
                                         keep=cfg.keep_checkpoints, resume=cfg.resume, is_main=self.dist.is_main)
        self.policy = self.checkpointer.policy
        configured = stop_conditions(cfg.stop_on)
        self.stops = StopConditions([*configured, *success_stop(self.env.solved_threshold, cfg.stop_on_solved)])
        self.best = BestTracker(cfg.best_metric or self.env.solved_metric, cfg.best_mode)
        best_key = "trainer.best_metric" if cfg.best_metric else "env.solved_metric"
        self.curriculum = Curriculum(cfg.curriculum, self.env)
        thresholds = [(f"trainer.curriculum.{name}.metric", entry.metric)
                      for name, entry in cfg.curriculum.items() if entry.metric is not None]
        self.metric_names = metric_names(configured, (best_key, self.best.metric),
                                         getattr(self.env, "info_metrics", ()), getattr(self.env, "reward_terms", ()),
                                         thresholds)
        self.callbacks = Callbacks([instantiate(node, f"trainer.callbacks[{i}].")
                                    for i, node in enumerate(cfg.callbacks)])
        self.state = TrainState(next_eval=evaluation.cfg.every_env_steps,
                                next_checkpoint=cfg.checkpoint_every_env_steps)
        self.sync: dict[str, Any] | None = None  # the ranks' parameter check after training
        self.started_at: float | None = None  # time.time() when train() started its clock
        self.window = RecordWindow(cfg.log_every_env_steps)  # restarted at the resumed count in _start

    def train(self) -> dict[str, Any]:
        """Train until a stop condition holds; write ``summary.json`` and return the summary.

        Raises:
            PreemptedError: Stopped on SIGTERM/SIGUSR2 after saving (after submitit's requeue handler ran).
            Interrupted: Stopped on Ctrl-C after finishing the iteration and saving ``last.pt``.
            KeyboardInterrupt: A second Ctrl-C aborted at once (``last.pt`` keeps the last saved state).
        """
        self._start()
        loggers = self.loggers.open(self.state.env_steps)
        origin = time.perf_counter() - self.state.wall_time_s  # the clock continues a resumed run's wall time
        self.started_at = time.time()
        status, reason, failed = "running", None, False
        with StopSignals(defer=True) as signals:
            try:
                while (reason := self._agreed_stop(signals)) is None:
                    self._iteration(origin, loggers)
                status = self._finish(reason, loggers)
            except BaseException as exc:
                status, failed = fate_of(exc), True
                reason = end_reason(exc, status, reason)
                loggers.close_quietly()
                raise
            finally:
                summary = self._end(status, reason, failed)
            if status == "preempted":
                signals.hand_over(call_previous=self.dist.is_main)  # submitit: requeue + exit; else PreemptedError
        if status == "interrupted":
            raise Interrupted(f"stopped on Ctrl-C after saving checkpoints/last.pt at env_steps="
                              f"{self.state.env_steps:,}; train again in {self.run_dir} (hydra.run.dir) to resume")
        return summary

    def _start(self) -> None:
        """Continue from a checkpoint, or reset the envs for a fresh start."""
        resumed = self.checkpointer.resume(self.seed)
        if resumed is not None:
            self.stops.resumed(resumed)  # a changed trainer.stop_on forgets the condition that held
            self.best.resumed(resumed)  # a changed trainer.best_metric forgets the best value
            self.state = resumed
        self.curriculum.start(self.state.curriculum)  # level 0, or where the checkpoint left it
        if resumed is None:
            self.collector.reset(seed=self.seed)
        self.window = RecordWindow(self.cfg.log_every_env_steps, logged_at=self.state.env_steps)
        self._first_iteration = self.state.iteration + 1
        for part in (self.collector, self.algo, self.evaluation.evaluator):
            part.use_cuda_graphs()  # recorded at their next calls; every buffer they read is final by now

    def _iteration(self, origin: float, loggers: MetricLoggers) -> None:
        """One iteration: collect -> update -> evaluate when due -> log -> checkpoint when due."""
        t0 = time.perf_counter()
        rollout = self.collector.collect()  # collect: num_steps steps of every env, with the policy's outputs
        if self.env.device.type == "cuda":
            torch.cuda.synchronize(self.env.device)  # time the collection, not its launch
        t1 = time.perf_counter()
        with torch_threads(self.num_update_threads):
            metrics = self.algo.update(rollout)  # update: everything algorithm-specific happens in here
        # Fail before a diverged update is logged or saved: last.pt keeps the last good state.
        check_divergence(self.cfg.divergence, metrics, self.state.iteration + 1, lambda: self.algo.learning_rate)
        t2 = time.perf_counter()
        steps = self._count(rollout)
        record = {**self._advance(steps), **self._episode_metrics(), **metrics}  # the iteration's record
        final = self._final(origin)
        evaluated = self.evaluation.due(self.state, final=final) and self.dist.is_main
        if evaluated:  # evaluate: rank 0 only, at most once per iteration; its stop decision reaches the others
            record.update(self.evaluation.run(self.state, lambda: time.perf_counter() - origin, loggers))
        record.update(self.curriculum.update(self.state.env_steps, record))  # curriculum: move ranges when due
        self.state.curriculum = dict(self.curriculum.levels)
        record.update(self._timing(origin, steps, t0, t1, t2))
        self.state.last.update({k: v for k, v in record.items() if v is not None})  # the summary's last values
        logged = self.window.add(record, force=evaluated or final)  # the mean since the last log, when due
        if logged is not None:
            loggers.log(logged)  # log: metrics.jsonl, the console, TensorBoard, wandb
            self._after_record(logged)  # metric-name checks, stop conditions, callbacks, best.pt
        if self.state.env_steps >= self.state.next_checkpoint:  # checkpoint: last.pt and a periodic step_*.pt
            self.state.next_checkpoint = next_threshold(self.state.env_steps, self.cfg.checkpoint_every_env_steps)
            self._saved(self.checkpointer.save(self.state, periodic=True), self.state.last)

    def _count(self, rollout: TensorDict) -> int:
        """Env steps the rollout holds, summed over the ranks."""
        steps = rollout.batch_size[0] * rollout.get_non_tensor("num_env_steps",
                                                               rollout.get_non_tensor("num_steps_collected"))
        if self.dist.world_size > 1:
            steps = int(allreduce_sum(torch.tensor([steps], device=self.env.device)).item())
        return steps

    def _advance(self, steps: int) -> dict[str, Any]:
        """Count the iteration; the record's first keys (episode means stay None when no episode ended)."""
        self.state.env_steps += steps
        self.state.iteration += 1
        return {"iteration": self.state.iteration, "env_steps": self.state.env_steps,
                "episode/return_mean": None, "episode/length_mean": None}

    def _episode_metrics(self) -> dict[str, Any]:
        """The training episodes that ended in this iteration (``episode/*``), summed over the ranks."""
        return self.collector.pop_metrics(reduce=allreduce_sum)

    def _final(self, origin: float) -> bool:
        """Whether this iteration ends the run by its budget or its wall time (it then evaluates)."""
        limit = self.cfg.max_wall_time_s
        out_of_time = limit is not None and time.perf_counter() - origin >= limit
        return self.state.env_steps >= self.cfg.total_env_steps or out_of_time

    def _timing(self, origin: float, steps: int, t0: float, t1: float, t2: float) -> dict[str, Any]:
        """The iteration's wall time and speeds; the compile time on the first iteration of this attempt."""
        now = time.perf_counter()
        iteration_s = now - (origin + self.state.wall_time_s)
        self.state.wall_time_s = now - origin
        out = {"wall_time_s": self.state.wall_time_s, "sps": steps / iteration_s,
               "perf/collect_sps": steps / (t1 - t0), "perf/update_sps": steps / (t2 - t1)}
        if self.compile_s and self.state.iteration == self._first_iteration:
            out["perf/compile_s"] = self.compile_s
        return out

    def _after_record(self, record: dict[str, Any]) -> None:
        """After a logged record: check the configured metric names, update the stop conditions, call the
        callbacks, keep ``best.pt``."""
        evaluated = record.get("eval/return_mean") is not None
        self.metric_names.observe(record, evaluated)
        met = self.stops.update(record, self.state.stop_state)
        if met is not None and self.state.stop_condition is None:
            self.state.stop_condition = met
        if self.dist.is_main:
            if evaluated:
                self.callbacks.call("on_evaluation", record)
            self.callbacks.call("on_iteration", record)
        if self.best.improved(record, self.state):
            self._saved(self.checkpointer.save(self.state, best=True), record)

    def _saved(self, paths: list[Path], record: dict[str, Any]) -> None:
        for path in paths:
            self.callbacks.call("on_checkpoint", path, record)

    def _agreed_stop(self, signals: StopSignals) -> str | None:
        """The stop decision every rank takes: ``preempted`` or ``interrupted`` if any rank was signalled,
        else rank 0's stop reason."""
        reason = stop_reason(self.state, self.cfg) if self.dist.is_main else None
        flags = [float(signals.requested), float(signals.interrupted)]
        if self.dist.world_size > 1:
            flags = allreduce_max(torch.tensor(flags, device=self.env.device)).tolist()
            reason = broadcast_object(reason)
        if flags[0]:
            return "preempted"
        return "interrupted" if flags[1] else reason

    def _finish(self, reason: str | None, loggers: MetricLoggers) -> str:
        """After the last iteration: save ``last.pt``, compare the ranks' parameters, close the loggers; the status."""
        pending = self.window.pop()  # the iterations since the last log (a stop by signal, or on a train metric)
        if pending is not None:
            loggers.log(pending)
        self._saved(self.checkpointer.save(self.state), self.state.last)
        networks = self.algo.networks().values()  # an off-policy algorithm's critics and targets
        self.sync = sync_report(torch.nn.ModuleList([self.policy, *networks]), self.collector.rollout["obs"])
        if not self.sync["params_identical"]:
            log.error("ranks hold different parameters after training: %s", self.sync)
        if reason == "stop_on" and self.state.stop_condition is not None:
            loggers.note_stop_condition(self.state.stop_condition)
        loggers.close()
        return reason if reason in ("preempted", "interrupted") else "completed"

    def _end(self, status: str, reason: str | None, failed: bool) -> dict[str, Any]:
        """Write ``summary.json`` and call ``on_end`` (rank 0); also when the run failed (``failed``)."""
        summary = run_summary(self.state, status, reason, env=self.env, best_metric=self.best.metric,
                              compile_s=self.compile_s, run_dir=self.run_dir,
                              distributed=self.sync or {"world_size": self.dist.world_size},
                              started_at=self.started_at)
        if self.dist.is_main:
            write_summary(self.run_dir, summary)
            if failed:
                self.callbacks.end_quietly(summary)  # a callback's own failure must not hide the run's
            else:
                self.callbacks.call("on_end", summary)
        return summary

"""Periodic evaluation during training (the ``eval`` node): when it is due, its record, its video, "solved".

Every time ``eval.every_env_steps`` is crossed (and at the end of the budget or the wall time), rank 0 runs
``eval.num_episodes`` deterministic episodes on the evaluation envs, always from the same seeded starts, so two
evaluations differ only through the policy. With ``eval.video`` one episode is also filmed. The first evaluation
that meets the env's solved criterion records when the run was solved.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from embodirl.collect.evaluator import Evaluator
from embodirl.config.training import EvalConfig
from embodirl.training.loggers import MetricLoggers
from embodirl.training.state import TrainState, next_threshold
from embodirl.training.video import record_episode, save_video

__all__ = ["EVAL_KEYS", "PeriodicEvaluation"]

# Logged by every evaluation (None where the env does not report them), so every evaluation record has them.
EVAL_KEYS = ("eval/return_mean", "eval/return_std", "eval/length_mean", "eval/success_rate",
             "eval/success_once", "eval/success_at_end")


class PeriodicEvaluation:
    """Decides when to evaluate, evaluates, films, and records when the run was first solved.

    Args:
        cfg: The ``eval`` node.
        evaluator: Runs the deterministic episodes on the evaluation envs.
        run_dir: Videos go to ``<run_dir>/videos``.
        seed: The evaluation episodes' seed (:func:`embodirl.app.build.eval_seed`).
        is_solved: The run's solved criterion over evaluation metrics: the training env's, which the console
            and the summary report (``eval.env_overrides`` do not change it).
    """

    def __init__(self, cfg: EvalConfig, *, evaluator: Evaluator, run_dir: Path, seed: int,
                 is_solved: Callable[[dict[str, Any]], bool]) -> None:
        self.cfg, self.evaluator, self.run_dir, self.seed = cfg, evaluator, Path(run_dir), seed
        self.env, self.is_solved = evaluator.env, is_solved

    def due(self, state: TrainState, final: bool) -> bool:
        """Whether this iteration evaluates (a multiple crossed, or ``final``); if so, schedule the next one."""
        if state.env_steps < state.next_eval and not final:
            return False
        state.next_eval = next_threshold(state.env_steps, self.cfg.every_env_steps)
        return True

    def run(self, state: TrainState, clock: Callable[[], float], loggers: MetricLoggers | None) -> dict[str, Any]:
        """Evaluate (and film); note when the run is first solved. Returns the ``eval/*`` part of the record.

        Args:
            state: The trainer's counters (``solved_*`` are set here).
            clock: The training wall time so far, in seconds (read once the evaluation is done).
            loggers: Where the video goes besides its file (None: the file only).
        """
        metrics = self.evaluator.evaluate(self.cfg.num_episodes, seed=self.seed)
        out: dict[str, Any] = {key: None for key in EVAL_KEYS}
        out.update(metrics)
        if self.cfg.video:
            self._film(state.env_steps, loggers)
        if state.solved_env_steps is None and self.is_solved(metrics):
            state.solved_env_steps = state.env_steps
            state.solved_wall_time_s = clock()
        return out

    def _film(self, env_steps: int, loggers: MetricLoggers | None) -> None:
        """One deterministic episode of the first evaluation envs, saved and handed to the loggers."""
        cfg = self.cfg
        frames = record_episode(self.env, self.evaluator.policy, cfg.num_filmed(self.env.num_envs), cfg.video_size,
                                self.seed)
        path = save_video(frames, self.run_dir / "videos" / f"eval_{env_steps:012d}.{cfg.video_format}", cfg.video_fps)
        if loggers is not None:
            loggers.log_video("eval/video", frames, path, env_steps, cfg.video_fps)

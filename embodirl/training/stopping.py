"""Stop conditions on logged metrics (``trainer.stop_on``): thresholds and plateaus.

Each entry of ``trainer.stop_on`` is one condition; the run stops after the first iteration whose record
makes any of them hold (besides the budget, ``stop_on_solved`` and the wall-time limit):

* a threshold ``{metric: eval/return_mean, op: ">=", value: 400}`` (``op``: ``>=``, ``>``, ``<=``, ``<``,
  ``==``) holds when the metric's latest value compares true;
* a plateau ``{metric: eval/return_mean, plateau: {patience_evals: 5, min_delta: 1.0, mode: max}}`` holds
  once the metric has gone ``patience_evals`` values in a row without beating its best so far by more
  than ``min_delta`` (``mode: min`` for metrics that should fall). ``eval/*`` metrics get one value per
  evaluation; any other metric one per iteration.

A run whose env has no solved threshold (a gymnasium id that registers none, your own env) also stops once
``eval/success_rate >= 0.9`` where the env reports success (:func:`success_stop`): the success-based stop of
``env=torch_vector`` and the native tasks. :func:`goal_note` is the log line that says how a run stops.

Metric names are checked against what the run logs (:class:`MetricNames`): before training for the names
known in advance, and after the first record (``loss/*``, ``diag/*``, ``perf/*``) or the first
evaluation (success metrics, which exist only for envs that report success) for the others.
"""

from __future__ import annotations

import logging
import math
import operator
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeGuard

from embodirl.config.training import StopOnConfig, TrainerConfig
from embodirl.errors import ConfigError
from embodirl.training.console import StopGoal
from embodirl.training.state import TrainState

__all__ = ["ALWAYS_LOGGED", "SUCCESS_KEYS", "SUCCESS_STOP", "MetricNames", "Plateau", "StopConditions", "Threshold",
           "goal_note", "metric_names", "stop_conditions", "stop_reason", "success_stop"]

OPS = {">=": operator.ge, ">": operator.gt, "<=": operator.le, "<": operator.lt, "==": operator.eq}
# Metrics every run logs (every iteration, or at every evaluation); others depend on the algorithm or the env.
ALWAYS_LOGGED = ("iteration", "env_steps", "wall_time_s", "sps", "perf/collect_sps", "perf/update_sps",
                 "episode/count", "episode/return_mean", "episode/length_mean", "eval/return_mean",
                 "eval/return_std", "eval/length_mean", "eval/num_episodes")
# Logged only for envs that report success: known once the first evaluation has run.
SUCCESS_KEYS = ("episode/success_rate", "eval/success_rate", "eval/success_once", "eval/success_at_end")
SUCCESS_STOP = 0.9  # eval/success_rate that stops a run whose env has no solved threshold (torch_vector's default)


def _number(value: Any) -> TypeGuard[int | float]:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


@dataclass(frozen=True)
class Threshold:
    """Stop when ``metric op value`` holds for the metric's latest value."""

    metric: str
    op: Literal[">=", ">", "<=", "<", "=="]
    value: float

    def describe(self) -> str:
        return f"{self.metric} {self.op} {self.value:g}"


@dataclass(frozen=True)
class Plateau:
    """Stop after ``patience_evals`` values in a row that do not beat the best by more than ``min_delta``."""

    metric: str
    patience_evals: int
    min_delta: float = 0.0
    mode: Literal["max", "min"] = "max"

    def describe(self) -> str:
        return (f"{self.metric} plateau: no {'gain' if self.mode == 'max' else 'drop'} > {self.min_delta:g} "
                f"in {self.patience_evals} values")


def stop_conditions(entries: Sequence[StopOnConfig]) -> list[Threshold | Plateau]:
    """The checked ``trainer.stop_on`` entries as conditions."""
    conditions: list[Threshold | Plateau] = []
    for entry in entries:
        if entry.plateau is not None:
            p = entry.plateau
            conditions.append(Plateau(entry.metric, p.patience_evals, float(p.min_delta), p.mode))
        elif entry.op is not None and entry.value is not None:  # StopOnConfig.check: one of the two shapes
            conditions.append(Threshold(entry.metric, entry.op, float(entry.value)))
    return conditions


def success_stop(solved_threshold: float | None, stop_on_solved: bool) -> list[Threshold]:
    """``[eval/success_rate >= 0.9]`` for a run that stops once solved but whose env has no solved threshold, else
    ``[]``. The condition never holds for an env that reports no success: its ``eval/success_rate`` is None."""
    if solved_threshold is not None or not stop_on_solved:
        return []
    return [Threshold("eval/success_rate", ">=", SUCCESS_STOP)]


def goal_note(goal: StopGoal, env_name: str, source: str, recipes: Sequence[str]) -> tuple[int, str]:
    """The log level and line that say how a run stops: at its solved threshold, naming where the threshold comes
    from, or (a warning) at its budget, pointing at the recipes that tune the env and at the keys that set a goal.

    Args:
        goal: The budget and the solved criterion.
        env_name: The env, e.g. ``Pendulum-v1`` (a gymnasium id) or ``env=cartpole``.
        source: Where the threshold comes from (:func:`embodirl.config.envs.threshold_source`).
        recipes: ``experiment=`` recipes for this env (:func:`embodirl.config.envs.recipes_for`).
    """
    if goal.solved_threshold is not None:
        action = "stops" if goal.stop_on_solved else "counts as solved"
        return logging.INFO, (f"the run {action} once {goal.solved_metric} >= {goal.solved_threshold:g} ({source}; "
                              f"set another with env.solved_threshold=<value>)")
    recipe = f"use a recipe tuned for it ({', '.join(f'experiment={r}' for r in recipes)}), or " if recipes else ""
    return logging.WARNING, (f"{env_name} has no solved threshold (env.solved_threshold is null and so is {source}): "
                             f"the run stops after trainer.total_env_steps={goal.total_env_steps:,} env steps (sooner "
                             f"only if the env reports success: eval/success_rate >= {SUCCESS_STOP:g}); {recipe}set a "
                             "goal with env.solved_threshold=<eval return> or trainer.stop_on")


def stop_reason(state: TrainState, cfg: TrainerConfig) -> str | None:
    """Why training should stop now (``solved``, ``stop_on``, ``total_env_steps``, ``max_wall_time_s``), or None."""
    if cfg.stop_on_solved and state.solved_env_steps is not None:
        return "solved"
    if state.stop_condition is not None:
        return "stop_on"
    if state.env_steps >= cfg.total_env_steps:
        return "total_env_steps"
    if cfg.max_wall_time_s is not None and state.wall_time_s >= cfg.max_wall_time_s:
        return "max_wall_time_s"
    return None


class StopConditions:
    """Evaluates conditions on every record; the plateau bookkeeping is a plain dict (checkpointed).

    Args:
        conditions: From :func:`stop_conditions`.
    """

    def __init__(self, conditions: list[Threshold | Plateau]) -> None:
        self.conditions = conditions

    def resumed(self, state: TrainState) -> None:
        """Forget a resumed run's met condition when ``trainer.stop_on`` no longer holds it."""
        if state.stop_condition and not any(state.stop_condition.startswith(c.describe()) for c in self.conditions):
            state.stop_condition = None

    def update(self, record: dict[str, Any], state: dict[str, list]) -> str | None:
        """Account ``record``; return the description of the first condition that holds, else None.

        Args:
            record: One iteration's metrics (values may be None: not measured this iteration).
            state: ``description -> [best, values_without_improvement]`` for plateaus, updated in place (keyed by
                the condition, so a changed ``trainer.stop_on`` on resume starts its plateaus afresh).
        """
        met = None
        for cond in self.conditions:
            value = record.get(cond.metric)
            if not _number(value):
                continue
            if isinstance(cond, Threshold):
                if met is None and OPS[cond.op](value, cond.value):
                    met = f"{cond.describe()} (value {value:g})"
                continue
            best, stale = state.get(cond.describe(), [None, 0])
            sign = 1.0 if cond.mode == "max" else -1.0
            if best is None or sign * (value - best) > cond.min_delta:
                best, stale = value, 0
            else:
                stale += 1
            state[cond.describe()] = [best, stale]
            if met is None and stale >= cond.patience_evals:
                met = f"{cond.describe()} (best {best:g})"
        return met


class MetricNames:
    """Checks configured metric names against what the run logs, as early as each can be known.

    Args:
        uses: ``(config key, metric name)`` pairs, e.g. ``("trainer.stop_on[0].metric", "eval/return_mean")``.
        known: Names every record or every evaluation of this run carries (checked before training).
        after_record: Name prefixes known only from the first record (the algorithm's ``loss/*`` ...).
        after_evaluation: Names known only from the first evaluation (success metrics).
    """

    def __init__(self, uses: list[tuple[str, str]], known: Iterable[str], after_record: tuple[str, ...],
                 after_evaluation: Iterable[str]) -> None:
        self.known, self.after_record, self.after_evaluation = set(known), after_record, set(after_evaluation)
        self.pending: list[tuple[str, str]] = []
        for key, name in uses:
            if name in self.known:
                continue
            if name.startswith(after_record) or name in self.after_evaluation:
                self.pending.append((key, name))
            else:
                self._fail(key, name, self.known, " and the algorithm's loss/*, diag/*, perf/* metrics; "
                           "success metrics for envs that report success")
        self.seen: set[str] = set()
        self.records = 0

    def observe(self, record: dict[str, Any], evaluated: bool) -> None:
        """Account one record; raise for a pending name that this record proves the run never logs."""
        if not self.pending:
            return
        self.seen.update(k for k, v in record.items() if v is not None)
        self.records += 1
        if "eval/success_rate" in self.seen:  # an env that reports success also logs it for training episodes
            self.seen.add("episode/success_rate")
        for key, name in self.pending:
            decided = evaluated if name in self.after_evaluation else self.records >= 1
            if name not in self.seen and decided:
                self._fail(key, name, self.known | self.seen)
        self.pending = [(k, n) for k, n in self.pending if n not in self.seen]

    @staticmethod
    def _fail(key: str, name: str, names: set[str], more: str = "") -> None:
        listed = ", ".join(sorted(names))
        raise ConfigError(key, name, f"a metric this run logs (one of: {listed}{more})",
                          "pick one of them (metrics.jsonl of any run lists them all)", absolute=True)


def metric_names(conditions: Sequence[Threshold | Plateau], best: tuple[str, str],
                 info_metrics: Iterable[str] = (), reward_terms: Iterable[str] = (),
                 more: Sequence[tuple[str, str]] = ()) -> MetricNames:
    """The checks of the metric names a run's config uses: its stop conditions, its best metric and ``more``.

    Args:
        conditions: The ``trainer.stop_on`` conditions.
        best: ``(config key, metric)`` of the best checkpoint's metric (``trainer.best_metric`` or
            ``env.solved_metric``).
        info_metrics: The env's ``info_metrics`` (logged as ``episode/metrics/*`` and ``eval/metrics/*``).
        reward_terms: The env's ``reward_terms`` (logged as ``episode/rewards/*`` and ``eval/rewards/*``).
        more: Further ``(config key, metric)`` uses, e.g. the curriculum's thresholds.
    """
    info = [f"{family}/metrics/{key}" for family in ("episode", "eval") for key in info_metrics]
    info += [f"{family}/rewards/{term}" for family in ("episode", "eval") for term in reward_terms]
    uses = [(f"trainer.stop_on[{i}].metric", c.metric) for i, c in enumerate(conditions)] + [best, *more]
    return MetricNames(uses, known=(*ALWAYS_LOGGED, *info), after_record=("loss/", "diag/", "perf/"),
                       after_evaluation=SUCCESS_KEYS)

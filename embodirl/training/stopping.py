"""Stop conditions on logged metrics (``trainer.stop_on``): thresholds and plateaus.

Each entry of ``trainer.stop_on`` is one condition; the run stops after the first iteration whose record
makes any of them hold (besides the budget, ``stop_on_solved`` and the wall-time limit):

* a threshold ``{metric: eval/return_mean, op: ">=", value: 400}`` (``op``: ``>=``, ``>``, ``<=``, ``<``,
  ``==``) holds when the metric's latest value compares true;
* a plateau ``{metric: eval/return_mean, plateau: {patience_evals: 5, min_delta: 1.0, mode: max}}`` holds
  once the metric has gone ``patience_evals`` values in a row without beating its best so far by more
  than ``min_delta`` (``mode: min`` for metrics that should fall). ``eval/*`` metrics get one value per
  evaluation; any other metric one per iteration.

Metric names are checked against what the run logs (:class:`MetricNames`): before training for the names
known in advance, and after the first record (``loss/*``, ``diag/*``, ``perf/*``) or the first
evaluation (success metrics, which exist only for envs that report success) for the others.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

from embodirl.errors import ConfigError, check, check_choice

__all__ = ["MetricNames", "Plateau", "StopConditions", "Threshold", "parse_stop_on"]

OPS = {">=": operator.ge, ">": operator.gt, "<=": operator.le, "<": operator.lt, "==": operator.eq}
_EXAMPLE = "trainer.stop_on=[{metric: eval/return_mean, op: '>=', value: 400}]"


def _number(value: Any) -> bool:
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


def parse_stop_on(items: Iterable[Any] | None) -> list[Threshold | Plateau]:
    """``trainer.stop_on`` entries (plain dicts) as conditions; every key and value checked.

    Raises:
        ConfigError: Keyed ``stop_on[i].<key>`` (the trainer prefixes ``trainer.``).
    """
    conditions: list[Threshold | Plateau] = []
    for i, item in enumerate(items or []):
        key = f"stop_on[{i}]"
        check(isinstance(item, dict), key, item, "a mapping {metric, op, value} or {metric, plateau: {...}}",
              f"pass e.g. {_EXAMPLE}")
        metric = item.get("metric")
        check(isinstance(metric, str) and bool(metric), f"{key}.metric", metric,
              "a logged metric name such as eval/return_mean", f"pass e.g. {_EXAMPLE}")
        if "plateau" in item:
            conditions.append(_plateau(key, metric, item))
            continue
        unknown = sorted(set(item) - {"metric", "op", "value"})
        check(not unknown, f"{key}.{unknown[0] if unknown else ''}", item.get(unknown[0]) if unknown else None,
              "one of the keys metric, op, value (or metric, plateau)", f"remove it, e.g. {_EXAMPLE}")
        check_choice(f"{key}.op", item.get("op"), list(OPS))
        check(_number(item.get("value")), f"{key}.value", item.get("value"), "a finite number",
              f"pass e.g. {_EXAMPLE}")
        conditions.append(Threshold(metric, item["op"], float(item["value"])))
    return conditions


def _plateau(key: str, metric: str, item: dict) -> Plateau:
    unknown = sorted(set(item) - {"metric", "plateau"})
    check(not unknown, f"{key}.{unknown[0] if unknown else ''}", item.get(unknown[0]) if unknown else None,
          "no other key next to metric and plateau", "remove it")
    spec = item["plateau"]
    fields = ("patience_evals", "min_delta", "mode")
    check(isinstance(spec, dict) and set(spec) <= set(fields), f"{key}.plateau", spec,
          "a mapping with patience_evals, and optionally min_delta and mode",
          f"pass e.g. {key}.plateau={{patience_evals: 5, min_delta: 1.0, mode: max}}")
    patience = spec.get("patience_evals")
    check(isinstance(patience, int) and not isinstance(patience, bool) and patience >= 1,
          f"{key}.plateau.patience_evals", patience, "an int >= 1")
    min_delta = spec.get("min_delta", 0.0)
    check(_number(min_delta) and min_delta >= 0, f"{key}.plateau.min_delta", min_delta, "a float >= 0")
    mode = spec.get("mode", "max")
    check_choice(f"{key}.plateau.mode", mode, ["max", "min"])
    return Plateau(metric, patience, float(min_delta), mode)


class StopConditions:
    """Evaluates conditions on every record; the plateau bookkeeping is a plain dict (checkpointed).

    Args:
        conditions: From :func:`parse_stop_on`.
    """

    def __init__(self, conditions: list[Threshold | Plateau]) -> None:
        self.conditions = conditions

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

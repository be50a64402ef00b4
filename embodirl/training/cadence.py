"""The logging cadence: at one env step per iteration (FastTD3's loop) a record per iteration floods the
console, metrics.jsonl and TensorBoard, so the Trainer logs the mean of the iterations since the last log.

A record is logged when ``trainer.log_every_env_steps`` env steps have passed since the last one (0 = every
iteration), and always when it holds an evaluation or ends the run: evaluations, stop decisions on them and
``best.pt`` are never delayed.
"""

from __future__ import annotations

from typing import Any

__all__ = ["LATEST", "RecordWindow"]

#: Keys that count or time the run: the window's latest value, not a mean.
LATEST = ("iteration", "env_steps", "wall_time_s")


class RecordWindow:
    """The records of the iterations since the last log, merged into one when a log is due.

    Args:
        every_env_steps: Env steps between logs; 0 logs every iteration.
        logged_at: The env steps of the last log (a resumed run's count).
    """

    def __init__(self, every_env_steps: int, logged_at: int = 0) -> None:
        self.every_env_steps = every_env_steps
        self.logged_at = logged_at
        self.records: list[dict[str, Any]] = []

    def add(self, record: dict[str, Any], *, force: bool) -> dict[str, Any] | None:
        """Keep ``record``; the merged record of the window when a log is due (``force``: now), else None."""
        self.records.append(record)
        if not force and record["env_steps"] - self.logged_at < self.every_env_steps:
            return None
        return self.pop()

    def pop(self) -> dict[str, Any] | None:
        """The merged record of the window (None when empty), and an empty window."""
        if not self.records:
            return None
        merged = merge_records(self.records)
        self.records, self.logged_at = [], merged["env_steps"]
        return merged


def merge_records(records: list[dict[str, Any]]) -> dict[str, Any]:
    """One record for several iterations: per key, the mean of its numeric values over the iterations that have
    one (None where none has), the latest value for the counters (:data:`LATEST`) and for anything not a
    number; keys in the order of their first appearance."""
    merged: dict[str, Any] = {}
    for key in dict.fromkeys(k for record in records for k in record):
        values = [record[key] for record in records if record.get(key) is not None]
        numbers = [v for v in values if isinstance(v, int | float) and not isinstance(v, bool)]
        if key in LATEST or not values or len(numbers) != len(values):
            merged[key] = values[-1] if values else None
        else:
            merged[key] = sum(numbers) / len(numbers)
    return merged

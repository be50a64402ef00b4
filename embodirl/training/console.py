"""What a person watching the terminal sees: the training progress line and the progress of a batch of tasks.

Both show a rich bar on a terminal and plain log lines otherwise (files, CI, SLURM logs), with the
same content. The training line (:class:`ConsoleLogger`) reads, for example::

    ppo-push_cube-seed0  393,216/10,000,000 steps (4%) | 61,440 sps | return 0.62 |
        eval/success_rate 0.55 (stops at >= 0.9) | ETA 2m 36s until budget

and, once the run stops, ``stopped: solved at 1,310,720 steps (eval/success_rate 0.93 >= 0.9) after
21s`` with the bar full. The remaining time is the budget's (``trainer.total_env_steps``) at the
average speed so far, or the wall-time limit's when that comes first; a run that stops on solved may
end sooner, which the stopping metric and its threshold beside it let you judge.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TextIO

from embodirl.runtime.formatting import format_count, format_duration, format_number, output_console

__all__ = ["ConsoleLogger", "StopGoal", "TaskProgress", "format_duration", "output_console", "remaining_time",
           "stop_message", "task_progress"]

log = logging.getLogger(__name__)

def remaining_time(env_steps: int, total_env_steps: int, steps_done: int, elapsed_s: float,
                   wall_time_s: float | None = None, max_wall_time_s: float | None = None) -> tuple[float | None, str]:
    """Seconds until the run reaches its budget or its wall-time limit, whichever comes first.

    Args:
        env_steps: Env steps so far (this run, all attempts).
        total_env_steps: The budget.
        steps_done: Env steps taken since the clock started (this attempt).
        elapsed_s: Seconds since the clock started.
        wall_time_s: The run's training wall time so far (all attempts), for the limit.
        max_wall_time_s: The wall-time limit (None: none).

    Returns:
        ``(seconds or None while the speed is unknown, "budget" or "time limit")``. E.g. 1,000 of
        10,000 steps done in 2 s leaves ``(18.0, "budget")``; with 5 s of a 10 s limit used, ``(5.0,
        "time limit")``.
    """
    budget_s = None
    if steps_done > 0 and elapsed_s > 0:
        budget_s = max(total_env_steps - env_steps, 0) * elapsed_s / steps_done
    if max_wall_time_s is not None and wall_time_s is not None:
        limit_s = max(max_wall_time_s - wall_time_s, 0.0)
        if budget_s is None or limit_s < budget_s:
            return limit_s, "time limit"
    return budget_s, "budget"


@dataclasses.dataclass(frozen=True)
class StopGoal:
    """Where a run is heading, for the console: its budget and stop conditions.

    Args:
        total_env_steps: The budget (``trainer.total_env_steps``).
        solved_metric: The evaluation metric that decides "solved" (the env's ``solved_metric``).
        solved_threshold: Its value that counts as solved (the env's; None: never solved).
        stop_on_solved: Whether the run stops once solved (``trainer.stop_on_solved``).
        max_wall_time_s: The training wall-time limit (``trainer.max_wall_time_s``; None: none).
    """

    total_env_steps: int
    solved_metric: str = "eval/return_mean"
    solved_threshold: float | None = None
    stop_on_solved: bool = True
    max_wall_time_s: float | None = None

    def is_solved(self, value: float | None) -> bool:
        """Whether ``value`` of the solved metric meets the threshold."""
        return self.solved_threshold is not None and value is not None and value >= self.solved_threshold

    def metric_text(self, value: float | None) -> str:
        """``eval/success_rate 0.55 (stops at >= 0.9)``; ``-`` before the first evaluation."""
        text = f"{self.solved_metric} {format_number(value, 3)}"
        if self.solved_threshold is None:
            return text
        verb = "stops at" if self.stop_on_solved else "solved at"
        return f"{text} ({verb} >= {_threshold(self.solved_threshold)})"


def _threshold(value: float | None) -> str:
    """A threshold without trailing zeros: ``0.9``, ``475``, ``-200``."""
    text = format_number(value, 3)
    return text.rstrip("0").rstrip(".") if "." in text else text


def stop_message(goal: StopGoal, env_steps: int, elapsed_s: float, solved_at: int | None, solved_value: float | None,
                 wall_time_s: float | None, failed: bool, condition: str | None = None) -> str:
    """The closing words of the progress line: why the run ended, at how many steps, after how long
    (``condition``: the ``trainer.stop_on`` condition that stopped it)."""
    after = f"after {format_duration(elapsed_s)}"
    steps = f"{format_count(env_steps)} steps"
    if failed:
        return f"failed at {steps} {after}"
    if goal.stop_on_solved and solved_at is not None:
        return (f"stopped: solved at {format_count(solved_at)} steps ({goal.solved_metric} "
                f"{format_number(solved_value, 3)} >= {_threshold(goal.solved_threshold)}) {after}")
    if condition is not None:
        return f"stopped: {condition} at {steps} {after}"
    if env_steps >= goal.total_env_steps:
        return f"done: the budget of {steps} {after}"
    if goal.max_wall_time_s is not None and wall_time_s is not None and wall_time_s >= goal.max_wall_time_s:
        return f"stopped: time limit of {format_duration(goal.max_wall_time_s)} at {steps}"
    return f"stopped at {steps} of {format_count(goal.total_env_steps)} {after}"


class ConsoleLogger:
    """A labelled progress bar on a terminal; the same content as plain periodic lines otherwise.

    Args:
        goal: Budget and stop conditions (:class:`StopGoal`).
        mode: ``auto`` (bar on a TTY, lines otherwise), ``bar``, ``lines`` or ``none``.
        every_s: Seconds between plain lines (the first and the closing line are always written).
        start_steps: Env steps already done (a resumed run).
        label: What is being run, e.g. ``ppo-cartpole-seed0``.
        stream: Where the bar goes (default ``sys.stdout``; plain lines go to the ``embodirl.training.loggers`` log).
        clock: Monotonic seconds (a test passes its own).
    """

    def __init__(self, goal: StopGoal, mode: str = "auto", every_s: float = 5.0, start_steps: int = 0,
                 label: str = "train", stream: TextIO | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        stream = stream or sys.stdout
        self.goal, self.every_s, self.start_steps, self.label, self.clock = goal, every_s, start_steps, label, clock
        self.mode = ("bar" if stream.isatty() else "lines") if mode == "auto" else mode
        self._start = clock()
        self._last_line = -math.inf
        self._steps = start_steps
        self._wall_time_s: float | None = None
        self._return: float | None = None
        self._metric: float | None = None
        self._solved_at: int | None = None
        self._solved_value: float | None = None
        self._condition: str | None = None
        self._progress = None
        if self.mode == "bar":
            from rich.console import Console
            from rich.progress import BarColumn, Progress, TextColumn
            from rich.table import Column

            self._progress = Progress(  # the label whole, a short bar, the text folded onto more lines if need be
                TextColumn("[bold]{task.description}", table_column=Column(no_wrap=True)), BarColumn(bar_width=20),
                TextColumn("{task.fields[text]}", markup=False, table_column=Column(ratio=1, overflow="fold")),
                console=Console(file=stream), transient=False)
            self._task = self._progress.add_task(label, total=goal.total_env_steps, completed=start_steps,
                                                 text=self.text())
            self._progress.start()

    def text(self) -> str:
        """The progress line after the label: steps, speed, training return, stopping metric, ETA."""
        steps, total = self._steps, self.goal.total_env_steps
        elapsed = self.clock() - self._start
        done = steps - self.start_steps
        sps = done / elapsed if elapsed > 0 and done > 0 else None
        eta, until = remaining_time(steps, total, done, elapsed, self._wall_time_s, self.goal.max_wall_time_s)
        return (f"{format_count(steps)}/{format_count(total)} steps ({100 * steps / total:.0f}%) | "
                f"{format_count(sps)} sps | return {format_number(self._return, 3)} | "
                f"{self.goal.metric_text(self._metric)} | ETA {format_duration(eta)} until {until}")

    def log(self, record: dict[str, Any]) -> None:
        self._steps = record["env_steps"]
        self._wall_time_s = record.get("wall_time_s", self._wall_time_s)
        if record.get("episode/return_mean") is not None:
            self._return = record["episode/return_mean"]
        value = record.get(self.goal.solved_metric)
        if value is not None:
            self._metric = value
            if self._solved_at is None and self.goal.is_solved(value):
                self._solved_at, self._solved_value = self._steps, value
        if self._progress is not None:
            self._progress.update(self._task, completed=self._steps, text=self.text())
        elif self.mode == "lines" and self.clock() - self._last_line >= self.every_s:
            self._last_line = self.clock()
            log.info("%s | %s", self.label, self.text())

    def note_stop_condition(self, condition: str) -> None:
        """The ``trainer.stop_on`` condition that stopped the run (named by the closing words)."""
        self._condition = condition

    def close(self) -> None:
        """Finish the line: full bar and why the run stopped (``failed`` while an exception propagates)."""
        failed = sys.exc_info()[0] is not None  # closed from an ``except`` block: the run is failing
        end = stop_message(self.goal, self._steps, self.clock() - self._start, self._solved_at, self._solved_value,
                           self._wall_time_s, failed, self._condition)
        if self._progress is not None:
            if failed:
                self._progress.update(self._task, text=end)
            else:
                self._progress.update(self._task, total=max(self._steps, 1), completed=max(self._steps, 1), text=end)
            self._progress.stop()
        elif self.mode == "lines":
            log.info("%s | %s", self.label, end)


# --- a batch of tasks (embodirl-bench) ------------------------------------------------------------------
@dataclasses.dataclass
class TaskProgress:
    """Counts finished tasks of a batch and shows each: a rich bar on a terminal, one line each otherwise."""

    total: int
    label: str
    stream: TextIO
    done: int = 0
    _progress: Any = None
    _task: Any = None

    def start(self, what: str) -> None:
        """Say which task runs now (the bar's text; plain mode prints ``[i/n] what ...``)."""
        if self._progress is not None:
            self._progress.update(self._task, text=what)
        else:
            print(f"{self.label} [{self.done + 1}/{self.total}] {what} ...", file=self.stream, flush=True)

    def finish(self, result: str) -> None:
        """Count the task as done and show its result."""
        self.done += 1
        if self._progress is not None:
            self._progress.console.print(f"  {result}")
            self._progress.update(self._task, completed=self.done)
        else:
            print(f"{self.label} [{self.done}/{self.total}] {result}", file=self.stream, flush=True)


@contextmanager
def task_progress(total: int, label: str, stream: TextIO | None = None,
                  bar: bool | None = None) -> Iterator[TaskProgress]:
    """A :class:`TaskProgress` for ``total`` tasks on ``stream`` (default stderr, keeping stdout for results).

    Args:
        total: Number of tasks.
        label: Shown before each line or bar, e.g. ``embodirl-bench``.
        stream: Where progress goes.
        bar: Force the bar (True) or plain lines (False); None = a bar on a terminal.
    """
    stream = stream or sys.stderr
    progress = TaskProgress(total, label, stream)
    if bar if bar is not None else stream.isatty():
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        progress._progress = Progress(TextColumn(f"[bold]{label}"), BarColumn(), MofNCompleteColumn(),
                                      TimeElapsedColumn(), TextColumn("{task.fields[text]}"),
                                      console=Console(file=stream))
        progress._task = progress._progress.add_task(label, total=total, text="")
        progress._progress.start()
    try:
        yield progress
    finally:
        if progress._progress is not None:
            progress._progress.stop()

"""The progress line: labelled, its remaining time follows the stop conditions, the stopping metric, its end."""

from __future__ import annotations

import io
import logging

import pytest

from embodirl.training.console import (
    ConsoleLogger,
    StopGoal,
    format_duration,
    remaining_time,
    stop_message,
    task_progress,
)


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_format_duration():
    assert [format_duration(s) for s in (0.4, 42, 62, 3599.6, 3600 * 3 + 5 * 60, None, float("inf"))] == [
        "0s", "42s", "1m 02s", "1h 00m", "3h 05m", "?", "?"]


def test_remaining_time_is_the_budget_or_the_time_limit_whichever_comes_first():
    # 1,000 steps in 2 s (500 steps/s): 9,000 steps of a 10,000 budget left -> 18 s
    assert remaining_time(1_000, 10_000, 1_000, 2.0) == (18.0, "budget")
    # resumed at 4,000: this attempt did 1,000 steps in 2 s, 5,000 left -> 10 s
    assert remaining_time(5_000, 10_000, 1_000, 2.0) == (10.0, "budget")
    # 10 s wall-time limit with 5 s used comes before the budget's 18 s
    assert remaining_time(1_000, 10_000, 1_000, 2.0, wall_time_s=5.0, max_wall_time_s=10.0) == (5.0, "time limit")
    assert remaining_time(1_000, 10_000, 1_000, 2.0, wall_time_s=5.0, max_wall_time_s=60.0) == (18.0, "budget")
    assert remaining_time(0, 10_000, 0, 0.0) == (None, "budget")  # speed unknown before the first iteration


def test_stop_message_names_why_the_run_ended():
    goal = StopGoal(10_000, "eval/success_rate", 0.9, True, max_wall_time_s=30.0)
    assert stop_message(goal, 6_000, 12.0, 6_000, 0.93, 12.0, failed=False) == (
        "stopped: solved at 6,000 steps (eval/success_rate 0.930 >= 0.9) after 12s")
    assert stop_message(goal, 10_000, 20.0, None, None, 20.0, False) == "done: the budget of 10,000 steps after 20s"
    assert stop_message(goal, 7_000, 31.0, None, None, 30.5, False) == "stopped: time limit of 30s at 7,000 steps"
    assert stop_message(goal, 3_000, 5.0, None, None, 5.0, False) == "stopped at 3,000 steps of 10,000 after 5s"
    assert stop_message(goal, 3_000, 5.0, 2_000, 0.95, 5.0, True) == "failed at 3,000 steps after 5s"
    assert stop_message(goal, 3_000, 5.0, None, None, 5.0, False, "eval/return_mean >= 400 (value 412)") == \
        "stopped: eval/return_mean >= 400 (value 412) at 3,000 steps after 5s"
    solved_but_going_on = StopGoal(10_000, "eval/success_rate", 0.9, stop_on_solved=False)
    assert stop_message(solved_but_going_on, 10_000, 9.0, 6_000, 0.93, 9.0, False).startswith("done: the budget")


def _feed(console: ConsoleLogger, clock: FakeClock) -> None:
    clock.now += 2.0
    console.log({"env_steps": 1_000, "sps": 500.0, "wall_time_s": 2.0, "episode/return_mean": 0.25,
                 "eval/success_rate": None})
    clock.now += 2.0
    console.log({"env_steps": 2_000, "sps": 500.0, "wall_time_s": 4.0, "episode/return_mean": 0.5,
                 "eval/success_rate": 0.95, "eval/return_mean": 0.8})


def test_plain_lines_show_label_progress_stopping_metric_eta_and_the_solved_end(caplog):
    clock = FakeClock()
    goal = StopGoal(10_000, "eval/success_rate", 0.9, stop_on_solved=True)
    console = ConsoleLogger(goal, mode="lines", every_s=0.0, label="ppo-push_cube-seed0", clock=clock)
    with caplog.at_level(logging.INFO, logger="embodirl.training.console"):
        _feed(console, clock)
        console.close()
    lines = [r.getMessage() for r in caplog.records]
    assert lines == [
        "ppo-push_cube-seed0 | 1,000/10,000 steps (10%) | 500 sps | return 0.250 | "
        "eval/success_rate - (stops at >= 0.9) | ETA 18s until budget",
        "ppo-push_cube-seed0 | 2,000/10,000 steps (20%) | 500 sps | return 0.500 | "
        "eval/success_rate 0.950 (stops at >= 0.9) | ETA 16s until budget",
        "ppo-push_cube-seed0 | stopped: solved at 2,000 steps (eval/success_rate 0.950 >= 0.9) after 4s",
    ]


def test_plain_lines_follow_the_time_limit_and_respect_every_s(caplog):
    clock = FakeClock()
    goal = StopGoal(1_000_000, "eval/return_mean", 475.0, max_wall_time_s=10.0)
    console = ConsoleLogger(goal, mode="lines", every_s=3.0, label="ppo-cartpole-seed0", clock=clock)
    with caplog.at_level(logging.INFO, logger="embodirl.training.console"):
        _feed(console, clock)  # the second record comes 2 s after the first: no line (every 3 s)
        clock.now += 6.0
        console.log({"env_steps": 5_000, "sps": 1_000.0, "wall_time_s": 10.0})
        console.close()
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 3
    assert lines[0].endswith("eval/return_mean - (stops at >= 475) | ETA 8s until time limit")
    assert lines[1].endswith("ETA 0s until time limit")
    assert lines[2] == "ppo-cartpole-seed0 | stopped: time limit of 10s at 5,000 steps"


def test_bar_is_labelled_and_full_when_the_run_stops_early():
    stream, clock = io.StringIO(), FakeClock()
    console = ConsoleLogger(StopGoal(10_000, "eval/success_rate", 0.9), mode="bar", label="grpo-push_cube-seed1",
                            stream=stream, clock=clock)
    _feed(console, clock)
    console.close()
    task = console._progress.tasks[0]
    assert task.description == "grpo-push_cube-seed1"
    assert task.completed == task.total == 2_000  # a full bar although the budget was 10,000
    assert task.fields["text"] == "stopped: solved at 2,000 steps (eval/success_rate 0.950 >= 0.9) after 4s"
    assert "grpo-push_cube-seed1" in stream.getvalue() and "stopped: solved at 2,000 steps" in stream.getvalue()


def test_a_failing_run_is_marked_failed_not_completed():
    stream, clock = io.StringIO(), FakeClock()
    console = ConsoleLogger(StopGoal(10_000), mode="bar", stream=stream, clock=clock)
    _feed(console, clock)
    with pytest.raises(RuntimeError):
        try:
            raise RuntimeError("boom")
        except RuntimeError:
            console.close()  # as the trainer closes its loggers while the error propagates
            raise
    task = console._progress.tasks[0]
    assert task.fields["text"] == "failed at 2,000 steps after 4s" and task.completed == 2_000 and task.total == 10_000


def test_task_progress_plain_lines_and_bar():
    stream = io.StringIO()
    with task_progress(2, "embodirl-bench", stream, bar=False) as progress:
        progress.start("ppo_cartpole throughput")
        progress.finish("ppo_cartpole throughput: 1,000 steps/s")
        progress.start("ppo_cartpole seed 0")
        progress.finish("ppo_cartpole seed 0: solved in 1.00 s")
    assert stream.getvalue().splitlines() == [
        "embodirl-bench [1/2] ppo_cartpole throughput ...",
        "embodirl-bench [1/2] ppo_cartpole throughput: 1,000 steps/s",
        "embodirl-bench [2/2] ppo_cartpole seed 0 ...", "embodirl-bench [2/2] ppo_cartpole seed 0: solved in 1.00 s"]
    stream = io.StringIO()
    with task_progress(1, "embodirl-bench", stream, bar=True) as progress:
        progress.start("cartpole env speed")
        progress.finish("cartpole env speed: 5 steps/s")
    assert progress.done == 1 and progress._progress.tasks[0].completed == 1
    assert "cartpole env speed: 5 steps/s" in stream.getvalue()

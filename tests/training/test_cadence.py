"""The logging cadence: a record every ``trainer.log_every_env_steps`` env steps holds the mean of the iterations
since the last one (hand values), evaluations and the run's end are logged when they happen, and the records of a
run with a cadence are the means of the same run's records logged every iteration."""

import json

import pytest

from embodirl.training.cadence import RecordWindow, merge_records
from tests.conftest import TINY


def test_a_merged_record_averages_numbers_over_the_iterations_that_have_them_and_keeps_the_latest_counters():
    records = [{"iteration": 1, "env_steps": 8, "loss/critic": 1.0, "episode/return_mean": None, "wall_time_s": 0.5},
               {"iteration": 2, "env_steps": 16, "loss/critic": 2.0, "episode/return_mean": 10.0,
                "loss/actor": 4.0, "wall_time_s": 1.0},
               {"iteration": 3, "env_steps": 24, "loss/critic": 6.0, "episode/return_mean": 20.0,
                "wall_time_s": 1.5, "mode": "sampled"}]
    assert merge_records(records) == {"iteration": 3, "env_steps": 24, "loss/critic": 3.0,
                                      "episode/return_mean": 15.0, "wall_time_s": 1.5, "loss/actor": 4.0,
                                      "mode": "sampled"}
    assert merge_records(records[:1])["episode/return_mean"] is None  # no episode ended in the window


def test_the_window_logs_once_the_cadence_has_passed_or_when_forced():
    window = RecordWindow(every_env_steps=20, logged_at=0)
    assert window.add({"env_steps": 8, "x": 1.0}, force=False) is None
    assert window.add({"env_steps": 16, "x": 3.0}, force=False) is None
    assert window.add({"env_steps": 24, "x": 5.0}, force=False) == {"env_steps": 24, "x": 3.0}
    assert window.add({"env_steps": 32, "x": 7.0}, force=True) == {"env_steps": 32, "x": 7.0}  # an evaluation
    assert window.add({"env_steps": 40, "x": 1.0}, force=False) is None
    assert window.pop() == {"env_steps": 40, "x": 1.0} and window.pop() is None  # the end of the run
    every = RecordWindow(every_env_steps=0)
    assert every.add({"env_steps": 8, "x": 1.0}, force=False) == {"env_steps": 8, "x": 1.0}


def _records(run_dir):
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_a_run_with_a_cadence_logs_the_means_of_the_run_logged_every_iteration(cli, tmp_path):
    args = [*TINY, "algo=ppo", "env=cartpole", "trainer.total_env_steps=640", "eval.every_env_steps=384", "seed=3"]
    for name, every in (("each", 0), ("cadence", 256)):
        outcome = cli("embodirl-train", [*args, f"trainer.log_every_env_steps={every}",
                                         f"hydra.run.dir={tmp_path / name}"])
        assert outcome.code == 0, outcome.err
    each, cadence = _records(tmp_path / "each"), _records(tmp_path / "cadence")
    assert [r["env_steps"] for r in each] == [128, 256, 384, 512, 640]
    # every 256 env steps, and at the evaluation (384) and at the end (640), whatever the cadence says
    assert [r["env_steps"] for r in cadence] == [256, 384, 640]
    for logged, window in zip(cadence, (each[0:2], each[2:3], each[3:5]), strict=True):
        assert logged["loss/policy"] == pytest.approx(sum(r["loss/policy"] for r in window) / len(window))
        assert logged["iteration"] == window[-1]["iteration"]
    assert cadence[1]["eval/return_mean"] == each[2]["eval/return_mean"]

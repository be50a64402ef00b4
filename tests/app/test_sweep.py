"""The end of a multirun: one table of its jobs, the embodirl-report command, then the failures."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from embodirl.app.sweep import report_command
from tests.conftest import TINY, in_process_run


def test_report_command_is_quoted_for_the_shell():
    assert report_command(Path("multirun/2026-11-23/10-00-00-000001")) == (
        "embodirl-report multirun/2026-11-23/10-00-00-000001")
    assert report_command(Path("/data/my sweeps/x")) == "embodirl-report '/data/my sweeps/x'"


def test_a_multirun_ends_with_one_table_then_the_report_command_then_the_failures(tmp_path, monkeypatch, capsys):
    from embodirl.cli.train import main

    sweep = tmp_path / "sweep"
    monkeypatch.setattr(sys, "argv", ["embodirl-train", "-m", "algo.learning_rate=2e-3,-1", *TINY,
                                      f"hydra.sweep.dir={sweep}"])
    monkeypatch.setattr(sys, "stderr", sys.stdout)  # one stream, to check the order of table and failure lines
    with in_process_run(120), pytest.raises(SystemExit) as info:
        main()
    assert info.value.code == 1
    out = capsys.readouterr().out
    table = out[out.index(f"sweep {sweep}  (every job: "):]  # the overrides all jobs share: in the title
    assert "env.num_envs=8" in table.split("┏")[0]
    rows = {line.split("│")[1].strip(): [c.strip() for c in line.split("│")[2:-1]] for line in table.splitlines()
            if line.startswith("│")}
    assert list(rows) == ["0", "1"]
    assert rows["0"][:2] == ["algo.learning_rate=0.002", "completed"]  # as Hydra records the override
    assert float(rows["0"][2]) > 0 and rows["0"][3] == "256" and rows["0"][4].endswith(" s")
    assert rows["1"] == ["algo.learning_rate=-1", "failed: ConfigError", "-", "-", "-"]
    assert table.index(report_command(sweep)) < table.index("1 of 2 sweep jobs did not complete")


def _table_rows(out: str) -> dict[str, list[str]]:
    return {line.split("│")[1].strip(): [c.strip() for c in line.split("│")[2:-1]] for line in out.splitlines()
            if line.startswith("│") and line.split("│")[1].strip().isdigit()}


@pytest.mark.slow  # two multiruns
def test_a_sweep_refused_by_its_job_directories_fails_naming_each_job_and_keeps_the_earlier_runs(
        tmp_path, monkeypatch, capsys):
    from embodirl.cli.train import main

    sweep = tmp_path / "sweep"
    argv = ["embodirl-train", "-m", *TINY, "seed=0,1", f"hydra.sweep.dir={sweep}"]
    monkeypatch.setattr(sys, "argv", argv)
    with in_process_run(120):
        main()  # the first sweep completes
    kept = [sweep / job / name for job in ("0", "1") for name in (
        "status.json", "summary.json", "metrics.jsonl", "checkpoints/last.pt", ".hydra/config.yaml")]
    before = {path: path.read_bytes() for path in kept}
    capsys.readouterr()
    monkeypatch.setattr(sys, "argv", [*argv, "algo.learning_rate=1e-3"])  # the same sweep directory, another config
    with in_process_run(120), pytest.raises(SystemExit) as info:
        main()
    assert info.value.code == 1
    out, err = capsys.readouterr()
    rows = _table_rows(out)
    assert rows["0"][:2] == ["seed=0", "failed: CheckpointError"]
    assert "algo.learning_rate=0.001" in out.split("┏")[0]  # this attempt's overrides, shared by both jobs: the title
    assert rows["1"][1] == "failed: CheckpointError" and rows["0"][2:] == ["-", "-", "-"]  # it produced nothing
    assert "2 of 2 sweep jobs did not complete" in err
    failures = [line for line in err.splitlines() if line.startswith("  job ")]
    assert len(failures) == 2 and all("holds a run trained with a different config" in f for f in failures)
    assert all("keeps its earlier run (completed)" in f for f in failures)
    assert {path: path.read_bytes() for path in kept} == before  # nothing the first sweep produced was touched
    assert "EMBODIRL_SWEEP_ID" not in os.environ


@pytest.mark.slow  # a multirun
def test_a_job_refused_by_a_busy_directory_fails_the_sweep_and_leaves_the_holder_alone(tmp_path, monkeypatch, capsys):
    from embodirl.cli.train import main
    from embodirl.runtime.rundir import RunDirLock
    from embodirl.runtime.status import write_status

    sweep = tmp_path / "sweep"
    monkeypatch.setattr(sys, "argv", ["embodirl-train", "-m", *TINY, "seed=0,1", f"hydra.sweep.dir={sweep}"])
    with RunDirLock(sweep / "0"):  # another live process holds job 0's directory and records its own fate
        write_status(sweep / "0", "running")
        holder = (sweep / "0" / "status.json").read_bytes()
        with in_process_run(120), pytest.raises(SystemExit) as info:
            main()
        write_status(sweep / "0", "completed")  # the holder ends after this sweep's job was refused
    assert info.value.code == 1
    assert json.loads(holder)["status"] == "running"
    out, err = capsys.readouterr()
    rows = _table_rows(out)
    assert rows["0"][:2] == ["seed=0", "failed: RunDirBusyError"] and rows["1"][1] == "completed"
    (failure,) = [line for line in err.splitlines() if line.startswith("  job ")]
    assert "job 0 [" in failure and "is in use by process" in failure
    assert "1 of 2 sweep jobs did not complete" in err


def test_job_records_that_are_not_this_sweeps_are_skipped(tmp_path, caplog):
    from embodirl.app.sweep import JOBS_DIR, failed_jobs

    sweep_id = "0" * 32
    folder = tmp_path / JOBS_DIR / sweep_id
    folder.mkdir(parents=True)
    (tmp_path / "0").mkdir()
    good = {"status": "failed", "exception": "CheckpointError", "message": "m", "run_dir": str(tmp_path / "0"),
            "overrides": ["seed=0"]}
    (folder / "0.json").write_text(json.dumps(good))
    (folder / "1.json").write_text(json.dumps({**good, "run_dir": "/etc"}))  # outside the sweep
    (folder / "2.json").write_text(json.dumps({**good, "overrides": [{"a": 1}]}))
    os.mkfifo(folder / "3.json")  # a FIFO would block a plain read forever
    found = failed_jobs(tmp_path, sweep_id)
    job = (tmp_path / "0").resolve()
    assert list(found) == [job] and found[job]["exception"] == "CheckpointError"
    assert sum("skipped, not a job record" in r.getMessage() for r in caplog.records) == 3

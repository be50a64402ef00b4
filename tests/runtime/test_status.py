"""A run's fate reaches status.json even when the disk is full, and a ``running`` record whose process is
gone reads as failed."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import tempfile
import time

import pytest

from embodirl.runtime.status import read_status, write_status
from tests.conftest import TINY, in_process_run


def test_a_disk_that_fills_mid_run_ends_failed_in_one_line(tmp_path, monkeypatch, capsys):
    from embodirl.cli.train import main
    from embodirl.runtime.checkpoint import load_checkpoint

    run_dir = tmp_path / "run"
    first_checkpoint = run_dir / "checkpoints" / "step_000000000128.pt"

    def mkstemp(*args, **kwargs):  # every new file fails once the first checkpoints are written: the disk is full
        if first_checkpoint.exists():
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_mkstemp(*args, **kwargs)

    real_mkstemp = tempfile.mkstemp
    monkeypatch.setattr("embodirl.runtime.files.tempfile.mkstemp", mkstemp)
    monkeypatch.setattr(sys, "argv", ["embodirl-train", *TINY, f"hydra.run.dir={run_dir}"])
    with in_process_run(120), pytest.raises(SystemExit) as info:
        main()
    assert info.value.code == 1
    out, err = capsys.readouterr()
    (line,) = err.strip().splitlines()
    assert "Traceback" not in out  # the writes that fail after the first (summary.json, status.json) log one line
    assert line.startswith(f"embodirl-train: error: {run_dir / 'checkpoints'}/")
    assert ".pt: No space left on device (errno 28)" in line and "Fix: free disk space" in line
    status = read_status(run_dir)
    assert status["status"] == "failed" and status["exception"] == "OSError"
    assert "No space left on device" in status["message"]
    assert load_checkpoint(run_dir / "checkpoints" / "last.pt")["trainer"]["env_steps"] == 128  # the last good state


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_a_running_record_whose_process_is_gone_reads_as_failed(tmp_path):
    from embodirl.analysis.report import load_run

    write_status(tmp_path, "running")
    from embodirl.runtime.status import process_gone

    assert not process_gone(read_status(tmp_path))  # this process
    assert load_run(tmp_path).status == "running"
    record = json.loads((tmp_path / "status.json").read_text())
    gone = [{**record, "pid": _dead_pid()},
            {**record, "updated_at": time.time() - 10 * 365 * 86400}]  # a live pid, reused since the record
    for stale in gone:
        (tmp_path / "status.json").write_text(json.dumps(stale))
        assert process_gone(read_status(tmp_path))
        run = load_run(tmp_path)
        assert run.status == "failed" and run.error.startswith("ProcessGone: ")
        assert f"process {stale['pid']} on host {stale['host']}" in run.error
    elsewhere = {**record, "pid": _dead_pid(), "host": "another-host"}  # another machine's process: cannot tell
    (tmp_path / "status.json").write_text(json.dumps(elsewhere))
    assert not process_gone(read_status(tmp_path)) and load_run(tmp_path).status == "running"
    for ended in ("completed", "failed", "preempted"):
        assert not process_gone({**record, "pid": _dead_pid(), "status": ended})


def test_a_sweep_whose_job_was_killed_outright_names_it_failed(tmp_path, capsys):
    from omegaconf import OmegaConf

    from embodirl.app.sweep import SweepFate

    job = tmp_path / "0"
    (job / ".hydra").mkdir(parents=True)
    (job / ".hydra" / "overrides.yaml").write_text("- seed=0\n")
    write_status(job, "running")
    record = json.loads((job / "status.json").read_text())
    (job / "status.json").write_text(json.dumps({**record, "pid": _dead_pid()}))
    with pytest.raises(SystemExit) as info:
        SweepFate().on_multirun_end(OmegaConf.create({"hydra": {"sweep": {"dir": str(tmp_path)}}}))
    assert info.value.code == 1
    out, err = capsys.readouterr()
    assert "failed: ProcessGone" in out
    assert "job 0 [seed=0] failed: ProcessGone: status.json says running, but process" in err

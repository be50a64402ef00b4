"""One run's fate: status.json and summary.json agree on every way a run ends; files are readable by others."""

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from embodirl.app.run import run_training
from embodirl.runtime.status import read_status, write_status
from embodirl.training.loggers import LoggerError
from tests.conftest import compose_config


def _statuses(run_dir):
    return (json.loads((run_dir / "status.json").read_text())["status"],
            json.loads((run_dir / "summary.json").read_text())["status"])


def test_an_unexpected_error_marks_both_status_files_failed(tmp_path, tiny, monkeypatch):
    from embodirl.algos.ppo import PPO

    original, calls = PPO.update, {"n": 0}

    def broken_update(self, rollout):
        calls["n"] += 1
        if calls["n"] == 2:
            raise RuntimeError("boom")
        return original(self, rollout)

    monkeypatch.setattr(PPO, "update", broken_update)
    with pytest.raises(RuntimeError, match="boom"):
        run_training(compose_config(tiny), tmp_path)
    assert _statuses(tmp_path) == ("failed", "failed")
    assert json.loads((tmp_path / "summary.json").read_text())["stop_reason"] == "RuntimeError"


def test_a_logger_error_names_the_logger_and_how_to_turn_it_off(tmp_path, tiny, monkeypatch):
    from embodirl.training.loggers import TensorBoardLogger

    def broken(self, record):
        raise ValueError("cannot encode")

    monkeypatch.setattr(TensorBoardLogger, "log", broken)
    with pytest.raises(LoggerError, match=r"TensorBoardLogger.log failed.*logger.tensorboard=false"):
        run_training(compose_config([*tiny, "logger.tensorboard=true"]), tmp_path)
    assert _statuses(tmp_path) == ("failed", "failed")


def test_a_restart_removes_the_debris_of_writes_a_kill_interrupted(tmp_path, tiny):
    run_training(compose_config(tiny), tmp_path)
    debris = [tmp_path / ".summary.json.k1ll3d.tmp", tmp_path / "checkpoints" / ".last.pt.k1ll3d.tmp"]
    for path in debris:
        path.write_bytes(b"half a file")
    run_training(compose_config([*tiny, "trainer.total_env_steps=384"]), tmp_path)
    assert not any(path.exists() for path in debris)


def test_result_files_follow_the_umask_like_ordinary_writes(tmp_path, tiny):
    old = os.umask(0o022)
    try:
        run_training(compose_config(tiny), tmp_path)
    finally:
        os.umask(old)
    for path in ("summary.json", "status.json", "checkpoints/last.pt", "checkpoints/step_000000000128.pt"):
        assert stat.S_IMODE((tmp_path / path).stat().st_mode) == 0o644, path


def test_a_malformed_status_file_does_not_stop_a_restart(tmp_path):
    (tmp_path / "status.json").write_text(json.dumps({"status": 5, "attempt": "x"}))
    assert read_status(tmp_path) is None
    (tmp_path / "status.json").write_bytes(b"\xff\xfe not json")
    assert read_status(tmp_path) is None
    (tmp_path / "status.json").write_text(json.dumps({"status": "preempted", "attempt": "x", "started_at": "y"}))
    assert write_status(tmp_path, "running")["attempt"] == 1


SIGTERM_DURING_BUILD = """
import os, signal, sys, time
import embodirl.app.run as experiment
from embodirl.runtime.preemption import PreemptedError
from tests.conftest import compose_config, TINY

def build(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(5)  # the signal arrives during this
    raise AssertionError("SIGTERM was ignored")

experiment.build = build
try:
    experiment.run_training(compose_config(TINY), sys.argv[1])
except PreemptedError as exc:
    print("preempted:", exc)
"""


@pytest.mark.slow
def test_sigterm_during_build_records_preempted(tmp_path):
    result = subprocess.run([sys.executable, "-c", SIGTERM_DURING_BUILD, str(tmp_path)], capture_output=True,
                            text=True, timeout=120, cwd=Path(__file__).resolve().parents[2])
    assert result.returncode == 0 and "before training started" in result.stdout, result.stderr
    assert read_status(tmp_path)["status"] == "preempted"


@pytest.mark.slow  # a fresh process
def test_a_busy_run_directory_is_told_before_torch_is_imported(tmp_path):
    """Issue 32 item 5: the lock was taken after the torch import (18 s at load 9 to learn a directory is busy)."""
    import re

    from embodirl.runtime.rundir import RunDirLock

    with RunDirLock(tmp_path):
        result = subprocess.run([sys.executable, "-X", "importtime", "-m", "embodirl.cli.train", "trainer=debug",
                                 "device=cpu", f"hydra.run.dir={tmp_path}"], capture_output=True, text=True,
                                timeout=120)
    said = [line for line in result.stderr.splitlines() if not line.startswith("import time:")]
    assert result.returncode == 2 and len(said) == 1 and f"{tmp_path} is in use by process {os.getpid()}" in said[0]
    assert not re.search(r"\|\s+torch$", result.stderr, re.MULTILINE), "torch was imported before the lock"

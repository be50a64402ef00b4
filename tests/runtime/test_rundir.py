"""The run directory's lifecycle: the lock, debris of interrupted writes, .hydra/, refused jobs."""

import json
import os
import socket

import pytest

from embodirl.errors import ConfigError
from embodirl.runtime.rundir import (
    RunDirBusyError,
    RunDirLock,
    record_refused_job,
    remove_temp_files,
    write_hydra_files,
)


def test_a_second_holder_is_refused_naming_the_first(tmp_path):
    with RunDirLock(tmp_path):
        with pytest.raises(RunDirBusyError) as info:
            RunDirLock(tmp_path).acquire()
        text = str(info.value)
        assert f"process {os.getpid()}" in text and socket.gethostname() in text
        assert "hydra.run.dir=" in text and "\n" not in text
    with RunDirLock(tmp_path):  # released on exit: the next run may take it
        pass


def test_temp_files_of_interrupted_writes_are_removed(tmp_path):
    (tmp_path / "checkpoints").mkdir()
    debris = [tmp_path / ".summary.json.abc123.tmp", tmp_path / "checkpoints" / ".last.pt.x9y8.tmp"]
    keep = [tmp_path / "summary.json", tmp_path / "checkpoints" / "last.pt", tmp_path / "notes.tmp"]
    for path in debris + keep:
        path.write_text("x")
    assert sorted(remove_temp_files(tmp_path)) == sorted(debris)
    assert all(p.exists() for p in keep) and not any(p.exists() for p in debris)


def test_hydra_files_keep_their_earlier_versions(tmp_path):
    write_hydra_files(tmp_path, {"config.yaml": "a: 1\n", "overrides.yaml": "[]\n"})
    write_hydra_files(tmp_path, {"config.yaml": "a: 1\n", "overrides.yaml": "[]\n"})  # unchanged: no history
    assert not (tmp_path / ".hydra" / "history").exists()
    write_hydra_files(tmp_path, {"config.yaml": "a: 2\n", "overrides.yaml": "[a=2]\n"})
    assert (tmp_path / ".hydra" / "config.yaml").read_text() == "a: 2\n"
    (history,) = (tmp_path / ".hydra" / "history").iterdir()
    assert (history / "config.yaml").read_text() == "a: 1\n" and (history / "overrides.yaml").read_text() == "[]\n"


def test_a_refused_sweep_job_is_recorded_in_its_fresh_directory_but_never_over_an_earlier_run(tmp_path):
    files = {"config.yaml": "a: 1\n", "overrides.yaml": "- algo.learning_rate=-1\n"}
    fresh = tmp_path / "fresh"
    assert record_refused_job(fresh, files, ConfigError("algo.learning_rate", -1, "a float > 0"))
    status = json.loads((fresh / "status.json").read_text())
    assert status["status"] == "failed" and status["exception"] == "ConfigError"
    assert (fresh / ".hydra" / "overrides.yaml").read_text() == files["overrides.yaml"]
    earlier = tmp_path / "earlier"
    (earlier / "checkpoints").mkdir(parents=True)
    (earlier / ".hydra").mkdir()
    (earlier / ".hydra" / "overrides.yaml").write_text("- seed=1\n")
    assert not record_refused_job(earlier, files, ConfigError("algo.learning_rate", -1, "a float > 0"))
    assert not (earlier / "status.json").exists()
    assert (earlier / ".hydra" / "overrides.yaml").read_text() == "- seed=1\n"

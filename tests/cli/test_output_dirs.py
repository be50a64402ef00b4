"""Where a run writes: an empty output directory or one that cannot be written gets one line, exit 2."""

from __future__ import annotations

import sys

import pytest

from tests.conftest import TINY, in_process_run


def _train(monkeypatch, capsys, args: list[str]) -> tuple[int | str | None, list[str]]:
    from embodirl.cli.train import main

    monkeypatch.setattr(sys, "argv", ["embodirl-train", *args])
    with in_process_run(120), pytest.raises(SystemExit) as info:
        main()
    return info.value.code, capsys.readouterr().err.strip().splitlines()


@pytest.mark.parametrize("flags", [["hydra.run.dir="], ["hydra.run.dir=''"], ["hydra.run.dir= "],
                                   ["-m", "hydra.sweep.dir="], ["-m", "hydra.sweep.subdir="]])
def test_an_empty_output_directory_is_refused_before_anything_is_written(tmp_path, monkeypatch, capsys, flags):
    monkeypatch.chdir(tmp_path)
    *mode, item = flags
    code, lines = _train(monkeypatch, capsys, [*mode, *TINY, item])
    key = item.split("=")[0]
    assert code == 2 and len(lines) == 1, lines
    assert lines[0].startswith(f"embodirl-train: error: {key}=") and f"Fix: pass {key}=" in lines[0]
    assert list(tmp_path.iterdir()) == []  # nothing trained into the current directory


def test_a_run_directory_whose_log_file_cannot_be_opened_gets_one_line(tmp_path, monkeypatch, capsys):
    # Hydra opens <run_dir>/train.log before the task runs; a directory in its place fails that open as a
    # read-only directory does (which needs another user than root to test).
    run_dir = tmp_path / "run"
    (run_dir / "train.log").mkdir(parents=True)
    code, lines = _train(monkeypatch, capsys, [*TINY, f"hydra.run.dir={run_dir}"])
    assert code == 2 and len(lines) == 1, lines
    assert lines[0].startswith(f"embodirl-train: error: {run_dir / 'train.log'}: Is a directory") and "Fix:" in lines[0]


@pytest.mark.parametrize("flags", [["hydra.run.dir=."], ["hydra.run.dir=./"], ["-m", "hydra.sweep.dir=."],
                                   ["-m", "hydra.sweep.subdir=."], ["-m", "hydra.sweep.subdir=same"]])
def test_the_current_directory_or_one_subdirectory_for_every_job_is_refused(tmp_path, monkeypatch, capsys, flags):
    monkeypatch.chdir(tmp_path)  # "." wrote .hydra/, train.log and the checkpoints among the user's files
    *mode, item = flags
    sweep = ["seed=1,2", f"hydra.sweep.dir={tmp_path / 'sweep'}"] if "subdir" in item else []
    code, lines = _train(monkeypatch, capsys, [*mode, *TINY, *sweep, item])
    key = item.split("=")[0]
    assert code == 2 and len(lines) == 1, lines
    assert lines[0].startswith(f"embodirl-train: error: {key}=") and f"Fix: pass {key}=" in lines[0]
    assert ("differs per job" if "subdir" in key else "this is the current directory") in lines[0]
    assert list(tmp_path.iterdir()) == []

"""A run directory is data: no file embodirl writes in it follows a link planted there (issue 33 item 1).

Every case plants a link to a file or folder outside the run directory and checks that the target keeps its
contents and modification time, and that the refusal is one line naming the entry, where it points and the fix.
"""

import logging
import os
from pathlib import Path

import pytest

from embodirl.runtime.files import (
    RUN_DIR_ENTRIES,
    RunDirLinkError,
    RunLogHandler,
    check_run_dir_links,
    open_append,
)
from embodirl.runtime.rundir import RunDirLock, remove_temp_files
from embodirl.training.loggers import JsonlLogger


@pytest.fixture
def outside(tmp_path) -> Path:
    """A file outside the run directory, with old contents and an old modification time."""
    path = tmp_path / "bashrc"
    path.write_text("echo hello\n")
    os.utime(path, (1_000_000, 1_000_000))
    return path


def _untouched(path: Path) -> bool:
    return path.read_text() == "echo hello\n" and path.stat().st_mtime == 1_000_000


def _one_line(exc: pytest.ExceptionInfo, path: Path, target: Path | str) -> None:
    text = str(exc.value)
    assert "\n" not in text and str(path) in text and str(target) in text and "Fix: " in text, text


@pytest.mark.parametrize("entry", [e.replace("*", "") for e in RUN_DIR_ENTRIES] + [
    "checkpoints/superseded", ".hydra/history", "export/onnx", "export/torchscript", "train.rank1.log"])
def test_a_link_among_the_entries_embodirl_writes_is_refused_before_the_lock_opens(tmp_path, outside, entry):
    run = tmp_path / "run"
    (run / entry).parent.mkdir(parents=True, exist_ok=True)
    (run / entry).symlink_to(outside)
    with pytest.raises(RunDirLinkError) as exc:
        RunDirLock(run).acquire()
    _one_line(exc, run / entry, outside)
    assert _untouched(outside)
    assert entry == ".lock" or not (run / ".lock").exists()


def test_the_lock_never_follows_a_link_nor_truncates_a_file_with_other_names(tmp_path, outside):
    run = tmp_path / "run"
    run.mkdir()
    (run / ".lock").symlink_to(outside)
    with pytest.raises(RunDirLinkError, match=r"\.lock is a symbolic link to .*bashrc"):
        RunDirLock(run).acquire()
    (run / ".lock").unlink()
    os.link(outside, run / ".lock")  # a hard link: O_NOFOLLOW cannot tell it, its link count can
    with pytest.raises(RunDirLinkError, match=r"\.lock is a file with 2 names \(a hard link\)"):
        RunDirLock(run).acquire()
    assert _untouched(outside)


def test_a_link_planted_after_the_check_is_not_followed_either(tmp_path, outside):
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.superseded.jsonl").symlink_to(outside)
    with pytest.raises(RunDirLinkError, match="symbolic link"):
        open_append(run / "metrics.superseded.jsonl")
    (run / "metrics.jsonl").write_bytes(b'{"env_steps": 0}\n{"env_steps": 8, "torn')  # a torn line to set aside
    with pytest.raises(RunDirLinkError, match=r"metrics\.superseded\.jsonl is a symbolic link"):
        JsonlLogger(run / "metrics.jsonl", 0)
    assert _untouched(outside)
    (run / "metrics.jsonl").unlink()
    (run / "metrics.jsonl").symlink_to(outside)  # a fresh start must not copy the target aside, nor append to it
    with pytest.raises(RunDirLinkError, match=r"metrics\.jsonl is a symbolic link"):
        JsonlLogger(run / "metrics.jsonl", 0)
    assert _untouched(outside)


def test_the_log_handler_writes_nothing_in_a_run_directory_holding_links(tmp_path, outside):
    run = tmp_path / "run"
    run.mkdir()
    for planted in ("train.log", ".lock"):  # Hydra opens train.log first: the whole directory is checked then
        (run / planted).symlink_to(outside)
        handler = RunLogHandler(str(run / "train.log"))
        handler.emit(logging.makeLogRecord({"msg": "continuing with config changes: '$(touch X)"}))
        handler.close()
        assert handler.refused is not None and f"{planted} is a symbolic link" in str(handler.refused)
        assert _untouched(outside)
        (run / planted).unlink()
    handler = RunLogHandler(str(run / "train.log"))
    handler.emit(logging.makeLogRecord({"msg": "fine"}))
    handler.close()
    assert handler.refused is None and (run / "train.log").read_text() == "fine\n"


def test_debris_removal_leaves_the_files_of_a_linked_folder_alone(tmp_path):
    run, elsewhere = tmp_path / "run", tmp_path / "elsewhere"
    run.mkdir()
    elsewhere.mkdir()
    (elsewhere / ".precious.tmp").write_text("keep")
    (run / "checkpoints").symlink_to(elsewhere)
    assert remove_temp_files(run) == []
    assert (elsewhere / ".precious.tmp").read_text() == "keep"
    with pytest.raises(RunDirLinkError, match=r"Fix: replace it with a copy of its folder \(rm .*checkpoints && cp -r"):
        check_run_dir_links(run)


def test_a_run_directory_that_is_itself_a_link_is_fine(tmp_path):
    real = tmp_path / "2026-11-28"
    real.mkdir()
    (tmp_path / "latest").symlink_to(real)
    with RunDirLock(tmp_path / "latest"):
        pass
    assert (real / ".lock").is_file()

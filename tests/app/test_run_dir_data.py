"""A run directory and a checkpoint are data (issue 33).

Item 1: the commands that continue, sweep, evaluate or export a run never write through a link planted in its
directory: each refuses in one line naming the link, or succeeds without touching the link's target. Item 5:
``trainer.resume=<file>`` gets the config comparison of a resume in place."""

import os
import shutil
import sys
from pathlib import Path

import pytest

from tests.conftest import TINY, Outcome, in_process_run, representatives


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """A tiny trained CartPole run, trained once for the module (each test continues a copy of it)."""
    from embodirl.cli import train

    path = tmp_path_factory.mktemp("links") / "run"
    with pytest.MonkeyPatch.context() as patch, in_process_run(timeout_s=300):
        patch.setattr(sys, "argv", ["embodirl-train", *TINY, f"hydra.run.dir={path}"])
        train.main()
    assert (path / "checkpoints" / "last.pt").is_file()
    return path


@pytest.fixture
def run(trained, tmp_path) -> Path:
    shutil.copytree(trained, tmp_path / "run")
    return tmp_path / "run"


@pytest.fixture
def outside(tmp_path) -> Path:
    """A file and a folder outside the run directory, with old contents and old modification times."""
    folder = tmp_path / "elsewhere"
    folder.mkdir()
    for path in (folder / "bashrc", folder / ".precious.tmp", folder / "config.yaml"):
        path.write_text("echo hello\n")
        os.utime(path, (1_000_000, 1_000_000))
    return folder


def _untouched(folder: Path) -> bool:
    return sorted(p.name for p in folder.iterdir()) == [".precious.tmp", "bashrc", "config.yaml"] and all(
        p.read_text() == "echo hello\n" and p.stat().st_mtime == 1_000_000 for p in folder.iterdir())


def _refused(result: Outcome, link: Path) -> None:
    lines = result.err.strip().splitlines()
    assert result.code == 2 and len(lines) == 1, result.err
    assert f"{link} is a symbolic link to" in lines[0] and "Fix: " in lines[0], lines[0]


@pytest.mark.parametrize(("entry", "to_folder", "extra"), representatives(["lock", "checkpoints"], {  # a file, a folder
    "lock": (".lock", False, []),
    "lock-changed-config": (".lock", False, ["seed=1"]),  # also when the resume would be refused for its config
    "train.log": ("train.log", False, []), "metrics.superseded": ("metrics.superseded.jsonl", False, []),
    "status": ("status.json", False, []), "checkpoints": ("checkpoints", True, []), "hydra": (".hydra", True, []),
    "tb": ("tb", True, [])}))
def test_continuing_a_run_refuses_a_planted_link_and_leaves_its_target(cli, run, outside, entry, to_folder, extra):
    with (run / "metrics.jsonl").open("a") as metrics:
        metrics.write('{"env_steps": 999999, "torn')  # a torn line past the checkpoint, to be set aside on resume
    if (run / entry).is_dir():
        shutil.rmtree(run / entry)
    else:
        (run / entry).unlink(missing_ok=True)
    (run / entry).symlink_to(outside if to_folder else outside / "bashrc")
    before = {p.name: p.stat().st_mtime for p in outside.iterdir()}
    result = cli("embodirl-train", [*TINY, "trainer.total_env_steps=384", *extra, f"hydra.run.dir={run}"])
    _refused(result, run / entry)
    assert {p.name: p.stat().st_mtime for p in outside.iterdir()} == before
    assert (outside / "bashrc").read_text() == "echo hello\n" and (outside / ".precious.tmp").exists()


def test_a_fresh_start_never_copies_a_linked_metrics_file_aside(cli, tmp_path, outside):
    run = tmp_path / "fresh"
    run.mkdir()
    (run / "metrics.jsonl").symlink_to(outside / "bashrc")
    _refused(cli("embodirl-train", [*TINY, f"hydra.run.dir={run}"]), run / "metrics.jsonl")
    assert _untouched(outside) and sorted(p.name for p in run.iterdir()) == ["metrics.jsonl"]


@pytest.mark.slow  # a multirun
def test_a_sweep_job_with_a_planted_lock_link_fails_alone_and_leaves_its_target(cli, tmp_path, outside):
    sweep = tmp_path / "sweep"
    (sweep / "0").mkdir(parents=True)
    (sweep / "0" / ".lock").symlink_to(outside / "bashrc")
    result = cli("embodirl-train", ["-m", *TINY, "seed=1", f"hydra.sweep.dir={sweep}"])
    assert result.code == 1 and "1 of 1 sweep jobs did not complete" in result.err, result.err
    assert f"{sweep / '0' / '.lock'} is a symbolic link" in result.err and _untouched(outside)


def test_evaluating_a_run_with_a_linked_eval_folder_is_refused(cli, run, outside):
    (run / "eval").symlink_to(outside)
    _refused(cli("embodirl-eval", [f"run={run}", "num_episodes=2"]), run / "eval")
    assert _untouched(outside)


def _export(monkeypatch, capsys, args: list[str]) -> Outcome:
    from embodirl.cli import export

    capsys.readouterr()
    monkeypatch.setattr(sys, "argv", ["embodirl-export", *args])
    code: int | str | None = 0
    with in_process_run(timeout_s=300):
        try:
            export.main()
        except SystemExit as exc:
            code = exc.code
    out, err = capsys.readouterr()
    return Outcome(0 if code is None else code if isinstance(code, int) else 1, out, err)


def test_an_export_never_writes_through_a_planted_partial_file_or_folder(run, outside, monkeypatch, capsys):
    folder = run / "export" / "torchscript"
    folder.mkdir(parents=True)
    (folder / ".policy.pt.partial").symlink_to(outside / "bashrc")
    result = _export(monkeypatch, capsys, [f"run={run}", "format=torchscript"])
    assert result.code == 0, result.err
    assert _untouched(outside) and not (folder / "policy.pt").is_symlink() and (folder / "policy.pt").stat().st_size
    shutil.rmtree(run / "export")
    (run / "export").symlink_to(outside)
    _refused(_export(monkeypatch, capsys, [f"run={run}", "format=torchscript"]), run / "export")
    assert _untouched(outside)


def test_starting_from_a_checkpoint_of_another_config_is_refused_with_the_overrides_that_fit(cli, trained, tmp_path):
    resume = f"trainer.resume={trained / 'checkpoints' / 'last.pt'}"
    args = [*TINY, resume, "trainer.total_env_steps=384", f"hydra.run.dir={tmp_path / 'new'}"]
    result = cli("embodirl-train", [*args, "seed=1", "algo.learning_rate=0.001"])
    lines = result.err.strip().splitlines()
    assert result.code == 2 and len(lines) == 1 and "(algo.learning_rate 0.002 -> 0.001, seed 0 -> 1)" in lines[0]
    fix = lines[0].split("Fix: pass ")[1].split(" to start from it")[0].split()
    assert fix == ["algo.learning_rate=0.002", "seed=0"]
    assert cli("embodirl-train", [*args, "seed=1", "algo.learning_rate=0.001", *fix]).code == 0  # the fix works


def test_a_cartpole_checkpoint_into_a_gymnasium_cartpole_is_one_line_not_a_traceback(cli, trained, tmp_path):
    args = [*TINY, "env=gym", "env.id=CartPole-v1", f"trainer.resume={trained / 'checkpoints' / 'last.pt'}",
            "trainer.total_env_steps=384"]
    result = cli("embodirl-train", [*args, f"hydra.run.dir={tmp_path / 'a'}"])
    lines = result.err.strip().splitlines()
    assert result.code == 2 and len(lines) == 1 and "env._target_ 'embodirl.envs.cartpole.CartPole' -> " in lines[0]
    result = cli("embodirl-train", [*args, "trainer.allow_config_change=true", f"hydra.run.dir={tmp_path / 'b'}"])
    assert result.code == 0 and "Traceback" not in result.err, result.err

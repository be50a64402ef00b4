"""Ctrl-C and failures as a user meets them: one line and exit 130 whatever the moment, each command saying what
it leaves behind, and no directory left that holds nothing the command produced.

Ctrl-C at a chosen moment of a fresh process: ``python -X importtime`` names each module on stderr as its import
ends, so SIGINT is sent right after a given module (the console script's package, or torch's fake tensors, the
import that once left torch's exit hook printing ``FakeTensor cache stats``).
"""

from __future__ import annotations

import functools
import os
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import TINY


def _interrupt_after_import(module: str, args: list[str], cwd: Path) -> tuple[int, str, list[str]]:
    """Run ``python -X importtime -m <args>``, send SIGINT once ``module`` is imported; return the exit status,
    stdout and the stderr lines that are not import times."""
    env = {**os.environ, "WANDB_MODE": "offline", "PYTHONUNBUFFERED": "1"}
    # A child inherits an ignored SIGINT (pytest started with `&` or nohup) and Python then keeps ignoring it.
    default_sigint = functools.partial(signal.signal, signal.SIGINT, signal.SIG_DFL)
    with subprocess.Popen([sys.executable, "-X", "importtime", "-m", *args], cwd=cwd, env=env, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=default_sigint) as proc:
        try:
            lines = []
            for line in proc.stderr:
                lines.append(line)
                if line.startswith("import time:") and line.rsplit("|", 1)[1].strip() == module:
                    proc.send_signal(signal.SIGINT)
                    break
            else:
                raise AssertionError(f"{module} was never imported:\n{''.join(lines[-20:])}")
            out, rest = proc.communicate(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
    said = [line for line in rest.splitlines() if line and not line.startswith("import time:")]
    return proc.returncode, out, said


@pytest.mark.slow
def test_ctrl_c_while_the_console_script_imports_is_one_line(tmp_path):
    code, _, said = _interrupt_after_import("embodirl.cli", ["embodirl.cli.train", *TINY], tmp_path)
    assert (code, said) == (130, ["embodirl-train: aborted on Ctrl-C while starting; nothing was run"]), said
    assert not (tmp_path / "outputs").exists()


@pytest.fixture
def trained(tmp_path, cli) -> Path:
    run_dir = tmp_path / "run"
    assert cli("embodirl-train", [*TINY, f"hydra.run.dir={run_dir}"]).code == 0
    return run_dir


@pytest.mark.slow
@pytest.mark.parametrize(("module", "line"), [
    ("embodirl.cli.evaluate", "embodirl-eval: aborted on Ctrl-C; the evaluation did not finish and wrote no eval.json; "
                              "run the same command again to evaluate"),
    ("embodirl.cli.export", "embodirl-export: aborted on Ctrl-C; the export did not finish (an export is complete "
                            "once its manifest.json is written); run the same command again to export"),
])
def test_ctrl_c_in_eval_and_export_says_what_they_leave(trained, module, line):
    code, out, said = _interrupt_after_import("torch._subclasses.fake_tensor", [module, f"run={trained}"],
                                              trained.parent)
    assert (code, said) == (130, [line]), said
    assert "FakeTensor" not in out
    assert not (trained / "eval").exists() and not (trained / "export").exists()


def test_a_refused_config_leaves_no_run_directory(tmp_path, cli, monkeypatch):
    monkeypatch.chdir(tmp_path)
    before = cli("embodirl-train", [*TINY, "algo.learning_rate=-1"])  # refused before torch
    after = cli("embodirl-train", [*TINY, "env=gym", "env.id=NoSuchEnv-v0"])  # refused by gymnasium, after torch
    assert (before.code, after.code) == (2, 2) and "algo.learning_rate=-1" in before.err and "NoSuchEnv" in after.err
    assert list(tmp_path.iterdir()) == []  # no outputs/<date>/<time>/ with a train.log or a failed status.json


def test_a_refused_evaluation_leaves_no_directory(trained, cli):
    result = cli("embodirl-eval", [f"run={trained}", "num_episodes=0"])
    assert result.code == 2 and "num_episodes=0" in result.err
    assert not (trained / "eval").exists()


def test_a_failed_run_keeps_a_directory_it_did_not_make(tmp_path, cli, trained):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine")
    for run_dir in (mine, trained):
        kept = sorted(p.relative_to(run_dir) for p in run_dir.rglob("*"))
        assert cli("embodirl-train", [*TINY, "objective=nope", f"hydra.run.dir={run_dir}"]).code == 2
        assert set(kept) <= {p.relative_to(run_dir) for p in run_dir.rglob("*")}


def test_ctrl_c_before_training_began_keeps_nothing_and_says_how_to_start_again(tmp_path, cli, monkeypatch):
    import embodirl.app.run

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(embodirl.app.run, "run_training", interrupted)
    result = cli("embodirl-train", TINY)
    assert result.code == 130
    (line,) = result.err.strip().splitlines()
    assert line == ("embodirl-train: aborted on Ctrl-C; training had not begun (nothing was kept); start it again "
                    f"with: {shlex.join(['embodirl-train', *TINY])}")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow  # a multirun in a fresh process
def test_ctrl_c_in_a_sweep_names_its_directory_and_the_command_that_resumes_it(tmp_path, cli, monkeypatch):
    import embodirl.app.run

    real = embodirl.app.run.run_training

    def second_job_interrupted(cfg, run_dir, *args, **kwargs):
        if Path(run_dir).name == "1":
            raise KeyboardInterrupt
        return real(cfg, run_dir, *args, **kwargs)

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(embodirl.app.run, "run_training", second_job_interrupted)
    result = cli("embodirl-train", ["-m", *TINY, "seed=0,1"])
    assert result.code == 130
    (line,) = result.err.strip().splitlines()
    sweep, _, command = line.removeprefix("embodirl-train: aborted on Ctrl-C; sweep ").partition(": resume it with: ")
    (made,) = (tmp_path / "multirun").glob("*/*")
    assert Path(sweep) == made.resolve() and shlex.split(command)[0] == "embodirl-train", line
    assert shlex.split(command)[1:] == ["-m", *TINY, "seed=0,1", f"hydra.sweep.dir={made.resolve()}"]
    monkeypatch.setattr(embodirl.app.run, "run_training", real)
    resumed = cli("embodirl-train", shlex.split(command)[1:])
    assert resumed.code == 0, resumed.err
    assert "2 of 2 jobs completed" in resumed.out + resumed.err

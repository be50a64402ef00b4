"""embodirl-train and embodirl-eval as a user runs them: files, messages, exit codes.

Most cases run the console scripts in this process (the ``cli`` fixture); the ones about processes (a second
process on a run directory, Ctrl-C) start real subprocesses and are in the slow tier.
"""

import json
import shlex

import pytest

from tests.conftest import TINY, run_cli


def test_train_cli_produces_the_run_directory(tmp_path, cli):
    run_dir = tmp_path / "run"
    result = cli("embodirl-train", [*TINY, f"hydra.run.dir={run_dir}"])
    assert result.code == 0, result.err
    assert (run_dir / ".hydra" / "config.yaml").is_file()
    assert (run_dir / "checkpoints" / "last.pt").is_file()
    assert list((run_dir / "tb").glob("events.out.tfevents.*"))
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    assert len(lines) == 2 and json.loads(lines[-1])["env_steps"] == 256
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "completed"
    assert "embodirl-train summary" in result.out and str(run_dir) in result.out


def test_eval_cli_rebuilds_from_the_checkpoint(tmp_path, cli):
    run_dir = _tiny_run(cli, tmp_path)
    eval_dir = tmp_path / "eval"
    result = cli("embodirl-eval", [f"checkpoint={run_dir / 'checkpoints' / 'last.pt'}", "num_episodes=6",
                                   "env.num_envs=3", "device=cpu", f"hydra.run.dir={eval_dir}"])
    assert result.code == 0, result.err
    record = json.loads((eval_dir / "eval.json").read_text())
    assert record["eval/num_episodes"] == 6 and record["num_envs"] == 3
    assert record["env_steps_trained"] == 256
    assert 1 <= record["eval/return_mean"] <= 500
    assert "eval/return_mean" in result.out


def test_eval_of_a_run_directory_writes_next_to_the_run(tmp_path, cli, monkeypatch):
    from embodirl.analysis.report import discover_runs

    monkeypatch.chdir(tmp_path)  # run=runs/a is relative to where the user stands
    run_dir = _tiny_run(cli, tmp_path / "runs", "a")
    for args, name in ((["run=runs/a", "checkpoint=best"], "best.pt"), (["run=runs/a"], "last.pt"),
                       ([f"checkpoint={run_dir / 'checkpoints' / 'step_000000000128.pt'}"], "step_000000000128.pt")):
        result = cli("embodirl-eval", [*args, "num_episodes=2", "device=cpu"])
        assert result.code == 0, result.err
        out = sorted((run_dir / "eval").glob("*/eval.json"), key=lambda p: p.stat().st_mtime)[-1]
        record = json.loads(out.read_text())
        assert record["checkpoint"] == str((run_dir / "checkpoints" / name).resolve())
        assert record["run"] == str(run_dir.resolve()) and str(out) in result.out
    assert not (tmp_path / "outputs").exists()
    assert discover_runs(tmp_path / "runs") == [run_dir]  # evaluations are not taken for runs


@pytest.mark.slow  # fresh processes
def test_eval_never_builds_a_runs_callbacks_and_checks_their_targets(tmp_path, cli):
    calls = tmp_path / "calls.jsonl"
    target = "tests.recording_callback.RecordingCallback"
    run_dir = tmp_path / "run"
    result = cli("embodirl-train", [*TINY, f"trainer.callbacks=[{{_target_: {target}, path: '{calls}'}}]",
                                    "eval.video=true", "eval.video_size=32", "eval.video_num_envs=1",
                                    f"hydra.run.dir={run_dir}"])
    assert result.code == 0, result.err
    assert calls.read_text().count("on_end") == 1 and list((run_dir / "videos").glob("eval_*.mp4"))
    calls.unlink()
    result = cli("embodirl-eval", [f"run={run_dir}", "num_episodes=2", "device=cpu"])
    assert result.code == 2 and f"trusted_targets=[{target}]" in result.err, result.err
    result = cli("embodirl-eval", [f"run={run_dir}", "num_episodes=2", "device=cpu", f"trusted_targets=[{target}]",
                                   "eval.video=true", "eval.video_size=32"])
    assert result.code == 0, result.err
    assert not calls.exists()  # the callback named in the checkpoint was checked, never built
    (out,) = (run_dir / "eval").glob("*/eval.json")
    video = out.parent / "video.mp4"
    assert json.loads(out.read_text())["video"] == str(video) and video.is_file()


def test_eval_of_a_checkpoint_written_before_the_evaluation_keys_moved(tmp_path, cli):
    # Until issue 21 the number of evaluation envs was trainer.num_eval_envs, and the logger and eval nodes named
    # classes that are gone since (LoggerSettings, VideoSettings): such a checkpoint still evaluates.
    from embodirl.app.run import run_training
    from embodirl.runtime.checkpoint import load_checkpoint, serialize_checkpoint
    from embodirl.runtime.files import atomic_write_bytes
    from tests.conftest import compose_config

    run_training(compose_config(TINY), tmp_path / "run")
    state = load_checkpoint(tmp_path / "run" / "checkpoints" / "last.pt")
    del state["format"], state["version"]
    config = state["config"]
    evaluation = config.pop("eval")
    config["trainer"].update(eval_every_env_steps=evaluation["every_env_steps"], num_eval_envs=3,
                             num_eval_episodes=evaluation["num_episodes"], eval_env_overrides=None)
    config["eval"] = {"_target_": "embodirl.training.video.VideoSettings", "_partial_": True, "video": False,
                      "video_num_envs": None, "video_size": 192, "video_fps": 20, "video_format": "mp4"}
    config["logger"]["_target_"] = "embodirl.training.loggers.LoggerSettings"
    atomic_write_bytes(tmp_path / "old.pt", serialize_checkpoint(state))
    result = cli("embodirl-eval", [f"checkpoint={tmp_path / 'old.pt'}", "num_episodes=3", "device=cpu",
                                   f"hydra.run.dir={tmp_path / 'eval'}"])
    assert result.code == 0, result.err
    assert json.loads((tmp_path / "eval" / "eval.json").read_text())["num_envs"] == 3


@pytest.mark.parametrize(("args", "fragments"), [
    (["run=runs/nope"], ["run='runs/nope'", "a run directory", "Fix:"]),
    (["checkpoint=best"], ["checkpoint='best'", "run=RUN_DIR", "Fix:"]),
    ([], ["checkpoint='last'", "run=RUN_DIR", "Fix:"]),
    (["run=runs/a", "checkpoint=step_9.pt"], ["checkpoint='step_9.pt'", "found: ", "last.pt", "Fix:"]),
    (["run=runs/a", "checkpoint=/x/y.pt"], ["checkpoint='/x/y.pt'", "without run=", "Fix:"]),
])
def test_eval_run_and_checkpoint_mistakes_get_one_line(cli, tmp_path, monkeypatch, args, fragments):
    (tmp_path / "runs" / "a" / "checkpoints").mkdir(parents=True)
    (tmp_path / "runs" / "a" / "checkpoints" / "last.pt").write_bytes(b"")
    monkeypatch.chdir(tmp_path)
    result = cli("embodirl-eval", args)
    assert result.code == 2 and len(result.err.strip().splitlines()) == 1, result.err
    assert all(f in result.err for f in fragments), result.err
    assert not (tmp_path / "runs" / "a" / "eval").exists()


def test_corrupt_checkpoint_is_refused_by_eval_and_train(tmp_path, cli):
    bad = tmp_path / "last.pt"
    bad.write_bytes(b"not a checkpoint at all")
    result = cli("embodirl-eval", [f"checkpoint={bad}", f"hydra.run.dir={tmp_path / 'e'}"])
    assert result.code != 0
    assert "cannot be read" in result.err and "Fix:" in result.err and "Traceback" not in result.err
    result = cli("embodirl-train", [*TINY, f"trainer.resume={bad}", f"hydra.run.dir={tmp_path / 'r'}"])
    assert result.code != 0 and "cannot be read" in result.err


def _tiny_run(cli, tmp_path, name="run"):
    """A finished TINY training run in ``tmp_path / name`` (embodirl-train in this process)."""
    run_dir = tmp_path / name
    result = cli("embodirl-train", [*TINY, f"hydra.run.dir={run_dir}"])
    assert result.code == 0, result.err
    return run_dir


def _plant(cli, tmp_path, config_edit):
    """A checkpoint that loads with weights_only=True but whose config names code (the exploit)."""
    import torch

    from embodirl.runtime.checkpoint import load_checkpoint, serialize_checkpoint

    state = load_checkpoint(_tiny_run(cli, tmp_path, "victim") / "checkpoints" / "last.pt")
    config_edit(state["config"])
    del state["format"], state["version"]
    path = tmp_path / "downloaded.pt"
    path.write_bytes(serialize_checkpoint(state))
    torch.load(path, weights_only=True)  # the safe loader accepts it: only plain values inside
    return path


EXPLOITS = {
    "nested target": lambda marker: lambda config: config["env"].update(
        max_episode_steps={"_target_": "pathlib.Path.write_text",
                           "self": {"_target_": "pathlib.Path", "_args_": [str(marker)]}, "data": "pwned"}),
    "component target": lambda marker: lambda config: config["policy"].update(
        _target_="builtins.exec", _args_=[f"open({str(marker)!r}, 'w').write('pwned')"]),
}


@pytest.mark.parametrize("exploit", list(EXPLOITS))
def test_a_checkpoint_never_runs_code_through_eval_or_resume(tmp_path, cli, exploit):
    marker = tmp_path / "marker.pth"
    evil = _plant(cli, tmp_path, EXPLOITS[exploit](marker))
    result = cli("embodirl-eval", [f"checkpoint={evil}", "device=cpu", f"hydra.run.dir={tmp_path / 'e'}"])
    assert result.code == 2 and not marker.exists(), result.err
    assert len(result.err.strip().splitlines()) == 1 and "Fix:" in result.err
    result = cli("embodirl-train", [*TINY, f"trainer.resume={evil}", f"hydra.run.dir={tmp_path / 'r'}"])
    assert not marker.exists(), result.err  # resuming reads weights and counters, never instantiates


def test_corrupt_and_nan_checkpoints_get_one_safe_line(tmp_path, cli):
    import torch

    from embodirl.runtime.checkpoint import load_checkpoint, serialize_checkpoint

    state = load_checkpoint(_tiny_run(cli, tmp_path) / "checkpoints" / "last.pt")
    state["policy"] = {k: torch.full_like(v, float("nan")) if v.is_floating_point() else v
                       for k, v in state["policy"].items()}
    del state["format"], state["version"]
    nan = tmp_path / "nan.pt"
    nan.write_bytes(serialize_checkpoint(state))
    result = cli("embodirl-eval", [f"checkpoint={nan}", f"hydra.run.dir={tmp_path / 'e'}"])
    assert result.code == 2 and "NaN" in result.err and "step_*.pt" in result.err
    bad = tmp_path / "bad.pt"
    bad.write_bytes(b"\x80\x02not a checkpoint")
    result = cli("embodirl-eval", [f"checkpoint={bad}", f"hydra.run.dir={tmp_path / 'e'}"])
    assert result.code == 2 and "cannot be read" in result.err
    assert "weights_only" not in result.err  # never repeat torch's advice to load unsafely


@pytest.mark.slow
def test_second_process_on_a_run_directory_is_refused(tmp_path):
    import os
    import subprocess
    import sys
    import time

    run_dir = tmp_path / "run"
    first = subprocess.Popen([sys.executable, "-m", "embodirl.cli.train", *TINY, "trainer.total_env_steps=100000000",
                              f"hydra.run.dir={run_dir}"], cwd=tmp_path, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True, env={**os.environ, "WANDB_MODE": "offline"})
    try:
        deadline = time.monotonic() + 60
        while not (run_dir / "metrics.jsonl").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        result = run_cli("embodirl-train", [*TINY, f"hydra.run.dir={run_dir}"], cwd=tmp_path)
        assert result.returncode == 2, result.stderr
        (line,) = result.stderr.strip().splitlines()
        assert f"in use by process {first.pid}" in line and "hydra.run.dir=<another directory>" in line
        assert json.loads((run_dir / "status.json").read_text())["pid"] == first.pid  # left alone
    finally:
        first.terminate()
        first.wait(timeout=60)
    assert first.returncode == 124 and json.loads((run_dir / "status.json").read_text())["status"] == "preempted"


@pytest.mark.slow
def test_ctrl_c_finishes_the_iteration_saves_and_resumes(tmp_path):
    import signal
    import subprocess
    import sys
    import time

    from embodirl.runtime.checkpoint import load_checkpoint

    run_dir = tmp_path / "run"
    args = [sys.executable, "-m", "embodirl.cli.train", *TINY, "trainer.total_env_steps=100000000",
            "trainer.checkpoint_every_env_steps=100000000", f"hydra.run.dir={run_dir}"]
    proc = subprocess.Popen(args, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while (not (run_dir / "metrics.jsonl").exists() or len((run_dir / "metrics.jsonl").read_text().splitlines()) < 3) \
            and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130
    (line,) = stderr.strip().splitlines()
    assert "stopped on Ctrl-C after saving checkpoints/last.pt" in line and "run the same command" not in line
    _, _, command = line.partition("; resume with: ")
    assert command.startswith("embodirl-train ") and f"hydra.run.dir={run_dir}" in command, line
    last = json.loads((run_dir / "metrics.jsonl").read_text().splitlines()[-1])
    assert load_checkpoint(run_dir / "checkpoints" / "last.pt")["trainer"]["env_steps"] == last["env_steps"]
    assert json.loads((run_dir / "status.json").read_text())["status"] == "interrupted"
    assert json.loads((run_dir / "summary.json").read_text())["status"] == "interrupted"
    assert not (run_dir / "checkpoints" / "interrupted.pt").exists()
    # The printed command continues this run (a longer budget appended: the printed one is 100M steps).
    longer = f"trainer.total_env_steps={last['env_steps'] + 128}"
    result = run_cli("embodirl-train", [*shlex.split(command)[1:], longer], cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert json.loads((run_dir / "metrics.jsonl").read_text().splitlines()[-1])["env_steps"] == last["env_steps"] + 128


def test_a_changed_config_is_refused_and_leaves_the_run_untouched(tmp_path, cli):
    run_dir = _tiny_run(cli, tmp_path)
    before = {p: p.read_bytes() for p in [run_dir / ".hydra" / "config.yaml", run_dir / "status.json",
                                          run_dir / "metrics.jsonl"]}
    result = cli("embodirl-train", [*TINY, "algo.learning_rate=0.01", f"hydra.run.dir={run_dir}"])
    assert result.code == 2
    (line,) = result.err.strip().splitlines()
    assert "algo.learning_rate 0.002 -> 0.01" in line and "trainer.allow_config_change=true" in line
    assert {p: p.read_bytes() for p in before} == before
    result = cli("embodirl-train", [*TINY, "algo.learning_rate=0.01", "trainer.allow_config_change=true",
                                    "trainer.total_env_steps=384", f"hydra.run.dir={run_dir}"])
    assert result.code == 0, result.err
    assert "learning_rate: 0.01" in (run_dir / ".hydra" / "config.yaml").read_text()
    (history,) = (run_dir / ".hydra" / "history").iterdir()
    assert "learning_rate: 0.002" in (history / "config.yaml").read_text()


def test_disk_full_fails_in_one_line_and_keeps_the_last_checkpoint(tmp_path, cli, monkeypatch):
    from embodirl.runtime.checkpoint import load_checkpoint
    from embodirl.training.loggers import JsonlLogger

    run_dir = _tiny_run(cli, tmp_path)
    opened = JsonlLogger.__init__

    def full_disk(self, *args, **kwargs):  # every write fails with ENOSPC, as on a full disk (a link is refused)
        opened(self, *args, **kwargs)
        self._file.close()
        self._file = open("/dev/full", "w", encoding="utf-8")  # noqa: SIM115 - closed by the logger

    monkeypatch.setattr(JsonlLogger, "__init__", full_disk)
    result = cli("embodirl-train", [*TINY, "trainer.total_env_steps=512", f"hydra.run.dir={run_dir}"])
    assert result.code == 1
    (line,) = result.err.strip().splitlines()
    assert f"{run_dir / 'metrics.jsonl'}: No space left on device" in line and "Fix: free disk space" in line
    assert json.loads((run_dir / "status.json").read_text())["status"] == "failed"
    assert json.loads((run_dir / "summary.json").read_text())["status"] == "failed"
    assert load_checkpoint(run_dir / "checkpoints" / "last.pt")["trainer"]["env_steps"] == 256

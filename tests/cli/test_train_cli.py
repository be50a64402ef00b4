"""embodirl-train and embodirl-eval as a user runs them: subprocesses, files, messages, exit codes."""

import json

import pytest

from tests.conftest import TINY, run_cli


def test_train_cli_produces_the_run_directory(tmp_path):
    run_dir = tmp_path / "run"
    result = run_cli("embodirl-train", [*TINY, f"hydra.run.dir={run_dir}"], cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert (run_dir / ".hydra" / "config.yaml").is_file()
    assert (run_dir / "checkpoints" / "last.pt").is_file()
    assert list((run_dir / "tb").glob("events.out.tfevents.*"))
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    assert len(lines) == 2 and json.loads(lines[-1])["env_steps"] == 256
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "completed"
    assert "embodirl-train summary" in result.stdout and str(run_dir) in result.stdout


def test_eval_cli_rebuilds_from_the_checkpoint(tmp_path):
    run_dir = tmp_path / "run"
    assert run_cli("embodirl-train", [*TINY, f"hydra.run.dir={run_dir}"], cwd=tmp_path).returncode == 0
    eval_dir = tmp_path / "eval"
    result = run_cli("embodirl-eval", [f"checkpoint={run_dir / 'checkpoints' / 'last.pt'}", "num_episodes=6",
                                       "env.num_envs=3", "device=cpu", f"hydra.run.dir={eval_dir}"], cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    record = json.loads((eval_dir / "eval.json").read_text())
    assert record["eval/num_episodes"] == 6 and record["num_envs"] == 3
    assert record["env_steps_trained"] == 256
    assert 1 <= record["eval/return_mean"] <= 500
    assert "eval/return_mean" in result.stdout


BAD_INPUTS = [
    # (overrides, text the single message must contain)
    (["algo=nonexistent"], ["algo/nonexistent", "Available options in 'algo'", "ppo"]),
    (["algo.clip_coef=-1"], ["algo.clip_coef=-1", "expected a float > 0", "Fix:"]),
    (["env.num_envs=0"], ["env.num_envs=0", "Fix:"]),
    (["trainer.total_env_steps=abc"], ["trainer.total_env_steps='abc'", "int", "Fix:"]),
    (["policy.activation=sigmoidz"], ["policy.activation='sigmoidz'", "relu", "Fix:"]),
    (["env=gym", "env.id=CartPol-v1"], ["env.id='CartPol-v1'", "CartPole-v1", "Fix:"]),
    (["trainer.resume=/nonexistent/last.pt"], ["trainer.resume='/nonexistent/last.pt'", "does not exist", "Fix:"]),
]


@pytest.mark.parametrize("overrides,expected", BAD_INPUTS, ids=lambda v: str(v[0]) if isinstance(v, list) else "")
def test_bad_input_fails_before_training_with_one_clear_message(tmp_path, overrides, expected):
    run_dir = tmp_path / "run"
    result = run_cli("embodirl-train", [*TINY, *overrides, f"hydra.run.dir={run_dir}"], cwd=tmp_path)
    assert result.returncode != 0
    for text in expected:
        assert text in result.stderr, result.stderr
    assert "Traceback" not in result.stderr
    assert not (run_dir / "metrics.jsonl").exists()


def test_corrupt_checkpoint_is_refused_by_eval_and_train(tmp_path):
    bad = tmp_path / "last.pt"
    bad.write_bytes(b"not a checkpoint at all")
    result = run_cli("embodirl-eval", [f"checkpoint={bad}", f"hydra.run.dir={tmp_path / 'e'}"], cwd=tmp_path)
    assert result.returncode != 0
    assert "cannot be read" in result.stderr and "Fix:" in result.stderr and "Traceback" not in result.stderr
    result = run_cli("embodirl-train", [*TINY, f"trainer.resume={bad}", f"hydra.run.dir={tmp_path / 'r'}"],
                     cwd=tmp_path)
    assert result.returncode != 0 and "cannot be read" in result.stderr

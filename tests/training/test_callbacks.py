"""trainer.callbacks: hooks called in order with the records, checkpoints and summary; bad entries refused."""

import json

import pytest

from embodirl.app.run import run_training
from embodirl.errors import ConfigError
from embodirl.training.callbacks import Callback, Callbacks
from tests.conftest import compose_config


def _calls(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_callbacks_see_iterations_evaluations_checkpoints_and_the_end(tmp_path, tiny):
    log = tmp_path / "calls.jsonl"
    cfg = compose_config([*tiny, "trainer.total_env_steps=384", "eval.every_env_steps=256",
                          "trainer.checkpoint_every_env_steps=256", "trainer.best_metric=env_steps",
                          f"trainer.callbacks=[{{_target_: tests.recording_callback.RecordingCallback, path: '{log}'}},"
                          f"{{_target_: tests.recording_callback.OnlyEnd, path: '{tmp_path / 'end.txt'}'}}]"])
    run_training(cfg, tmp_path / "run")
    calls = [(c["hook"], c.get("env_steps"), c.get("file")) for c in _calls(log)]
    # best_metric=env_steps improves every iteration: best.pt after each record, before the periodic save.
    assert calls == [
        ("on_iteration", 128, None), ("on_checkpoint", 128, "best.pt"),
        ("on_evaluation", 256, None), ("on_iteration", 256, None), ("on_checkpoint", 256, "best.pt"),
        ("on_checkpoint", 256, "last.pt"), ("on_checkpoint", 256, "step_000000000256.pt"),
        ("on_evaluation", 384, None), ("on_iteration", 384, None), ("on_checkpoint", 384, "best.pt"),
        ("on_checkpoint", 384, "last.pt"), ("on_end", 384, None)]
    assert all(c["exists"] for c in _calls(log) if c["hook"] == "on_checkpoint")
    assert _calls(log)[-1]["status"] == "completed" and (tmp_path / "end.txt").read_text() == "completed"


def test_a_failing_callback_fails_the_run_and_still_gets_on_end(tmp_path, tiny, monkeypatch):
    from tests.recording_callback import RecordingCallback

    def boom(self, record):
        raise RuntimeError("callback bug")

    monkeypatch.setattr(RecordingCallback, "on_evaluation", boom)
    log = tmp_path / "calls.jsonl"
    cfg = compose_config([*tiny, f"trainer.callbacks=[{{_target_: tests.recording_callback.RecordingCallback, "
                                 f"path: '{log}'}}]"])
    with pytest.raises(RuntimeError, match="callback bug"):
        run_training(cfg, tmp_path / "run")
    assert _calls(log)[-1]["hook"] == "on_end" and _calls(log)[-1]["status"] == "failed"
    assert json.loads((tmp_path / "run" / "status.json").read_text())["status"] == "failed"


def test_base_class_hooks_are_no_ops_and_an_object_without_hooks_is_refused():
    Callbacks([Callback()]).call("on_iteration", {"env_steps": 1})
    with pytest.raises(ConfigError, match=r"callbacks\[1\]"):
        Callbacks([Callback(), object()])


def test_a_callback_that_is_not_a_target_node_is_refused_before_training(tmp_path, tiny):
    with pytest.raises(ConfigError, match=r"trainer.callbacks\[0\]"):
        run_training(compose_config([*tiny, "trainer.callbacks=[nonsense]"]), tmp_path)
    assert not (tmp_path / "metrics.jsonl").exists()

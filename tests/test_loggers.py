"""Logging sinks: wandb offline run files, plain console lines off a terminal, metrics.jsonl on resume."""

import json
import logging

from embodirl.experiment import run_training
from embodirl.loggers import ConsoleLogger, JsonlLogger
from tests.conftest import compose_config


def test_wandb_offline_run_is_written_into_the_run_dir(tmp_path, tiny, monkeypatch):
    monkeypatch.setenv("WANDB_SILENT", "true")
    cfg = compose_config([*tiny, "logger.wandb.enabled=true", "logger.wandb.mode=offline",
                          "logger.wandb.project=embodirl-test"])
    run_training(cfg, tmp_path)
    runs = list((tmp_path / "wandb").glob("offline-run-*"))
    assert len(runs) == 1
    assert list(runs[0].glob("*.wandb"))  # the run's records, ready for `wandb sync`


def test_console_prints_plain_periodic_lines_when_not_a_terminal(caplog):
    console = ConsoleLogger(total_env_steps=1000, mode="lines", every_s=0.0)
    with caplog.at_level(logging.INFO, logger="embodirl.loggers"):
        console.log({"env_steps": 500, "sps": 1000.0, "episode/return_mean": 12.5})
        console.log({"env_steps": 1000, "sps": 1000.0, "eval/return_mean": 30.0})
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2
    assert "env_steps 500/1,000 (50%)" in lines[0] and "return 12.5" in lines[0] and "ETA 0s" in lines[0]
    assert "eval 30.0" in lines[1]


def test_jsonl_resume_drops_lines_written_after_the_checkpoint(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(json.dumps({"env_steps": s}) + "\n" for s in (100, 200, 300)) + '{"env_st')
    JsonlLogger(path, resume_env_steps=200).close()
    assert [json.loads(x)["env_steps"] for x in path.read_text().splitlines()] == [100, 200]

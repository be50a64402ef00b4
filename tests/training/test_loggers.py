"""Logging sinks: wandb offline run files, metrics.jsonl on resume, the logger options (the console:
test_console.py)."""

import errno
import json
import time

import pytest

from embodirl.app.run import run_training, wandb_identity
from embodirl.config.schema import parse
from embodirl.config.training import LoggerConfig, WandbConfig
from embodirl.errors import ConfigError
from embodirl.training.loggers import (
    ConsoleLogger,
    JsonlLogger,
    Loggers,
    StopGoal,
    TensorBoardLogger,
    WandbLogger,
    build_loggers,
    wandb_mode,
)
from tests.conftest import compose_config


@pytest.mark.slow  # a second wandb run: the fast tier's is the one below, configured from the environment
def test_wandb_offline_run_is_written_into_the_run_dir(tmp_path, tiny, monkeypatch):
    monkeypatch.setenv("WANDB_SILENT", "true")
    cfg = compose_config([*tiny, "logger.wandb.enabled=true", "logger.wandb.mode=offline",
                          "logger.wandb.project=embodirl-test"])
    run_training(cfg, tmp_path)
    runs = list((tmp_path / "wandb").glob("offline-run-*"))
    assert len(runs) == 1
    assert list(runs[0].glob("*.wandb"))  # the run's records, ready for `wandb sync`


def test_jsonl_resume_drops_lines_written_after_the_checkpoint_and_keeps_them_aside(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(json.dumps({"env_steps": s}) + "\n" for s in (100, 200, 300)) + '{"env_st')
    JsonlLogger(path, start_env_steps=200).close()
    assert [json.loads(x)["env_steps"] for x in path.read_text().splitlines()] == [100, 200]
    aside = (tmp_path / "metrics.superseded.jsonl").read_text().splitlines()
    assert aside == [json.dumps({"env_steps": 300}), '{"env_st']


def test_jsonl_restart_without_checkpoint_starts_the_file_afresh(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(json.dumps({"env_steps": s}) + "\n" for s in (100, 200)))
    logger = JsonlLogger(path, start_env_steps=0)
    logger.log({"env_steps": 100})
    logger.close()
    assert [json.loads(x)["env_steps"] for x in path.read_text().splitlines()] == [100]


def test_jsonl_survives_non_utf8_bytes(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_bytes(b'{"env_steps": 100}\n\xff\xfe garbage \x80\n{"env_steps": 200}\n')
    JsonlLogger(path, start_env_steps=200).close()
    assert [json.loads(x)["env_steps"] for x in path.read_text().splitlines()] == [100, 200]
    assert (tmp_path / "metrics.superseded.jsonl").read_bytes() == b"\xff\xfe garbage \x80\n"


def test_jsonl_write_errors_name_the_file(tmp_path):
    path = tmp_path / "metrics.jsonl"
    logger = JsonlLogger(path)
    logger._file.close()
    logger._file = open("/dev/full", "w", encoding="utf-8")  # noqa: SIM115 - every write fails with ENOSPC, as on a full disk
    with pytest.raises(OSError) as info:
        logger.log({"env_steps": 1})
    assert info.value.errno == errno.ENOSPC and info.value.filename == str(path)


def test_tensorboard_gets_every_finite_metric_of_a_record_at_its_env_steps(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    tb = TensorBoardLogger(tmp_path)
    tb.log({"iteration": 1, "env_steps": 100, "sps": 5e4, "loss/policy": 0.25, "eval/return_mean": None,
            "diag/approx_kl": float("nan"), "episode/count": 3, "diag/flag": True, "note/text": "x"})
    tb.log({"iteration": 2, "env_steps": 200, "sps": 6e4, "loss/policy": -1.5, "eval/return_mean": 475.0})
    tb.close()
    acc = EventAccumulator(str(tmp_path))
    acc.Reload()
    scalars = {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}
    assert scalars == {"loss/policy": [(100, 0.25), (200, -1.5)], "perf/sps": [(100, 5e4), (200, 6e4)],
                       "episode/count": [(100, 3.0)], "diag/flag": [(100, 1.0)], "eval/return_mean": [(200, 475.0)]}


def test_wandb_mode_follows_the_environment_unless_set(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    assert wandb_mode(WandbConfig(enabled=True)) == "offline"
    assert wandb_mode(WandbConfig(enabled=True, mode="disabled")) == "disabled"
    monkeypatch.delenv("WANDB_MODE")
    assert wandb_mode(WandbConfig(enabled=True)) == "online"
    monkeypatch.setenv("WANDB_MODE", "bogus")
    with pytest.raises(ConfigError, match="WANDB_MODE='bogus'"):  # refused when the loggers are built, before training
        Loggers(LoggerConfig(wandb=WandbConfig(enabled=True)), run_dir=tmp_path, config={}, goal=StopGoal(100))


@pytest.mark.slow  # wandb's service processes
def test_wandb_offline_from_the_environment_needs_no_api_key(tmp_path, tiny, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / "wandb-config"))  # no stored login either
    summary = run_training(compose_config([*tiny, "logger.wandb.enabled=true"]), tmp_path,
                           run_name=("ppo-cartpole-seed0", "ppo-cartpole"))
    assert summary["status"] == "completed"
    (run,) = (tmp_path / "wandb").glob("offline-run-*")
    assert list(run.glob("*.wandb"))  # the run's records, in the run dir, ready for `wandb sync`


def test_wandb_runs_are_named_and_grouped_by_algo_env_seed_and_sweep():
    choices = {"algo": "grpo", "env": "push_cube", "policy": "actor_only"}
    assert wandb_identity(choices, 3, None) == ("grpo-push_cube-seed3", "grpo-push_cube")
    name, group = wandb_identity(choices, 1, ("multirun/2026-11-23/10-00-00", ["algo.learning_rate=1e-3", "seed=1"]))
    assert (name, group) == ("grpo-push_cube-seed1 algo.learning_rate=1e-3", "multirun/2026-11-23/10-00-00")


@pytest.mark.parametrize("bad", [{"console": "fancy"}, {"tensorboard": "maybe"}, {"console_every_s": "abc"},
                                 {"console_every_s": 0}, {"wandb": {"mode": "bogus"}}, {"wandb": {"projekt": "x"}}])
def test_logger_settings_are_checked(bad):
    with pytest.raises(ConfigError) as info:
        parse(LoggerConfig, bad, "logger.")
    assert info.value.key.startswith("logger.")


# logger=default | tensorboard | wandb | none: what each sends where (metrics.jsonl always)
LOGGER_OPTIONS = {"default": (True, False), "tensorboard": (True, False), "wandb": (True, True), "none": (False, False)}


@pytest.mark.parametrize("option", sorted(LOGGER_OPTIONS))
def test_every_logger_option_composes_and_builds_its_loggers(option, tmp_path, monkeypatch):
    from embodirl.config.instantiate import instantiate

    monkeypatch.setenv("WANDB_MODE", "offline")
    loggers = instantiate(compose_config([f"logger={option}"]).logger, "logger.", run_dir=tmp_path, config={},
                          goal=StopGoal(100))
    assert isinstance(loggers, Loggers)
    assert (loggers.cfg.tensorboard, loggers.cfg.wandb.enabled) == LOGGER_OPTIONS[option]
    assert loggers.cfg.console == "auto" and wandb_mode(loggers.cfg.wandb) == "offline"


def test_build_loggers_follows_the_option_and_hands_the_stop_goal_to_the_console(tmp_path, monkeypatch):
    from embodirl.config.instantiate import instantiate

    goal = StopGoal(50_000, "eval/success_rate", 0.9, stop_on_solved=True, max_wall_time_s=60.0)
    loggers = instantiate(compose_config(["logger=none", "logger.console=lines"]).logger, "logger.", run_dir=tmp_path,
                          config={}, goal=goal, run_name=("ppo-push_cube-seed0", "ppo-push_cube")).open(0)
    kinds = [type(x) for x in loggers.loggers]
    assert kinds == [JsonlLogger, ConsoleLogger] and TensorBoardLogger not in kinds and WandbLogger not in kinds
    console = loggers.loggers[1]
    assert console.label == "ppo-push_cube-seed0" and console.mode == "lines"
    assert (console.goal.total_env_steps, console.goal.solved_metric, console.goal.solved_threshold,
            console.goal.max_wall_time_s) == (50_000, "eval/success_rate", 0.9, 60.0)
    loggers.log({"env_steps": 100, "sps": 1.0})
    loggers.close()
    assert (tmp_path / "metrics.jsonl").read_text().count("\n") == 1 and not (tmp_path / "tb").exists()


def test_the_console_clock_starts_after_the_other_loggers_are_set_up(tmp_path, monkeypatch):
    # Its first line showed 34k steps/s for a 150k steps/s run: its clock included TensorBoard's set-up.
    import time

    real_init = TensorBoardLogger.__init__

    def slow_init(self, *args, **kwargs):
        real_init(self, *args, **kwargs)
        time.sleep(0.3)

    monkeypatch.setattr(TensorBoardLogger, "__init__", slow_init)
    cfg = parse(LoggerConfig, {"tensorboard": True, "console": "lines"}, "logger.")
    before = time.monotonic()
    loggers = build_loggers(tmp_path, cfg, {}, StopGoal(50_000), 0, "ppo-cartpole-seed0")
    kinds = [type(x) for x in loggers.loggers]
    assert kinds == [JsonlLogger, ConsoleLogger, TensorBoardLogger]
    assert loggers.loggers[1]._start >= before + 0.3
    loggers.close()


# --- TensorBoard after a resume: the same points as metrics.jsonl --------------------------------------------
COMPARED = ("loss/policy", "loss/value", "episode/return_mean", "eval/return_mean", "train/learning_rate")


def _jsonl_points(run_dir, key):
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [(r["env_steps"], r[key]) for r in records if r.get(key) is not None]


def _tensorboard_points(run_dir, key):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run_dir / "tb"))
    acc.Reload()
    return [(e.step, e.value) for e in acc.Scalars(key)]


def _assert_tensorboard_equals_jsonl(run_dir, steps):
    import numpy as np

    for key in COMPARED:
        jsonl = [(step, float(np.float32(value))) for step, value in _jsonl_points(run_dir, key)]  # TB holds float32
        assert _tensorboard_points(run_dir, key) == jsonl, key
    assert [s for s, _ in _jsonl_points(run_dir, "loss/policy")] == steps


def test_tensorboard_equals_metrics_jsonl_after_a_budget_extension(tmp_path, tiny):
    run_training(compose_config([*tiny, "trainer.total_env_steps=256"]), tmp_path)
    run_training(compose_config([*tiny, "trainer.total_env_steps=512"]), tmp_path)  # continues from 256
    _assert_tensorboard_equals_jsonl(tmp_path, [128, 256, 384, 512])


def test_tensorboard_equals_metrics_jsonl_after_a_crash_and_resume(tmp_path, tiny):
    cfg = compose_config([*tiny, "trainer.total_env_steps=512", "trainer.keep_checkpoints=10"])
    run_training(cfg, tmp_path)
    ckpts = tmp_path / "checkpoints"
    # As if killed after logging 384 and 512 but before their checkpoints: last.pt still holds env_steps=256.
    (ckpts / "step_000000000256.pt").replace(ckpts / "last.pt")
    for path in ckpts.glob("step_*.pt"):
        path.unlink()
    run_training(cfg, tmp_path)  # resumes at 256, redoes 384 and 512
    _assert_tensorboard_equals_jsonl(tmp_path, [128, 256, 384, 512])
    assert [json.loads(x)["env_steps"] for x in (tmp_path / "metrics.superseded.jsonl").read_text().splitlines()] \
        == [384, 512]


def test_a_run_continued_within_the_second_writes_an_event_file_tensorboard_reads_last(tmp_path):
    # TensorBoard reads event files in name order; within one second the names compare pid and counter as text,
    # so an earlier file named by pid 99999 would sort after a continued run's, and its purge would hide nothing.
    import socket

    earlier = tmp_path / f"events.out.tfevents.{int(time.time()):010d}.{socket.gethostname()}.99999.9"
    earlier.write_bytes(b"")
    logger = TensorBoardLogger(tmp_path, purge_step=257)
    logger.close()
    files = sorted(p.name for p in tmp_path.glob("events.out.tfevents.*"))
    assert len(files) == 2 and files[0] == earlier.name, files

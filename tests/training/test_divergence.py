"""A diverged run fails (``trainer.divergence``); healthy runs never trip the check."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from embodirl.config.schema import parse
from embodirl.config.training import DivergenceConfig, TrainerConfig
from embodirl.errors import ConfigError, DivergedError
from embodirl.training.divergence import check_divergence
from tests.conftest import TINY, compose_config, in_process_run

RECORDED = json.loads((Path(__file__).parent / "data" / "update_metrics.json").read_text())


@pytest.fixture(scope="module")
def default_limits() -> DivergenceConfig:
    """The limits every preset runs with (conf/trainer/default.yaml and debug.yaml, the schema's defaults); composed
    once for the module, since every recorded run is checked against the same limits."""
    for trainer in ("default", "debug"):
        assert compose_config([f"trainer={trainer}"]).trainer.divergence == compose_config([]).trainer.divergence
    limits = parse(DivergenceConfig, dict(compose_config([]).trainer.divergence), "trainer.divergence.")
    assert limits == DivergenceConfig()
    return limits


@pytest.mark.parametrize("run", [name for name, r in RECORDED["runs"].items() if r["healthy"]])
def test_no_update_of_a_healthy_preset_trips_the_default_limits(run, default_limits):
    records = RECORDED["runs"][run]["updates"]
    assert len(records) >= 5
    for iteration, metrics in enumerate(records, start=1):
        check_divergence(default_limits, metrics, iteration)


@pytest.mark.parametrize("run", [name for name, r in RECORDED["runs"].items() if not r["healthy"]])
def test_the_first_update_of_a_diverged_run_trips_the_default_limits(run, default_limits):
    first = RECORDED["runs"][run]["updates"][0]
    with pytest.raises(DivergedError) as info:
        check_divergence(default_limits, first, 1, lambda: 1000.0)
    text = str(info.value)
    assert "\n" not in text and "Fix: lower algo.learning_rate (now 1000)" in text
    assert "diag/approx_kl=" in text and "trainer.divergence.max_approx_kl=10" in text


def parse_divergence(node):
    """``trainer.divergence`` as the trainer's schema reads it (null: no check)."""
    return parse(TrainerConfig, {"divergence": node}, "trainer.").divergence


def test_a_limit_of_null_turns_its_check_off_and_bad_limits_are_config_errors():
    metrics = {"diag/approx_kl": 1e9, "loss/value": 1e12}
    with pytest.raises(DivergedError, match=r"loss/value=1e\+12 is beyond trainer.divergence.max_value_loss=1e\+10"):
        check_divergence(parse_divergence({"max_approx_kl": None}), metrics, 3)
    check_divergence(parse_divergence({"max_approx_kl": None, "max_value_loss": None}), metrics, 3)
    check_divergence(parse_divergence(None), metrics, 3)
    with pytest.raises(DivergedError, match="nan"):  # NaN is beyond every limit
        check_divergence(parse_divergence({}), {"diag/approx_kl": float("nan")}, 1)
    for bad in ({"max_approx_kl": 0}, {"max_approx_kl": float("inf")}, {"max_kl": 1.0}, {"max_value_loss": "big"}):
        with pytest.raises(ConfigError, match=r"trainer.divergence.max_"):
            parse_divergence(bad)


def test_a_healthy_short_run_completes_with_the_check_on(tmp_path, monkeypatch):
    from embodirl.cli.train import main

    for algo in ("ppo", "grpo"):
        run_dir = tmp_path / algo
        monkeypatch.setattr(sys, "argv", ["embodirl-train", *TINY, f"algo={algo}", f"hydra.run.dir={run_dir}"])
        with in_process_run(120):
            main()
        assert json.loads((run_dir / "status.json").read_text())["status"] == "completed"


def test_a_learning_rate_of_1e3_fails_as_diverged_and_keeps_the_last_good_checkpoint(tmp_path, monkeypatch, capsys):
    from embodirl.cli.train import main
    from embodirl.runtime.checkpoint import load_checkpoint

    run_dir = tmp_path / "run"
    base = ["embodirl-train", "trainer=debug", "logger.console=none", "device=cpu", f"hydra.run.dir={run_dir}",
            "env.num_envs=256"]  # 256 x 32 = 8192 env steps per update
    monkeypatch.setattr(sys, "argv", [*base, "trainer.total_env_steps=8192"])  # one healthy update
    with in_process_run(300):
        main()
    last = run_dir / "checkpoints" / "last.pt"
    kept = {path: path.read_bytes() for path in (last, run_dir / "metrics.jsonl")}
    capsys.readouterr()
    monkeypatch.setattr(sys, "argv", [*base, "algo.learning_rate=1e3", "trainer.allow_config_change=true"])
    with in_process_run(300), pytest.raises(SystemExit) as info:
        main()
    assert info.value.code == 3
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("embodirl-train: error: training diverged in iteration 2: diag/approx_kl=")
    assert "trainer.divergence.max_approx_kl=10" in line and "Fix: lower algo.learning_rate (now 1000)" in line
    status = json.loads((run_dir / "status.json").read_text())
    assert status["status"] == "failed" and status["exception"] == "DivergedError"
    assert json.loads((run_dir / "summary.json").read_text())["stop_reason"] == "diverged"
    assert {path: path.read_bytes() for path in kept} == kept  # the diverged update was neither logged nor saved
    assert load_checkpoint(last)["trainer"]["env_steps"] == 8192


def test_a_distillation_loss_beyond_its_limit_fails_the_run(default_limits):
    # loss/distill 1.95e11 "completed" before: distillation had no divergence limit
    with pytest.raises(DivergedError) as info:
        check_divergence(default_limits, {"loss/distill": 1.95e11, "diag/teacher_agreement": 0.5}, 2, lambda: 1e3)
    text = str(info.value)
    assert "\n" not in text and "loss/distill=1.95e+11 is beyond trainer.divergence.max_distill_loss=1e+06" in text
    assert "Fix: lower algo.learning_rate (now 1000)" in text
    check_divergence(parse_divergence({"max_distill_loss": None}), {"loss/distill": 1.95e11}, 2)
    check_divergence(default_limits, {"loss/distill": 0.69}, 1)  # a CartPole student's first update

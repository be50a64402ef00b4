"""The default PPO solves CartPole (deterministic eval >= 475) within a step budget."""

from embodirl.experiment import run_training
from tests.conftest import compose_config


def test_default_ppo_solves_cartpole(tmp_path):
    cfg = compose_config(["seed=0", "device=cpu", "logger.console=none", "logger.tensorboard=false",
                          "trainer.total_env_steps=1500000"])
    summary = run_training(cfg, tmp_path)
    assert summary["stop_reason"] == "solved", summary
    assert summary["eval/return_mean"] >= 475
    assert summary["solved_env_steps"] <= 1_500_000

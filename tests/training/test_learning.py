"""Learning to solve: the pinned recipes reach their thresholds within a step budget (CartPole eval >= 475,
push_cube success >= 90 %, ...). Whole training runs, so the module is in the slow tier (``-m slow``)."""

import pytest

from embodirl.app.run import run_training
from tests.conftest import compose_config

pytestmark = pytest.mark.slow


def test_default_ppo_solves_cartpole(tmp_path):
    # Seed 0 solves at 49,152 env steps (seeds 0-15 and 100-115: a median of 49,152, the slowest at 65,536); the
    # defaults before algo/ppo_sizing/cartpole.yaml needed 163,840, beyond this budget.
    cfg = compose_config(["seed=0", "device=cpu", "logger.console=none", "logger.tensorboard=false",
                          "trainer.total_env_steps=65536"])
    summary = run_training(cfg, tmp_path)
    assert summary["stop_reason"] == "solved", summary
    assert summary["eval/return_mean"] >= 475
    assert summary["solved_env_steps"] <= 65_536


def test_grpo_headline_command_solves_cartpole(tmp_path):
    import json

    from tests.conftest import run_cli

    run_dir = tmp_path / "run"
    result = run_cli("embodirl-train", ["algo=grpo", "env=cartpole", "seed=0", "device=cpu", "logger.console=none",
                                        "trainer.total_env_steps=3000000", f"hydra.run.dir={run_dir}"],
                     cwd=tmp_path, timeout=300)
    assert result.returncode == 0, result.stderr
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["stop_reason"] == "solved" and summary["eval/return_mean"] >= 475
    lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert all(0 < r["diag/valid_fraction"] <= 1 for r in lines)


def test_ppo_push_cube_reaches_90_percent_success(tmp_path):
    # The pinned recipe (147k-197k env steps over seeds 0-7).
    cfg = compose_config(["experiment=ppo_push_cube", "seed=0", "device=cpu", "logger.console=none",
                          "logger.tensorboard=false", "trainer.total_env_steps=3000000"])
    summary = run_training(cfg, tmp_path)
    assert summary["stop_reason"] == "solved", summary
    assert summary["eval/success_rate"] >= 0.9 and summary["eval/success_once"] >= 0.9


def test_grpo_push_cube_reaches_90_percent_success(tmp_path):
    cfg = compose_config(["experiment=grpo_push_cube", "seed=0", "device=cpu", "logger.console=none",
                          "logger.tensorboard=false", "trainer.total_env_steps=2000000"])
    summary = run_training(cfg, tmp_path)
    assert summary["stop_reason"] == "solved", summary
    assert summary["eval/success_rate"] >= 0.9


def test_ppo_acrobot_recipe_reaches_the_gymnasium_threshold(tmp_path):
    # The pinned gymnasium recipe with reward scaling (algo.normalize_rewards); seed 0 solves at 49,152
    # env steps (the 5 seeds in the README need 16k-66k).
    cfg = compose_config(["experiment=ppo_acrobot", "seed=0", "device=cpu", "logger.console=none",
                          "logger.tensorboard=false", "trainer.total_env_steps=200000"])
    summary = run_training(cfg, tmp_path)
    assert summary["stop_reason"] == "solved", summary
    assert summary["eval/return_mean"] >= -100 and summary["solved_env_steps"] <= 200_000


def test_ppo_push_cube_arm_learns_to_push_the_cube(tmp_path):
    # The UR10 recipe on a CI budget (about 260k env steps): the deterministic policy
    # already pushes a clear share of cubes into the goal. The untrained policy holds the arm still (success 0,
    # eval return 3.3); the full recipe reaches 90 % at the episode's end at 0.6-0.8M steps.
    cfg = compose_config(["experiment=ppo_push_cube_arm", "seed=0", "device=cpu", "logger.console=none",
                          "logger.tensorboard=false", "trainer.total_env_steps=262144",
                          "eval.every_env_steps=262144"])
    summary = run_training(cfg, tmp_path)
    assert summary["eval/success_once"] >= 0.2 and summary["eval/return_mean"] >= 14, summary


def test_a_recurrent_policy_solves_partially_observed_cartpole_and_an_mlp_does_not(tmp_path):
    # env.hide_velocities=true: only cart position and pole angle. The GRU policy (default recurrent PPO)
    # solved seed 0 at 1.06M env steps; the MLP ended at 46 after 1.5M.
    quiet = ["seed=0", "device=cpu", "logger.console=none", "logger.tensorboard=false", "env.hide_velocities=true"]
    gru = run_training(compose_config([*quiet, "policy=actor_critic_rnn", "trainer.total_env_steps=2000000"]),
                       tmp_path / "gru")
    assert gru["stop_reason"] == "solved" and gru["eval/return_mean"] >= 475, gru
    mlp = run_training(compose_config([*quiet, "trainer.total_env_steps=1000000"]), tmp_path / "mlp")
    assert mlp["stop_reason"] != "solved" and mlp["eval/return_mean"] < 200, mlp


def test_ppo_learns_push_cube_from_pixels(tmp_path):
    # The pixel recipe (CNN actor on the 64x64 top view, privileged state critic) on a CI budget: 32,768 env
    # steps. The untrained deterministic policy returns 3.2-3.4 over 256
    # episodes (seeds 0-2; standard error 0.1) and never succeeds; after this budget seed 0 returns 11.0 and
    # succeeds in 3.5 % of the episodes (the full recipe's curve is in docs/envs/push_cube.md, "From pixels").
    cfg = compose_config(["experiment=ppo_push_cube_rgb", "seed=0", "device=cpu", "logger.console=none",
                          "logger.tensorboard=false", "env.num_envs=128", "trainer.total_env_steps=32768",
                          "eval.every_env_steps=32768"])
    summary = run_training(cfg, tmp_path)
    assert summary["eval/return_mean"] >= 5.0, summary

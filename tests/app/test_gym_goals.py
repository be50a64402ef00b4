"""A gymnasium id without a recipe (issue 32 item 4): PPO sized to the env, the registered reward_threshold as the
solved condition (said in the log), a success-based stop for an env that reports success, and a warning that points
at the recipe when there is no goal."""

from __future__ import annotations

import logging

import gymnasium as gym
import numpy as np
import pytest
import yaml

from embodirl.app.run import run_training
from embodirl.config.envs import recipes_for, threshold_source
from embodirl.training.console import StopGoal
from embodirl.training.stopping import goal_note, success_stop
from tests.conftest import compose_config


class _ReachOnce(gym.Env):
    """Succeeds (``is_success``) on its second step, whatever the action; registers no reward_threshold."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.steps = 0
        return np.zeros(2, np.float32), {}

    def step(self, action):
        self.steps += 1
        done = self.steps >= 2
        return np.zeros(2, np.float32), float(done), done, False, {"is_success": done}


if "EmbodirlTest/ReachOnce-v0" not in gym.registry:
    gym.register("EmbodirlTest/ReachOnce-v0", entry_point=_ReachOnce, max_episode_steps=8, disable_env_checker=True)


def _recipe(name: str) -> dict:
    from importlib.resources import files

    return yaml.safe_load(files("embodirl.conf").joinpath(f"experiment/{name}.yaml").read_text())


def test_ppo_is_sized_to_a_gym_env_and_to_cartpole_and_nowhere_else():
    gym_algo = compose_config(["env=gym", "env.id=Pendulum-v1"]).algo
    assert (gym_algo.num_steps, gym_algo.minibatch_size) == (256, 512)  # was 32 and 4096: one minibatch of 256
    assert gym_algo.num_steps * compose_config(["env=gym"]).env.num_envs >= gym_algo.minibatch_size
    cartpole = compose_config([])  # 64 envs x 32 steps in 4 minibatches, 4 epochs, scaled rewards
    assert (cartpole.env.num_envs, cartpole.algo.num_steps, cartpole.algo.minibatch_size) == (64, 32, 512)
    assert cartpole.algo.num_epochs == 4 and cartpole.algo.normalize_rewards
    push_cube = compose_config(["env=push_cube"]).algo  # algo=ppo's own values
    assert (push_cube.minibatch_size, push_cube.num_epochs, push_cube.normalize_rewards) == (4096, 2, False)
    pinned = compose_config(["experiment=ppo_cartpole"]).algo  # the old defaults, pinned by the recipe
    assert (pinned.minibatch_size, pinned.num_epochs, pinned.normalize_rewards) == (4096, 2, False)
    assert compose_config(["env=gym", "algo.minibatch_size=64"]).algo.minibatch_size == 64  # the command line wins
    assert compose_config(["env=gym", "algo=a2c"]).algo.minibatch_size is None  # other algorithms keep theirs
    for name in ("ppo_pendulum", "ppo_acrobot"):  # the recipes keep theirs
        algo = compose_config([f"experiment={name}"]).algo
        assert (algo.num_steps, algo.minibatch_size) == (_recipe(name)["algo"]["num_steps"],
                                                         _recipe(name)["algo"]["minibatch_size"])


def test_threshold_source_and_recipes_come_from_the_env_node():
    assert threshold_source(compose_config(["env=gym", "env.id=CartPole-v1"]).env) == \
        "gymnasium's reward_threshold for CartPole-v1"
    assert threshold_source(compose_config(["experiment=ppo_pendulum"]).env) == "env.solved_threshold"
    assert threshold_source(compose_config([]).env) == "the env's own"
    assert recipes_for(compose_config(["env=gym", "env.id=Pendulum-v1"]).env) == ["ppo_pendulum"]
    assert recipes_for(compose_config(["env=gym", "env.id=Blackjack-v1"]).env) == []
    assert recipes_for(compose_config([]).env) == []


def test_goal_note_names_the_threshold_or_warns_with_the_recipe():
    level, text = goal_note(StopGoal(2_000_000, solved_threshold=475.0), "GymEnv CartPole-v1",
                            "gymnasium's reward_threshold for CartPole-v1", [])
    assert level == logging.INFO
    assert text.startswith("the run stops once eval/return_mean >= 475 (gymnasium's reward_threshold for CartPole-v1")
    level, text = goal_note(StopGoal(2_000_000), "GymEnv Pendulum-v1", "gymnasium's reward_threshold for Pendulum-v1",
                            ["ppo_pendulum"])
    assert level == logging.WARNING
    assert "GymEnv Pendulum-v1 has no solved threshold" in text and "trainer.total_env_steps=2,000,000" in text
    assert "experiment=ppo_pendulum" in text and "env.solved_threshold=<eval return>" in text


def test_success_stop_only_without_a_threshold():
    assert [c.describe() for c in success_stop(None, True)] == ["eval/success_rate >= 0.9"]
    assert success_stop(475.0, True) == [] and success_stop(None, False) == []


def test_pendulum_by_id_warns_once_without_the_minibatch_warning(tmp_path, tiny, caplog):
    tiny = [o for o in tiny if not o.startswith(("algo.", "env.num_envs"))]  # the defaults under test
    cfg = compose_config([*tiny, "env=gym", "env.id=Pendulum-v1", "env.num_envs=2", "trainer.total_env_steps=512"])
    with caplog.at_level(logging.INFO):
        summary = run_training(cfg, tmp_path)
    assert summary["status"] == "completed" and summary["stop_reason"] == "total_env_steps"
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert not any("exceeds the rollout" in w for w in warnings), warnings
    assert sum("experiment=ppo_pendulum" in w for w in warnings) == 1, warnings


def test_cartpole_by_id_logs_its_registered_threshold(tmp_path, tiny, caplog):
    cfg = compose_config([*tiny, "env=gym", "env.id=CartPole-v1", "trainer.total_env_steps=128"])
    with caplog.at_level(logging.INFO):
        summary = run_training(cfg, tmp_path)
    assert summary["solved_threshold"] == 475.0
    assert any(r.getMessage().startswith("the run counts as solved once eval/return_mean >= 475 (gymnasium's "
                                          "reward_threshold for CartPole-v1") for r in caplog.records)  # trainer=debug


@pytest.mark.parametrize("stop_on_solved", [True, False])
def test_own_env_reporting_success_stops_on_it(tmp_path, tiny, stop_on_solved):
    cfg = compose_config([*tiny, "env=gym", "env.id=EmbodirlTest/ReachOnce-v0", "env.num_envs=2",
                          "algo.num_steps=8", "algo.minibatch_size=16", "trainer.total_env_steps=256",
                          "eval.every_env_steps=32", f"trainer.stop_on_solved={stop_on_solved}"])
    summary = run_training(cfg, tmp_path)
    assert summary["eval/success_rate"] == 1.0
    if stop_on_solved:
        assert summary["stop_reason"] == "stop_on" and summary["env_steps"] == 32
        assert summary["stop_condition"].startswith("eval/success_rate >= 0.9")
    else:
        assert summary["stop_reason"] == "total_env_steps" and summary["env_steps"] == 256

"""GenesisEnv on the shipped cart-pole: config errors before the (slow) scene build, the step contract, per-env
restarts with the true final observation, group-shared starts, and training through embodirl-train with no glue.

The simulator tests are skipped, with the reason, where the ``genesis`` extra is not installed; building a scene
compiles Genesis's kernels (minutes on a CPU), so they share one scene of 4 envs with a 5-step time limit."""

from __future__ import annotations

import importlib.util

import pytest
import torch

from embodirl.config.envs import GenesisConfig
from embodirl.envs.adapters.genesis import GenesisEnv, model_path
from embodirl.errors import ConfigError

needs_genesis = pytest.mark.skipif(importlib.util.find_spec("genesis") is None,
                                   reason='needs the genesis extra: pip install "embodirl[genesis]"')
LIMIT = 5


def test_the_example_model_ships_in_the_package():
    assert model_path(GenesisConfig().model).read_text().startswith("<!--")


@pytest.mark.parametrize(("values", "key", "expected"), [
    ({"model": "missing/robot.xml"}, "env.model", "an existing .xml (MJCF) or .urdf file"),
    ({"observation": "embodirl.envs.genesis_cartpole.observe"}, "env.observation", "importing it failed"),
    ({"termination": "embodirl.envs.genesis_cartpole.ANGLE_LIMIT"}, "env.termination", "it is not callable"),
])
def test_bad_files_and_functions_are_refused_before_genesis_is_imported(values, key, expected):
    with pytest.raises(ConfigError) as info:
        GenesisEnv(GenesisConfig(num_envs=2, **values))
    assert info.value.key == key.removeprefix("env.") and expected in str(info.value) and "Fix:" in str(info.value)


@pytest.fixture(scope="module")
def env() -> GenesisEnv:
    return GenesisEnv(GenesisConfig(num_envs=4, max_episode_steps=LIMIT), seed=0)


@needs_genesis
@pytest.mark.slow
def test_reset_and_step_return_tensors_of_the_contracts_shapes(env):
    assert env.observation_space.shape == (4,) and env.action_space.shape == (1,)
    obs = env.reset(seed=1)
    assert obs.shape == (4, 4) and obs.dtype == torch.float32 and obs.abs().max() <= 0.05 + 1e-6
    out = env.step(torch.zeros(4, 1))
    assert out.obs.shape == out.final_obs.shape == (4, 4) and torch.equal(out.reward, torch.ones(4))
    assert out.terminated.dtype == out.truncated.dtype == torch.bool and not (out.terminated | out.truncated).any()


@needs_genesis
@pytest.mark.slow
def test_the_time_limit_truncates_with_the_final_observation_and_restarts(env):
    env.reset(seed=2)
    for _ in range(LIMIT):
        out = env.step(torch.zeros(4, 1))
    assert out.truncated.all() and not out.terminated.any() and (env.elapsed == 0).all()
    assert not torch.equal(out.final_obs, out.obs) and out.obs.abs().max() <= 0.05 + 1e-6  # a fresh start


@needs_genesis
@pytest.mark.slow
def test_a_fallen_pole_terminates_only_its_env(env):
    env.reset(seed=3)
    tilted = torch.tensor([[0.0, 0.3]])  # rad: past CartPole-v1's 12 degrees
    env.entity.set_dofs_position(tilted, envs_idx=torch.tensor([0]), zero_velocity=True)
    out = env.step(torch.zeros(4, 1))
    assert out.terminated.tolist() == [True, False, False, False] and not out.truncated.any()
    assert out.final_obs[0, 2] > 0.2 and out.obs[0, 2].abs() <= 0.05 + 1e-6, "env 0 restarted; final_obs kept"
    assert torch.equal(out.obs[1:], out.final_obs[1:]) and env.elapsed.tolist() == [0, 1, 1, 1]


@needs_genesis
@pytest.mark.slow
def test_group_shared_starts(env):
    obs = env.reset(seed=4, group_size=2)
    assert torch.equal(obs[0], obs[1]) and torch.equal(obs[2], obs[3]) and not torch.equal(obs[0], obs[2])


@needs_genesis
@pytest.mark.slow
def test_an_unknown_action_joint_is_refused_naming_the_models_joints():
    with pytest.raises(ConfigError, match=r"^action_joints=\['rail'\] is invalid: expected joints of the model "
                                          r"\(.*slider, hinge\)"):
        GenesisEnv(GenesisConfig(num_envs=2, action_joints=["rail"]))


@needs_genesis
@pytest.mark.slow
def test_embodirl_train_runs_env_genesis_with_no_glue(tmp_path):
    from embodirl.app.run import run_training
    from tests.conftest import compose_config

    cfg = compose_config(["env=genesis", "env.num_envs=4", "eval.num_envs=4", "eval.num_episodes=4",
                          "algo.num_steps=8", "algo.minibatch_size=16", "trainer.total_env_steps=64", "device=cpu",
                          "logger.console=none"])
    summary = run_training(cfg, tmp_path)
    assert summary["status"] == "completed" and summary["iterations"] == 2

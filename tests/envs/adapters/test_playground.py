"""PlaygroundEnv on MuJoCo Playground's CartpoleBalance (MJX, jax on the CPU): the step contract, time-limit
truncation with the true final observation, termination, results shared with jax without a copy, group-shared
starts, config errors, and training through embodirl-train with no glue.

Skipped, with the reason, where the ``playground`` extra is not installed. Compiling the batched step takes a
minute or two on a CPU, so the contract tests share one env of 4 copies with a 3-step time limit."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

pytest.importorskip("mujoco_playground", reason='needs the playground extra: pip install "embodirl[playground]"')

from embodirl.config.envs import PlaygroundConfig
from embodirl.envs.adapters.playground import PlaygroundEnv
from embodirl.errors import ConfigError

LIMIT = 3


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    """The persistent compilation cache of this module's envs (jax reads the folder once per process)."""
    return tmp_path_factory.mktemp("jax_cache")


@pytest.fixture(scope="module")
def env(cache) -> PlaygroundEnv:
    return PlaygroundEnv(PlaygroundConfig(num_envs=4, max_episode_steps=LIMIT, jax_cache_dir=str(cache)), seed=0)


def test_reset_and_step_return_cpu_tensors_of_the_contracts_shapes(env):
    assert env.max_episode_steps == LIMIT and env.action_space.shape == (1,) and env.observation_space.shape == (5,)
    obs = env.reset(seed=1)
    assert obs.shape == (4, 5) and obs.dtype == torch.float32 and obs.device == torch.device("cpu")
    out = env.step(torch.zeros(4, 1))
    assert out.obs.shape == out.final_obs.shape == (4, 5)
    assert out.reward.shape == (4,) and out.reward.dtype == torch.float32
    assert out.terminated.dtype == out.truncated.dtype == torch.bool
    assert torch.isfinite(out.obs).all() and (out.reward > 0).all()  # balancing near upright earns reward


def test_the_compiled_step_is_kept_in_the_cache_folder(env, cache):
    assert any(cache.iterdir()), "jax wrote the compiled reset and step for the next run"


def test_results_share_jaxs_memory(env):
    env.reset(seed=1)
    out = env.step(torch.zeros(4, 1))
    assert out.obs.data_ptr() == env._carry[0].obs.unsafe_buffer_pointer(), "obs is jax's buffer, not a copy"


def test_the_time_limit_truncates_with_the_final_observation_and_restarts(env):
    env.reset(seed=2)
    for _ in range(LIMIT - 1):
        out = env.step(torch.ones(4, 1))
        assert not out.truncated.any() and torch.equal(out.final_obs, out.obs)
    before = out.obs.clone()
    out = env.step(torch.ones(4, 1))
    assert out.truncated.all() and not out.terminated.any()
    assert (out.final_obs[:, 0] > before[:, 0]).all(), "final_obs continues the pushed episode (cart moves right)"
    assert not torch.allclose(out.final_obs, out.obs), "obs is the next episode's first"
    assert not env.step(torch.ones(4, 1)).truncated.any(), "the step counter restarted with the episode"


def test_a_diverged_env_terminates_alone_and_restarts_finite(env):
    env.reset(seed=3)
    action = torch.zeros(4, 1)
    action[1] = float("nan")  # clipped to [-1, 1] stays nan: the physics diverges, the task reports done
    out = env.step(action)
    assert out.terminated.tolist() == [False, True, False, False] and not out.truncated.any()
    assert torch.isnan(out.final_obs[1]).any() and torch.isfinite(out.obs).all()


def test_group_shared_starts_are_equal_within_groups_and_differ_across(env):
    obs = env.reset(seed=4, group_size=2)
    assert torch.equal(obs[0], obs[1]) and torch.equal(obs[2], obs[3]) and not torch.equal(obs[0], obs[2])
    again = env.reset(seed=4, group_size=2)
    assert torch.equal(obs, again), "a seed gives the same starts"


def test_an_unknown_task_is_refused_with_the_key_and_a_fix():
    with pytest.raises(ConfigError, match=r"^id='CartpoleBalanc' .*MuJoCo Playground task.*env.id=Cartpole"):
        PlaygroundEnv(PlaygroundConfig(id="CartpoleBalanc", num_envs=2, jax_cache=False))
    with pytest.raises(ConfigError, match=r"^config_overrides.ctrl_dtt=0.02 .*a key of CartpoleBalance's config"):
        PlaygroundEnv(PlaygroundConfig(num_envs=2, jax_cache=False, config_overrides={"ctrl_dtt": 0.02}))
    with pytest.raises(ConfigError, match=r"^config_overrides.impl="):
        PlaygroundEnv(PlaygroundConfig(num_envs=2, jax_cache=False, config_overrides={"impl": "warp"}))


@pytest.mark.slow
def test_embodirl_train_runs_env_playground_with_no_glue(tmp_path, cache):
    from embodirl.app.run import run_training
    from tests.conftest import compose_config

    cfg = compose_config(["env=playground", "env.num_envs=4", f"env.max_episode_steps={LIMIT}",
                          f"env.jax_cache_dir={cache}", "eval.num_envs=4", "eval.num_episodes=4", "algo.num_steps=8",
                          "algo.minibatch_size=16", "trainer.total_env_steps=64", "device=cpu", "logger.console=none"])
    summary = run_training(cfg, tmp_path)
    assert summary["status"] == "completed" and summary["iterations"] == 2

"""Configs are code: every option composes, every combination builds and trains a debug iteration."""

import pytest

from embodirl.app.run import run_training
from embodirl.errors import ConfigError
from tests.conftest import compose_config, representatives

ALGOS = {"ppo": [], "grpo": ["algo.group_size=2", "algo.num_steps=16"]}
POLICIES = ["actor_critic", "actor_only"]
ENVS = {"cartpole": [], "push_cube": ["env.num_envs=8"], "gym": ["env.id=CartPole-v1", "env.num_envs=2"],
        "gym_vector": ["env.id=CartPole-v1", "env.num_envs=2", "env.autoreset_mode=NextStep"]}


COMBINATIONS = {f"{algo}-{policy}-{env}": (algo, policy, env)
                for algo in sorted(ALGOS) for policy in POLICIES for env in sorted(ENVS)}


# Representatives: each algo, policy and env once, and the refused combination.
@pytest.mark.parametrize(("algo", "policy", "env"), representatives(
    ["ppo-actor_critic-push_cube", "ppo-actor_only-gym_vector", "grpo-actor_only-gym", "grpo-actor_critic-cartpole"],
    COMBINATIONS))
def test_every_combination_runs_a_debug_iteration_or_is_refused(tmp_path, tiny, algo, policy, env):
    overrides = [*tiny, f"algo={algo}", f"policy={policy}", f"env={env}", "trainer.total_env_steps=1",
                 *ALGOS[algo], *ENVS[env]]
    if algo == "grpo" and policy == "actor_critic":  # a critic would be trained for nothing
        with pytest.raises(ConfigError, match="actor_only"):
            run_training(compose_config(overrides), tmp_path)
        return
    summary = run_training(compose_config(overrides), tmp_path)
    assert summary["status"] == "completed" and summary["iterations"] == 1
    assert (tmp_path / "checkpoints" / "last.pt").is_file()


def test_defaults_are_ppo_actor_critic_cartpole():
    cfg = compose_config([])
    assert cfg.algo._target_ == "embodirl.algos.ppo.PPO"
    assert cfg.policy._target_ == "embodirl.policies.actor_critic.ActorCritic"
    assert cfg.env._target_ == "embodirl.envs.cartpole.CartPole"
    assert cfg.device == "auto" and cfg.num_threads == 1


def test_command_line_overrides_reach_the_objects(tmp_path, tiny):
    from embodirl.app.build import build_components

    cfg = compose_config([*tiny, "algo.clip_coef=0.1", "env.num_envs=12", "seed=3", "policy.hidden_sizes=[32]"])
    parts = build_components(cfg)
    assert parts.algo.cfg.clip_coef == 0.1 and parts.env.num_envs == 12
    assert parts.policy.actor[0].out_features == 32


def test_gym_env_by_id_with_continuous_actions(tmp_path, tiny):
    cfg = compose_config([*tiny, "env=gym", "env.id=Pendulum-v1", "env.num_envs=2", "trainer.total_env_steps=64"])
    summary = run_training(cfg, tmp_path)
    assert summary["status"] == "completed"


def _options(group: str) -> list[str]:
    from importlib.resources import files

    return sorted(p.name.removesuffix(".yaml") for p in files("embodirl.conf").joinpath(group).iterdir()
                  if p.name.endswith(".yaml"))


# Representatives: a teacher's (refused without its run), pixels off-policy, the arm, a gymnasium env.
@pytest.mark.parametrize("experiment", representatives(
    ["distill_push_cube_rgb", "sac_push_cube_pixels", "grpo_push_cube_arm", "ppo_acrobot"],
    {name: name for name in _options("experiment")}))
def test_every_experiment_composes_and_builds(experiment):
    from embodirl.app.build import build_components

    cfg = compose_config([f"experiment={experiment}", "device=cpu"])
    if "teacher" in cfg.algo:  # distillation: refused in one line until a teacher's run is named
        with pytest.raises(ConfigError, match=r"algo.teacher.run=None is invalid: expected the run directory"):
            build_components(cfg)
        return
    parts = build_components(cfg)
    assert parts.env.num_envs >= 1 and parts.collector.plan.num_steps >= 1


def test_update_threads_are_configurable_and_checked(tmp_path, tiny):
    summary = run_training(compose_config([*tiny, "num_update_threads=2", "trainer.total_env_steps=128"]), tmp_path)
    assert summary["status"] == "completed"
    with pytest.raises(ConfigError, match="num_update_threads=0"):
        run_training(compose_config([*tiny, "num_update_threads=0"]), tmp_path / "bad")


@pytest.mark.parametrize("sweep", _options("sweep"))
def test_every_sweep_file_composes(sweep):
    import importlib.util

    from hydra import compose, initialize_config_module

    if sweep.startswith("optuna") and importlib.util.find_spec("hydra_plugins.hydra_optuna_sweeper") is None:
        pytest.skip("needs the optional extra: pip install -e '.[optuna]'")
    with initialize_config_module("embodirl.conf", version_base="1.3"):
        cfg = compose("train", overrides=[f"sweep={sweep}"], return_hydra_config=True)
    assert str(cfg.hydra.mode) == "RunMode.MULTIRUN" and cfg.hydra.sweeper.params

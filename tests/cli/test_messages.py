"""What embodirl-train and embodirl-eval tell the user: each message names the right thing and its fix works.

Everything runs in process (the ``cli`` fixture in ``tests/conftest.py``) except where a real signal or terminal
matters.
"""

from __future__ import annotations

import io
import json
import os
import stat
import sys
import textwrap

import numpy as np
import pytest
import yaml

from tests.conftest import TINY, compose_config


def _cfg_job(cli, args: list[str]) -> dict:
    result = cli("embodirl-train", [*args, "--cfg", "job"])
    assert result.code == 0, result.err
    return yaml.safe_load(result.out)


def test_a_debug_trainer_wins_over_an_experiments_budget(cli):
    debug = _cfg_job(cli, ["+experiment=ppo_push_cube", "trainer=debug"])
    assert debug["trainer"]["total_env_steps"] == 16384 and debug["eval"]["num_envs"] == 2
    recipe_envs = compose_config(["experiment=ppo_push_cube"]).env.num_envs
    assert recipe_envs != compose_config(["env=push_cube"]).env.num_envs  # so the next line tells the recipe's
    assert debug["env"]["num_envs"] == recipe_envs and debug["objective"] == "eval/success_rate"  # the rest of it
    assert _cfg_job(cli, ["+experiment=ppo_push_cube"])["trainer"]["total_env_steps"] == 10_000_000
    chosen = _cfg_job(cli, ["+experiment=ppo_push_cube", "trainer=debug", "trainer.total_env_steps=1000"])
    assert chosen["trainer"]["total_env_steps"] == 1000  # a key on the command line still wins over both


def test_wandb_names_tell_gymnasium_envs_and_experiments_apart():
    from embodirl.app.run import wandb_identity

    gym = {"algo": "ppo", "env": "gym"}
    assert wandb_identity(gym, 0, None, {"id": "Pendulum-v1"}) == ("ppo-Pendulum-v1-seed0", "ppo-Pendulum-v1")
    assert wandb_identity(gym, 0, None, {"id": "LunarLander-v3"})[0] == "ppo-LunarLander-v3-seed0"
    assert wandb_identity({**gym, "experiment": "ppo_pendulum"}, 1, None, {"id": "Pendulum-v1"}) == (
        "ppo_pendulum-seed1", "ppo_pendulum")
    assert wandb_identity({"algo": "grpo", "env": "push_cube"}, 3, None) == ("grpo-push_cube-seed3", "grpo-push_cube")


def test_vector_envs_are_named_by_their_make_target():
    from embodirl.app.run import wandb_identity

    vector = {"algo": "ppo", "env": "gym_vector"}
    assert wandb_identity(vector, 0, None, {"id": None, "make": "mylab.reach:make_vec"})[0] == \
        "ppo-mylab.reach:make_vec-seed0"
    assert wandb_identity(vector, 0, None, {"id": None, "make": {"_target_": "mylab.arm.ArmVec", "n": 2}})[0] == \
        "ppo-mylab.arm.ArmVec-seed0"
    assert wandb_identity(vector, 0, None, {"id": "HalfCheetah-v5", "make": None})[0] == "ppo-HalfCheetah-v5-seed0"


@pytest.mark.parametrize(("overrides", "name"), [
    (["experiment=ppo_push_cube", "env=cartpole"], "ppo-cartpole-seed0"),  # was ppo_push_cube-seed0
    pytest.param(["experiment=ppo_pendulum", "env.id=Acrobot-v1"], "ppo-Acrobot-v1-seed0", marks=pytest.mark.slow),
    (["experiment=ppo_push_cube", "env.num_envs=64"], "ppo_push_cube-seed0"),  # the experiment's env, resized
    pytest.param(["experiment=ppo_push_cube_dr"], "ppo_push_cube_dr-seed0", marks=pytest.mark.slow),
])
def test_an_experiment_names_a_run_only_when_the_run_trains_its_env(overrides, name):
    from hydra import compose, initialize_config_module

    from embodirl.app.run import experiment_env, wandb_identity

    with initialize_config_module("embodirl.conf", version_base="1.3"):
        cfg = compose("train", overrides=overrides, return_hydra_config=True)
        own = experiment_env("train", overrides)
    assert wandb_identity(cfg.hydra.runtime.choices, 0, None, cfg.env, own)[0] == name


def test_summary_tables_are_not_cut_without_a_terminal():
    from embodirl.analysis.summary import print_eval, print_summary

    run_dir = "/data/" + "a_long_folder_name/" * 8 + "run"
    summary = {"status": "completed", "stop_reason": "solved", "env_steps": 1, "iterations": 1, "wall_time_s": 1.0,
               "run_dir": run_dir, "checkpoint": f"{run_dir}/checkpoints/last.pt"}
    out = io.StringIO()
    from embodirl.training.console import output_console

    print_summary(summary, output_console(out))
    print_eval({"checkpoint": f"{run_dir}/checkpoints/last.pt"}, output_console(out))
    assert f"{run_dir}/checkpoints/last.pt" in out.getvalue()  # whole, on one line


def test_videos_get_the_permissions_of_any_file_the_user_writes(tmp_path):
    from embodirl.training.video import save_video

    old = os.umask(0o022)
    try:
        path = save_video(np.zeros((2, 16, 16, 3), dtype=np.uint8), tmp_path / "v.gif", fps=5)
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o644


@pytest.fixture
def trained(cli, tmp_path):
    run_dir = tmp_path / "run"
    result = cli("embodirl-train", [*TINY, f"hydra.run.dir={run_dir}"])
    assert result.code == 0, result.err
    return run_dir


def test_eval_takes_a_run_directory_as_checkpoint_and_logs_into_evaluate_log(cli, trained, tmp_path):
    result = cli("embodirl-eval", [f"checkpoint={trained}", "num_episodes=2", "device=cpu"])
    assert result.code == 0, result.err
    (out,) = (trained / "eval").glob("*/eval.json")
    assert json.loads(out.read_text())["checkpoint"] == str((trained / "checkpoints" / "last.pt").resolve())
    log = (out.parent / "evaluate.log").read_text()
    assert "2 deterministic episodes" in log and f"wrote {out}" in log
    (tmp_path / "empty").mkdir()
    result = cli("embodirl-eval", [f"checkpoint={tmp_path / 'empty'}"])
    assert result.code == 2 and result.err.count("\n") == 1, result.err
    assert "has no checkpoints/" in result.err and "Fix: pass run=" in result.err


def test_eval_help_lists_the_eval_keys_not_the_training_groups(cli):
    result = cli("embodirl-eval", ["--help"])
    assert result.code == 0, result.err
    assert "Usage: embodirl-eval run=RUN_DIR" in result.out
    for key in ("run=null", "checkpoint=last", "num_episodes=100", "trusted_targets=[]", "eval.video=false"):
        assert key in result.out
    assert "algo" not in result.out and "Powered by Hydra" not in result.out


def test_eval_seed_abc_names_the_value(cli, trained):
    result = cli("embodirl-eval", [f"run={trained}", "seed=abc", "device=cpu"])
    assert result.code == 2 and "seed='abc' is invalid" in result.err and "object at 0x" not in result.err


@pytest.fixture
def own_env_module(tmp_path, monkeypatch):
    """A module of the user's, on sys.path, that registers two gymnasium envs (one turns NaN after 3 steps)."""
    import gymnasium

    (tmp_path / "mods").mkdir()
    (tmp_path / "mods" / "my_i20_envs.py").write_text(textwrap.dedent('''
        import gymnasium as gym
        import numpy as np
        from gymnasium.envs.classic_control.cartpole import CartPoleEnv

        class NanLater(CartPoleEnv):
            def __init__(self, what="reward", after=3, **kwargs):
                super().__init__(**kwargs)
                self.what, self.after, self.count = what, after, 0

            def step(self, action):
                obs, reward, terminated, truncated, info = super().step(action)
                self.count += 1
                if self.count > self.after and self.what == "reward":
                    reward = float("nan")
                elif self.count > self.after:
                    obs = np.full_like(obs, np.nan)
                return obs, reward, terminated, truncated, info

        gym.register(id="MyCartPole-v0", entry_point=CartPoleEnv, max_episode_steps=50)
        gym.register(id="MyNanLater-v0", entry_point=NanLater, max_episode_steps=50)
    '''))
    monkeypatch.syspath_prepend(str(tmp_path / "mods"))
    yield "my_i20_envs"
    sys.modules.pop("my_i20_envs", None)
    for env_id in ("MyCartPole-v0", "MyNanLater-v0"):
        gymnasium.registry.pop(env_id, None)


def test_a_custom_gymnasium_env_loads_by_module_and_id(cli, tmp_path, own_env_module):
    result = cli("embodirl-train", [*TINY, "env=gym", f"env.id={own_env_module}:MyCartPole-v0",
                                    f"hydra.run.dir={tmp_path / 'run'}"])
    assert result.code == 0, result.err
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["env_steps"] == 256
    result = cli("embodirl-train", [*TINY, "env=gym", "env.id=no_such_i20_module:MyCartPole-v0",
                                    f"hydra.run.dir={tmp_path / 'other'}"])
    assert result.code == 2 and "No module named 'no_such_i20_module'" in result.err and "PYTHONPATH" in result.err


@pytest.mark.parametrize(("what", "named"), [("reward", "reward"), ("obs", "observation 'state'")])
def test_an_env_that_turns_nan_is_named_not_the_learning_rate(cli, tmp_path, own_env_module, what, named):
    result = cli("embodirl-train", [*TINY, "env=gym", f"env.id={own_env_module}:MyNanLater-v0",
                                    f"+env.env_kwargs.what={what}", f"hydra.run.dir={tmp_path / 'run'}"])
    (line,) = result.err.strip().splitlines()
    assert result.code == 3, result.err
    assert f"the env GymEnv {own_env_module}:MyNanLater-v0 produced a NaN or infinite {named}" in line
    assert "learning_rate" not in line


def test_an_env_that_breaks_the_contract_in_the_dry_run_is_a_config_error(cli, tmp_path, own_env_module):
    result = cli("embodirl-train", [*TINY, "env=gym", f"env.id={own_env_module}:MyNanLater-v0",
                                    "+env.env_kwargs.what=obs", "+env.env_kwargs.after=0",
                                    f"hydra.run.dir={tmp_path / 'run'}"])
    (line,) = result.err.strip().splitlines()
    assert result.code == 2, result.err
    assert line.startswith(f"embodirl-train: error: env='GymEnv {own_env_module}:MyNanLater-v0' is invalid: expected "
                           "an env whose first reset and step follow the batched-env contract (GymEnv.step().obs"
                           "['state'] contains NaN or infinite values). Fix: check the env.* values"), line
    assert not (tmp_path / "run" / "metrics.jsonl").exists()

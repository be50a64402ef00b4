"""A config read from a file may only name code embodirl ships (or the user trusts), and holds no interpolation."""

import json
from pathlib import Path

import pytest

from embodirl.config.trust import MOVED_TARGETS, check_config_from_file, packaged_targets, with_moved_targets
from embodirl.errors import CheckpointError

SHIPPED = {"env": {"_target_": "embodirl.envs.cartpole.CartPole", "num_envs": 4},
           "policy": {"_target_": "embodirl.policies.actor_critic.ActorCritic", "hidden_sizes": [64, 64]}}

GENESIS = {"_target_": "embodirl.envs.adapters.genesis.GenesisEnv", "observation": "embodirl.envs.genesis_cartpole."
           "observation", "reward": "embodirl.envs.genesis_cartpole.reward", "termination": None}


def test_the_shipped_option_files_define_the_allowed_targets():
    shipped = {"embodirl.envs.cartpole.CartPole", "embodirl.algos.ppo.PPO", "embodirl.training.trainer.Trainer"}
    assert shipped <= packaged_targets()
    assert not any(t.startswith("hydra_plugins.") for t in packaged_targets())  # launcher profiles excluded
    check_config_from_file(SHIPPED, "checkpoint='x'")
    check_config_from_file({**SHIPPED, "env": GENESIS}, "checkpoint='x'")  # the example task's functions


@pytest.mark.parametrize("config,fragment", [
    ({**SHIPPED, "env": {**SHIPPED["env"], "x": [{"_target_": "os.system", "_args_": ["true"]}]}},
     "env.x[0]._target_='os.system'"),
    ({**SHIPPED, "policy": {"_target_": "builtins.exec"}}, "policy._target_='builtins.exec'"),
    ({**SHIPPED, "env": {"_target_": "embodirl.envs.adapters.gym.GymEnv", "id": "evil_module:Env-v0"}},
     "import the module"),
    ({**SHIPPED, "env": {"_target_": "embodirl.envs.adapters.torch_vector.TorchVectorEnv", "make": "os.system"}},
     "env.make='os.system' names code that embodirl would import and call"),
    ({**SHIPPED, "env": {"_target_": "embodirl.envs.adapters.gym_vector.GymVectorEnv", "make": "os.system"}},
     "env.make='os.system' names code that embodirl would import and call"),
    ({**SHIPPED, "env": {"_target_": "embodirl.envs.adapters.gym_vector.GymVectorEnv", "id": "evil_module:Env-v0"}},
     "import the module"),
    ({**SHIPPED, "env": {"_target_": "embodirl.envs.adapters.gym_vector.GymVectorEnv", "id": "CartPole-v1",
                         "wrappers": [{"_target_": "os.system"}]}},
     "env.wrappers[0]._target_='os.system'"),
    ({**SHIPPED, "env": {"_target_": "embodirl.envs.adapters.torch_vector.TorchVectorEnv",
                         "make": {"_target_": "os.system"}}},
     "env.make._target_='os.system'"),
    ({**SHIPPED, "env": {**GENESIS, "reward": "os.system"}},
     "env.reward='os.system' names code that embodirl would import and call"),
    ({**SHIPPED, "env": {**SHIPPED["env"], "num_envs": "${oc.env:HOME}"}}, "interpolation at env.num_envs"),
    ({**SHIPPED, "${oc.env:HOME}": 1}, "interpolation"),
    (["not", "a", "mapping"], "not a mapping"),
])
def test_anything_else_is_refused(config, fragment):
    with pytest.raises(CheckpointError, match="Fix:") as info:
        check_config_from_file(config, "checkpoint='x'")
    assert fragment in str(info.value)


def test_trusted_targets_let_your_own_classes_through():
    config = {"env": {"_target_": "mypkg.envs.MyEnv"}}
    with pytest.raises(CheckpointError, match=r"trusted_targets=\[mypkg.envs.MyEnv\]"):
        check_config_from_file(config, "checkpoint='x'")
    check_config_from_file(config, "checkpoint='x'", ["mypkg.envs.MyEnv"])
    simulator = {"env": {"_target_": "embodirl.envs.adapters.torch_vector.TorchVectorEnv",
                         "make": "mypkg.sims.make_sim"}}
    with pytest.raises(CheckpointError, match=r"trusted_targets=\[mypkg.sims.make_sim\]"):
        check_config_from_file(simulator, "checkpoint='x'")
    check_config_from_file(simulator, "checkpoint='x'", ["mypkg.sims.make_sim"])


def test_torch_optimizers_are_allowed_and_nothing_else_under_torch():
    config = {**SHIPPED, "algo": {"_target_": "embodirl.algos.ppo.PPO",
                                  "optimizer": {"_target_": "torch.optim.RMSprop", "_partial_": True}}}
    check_config_from_file(config, "checkpoint='x'")  # not in the shipped presets, still an optimizer class
    for target in ("torch.optim.lr_scheduler.LambdaLR", "torch.optim.Optimizer.zero_grad", "torch.load",
                   "torch.optim.swa_utils", "torch.optim.__import__"):
        config["algo"]["optimizer"]["_target_"] = target
        with pytest.raises(CheckpointError, match="never runs code"):
            check_config_from_file(config, "checkpoint='x'")


# --- checkpoints written before the layout moved classes -----------------------------------------------------
OLD_CONFIG = Path(__file__).parent / "data" / "config_005a426.json"  # the stored config of a run of 005a426
OLD_POLICY = {"actor.0.weight": [64, 4], "actor.0.bias": [64], "actor.2.weight": [64, 64], "actor.2.bias": [64],
              "actor.4.weight": [2, 64], "actor.4.bias": [2], "critic.0.weight": [64, 4], "critic.0.bias": [64],
              "critic.2.weight": [64, 64], "critic.2.bias": [64], "critic.4.weight": [1, 64], "critic.4.bias": [1]}


def test_every_moved_target_names_a_shipped_class_and_old_ones_map_to_it():
    assert set(MOVED_TARGETS.values()) <= packaged_targets()
    old = json.loads(OLD_CONFIG.read_text())
    with pytest.raises(CheckpointError, match=r"does not ship, trainer._target_='embodirl.trainer.Trainer'"):
        check_config_from_file(old, "checkpoint='x'")  # what an old checkpoint met before the table
    moved = with_moved_targets(old)
    check_config_from_file(moved, "checkpoint='x'")
    assert moved["trainer"]["_target_"] == "embodirl.training.trainer.Trainer" and old != moved
    assert with_moved_targets({"a": [{"_target_": "embodirl.envs.gym.GymEnv", "id": "CartPole-v1"}]}) == {
        "a": [{"_target_": "embodirl.envs.adapters.gym.GymEnv", "id": "CartPole-v1"}]}


def test_a_checkpoint_of_the_original_layout_evaluates(tmp_path, monkeypatch, capsys):
    """A checkpoint whose stored config names the classes where 005a426 had them (embodirl.trainer.Trainer,
    embodirl.video.VideoSettings, ...), with the policy weights it held: embodirl-eval rebuilds and evaluates it."""
    import sys

    from embodirl.app.run import run_training
    from embodirl.cli.evaluate import main
    from embodirl.runtime.checkpoint import load_checkpoint, serialize_checkpoint
    from tests.conftest import TINY, compose_config, in_process_run

    run_training(compose_config(TINY), tmp_path / "run")
    state = load_checkpoint(tmp_path / "run" / "checkpoints" / "last.pt")
    assert {k: list(v.shape) for k, v in state["policy"].items()} == OLD_POLICY  # the weights' layout is unchanged
    del state["format"], state["version"]
    state["config"] = json.loads(OLD_CONFIG.read_text())
    old = tmp_path / "old.pt"
    old.write_bytes(serialize_checkpoint(state))
    monkeypatch.setattr(sys, "argv", ["embodirl-eval", f"checkpoint={old}", "num_episodes=2", "device=cpu",
                                      f"hydra.run.dir={tmp_path / 'eval'}"])
    with in_process_run(120):
        main()
    result = json.loads((tmp_path / "eval" / "eval.json").read_text())
    assert result["env"] == "embodirl.envs.cartpole.CartPole" and result["env_steps_trained"] == 256
    assert result["eval/return_mean"] > 0 and result["solved_threshold"] == 475.0

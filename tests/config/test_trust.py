"""A config read from a file may only name code embodirl ships (or the user trusts), and holds no interpolation."""

import pytest

from embodirl.errors import CheckpointError
from embodirl.config.trust import check_config_from_file, packaged_targets

SHIPPED = {"env": {"_target_": "embodirl.envs.cartpole.CartPole", "num_envs": 4},
           "policy": {"_target_": "embodirl.policies.actor_critic.ActorCritic", "hidden_sizes": [64, 64]}}


def test_the_shipped_option_files_define_the_allowed_targets():
    assert {"embodirl.envs.cartpole.CartPole", "embodirl.algos.ppo.PPO", "embodirl.training.trainer.Trainer"} <= packaged_targets()
    assert not any(t.startswith("hydra_plugins.") for t in packaged_targets())  # launcher profiles excluded
    check_config_from_file(SHIPPED, "checkpoint='x'")


@pytest.mark.parametrize("config,fragment", [
    ({**SHIPPED, "env": {**SHIPPED["env"], "x": [{"_target_": "os.system", "_args_": ["true"]}]}},
     "env.x[0]._target_='os.system'"),
    ({**SHIPPED, "policy": {"_target_": "builtins.exec"}}, "policy._target_='builtins.exec'"),
    ({**SHIPPED, "env": {"_target_": "embodirl.envs.adapters.gym.GymEnv", "id": "evil_module:Env-v0"}}, "import the module"),
    ({**SHIPPED, "env": {"_target_": "embodirl.envs.adapters.torch_vector.TorchVectorEnv", "make": "os.system"}},
     "env.make='os.system' names code that embodirl would import and call"),
    ({**SHIPPED, "env": {"_target_": "embodirl.envs.adapters.torch_vector.TorchVectorEnv", "make": {"_target_": "os.system"}}},
     "env.make._target_='os.system'"),
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
    simulator = {"env": {"_target_": "embodirl.envs.adapters.torch_vector.TorchVectorEnv", "make": "mypkg.sims.make_sim"}}
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

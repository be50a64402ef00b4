"""Starting from pretrained weights (policy.init_from), freezing parameters (policy.freeze), and GRPO
fine-tuning with a KL to the frozen pretrained policy."""

import pytest
import torch

from embodirl.errors import CheckpointError, ConfigError
from embodirl.runtime.run import run_training
from tests.conftest import compose_config

GRPO = ["algo=grpo", "env.num_envs=8", "algo.num_steps=16", "algo.batch_size=64", "trainer=debug",
        "trainer.total_env_steps=256", "logger.console=none", "device=cpu"]


def test_init_from_loads_a_checkpoint_and_fine_tuning_keeps_frozen_weights_and_logs_the_kl(tmp_path):
    from embodirl.build import build_components
    from embodirl.checkpoint import load_checkpoint

    run_training(compose_config([*GRPO, "seed=1"]), tmp_path / "pretrained")
    pretrained = load_checkpoint(tmp_path / "pretrained" / "checkpoints" / "last.pt")["policy"]
    init = [f"policy.init_from={tmp_path / 'pretrained' / 'checkpoints' / 'last.pt'}", "policy.freeze=[actor.0.*]"]
    built = build_components(compose_config([*GRPO, "seed=2", *init, "algo.kl_coef=0.02"])).policy
    for name, value in built.state_dict().items():
        torch.testing.assert_close(value, pretrained[name])  # the pretrained weights, not seed 2's
    assert not built.actor[0].weight.requires_grad and built.actor[2].weight.requires_grad

    summary = run_training(compose_config([*GRPO, "seed=2", *init, "algo.kl_coef=0.02"]), tmp_path / "tuned")
    tuned = load_checkpoint(tmp_path / "tuned" / "checkpoints" / "last.pt")["policy"]
    assert torch.equal(tuned["actor.0.weight"], pretrained["actor.0.weight"])  # frozen stays frozen
    assert not torch.equal(tuned["actor.2.weight"], pretrained["actor.2.weight"])  # the rest is trained
    assert summary["diag/approx_ref_kl"] > 0  # the KL to the pretrained policy is logged and non-zero


def test_a_plain_state_dict_works_too_and_mismatches_are_one_clear_line(tmp_path):
    from embodirl.build import build_components

    policy = build_components(compose_config(GRPO)).policy
    torch.save(policy.state_dict(), tmp_path / "weights.pt")
    build_components(compose_config([*GRPO, f"policy.init_from={tmp_path / 'weights.pt'}"]))
    with pytest.raises(CheckpointError, match=r"does not fit this policy \(shapes differ for actor.0.bias \[64\] vs \[32\], actor.0.weight"):
        build_components(compose_config([*GRPO, f"policy.init_from={tmp_path / 'weights.pt'}", "policy.hidden_sizes=[32,32]"]))
    with pytest.raises(CheckpointError, match="does not exist"):
        build_components(compose_config([*GRPO, f"policy.init_from={tmp_path / 'missing.pt'}"]))
    with pytest.raises(ConfigError, match=r"policy.freeze=\['critic.\*'\].*matches none of: actor.0.weight"):
        build_components(compose_config([*GRPO, "policy.freeze=[critic.*]"]))

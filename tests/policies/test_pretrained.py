"""Starting from pretrained weights (policy.init_from), freezing parameters (policy.freeze), and GRPO
fine-tuning with a KL to the frozen pretrained policy."""

import pytest
import torch

from embodirl.app.run import run_training
from embodirl.errors import CheckpointError, ConfigError
from tests.conftest import compose_config

GRPO = ["algo=grpo", "env.num_envs=8", "algo.num_steps=16", "algo.minibatch_size=64", "trainer=debug",
        "trainer.total_env_steps=256", "logger.console=none", "device=cpu"]


def test_init_from_loads_a_checkpoint_and_fine_tuning_keeps_frozen_weights_and_logs_the_kl(tmp_path):
    from embodirl.app.build import build_components
    from embodirl.runtime.checkpoint import load_checkpoint

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
    from embodirl.app.build import build_components

    policy = build_components(compose_config(GRPO)).policy
    torch.save(policy.state_dict(), tmp_path / "weights.pt")
    build_components(compose_config([*GRPO, f"policy.init_from={tmp_path / 'weights.pt'}"]))
    with pytest.raises(CheckpointError, match=r"does not fit this policy's actor: actor.0.bias is \[64\] in the file "
                                              r"and \[32\] here. Fix: build the actor the weights were trained with"):
        build_components(compose_config([*GRPO, f"policy.init_from={tmp_path / 'weights.pt'}",
                                         "policy.hidden_sizes=[32,32]"]))
    with pytest.raises(CheckpointError, match="does not exist"):
        build_components(compose_config([*GRPO, f"policy.init_from={tmp_path / 'missing.pt'}"]))
    with pytest.raises(ConfigError, match=r"policy.freeze=\['critic.\*'\].*matches none of: actor.0.weight"):
        build_components(compose_config([*GRPO, "policy.freeze=[critic.*]"]))


PPO = [*GRPO[1:], "policy.normalize_obs=true"]  # observation statistics that must come along with the actor


def _actions(policy, obs):
    from embodirl.envs.observations import as_tensordict

    batch = as_tensordict(obs, obs.shape[0])
    torch.manual_seed(3)
    sampled = policy.act(batch, policy.initial_state(obs.shape[0]))[0]
    return policy.mode(batch, policy.initial_state(obs.shape[0]))[0], sampled


def test_a_ppo_checkpoint_fine_tunes_an_actor_only_grpo_policy(tmp_path, caplog):
    from embodirl.app.build import build_components

    run_training(compose_config([*PPO, "seed=1"]), tmp_path / "ppo")
    checkpoint = tmp_path / "ppo" / "checkpoints" / "last.pt"
    source = build_components(compose_config([*PPO, f"policy.init_from={checkpoint}"])).policy  # the PPO policy itself
    assert source.normalizers["state"].count > 0  # trained statistics, not the initial ones
    caplog.clear()  # only the fine-tuned build's line (the source's build logs one too where INFO propagates)
    with caplog.at_level("INFO", logger="embodirl.app.build"):
        tuned = build_components(compose_config([*GRPO, "policy.normalize_obs=true", "seed=2",
                                                 f"policy.init_from={checkpoint}"])).policy
    assert not tuned.has_critic
    (line,) = [r.getMessage() for r in caplog.records if "policy.init_from" in r.getMessage()]
    assert "skipped from the file (no place in this policy): critic.* (6)" in line and "\n" not in line
    torch.testing.assert_close(tuned.normalizers["state"].mean, source.normalizers["state"].mean)
    obs = torch.randn(64, 4) * 2
    for ours, theirs in zip(_actions(tuned, obs), _actions(source, obs), strict=True):
        assert torch.equal(ours, theirs)  # the same actor: the same actions on the same observations


def test_an_actor_only_checkpoint_starts_an_actor_critic_with_a_fresh_critic(tmp_path, caplog):
    from embodirl.app.build import build_components

    run_training(compose_config([*GRPO, "seed=1"]), tmp_path / "grpo")
    checkpoint = tmp_path / "grpo" / "checkpoints" / "last.pt"
    source = build_components(compose_config([*GRPO, f"policy.init_from={checkpoint}"])).policy
    fresh = build_components(compose_config([*GRPO[1:], "seed=2"])).policy
    caplog.clear()  # only the fine-tuned build's line (the source's build logs one too where INFO propagates)
    with caplog.at_level("INFO", logger="embodirl.app.build"):
        tuned = build_components(compose_config([*GRPO[1:], "seed=2", f"policy.init_from={checkpoint}"])).policy
    (line,) = [r.getMessage() for r in caplog.records if "policy.init_from" in r.getMessage()]
    assert "started fresh (absent or of another shape in the file): critic.* (6)" in line
    for name, value in fresh.critic.state_dict().items():
        assert torch.equal(tuned.critic.state_dict()[name], value)  # seed 2's initial critic
    obs = torch.randn(64, 4)
    for ours, theirs in zip(_actions(tuned, obs), _actions(source, obs), strict=True):
        assert torch.equal(ours, theirs)


def test_an_actor_trained_on_normalised_observations_needs_them(tmp_path):
    from embodirl.app.build import build_components

    run_training(compose_config([*PPO, "seed=1"]), tmp_path / "ppo")
    init = f"policy.init_from={tmp_path / 'ppo' / 'checkpoints' / 'last.pt'}"
    with pytest.raises(CheckpointError) as info:
        build_components(compose_config([*GRPO, init]))
    assert str(info.value) == (f"{init.replace('=', '=' + chr(39), 1)}' does not fit this policy's actor: "
                               "normalizers.state.count (shape []) in the file has no place in this actor. "
                               "Fix: pass policy.normalize_obs=true as the weights were trained (the observation "
                               "statistics belong to the actor)")
    with pytest.raises(CheckpointError, match=r"actor.0.bias is \[64\] in the file and \[32\] here. Fix: build the "
                                              r"actor the file was trained with \(policy.hidden_sizes=\[64,64\], "
                                              r"policy.activation=relu\), on the same env"):
        build_components(compose_config([*PPO, init, "policy.hidden_sizes=[32,32]"]))


def test_an_actor_trained_with_an_observation_history_starts_a_run_with_the_same_history(tmp_path):
    from embodirl.app.build import build_components
    from embodirl.runtime.checkpoint import load_checkpoint

    history = [*PPO, "env.obs_history=3"]
    run_training(compose_config([*history, "seed=1"]), tmp_path / "ppo")
    path = tmp_path / "ppo" / "checkpoints" / "last.pt"
    built = build_components(compose_config([*history, "seed=2", f"policy.init_from={path}"])).policy
    for name, value in load_checkpoint(path)["policy"].items():
        assert torch.equal(built.state_dict()[name], value)
    assert built.actor[0].weight.shape == (64, 12)  # the 3 observations of CartPole's [4] side by side
    # Without the history the actor reads [4]: the fix names the history the file was trained with
    with pytest.raises(CheckpointError, match=r"actor.0.weight is \[64, 12\] in the file and \[64, 4\] here. Fix: "
                                              r"build the actor the file was trained with \(policy.hidden_sizes=\[64,"
                                              r"64\], policy.activation=relu\), on the same env with "
                                              r"env.obs_history=3 and env.frame_stack=1$"):
        build_components(compose_config([*PPO, "seed=2", f"policy.init_from={path}"]))

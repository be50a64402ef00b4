"""SAC: the soft target by hand, Polyak averaging, the squashed Gaussian, the update's schedule of gradient steps,
the policies and envs it refuses, the state (and the line a resume with an empty buffer prints), and it learns
Pendulum."""

import json
import logging

import gymnasium as gym
import pytest
import torch
from tensordict import TensorDict
from torch import nn

from embodirl.algos.base import Algorithm
from embodirl.algos.off_policy import polyak_update
from embodirl.config.policies import TanhGaussianConfig
from embodirl.errors import ConfigError
from embodirl.policies.distributions import TanhGaussian
from tests.conftest import algo_on_cartpole, compose_config, train_summary

SMALL = ["device=cpu", "algo=sac", "env=push_cube", "env.num_envs=8", "algo.num_steps=4", "algo.minibatch_size=16",
         "algo.learning_starts=64", "algo.critic_hidden_sizes=[16]", "policy.hidden_sizes=[16]", "eval.num_envs=2",
         "trainer.total_env_steps=1024"]


def sac_on_push_cube(*overrides: str):
    from embodirl.app.build import build_components

    parts = build_components(compose_config([*SMALL, *overrides]))
    parts.collector.reset(seed=0)
    return parts.algo, parts.collector


class Constant(nn.Module):
    """A "critic" that returns fixed values ``[2, B]`` whatever it reads."""

    def __init__(self, values):
        super().__init__()
        self.values = torch.as_tensor(values)

    def forward(self, features, action):
        return self.values


def test_the_critic_loss_regresses_both_critics_on_the_soft_target_by_hand(monkeypatch):
    algo, _ = sac_on_push_cube()
    assert isinstance(algo, Algorithm)
    algo.log_alpha.data.fill_(torch.log(torch.tensor(0.5)))
    algo.target_critics = Constant([[1.0, 4.0], [3.0, 2.0]])  # min over the two: [1, 2]
    algo.critics = Constant([[0.0, 1.0], [2.0, 3.0]])
    monkeypatch.setattr(algo, "sample_action", lambda f: (torch.zeros(2, 2), torch.tensor([2.0, -2.0])))
    obs = TensorDict({"state": torch.zeros(2, 13)}, [2])
    batch = TensorDict({"obs": obs, "next_obs": obs, "action": torch.zeros(2, 2), "reward": torch.tensor([1.0, 1.0]),
                        "discount": torch.tensor([0.5, 0.25]), "terminated": torch.tensor([False, True])}, [2])
    loss, q_mean = algo.critic_loss(batch)
    # soft values: min Q' - alpha log pi = [1 - 0.5 * 2, 2 - 0.5 * -2] = [0, 3];
    # targets: [1 + 0.5 * 0, 1 + 0 (terminated)] = [1, 1]
    # critic 1: ((0 - 1)^2 + (1 - 1)^2) / 2 = 0.5 ; critic 2: ((2 - 1)^2 + (3 - 1)^2) / 2 = 2.5
    assert loss.item() == pytest.approx(3.0) and q_mean.item() == pytest.approx(1.5)


def test_both_families_implement_the_algorithm_protocol_the_core_is_typed_on():
    from embodirl.algos.base import OnPolicyAlgorithm
    from embodirl.algos.off_policy import OffPolicyAlgorithm

    ppo, _ = algo_on_cartpole("ppo")
    sac, _ = sac_on_push_cube()
    assert isinstance(ppo, OnPolicyAlgorithm) and isinstance(sac, OffPolicyAlgorithm)
    for algo in (ppo, sac):
        assert isinstance(algo, Algorithm) and algo.optimizers()
        assert set(algo.optimizers()) <= set(algo.state_dict())  # the keys a resume checks the shapes under


def test_polyak_moves_the_target_by_tau():
    online, target = nn.Linear(2, 1), nn.Linear(2, 1)
    before = [p.clone() for p in target.parameters()]
    polyak_update(target, online, 0.25)
    for new, old, source in zip(target.parameters(), before, online.parameters(), strict=True):
        torch.testing.assert_close(new, 0.75 * old + 0.25 * source)


def test_the_squashed_gaussian_stays_in_the_bounds_and_its_log_prob_agrees():
    box = gym.spaces.Box(low=torch.tensor([-2.0, 0.0]).numpy(), high=torch.tensor([2.0, 1.0]).numpy())
    dist = TanhGaussian(TanhGaussianConfig(), action_space=box)
    torch.manual_seed(0)
    params = (0.5 * torch.randn(1000, 4)).requires_grad_()
    action, log_prob = dist.sample(params)
    assert bool((action[:, 0].abs() <= 2).all() and (action[:, 1] >= 0).all() and (action[:, 1] <= 1).all())
    inside = (action[:, 0].abs() < 1.98) & ((action[:, 1] - 0.5).abs() < 0.495)  # atanh is exact away from the bounds
    assert inside.sum() > 800
    torch.testing.assert_close(dist.log_prob(params, action)[inside], log_prob[inside], atol=2e-3, rtol=1e-3)
    action.sum().backward()  # reparameterised: the sample carries gradients to the actor's output
    assert params.grad is not None and bool(params.grad[:, 0].abs().sum() > 0)
    torch.testing.assert_close(dist.mode(torch.zeros(1, 4)), torch.tensor([[0.0, 0.5]]))
    with pytest.raises(ConfigError, match="a Box with finite bounds"):
        TanhGaussian(TanhGaussianConfig(), action_space=gym.spaces.Box(-float("inf"), float("inf"), (2,)))


def test_gradient_steps_start_at_learning_starts_and_follow_the_update_to_data_ratio():
    algo, collector = sac_on_push_cube("algo.updates_per_step=1.5")
    metrics = algo.update(collector.collect())  # 8 envs x 4 steps = 32 < learning_starts = 64
    assert algo.num_updates == 0 and metrics == {"diag/buffer_size": 32.0, "diag/num_updates": 0.0}
    metrics = algo.update(collector.collect())  # 64: round(4 x 1.5) = 6 steps
    assert algo.num_updates == 6 and len(algo.buffer) == 64 and algo.env_steps_seen == 64
    assert set(metrics) == set(algo.metric_names)
    assert next(iter(algo.actor_optimizer.state.values()))["step"].item() == 3  # policy_frequency=2
    assert next(iter(algo.critic_optimizer.state.values()))["step"].item() == 6


def test_sac_refuses_a_policy_without_a_squashed_gaussian_and_discrete_actions():
    from embodirl.app.build import build_components

    with pytest.raises(ConfigError, match=r"policy='ActorCritic' is invalid: expected a feedforward actor with a "
                                          r"TanhGaussian.*Fix: drop the policy override \(algo=sac selects "
                                          r"policy=sac_actor\)"):
        build_components(compose_config([*SMALL, "policy=actor_critic"]))
    with pytest.raises(ConfigError, match=r"distribution='TanhGaussian' is invalid: .*need a 1-D Box; the env has "
                                          r"Discrete\(2\)\). Fix: use an env with continuous actions, or .*algo=ppo"):
        build_components(compose_config([*SMALL, "env=cartpole"]))


def test_restored_state_holds_the_networks_and_leaves_the_buffer_to_the_checkpointer():
    algo, collector = sac_on_push_cube("algo.learning_starts=0")
    algo.update(collector.collect())
    fresh, fresh_collector = sac_on_push_cube("algo.learning_starts=0")
    fresh.update(fresh_collector.collect())
    fresh.load_state_dict(algo.state_dict())
    assert fresh.num_updates == 4 and fresh.env_steps_seen == 32 and len(fresh.buffer) == 0
    for a, b in zip(algo.critics.parameters(), fresh.critics.parameters(), strict=True):
        assert torch.equal(a, b)


def _records(run_dir):
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_a_resumed_sac_run_equals_an_uninterrupted_one_and_says_when_its_buffer_is_lost(tmp_path, caplog):
    from embodirl.app.run import run_training
    from embodirl.runtime.checkpoint import load_checkpoint

    run = [*SMALL, "eval.every_env_steps=128", "eval.num_episodes=2", "trainer.checkpoint_every_env_steps=64",
           "logger.console=none", "logger.tensorboard=false"]  # 2 evaluation episodes: eval runs; the rest is training
    full, resumed = tmp_path / "full", tmp_path / "resumed"
    run_training(compose_config([*run, "trainer.total_env_steps=192"]), full)
    records = _records(full)
    assert [r["env_steps"] for r in records] == [32, 64, 96, 128, 160, 192]
    assert "loss/critic" not in records[0] and records[-1]["diag/num_updates"] == 20  # learning_starts=64
    assert records[3]["eval/return_mean"] is not None and (full / "checkpoints" / "best.pt").exists()
    saved = load_checkpoint(full / "checkpoints" / "last.pt")  # the validator takes SAC's state; no buffer in it
    assert {"critics", "target_critics", "alpha", "critic_optimizer", "num_updates"} <= set(saved["algo"])
    run_training(compose_config([*run, "trainer.total_env_steps=128"]), resumed)
    with caplog.at_level(logging.INFO):
        run_training(compose_config([*run, "trainer.total_env_steps=192"]), resumed)  # continues from last.pt
    assert "refilled the replay buffer with 128 transitions" in caplog.text  # every transition collected
    for x, y in zip(records[4:], _records(resumed)[4:], strict=True):
        assert x["loss/critic"] == y["loss/critic"] and x["loss/actor"] == y["loss/actor"]
    a, b = saved["policy"], load_checkpoint(resumed / "checkpoints" / "last.pt")["policy"]
    assert all(torch.equal(a[k], b[k]) for k in a)
    (resumed / "checkpoints" / "replay.pt").unlink()  # a lost buffer file: one line says the buffer starts empty
    with caplog.at_level(logging.WARNING):
        run_training(compose_config([*run, "trainer.total_env_steps=224"]), resumed)
    assert "SAC resumes at env_steps=192 with an EMPTY replay buffer (no " in caplog.text


@pytest.mark.slow
def test_embodirl_train_algo_sac_learns_pendulum(tmp_path, monkeypatch):
    summary = train_summary(monkeypatch, tmp_path / "run", [
        "algo=sac", "env=gym", "env.id=Pendulum-v1", "env.num_envs=4", "algo.learning_starts=500",
        "algo.updates_per_step=4", "policy.hidden_sizes=[64,64]", "algo.critic_hidden_sizes=[64,64]",
        "trainer.total_env_steps=4000", "eval.every_env_steps=4000", "seed=0",
        "device=cpu", "logger.console=none", "logger.tensorboard=false"])
    # -200 at 4,000 env steps on our CPU (30 s of CPU time); an untrained policy scores about -1,200 to -1,500
    assert summary["eval/return_mean"] >= -400, summary

"""PPO's update: metrics, schedule, target-KL early stop, validation, non-finite guard."""

import gymnasium as gym
import pytest
import torch

from embodirl.config.policies import ActorCriticConfig
from embodirl.algos.ppo import PPO
from embodirl.errors import ConfigError, NonFiniteLossError
from embodirl.policies import ActorCritic
from tests.conftest import ppo_on_cartpole

METRICS = {"loss/policy", "loss/value", "loss/entropy", "diag/approx_kl", "diag/clip_fraction",
           "diag/explained_variance", "train/learning_rate", "train/ent_coef"}


def test_update_changes_parameters_and_logs_every_metric():
    algo, collector = ppo_on_cartpole()
    before = [p.clone() for p in algo.policy.parameters()]
    metrics = algo.update(collector.collect())
    assert METRICS <= set(metrics)
    assert all(isinstance(v, float) for v in metrics.values())
    assert any(not torch.equal(b, p) for b, p in zip(before, algo.policy.parameters()))
    assert 0.0 <= metrics["diag/clip_fraction"] <= 1.0 and metrics["diag/approx_kl"] >= 0.0


def test_linear_schedule_decays_with_env_steps():
    algo, collector = ppo_on_cartpole(learning_rate=1e-3, lr_schedule="linear")
    first = algo.update(collector.collect())["train/learning_rate"]
    second = algo.update(collector.collect())["train/learning_rate"]
    assert first == pytest.approx(1e-3)
    assert second == pytest.approx(1e-3 * (1 - 128 / 1024))


def test_target_kl_stops_epochs_early():
    algo, collector = ppo_on_cartpole(learning_rate=0.05, n_epochs=20, target_kl=1e-4)
    metrics = algo.update(collector.collect())
    assert metrics["diag/epochs"] < 20


def test_bad_hyperparameters_are_refused_with_the_key():
    policy = ActorCritic(ActorCriticConfig(), observation_space=gym.spaces.Box(-1, 1, (4,)),
                         action_space=gym.spaces.Discrete(2))
    with pytest.raises(ConfigError, match=r"clip_coef=-1 is invalid: expected a float > 0"):
        PPO(policy, device=torch.device("cpu"), total_env_steps=10, clip_coef=-1)
    with pytest.raises(ConfigError, match=r"lr_schedule='cosinus'.*constant, linear, cosine, adaptive_kl"):
        PPO(policy, device=torch.device("cpu"), total_env_steps=10, lr_schedule="cosinus")


def test_non_finite_loss_raises():
    algo, collector = ppo_on_cartpole()
    rollout = collector.collect()
    rollout["reward"][0, 0] = float("nan")
    with pytest.raises(NonFiniteLossError, match="last good checkpoint"):
        algo.update(rollout)


def test_update_refuses_a_rollout_that_breaks_the_schema():
    algo, collector = ppo_on_cartpole()
    rollout = collector.collect().clone()
    del rollout["final_value"]
    with pytest.raises(ValueError, match=r"missing key 'final_value' \(written by the collector"):
        algo.update(rollout)


def test_unshuffled_minibatches_do_not_depend_on_the_random_stream():
    def update(shuffle, seed):
        algo, collector = ppo_on_cartpole(shuffle_minibatches=shuffle)
        rollout = collector.collect()
        torch.manual_seed(seed)
        algo.update(rollout)
        return torch.cat([p.flatten() for p in algo.policy.parameters()])

    torch.testing.assert_close(update(False, 1), update(False, 2))  # the same contiguous minibatches
    assert not torch.allclose(update(True, 1), update(True, 2))  # shuffled: another split, another update


def test_dual_clip_is_checked_and_used():
    policy = ActorCritic(ActorCriticConfig(), observation_space=gym.spaces.Box(-1, 1, (4,)),
                         action_space=gym.spaces.Discrete(2))
    with pytest.raises(ConfigError, match=r"dual_clip_coef=0.5 is invalid: expected null \(off\) or a float > 1"):
        PPO(policy, device=torch.device("cpu"), total_env_steps=10, dual_clip_coef=0.5)
    algo, collector = ppo_on_cartpole(dual_clip_coef=1.5, learning_rate=0.05, n_epochs=8)
    rollout = collector.collect()
    dual = algo.update(rollout)["loss/policy"]
    plain_algo, _ = ppo_on_cartpole(learning_rate=0.05, n_epochs=8)
    assert dual != pytest.approx(plain_algo.update(rollout)["loss/policy"])  # large steps: the bound binds

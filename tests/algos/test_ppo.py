"""PPO's update: metrics, schedule, target-KL early stop, validation, non-finite guard."""

import pytest
import torch

from embodirl.config.algos import PPOConfig
from embodirl.config.schema import parse
from embodirl.errors import ConfigError, NonFiniteLossError
from tests.conftest import ppo_on_cartpole

METRICS = {"loss/policy", "loss/value", "loss/entropy", "diag/approx_kl", "diag/clip_fraction",
           "diag/explained_variance", "train/learning_rate", "train/ent_coef"}


def test_update_changes_parameters_and_logs_every_metric():
    algo, collector = ppo_on_cartpole()
    before = [p.clone() for p in algo.policy.parameters()]
    metrics = algo.update(collector.collect())
    assert set(metrics) >= METRICS
    assert {k for k in metrics if k.startswith(("loss/", "diag/"))} == set(algo.metric_names)  # what objective= sees
    assert all(isinstance(v, float) for v in metrics.values())
    assert any(not torch.equal(b, p) for b, p in zip(before, algo.policy.parameters(), strict=True))
    assert 0.0 <= metrics["diag/clip_fraction"] <= 1.0 and metrics["diag/approx_kl"] >= 0.0


def test_linear_schedule_decays_with_env_steps():
    algo, collector = ppo_on_cartpole(learning_rate=1e-3, lr_schedule="linear")
    first = algo.update(collector.collect())["train/learning_rate"]
    second = algo.update(collector.collect())["train/learning_rate"]
    assert first == pytest.approx(1e-3)
    assert second == pytest.approx(1e-3 * (1 - 128 / 1024))


def test_target_kl_stops_epochs_early():
    algo, collector = ppo_on_cartpole(learning_rate=0.05, num_epochs=20, target_kl=1e-4)
    metrics = algo.update(collector.collect())
    assert metrics["diag/epochs"] < 20


def test_bad_hyperparameters_are_refused_with_the_key():
    with pytest.raises(ConfigError, match=r"algo.clip_coef=-1 is invalid: expected a float > 0"):
        parse(PPOConfig, {"clip_coef": -1}, "algo.")
    with pytest.raises(ConfigError, match=r"algo.lr_schedule='cosinus'.*constant, linear, cosine, adaptive_kl"):
        parse(PPOConfig, {"lr_schedule": "cosinus"}, "algo.")
    with pytest.raises(ConfigError, match=r"algo.n_epochs=3 is invalid: expected no key of this name: it was renamed "
                                          r"to algo.num_epochs. Fix: pass algo.num_epochs=3 instead"):
        parse(PPOConfig, {"n_epochs": 3}, "algo.")


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
    with pytest.raises(ConfigError, match=r"dual_clip_coef=0.5 is invalid: expected null or a float > 1"):
        parse(PPOConfig, {"dual_clip_coef": 0.5}, "algo.")
    algo, collector = ppo_on_cartpole(dual_clip_coef=1.5, learning_rate=0.05, num_epochs=8)
    rollout = collector.collect()
    dual = algo.update(rollout)["loss/policy"]
    plain_algo, _ = ppo_on_cartpole(learning_rate=0.05, num_epochs=8)
    assert dual != pytest.approx(plain_algo.update(rollout)["loss/policy"])  # large steps: the bound binds

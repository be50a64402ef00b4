"""A2C: n-step returns by hand, one gradient step per rollout, the settings it refuses, and it solves CartPole."""

import pytest
import torch
from tensordict import TensorDict

from embodirl.config.algos import A2CConfig
from embodirl.config.schema import parse
from embodirl.errors import ConfigError
from tests.conftest import algo_on_cartpole, compose_config, train_summary


def test_advantages_are_n_step_returns_minus_the_value():
    algo, _ = algo_on_cartpole("a2c", gamma=0.5)
    # one env, 3 steps, no episode end: R_t = r_t + 0.5 r_{t+1} + ... + 0.5^(3-t) V_3 (gae_lambda = 1)
    reward, value = torch.tensor([[1.0, 2.0, 4.0, 0.0]]), torch.tensor([[0.5, 1.0, 2.0, 8.0]])
    rollout = TensorDict({"obs": TensorDict({"state": torch.zeros(1, 4, 4)}, [1, 4]), "action": torch.zeros(1, 4),
                          "reward": reward, "value": value, "done": torch.zeros(1, 4, dtype=torch.bool),
                          "final_value": torch.zeros(1, 4)}, batch_size=[1, 4])
    samples = algo.prepare(rollout)
    # R_2 = 4 + 0.5 * 8 = 8 ; R_1 = 2 + 0.5 * 8 = 6 ; R_0 = 1 + 0.5 * 6 = 4
    torch.testing.assert_close(samples["returns"], torch.tensor([4.0, 6.0, 8.0]))
    torch.testing.assert_close(samples["advantage"], torch.tensor([4.0 - 0.5, 6.0 - 1.0, 8.0 - 2.0]))
    # an episode that ends at t = 1 (terminated: final_value 0) cuts the sum there: R_1 = 2, R_0 = 1 + 0.5 * 2
    rollout["done"][0, 1] = True
    torch.testing.assert_close(algo.prepare(rollout)["returns"], torch.tensor([2.0, 2.0, 8.0]))


def test_one_gradient_step_per_rollout_and_the_metrics_it_declares():
    algo, collector = algo_on_cartpole("a2c", minibatch_size=None)  # A2C's default: the whole rollout
    metrics = algo.update(collector.collect())
    assert [state["step"].item() for state in algo.optimizer.state.values()] == [1.0] * len(algo.params)
    assert metrics["diag/epochs"] == 1.0
    assert {k for k in metrics if k.startswith(("loss/", "diag/"))} == set(algo.metric_names)
    assert algo.env_steps_seen == 8 * 16


@pytest.mark.parametrize("values,message", [
    ({"lr_schedule": "adaptive_kl"}, r"algo.lr_schedule='adaptive_kl' is invalid: expected constant, linear, cosine "
                                     r"or a list with algo=a2c \(A2C measures no approx-KL"),
    ({"target_kl": 0.01}, r"algo.target_kl=0.01 is invalid: expected null with algo=a2c.*Fix: pass algo.target_kl="),
    ({"n_epochs": 2}, r"algo.n_epochs=2 is invalid: expected no key of this name: it was renamed to algo.num_epochs"),
])
def test_settings_a2c_cannot_honour_are_refused(values, message):
    with pytest.raises(ConfigError, match=message):
        parse(A2CConfig, values, "algo.")


def test_a2c_refuses_a_recurrent_policy():
    from embodirl.app.build import build_components

    with pytest.raises(ConfigError, match=r"policy='ActorCriticRNN' is invalid: expected a feedforward policy "
                                          r"with algo=a2c.*Fix: pass policy=actor_critic, or algo=ppo"):
        build_components(compose_config(["algo=a2c", "policy=actor_critic_rnn", "device=cpu"]))


@pytest.mark.slow
def test_embodirl_train_algo_a2c_solves_cartpole(tmp_path, monkeypatch):
    summary = train_summary(monkeypatch, tmp_path / "run", [
        "algo=a2c", "seed=0", "device=cpu", "logger.console=none", "logger.tensorboard=false"], timeout_s=300)
    assert summary["stop_reason"] == "solved" and summary["eval/return_mean"] >= 475, summary
    assert summary["solved_env_steps"] <= 500_000  # twice what the seeds tried needed (the A2C commit message)

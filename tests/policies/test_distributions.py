"""Log-probs and entropies against closed forms; sampling frequencies; the policy interface."""

import math

import gymnasium as gym
import pytest
import torch
from tensordict import TensorDict

from embodirl.errors import ConfigError
from embodirl.policies import ActorCritic, ActorOnly
from embodirl.policies.distributions import Categorical, DiagGaussian
from embodirl.policies.networks import build_mlp


def test_categorical_log_prob_and_entropy_closed_form():
    logits = torch.log(torch.tensor([[0.2, 0.3, 0.5]]))
    dist = Categorical(3)
    torch.testing.assert_close(dist.log_prob(logits, torch.tensor([2])), torch.log(torch.tensor([0.5])))
    h = -(0.2 * math.log(0.2) + 0.3 * math.log(0.3) + 0.5 * math.log(0.5))
    torch.testing.assert_close(dist.entropy(logits), torch.tensor([h]))


def test_gumbel_max_sampling_follows_the_softmax():
    torch.manual_seed(0)
    logits = torch.log(torch.tensor([0.1, 0.6, 0.3])).expand(200_000, 3)
    action, log_prob = Categorical(3).sample(logits)
    freq = torch.bincount(action, minlength=3).float() / action.numel()
    torch.testing.assert_close(freq, torch.tensor([0.1, 0.6, 0.3]), atol=5e-3, rtol=0)
    torch.testing.assert_close(log_prob, torch.log(torch.tensor([0.1, 0.6, 0.3]))[action])


def test_gaussian_log_prob_and_entropy_closed_form():
    dist = DiagGaussian(2, init_log_std=math.log(0.5), log_std_min=-5, log_std_max=2)
    mean = torch.tensor([[0.0, 1.0]])
    action = torch.tensor([[0.5, 0.0]])
    # per dim: -0.5 z^2 - log(0.5) - 0.5 log(2 pi), z = [1, -2]
    expected = sum(-0.5 * z * z - math.log(0.5) - 0.5 * math.log(2 * math.pi) for z in (1.0, -2.0))
    torch.testing.assert_close(dist.log_prob(mean, action), torch.tensor([expected]))
    h = 2 * (0.5 + 0.5 * math.log(2 * math.pi) + math.log(0.5))
    torch.testing.assert_close(dist.entropy(mean), torch.tensor([h]))
    _, log_prob = dist.sample(mean.expand(4, 2))
    assert log_prob.shape == (4,)


def test_gaussian_log_std_is_clamped():
    dist = DiagGaussian(1, init_log_std=5.0, log_std_min=-5, log_std_max=2)
    h = 0.5 + 0.5 * math.log(2 * math.pi) + 2.0
    torch.testing.assert_close(dist.entropy(torch.zeros(1, 1)), torch.tensor([h]))


def test_unknown_activation_is_an_error_naming_the_choices():
    with pytest.raises(ConfigError, match=r"activation='sigmoidz'.*relu"):
        build_mlp(4, 2, [8], "sigmoidz", 1.0)


def test_policy_interfaces_over_tensordicts():
    obs_space = gym.spaces.Box(-1, 1, (3,))
    box = gym.spaces.Box(-1, 1, (2,))
    policy = ActorCritic(obs_space, box, hidden_sizes=[8])
    td = TensorDict({"obs": {"state": torch.randn(5, 3)}}, batch_size=[5])
    policy.get_action(td)
    assert td["action"].shape == (5, 2) and td["sample_log_prob"].shape == (5,) and td["value"].shape == (5,)
    out = policy.evaluate_actions(td)
    torch.testing.assert_close(out["sample_log_prob"], td["sample_log_prob"])
    assert out["entropy"].shape == (5,)
    deterministic = policy.get_action(td.clone(), deterministic=True)["action"]
    torch.testing.assert_close(deterministic, policy.get_action(td.clone(), deterministic=True)["action"])
    actor_only = ActorOnly(obs_space, gym.spaces.Discrete(4), hidden_sizes=[8])
    assert not actor_only.has_critic
    assert torch.equal(actor_only.get_value(td.clone())["value"], torch.zeros(5))


def test_observation_normalizer_statistics():
    policy = ActorCritic(gym.spaces.Box(-10, 10, (2,)), gym.spaces.Discrete(2), hidden_sizes=[8], normalize_obs=True)
    data = torch.tensor([[1.0, 10.0], [3.0, 10.0], [5.0, 16.0]])
    policy.update_normalizer(TensorDict({"state": data[:2]}, batch_size=[2]))
    policy.update_normalizer(TensorDict({"state": data[2:]}, batch_size=[1]))
    torch.testing.assert_close(policy.normalizers["state"].mean, data.mean(0))
    torch.testing.assert_close(policy.normalizers["state"].var, data.var(0, unbiased=False))
    assert "normalizers.state.mean" in policy.state_dict()

"""Log-probs and entropies against closed forms; sampling frequencies; the policy interface."""

import math

import gymnasium as gym
import pytest
import torch
from tensordict import TensorDict

from embodirl.config.policies import ActorCriticConfig, ActorOnlyConfig, BetaConfig, StateDependentGaussianConfig
from embodirl.config.schema import parse_node
from embodirl.errors import ConfigError
from embodirl.policies import ActorCritic, ActorOnly
from embodirl.policies.distributions import Beta, Categorical, Chunked, DiagGaussian, StateDependentGaussian
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
    policy = ActorCritic(ActorCriticConfig(hidden_sizes=[8]), observation_space=obs_space, action_space=box)
    td = TensorDict({"obs": {"state": torch.randn(5, 3)}}, batch_size=[5])
    policy.get_action(td)
    assert td["action"].shape == (5, 2) and td["sample_log_prob"].shape == (5,) and td["value"].shape == (5,)
    out = policy.evaluate_actions(td)
    torch.testing.assert_close(out["sample_log_prob"], td["sample_log_prob"])
    assert out["entropy"].shape == (5,)
    deterministic = policy.get_action(td.clone(), deterministic=True)["action"]
    torch.testing.assert_close(deterministic, policy.get_action(td.clone(), deterministic=True)["action"])
    actor_only = ActorOnly(ActorOnlyConfig(hidden_sizes=[8]), observation_space=obs_space,
                           action_space=gym.spaces.Discrete(4))
    assert not actor_only.has_critic
    assert torch.equal(actor_only.get_value(td.clone())["value"], torch.zeros(5))


def test_observation_normalizer_statistics():
    policy = ActorCritic(ActorCriticConfig(hidden_sizes=[8], normalize_obs=True),
                         observation_space=gym.spaces.Box(-10, 10, (2,)), action_space=gym.spaces.Discrete(2))
    data = torch.tensor([[1.0, 10.0], [3.0, 10.0], [5.0, 16.0]])
    policy.update_normalizer(TensorDict({"state": data[:2]}, batch_size=[2]))
    policy.update_normalizer(TensorDict({"state": data[2:]}, batch_size=[1]))
    torch.testing.assert_close(policy.normalizers["state"].mean, data.mean(0))
    torch.testing.assert_close(policy.normalizers["state"].var, data.var(0, unbiased=False))
    assert "normalizers.state.mean" in policy.state_dict()


def test_state_dependent_gaussian_reads_log_std_from_the_actor():
    box = gym.spaces.Box(-1, 1, (2,))
    dist = StateDependentGaussian(StateDependentGaussianConfig(init_log_std=0.0, log_std_min=-5, log_std_max=2),
                                  action_space=box)
    assert dist.num_params == 4
    # params = [mean (2), raw log_std (2)]: the same closed form as the DiagGaussian test, std 0.5 per dim
    params = torch.tensor([[0.0, 1.0, math.log(0.5), math.log(0.5)]])
    expected = sum(-0.5 * z * z - math.log(0.5) - 0.5 * math.log(2 * math.pi) for z in (1.0, -2.0))
    torch.testing.assert_close(dist.log_prob(params, torch.tensor([[0.5, 0.0]])), torch.tensor([expected]))
    torch.testing.assert_close(dist.entropy(params), torch.tensor([2 * (0.5 + 0.5 * math.log(2 * math.pi)
                                                                         + math.log(0.5))]))
    # per state: another row, another std (log_std 0 + offset -1, and one clamped at log_std_max = 2)
    shifted = StateDependentGaussian(StateDependentGaussianConfig(init_log_std=-1.0, log_std_min=-5, log_std_max=2),
                                     action_space=box)
    h = shifted.entropy(torch.tensor([[0.0, 0.0, 0.0, 9.0]]))
    torch.testing.assert_close(h, torch.tensor([(0.5 + 0.5 * math.log(2 * math.pi)) * 2 - 1.0 + 2.0]))
    action, log_prob = dist.sample(params.expand(3, 4))
    torch.testing.assert_close(log_prob, dist.log_prob(params.expand(3, 4), action))


def test_beta_by_hand_and_inside_the_bounds():
    dist = Beta(BetaConfig(), action_space=gym.spaces.Box(-1, 1, (1,)))
    p = math.log(math.e - 1)  # softplus(p) = 1 -> alpha = beta = 2
    params = torch.tensor([[p, p]])
    # Beta(2, 2) density at x = 0.5 is 6 x (1 - x) = 1.5; action 0 on [-1, 1] is x = 0.5, scale 2: 1.5 / 2
    torch.testing.assert_close(dist.log_prob(params, torch.tensor([[0.0]])), torch.tensor([math.log(0.75)]))
    # entropy of Beta(2, 2): ln B(2,2) - 2 psi(2) + 2 psi(4) = ln(1/6) - 2 (1 - g) + 2 (11/6 - g) = ln(1/6) + 5/3,
    # plus ln 2 for the scaling to [-1, 1]
    torch.testing.assert_close(dist.entropy(params), torch.tensor([math.log(1 / 6) + 5 / 3 + math.log(2)]))
    torch.testing.assert_close(dist.mode(params), torch.tensor([[0.0]]))  # the mean, 0.5 -> 0
    torch.manual_seed(0)
    wide = Beta(BetaConfig(), action_space=gym.spaces.Box(low=torch.tensor([0.0, -3.0]).numpy(),
                                                          high=torch.tensor([1.0, 5.0]).numpy()))
    action, log_prob = wide.sample(torch.zeros(10_000, 4))
    assert bool((action[:, 0] >= 0).all() and (action[:, 0] <= 1).all())
    assert bool((action[:, 1] >= -3).all() and (action[:, 1] <= 5).all())
    torch.testing.assert_close(log_prob, wide.log_prob(torch.zeros(10_000, 4), action), rtol=1e-4, atol=1e-4)


def test_distribution_override_reaches_the_policy_and_is_checked():
    box, beta = gym.spaces.Box(-1, 1, (2,)), parse_node({"_target_": "embodirl.policies.distributions.Beta"})
    policy = ActorCritic(ActorCriticConfig(hidden_sizes=[8], distribution=beta),
                         observation_space=gym.spaces.Box(-1, 1, (3,)), action_space=box)
    assert isinstance(policy.dist, Beta) and policy.actor[-1].out_features == 4
    action, _, _, _ = policy.act(TensorDict({"state": torch.randn(5, 3)}, batch_size=[5]))
    assert bool((action.abs() <= 1).all())
    with pytest.raises(ConfigError, match=r"distribution='Beta' is invalid.*1-D Box; the env has Discrete\(2\)"):
        ActorCritic(ActorCriticConfig(distribution=beta), observation_space=gym.spaces.Box(-1, 1, (3,)),
                    action_space=gym.spaces.Discrete(2))
    with pytest.raises(ConfigError, match=r"finite bounds"):
        Beta(BetaConfig(), action_space=gym.spaces.Box(-float("inf"), float("inf"), (2,)))


def test_the_state_dependent_preset_follows_the_policy_log_std_keys():
    from embodirl.app.build import build_env, build_policy
    from tests.conftest import compose_config

    cfg = compose_config(["env=push_cube", "env.num_envs=2", "policy.init_log_std=-0.5",
                          "+policy/distribution@policy.distribution=state_dependent_gaussian"])
    env = build_env(cfg.env, torch.device("cpu"), 0)
    policy = build_policy(cfg.policy, env, torch.device("cpu"))
    assert isinstance(policy.dist, StateDependentGaussian) and policy.dist.init_log_std == -0.5


def test_a_chunk_log_prob_and_entropy_are_the_sums_over_its_executed_actions_by_hand():
    # H = 3 actions of a 1-D Gaussian (mean 0, std 1), k = 2 executed: log N(0) + log N(1); the third is re-planned.
    dist = Chunked(DiagGaussian(1, init_log_std=0.0, log_std_min=-5, log_std_max=2), action_chunk=3, chunk_execute=2)
    params, chunk = torch.zeros(1, 3), torch.tensor([[[0.0], [1.0], [5.0]]])
    log_n0, log_n1 = -0.5 * math.log(2 * math.pi), -0.5 - 0.5 * math.log(2 * math.pi)
    torch.testing.assert_close(dist.log_prob(params, chunk), torch.tensor([log_n0 + log_n1]))  # -2.3379
    torch.testing.assert_close(dist.entropy(params), torch.tensor([2 * (0.5 + 0.5 * math.log(2 * math.pi))]))
    # Open loop (k = H): all three count, -0.5 * 25 - 0.9189 for the third.
    open_loop = Chunked(dist.base, action_chunk=3, chunk_execute=3)
    torch.testing.assert_close(open_loop.log_prob(params, chunk), torch.tensor([log_n0 + log_n1 - 12.5 + log_n0]))
    # Per-action means: row h of the actor's output is action h's mean.
    means = torch.tensor([[1.0, 2.0, 3.0]])
    assert torch.equal(dist.mode(means), torch.tensor([[[1.0], [2.0], [3.0]]]))
    action, log_prob = dist.sample(means.expand(4, 3))
    assert action.shape == (4, 3, 1) and dist.action_shape == (3, 1) and dist.num_params == 3
    torch.testing.assert_close(log_prob, dist.log_prob(means.expand(4, 3), action))


def test_a_chunk_of_categorical_actions_by_hand():
    dist = Chunked(Categorical(2), action_chunk=2, chunk_execute=1)
    logits = torch.log(torch.tensor([[0.25, 0.75, 0.5, 0.5]]))  # action 0: [0.25, 0.75], action 1: [0.5, 0.5]
    torch.testing.assert_close(dist.log_prob(logits, torch.tensor([[1, 0]])), torch.log(torch.tensor([0.75])))
    h = -(0.25 * math.log(0.25) + 0.75 * math.log(0.75))
    torch.testing.assert_close(dist.entropy(logits), torch.tensor([h]))
    assert dist.action_shape == (2,) and dist.action_dtype == torch.int64


def test_action_chunk_widens_the_actor_and_one_keeps_the_policy_as_it_was():
    obs_space, box = gym.spaces.Box(-1, 1, (3,)), gym.spaces.Box(-1, 1, (2,))
    single = ActorCritic(ActorCriticConfig(hidden_sizes=[8]), observation_space=obs_space, action_space=box)
    assert isinstance(single.dist, DiagGaussian)  # the same modules and state_dict names as before chunks
    chunked = ActorCritic(ActorCriticConfig(hidden_sizes=[8], action_chunk=4, chunk_execute=2),
                          observation_space=obs_space, action_space=box)
    assert isinstance(chunked.dist, Chunked) and chunked.actor[-1].out_features == 8
    assert (chunked.dist.action_chunk, chunked.dist.chunk_execute) == (4, 2)
    action, log_prob, _, _ = chunked.act(TensorDict({"state": torch.randn(5, 3)}, batch_size=[5]))
    assert action.shape == (5, 4, 2) and log_prob.shape == (5,)
    open_loop = ActorOnly(ActorOnlyConfig(action_chunk=4), observation_space=obs_space, action_space=box)
    assert open_loop.dist.chunk_execute == 4  # chunk_execute=null: the whole chunk
    with pytest.raises(ConfigError, match=r"chunk_execute=5 is invalid.*\[1, action_chunk=4\]"):
        ActorOnlyConfig(action_chunk=4, chunk_execute=5).check()

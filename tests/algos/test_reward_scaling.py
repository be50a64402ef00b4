"""Return-based reward scaling: hand-computed traces and scales, a plain loop, state, and PPO's hook."""

import pytest
import torch

from embodirl.config.envs import CartPoleConfig
from embodirl.config.policies import ActorCriticConfig
from embodirl.algos.ppo import PPO
from embodirl.algos.reward_scaling import RewardScaler, discounted_return_trace, scale_rewards
from embodirl.collect.collector import Collector
from embodirl.envs.cartpole import CartPole
from embodirl.policies import ActorCritic


def test_discounted_return_trace_hand_values():
    # gamma 0.5, carried-in return 2, the episode ends at t = 1:
    # t0: 0.5 * 2 + 1 = 2; t1: 0.5 * 2 + 2 = 3 (done: reset to 0); t2: 0 + 3 = 3; t3: 0.5 * 3 + 4 = 5.5.
    trace, carry = discounted_return_trace(torch.tensor([[1.0, 2.0, 3.0, 4.0]]),
                                           torch.tensor([[False, True, False, False]]), 0.5, torch.tensor([2.0]))
    assert trace.tolist() == [[2.0, 3.0, 3.0, 5.5]] and carry.tolist() == [5.5]
    _, carry = discounted_return_trace(torch.tensor([[1.0]]), torch.tensor([[True]]), 0.5, torch.tensor([2.0]))
    assert carry.tolist() == [0.0]  # the last step ended the episode: nothing is carried


def test_discounted_return_trace_matches_a_plain_loop():
    torch.manual_seed(0)
    reward, done, initial = torch.randn(3, 7), torch.rand(3, 7) < 0.3, torch.randn(3)
    trace, carry = discounted_return_trace(reward, done, 0.9, initial)
    for i in range(3):
        running = float(initial[i])
        for t in range(7):
            running = 0.9 * running + float(reward[i, t])
            assert float(trace[i, t]) == pytest.approx(running, abs=1e-5)
            running = 0.0 if done[i, t] else running
        assert float(carry[i]) == pytest.approx(running, abs=1e-5)


def test_scale_rewards_hand_values():
    assert scale_rewards(torch.tensor([3.0, -30.0]), torch.tensor(9.0), eps=0.0).tolist() == [1.0, -10.0]
    assert scale_rewards(torch.tensor([3.0, -30.0]), torch.tensor(9.0), eps=0.0, clip=5.0).tolist() == [1.0, -5.0]


def test_scaler_divides_by_the_std_of_all_returns_seen():
    # gamma 0.5, no episode ends. Rollout 1: env 0 returns 1, 1.5; env 1: 3, 4.5 -> mean 2.5,
    # population variance (1.5^2 + 1^2 + 0.5^2 + 2^2) / 4 = 1.875. Rewards are scaled by 1 / sqrt(1.875).
    scaler = RewardScaler(gamma=0.5, device="cpu", eps=0.0)
    reward, done = torch.tensor([[1.0, 1.0], [3.0, 3.0]]), torch.zeros(2, 2, dtype=torch.bool)
    scaled = scaler(reward, done)
    assert float(scaler.stats.var) == pytest.approx(1.875)
    torch.testing.assert_close(scaled, reward / 1.875**0.5)
    # Rollout 2 carries the returns 1.5 and 4.5 in: env 0: 0.75 + 1 = 1.75, 1.875; env 1: 5.25, 5.625.
    scaled = scaler(reward, done)
    seen = torch.tensor([1.0, 1.5, 3.0, 4.5, 1.75, 1.875, 5.25, 5.625], dtype=torch.float64)
    assert float(scaler.stats.var) == pytest.approx(float(seen.var(unbiased=False)))
    torch.testing.assert_close(scaled, reward / float(seen.var(unbiased=False)) ** 0.5)
    assert scaler.return_std == pytest.approx(float(seen.var(unbiased=False)) ** 0.5)


def test_scaler_state_round_trip():
    torch.manual_seed(0)
    reward, done = torch.randn(4, 5), torch.rand(4, 5) < 0.2
    scaler = RewardScaler(gamma=0.9, device="cpu")
    scaler(reward, done)
    restored = RewardScaler(gamma=0.9, device="cpu")
    restored.load_state_dict(scaler.state_dict())
    torch.testing.assert_close(restored(reward * 2, done), scaler(reward * 2, done))
    empty = RewardScaler(gamma=0.9, device="cpu")
    empty.load_state_dict(RewardScaler(gamma=0.9, device="cpu").state_dict())
    assert empty.running_return is None


def _ppo(normalize_rewards):
    torch.manual_seed(0)
    env = CartPole(CartPoleConfig(num_envs=8), seed=0)
    policy = ActorCritic(ActorCriticConfig(hidden_sizes=[16]), observation_space=env.observation_space,
                         action_space=env.action_space)
    algo = PPO(policy, device=torch.device("cpu"), total_env_steps=1024, num_steps=16, batch_size=32,
               normalize_rewards=normalize_rewards, normalize_advantage=False)
    collector = Collector(env, policy, algo.collect_plan(env))
    collector.reset(seed=0)
    return algo, collector


def _advantages(algo, rollout):
    """The advantages and returns PPO's update prepares for ``rollout`` (GAE on the scaled rewards)."""
    algo._allocate(rollout)
    algo.prepare(*algo.prepare_inputs(rollout))
    return algo._data["advantage"].clone(), algo._data["returns"].clone()


def test_ppo_normalize_rewards_makes_advantages_invariant_to_the_reward_scale():
    algo, collector = _ppo(normalize_rewards=True)
    rollout = collector.collect()
    big = rollout.clone()
    big["reward"] = rollout["reward"] * 1000.0
    other, _ = _ppo(normalize_rewards=True)
    advantage, returns = _advantages(algo, rollout)
    big_advantage, big_returns = _advantages(other, big)
    torch.testing.assert_close(big_advantage, advantage)
    torch.testing.assert_close(big_returns, returns)
    assert torch.equal(big["reward"], rollout["reward"] * 1000.0)  # the rollout itself is not changed
    plain, _ = _ppo(normalize_rewards=False)
    assert not torch.allclose(_advantages(plain, big)[0], big_advantage)


def test_ppo_checkpoints_the_reward_scaler():
    algo, collector = _ppo(normalize_rewards=True)
    algo.update(collector.collect())
    state = algo.state_dict()
    assert set(state["reward_scaler"]) == {"stats", "running_return"}
    restored, _ = _ppo(normalize_rewards=True)
    restored.load_state_dict(state)
    assert restored.reward_scaler.return_std == algo.reward_scaler.return_std
    torch.testing.assert_close(restored.reward_scaler.running_return, algo.reward_scaler.running_return)
    assert "reward_scaler" not in _ppo(normalize_rewards=False)[0].state_dict()

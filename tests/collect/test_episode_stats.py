import numpy as np
import pytest
import torch

from embodirl.collect.episode_stats import EpisodeStats, fold_steps, fold_sums
from embodirl.config.envs import CartPoleConfig
from embodirl.envs.cartpole import CartPole


def random_actions(num_envs: int, num_steps: int, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, 2, (num_steps, num_envs), generator=torch.Generator().manual_seed(seed))


def add_one_by_one(stats: EpisodeStats, reward: torch.Tensor, done: torch.Tensor, success=None) -> None:
    stats.add_steps(reward.unsqueeze(0), done.unsqueeze(0), None if success is None else success.unsqueeze(0))


def test_episode_stats_match_a_manual_count():
    env, stats = CartPole(CartPoleConfig(num_envs=8), seed=9), EpisodeStats(8, "cpu")
    for act in random_actions(8, 7, seed=3):  # partial episodes before the reset are discarded
        step = env.step(act)
        add_one_by_one(stats, step.reward, step.terminated | step.truncated)
    env.reset()
    stats.discard()
    running = np.zeros(8)
    finished: list[float] = []
    rewards, dones = [], []
    for act in random_actions(8, 300, seed=4):
        step = env.step(act)
        rewards.append(step.reward)
        dones.append(step.terminated | step.truncated)
        running += step.reward.numpy()
        for i in torch.nonzero(step.terminated | step.truncated).flatten().tolist():
            finished.append(running[i])
            running[i] = 0
    for block in torch.arange(300).split(37):  # blocks of uneven length: episodes run across them
        stats.add_steps(torch.stack(rewards)[block], torch.stack(dones)[block])
    popped = stats.pop()
    assert popped["episode/count"] == len(finished) > 20
    assert popped["episode/return_mean"] == pytest.approx(np.mean(finished))
    assert popped["episode/length_mean"] == pytest.approx(np.mean(finished))  # reward 1 per step
    assert stats.pop() == {"episode/count": 0.0}


def test_hand_counted_returns_lengths_and_success():
    stats = EpisodeStats(3, "cpu")
    f, t = False, True
    stats.add_steps(torch.tensor([[1.0, 2.0, 0.5], [1.0, 2.0, 0.5], [3.0, 2.0, 1.0]]),
                    torch.tensor([[f, f, f], [t, f, t], [t, t, f]]),
                    success=torch.tensor([[f, f, f], [t, f, f], [f, t, f]]))
    # episodes: env0 [1,1] ok, env2 [0.5,0.5] no, env0 [3] no, env1 [2,2,2] ok
    assert stats.pop() == pytest.approx({"episode/count": 4.0, "episode/return_mean": (2 + 1 + 3 + 6) / 4,
                                         "episode/length_mean": (2 + 2 + 1 + 3) / 4, "episode/success_rate": 0.5})


def test_state_dict_round_trip_keeps_partial_episodes():
    stats, restored = EpisodeStats(2, "cpu"), EpisodeStats(2, "cpu")
    add_one_by_one(stats, torch.tensor([1.0, 2.0]), torch.tensor([False, True]))
    restored.load_state_dict(stats.state_dict())
    for s in (stats, restored):
        add_one_by_one(s, torch.tensor([1.0, 1.0]), torch.tensor([True, False]))
    assert stats.pop() == restored.pop() == {"episode/count": 2.0, "episode/return_mean": 2.0,
                                             "episode/length_mean": 1.5}


def test_fold_steps_closes_the_recorded_episodes_of_a_block_by_hand():
    f, t = False, True
    reward = torch.tensor([[1.0, 3.0, 0.5]] * 4, dtype=torch.float64)
    done = torch.tensor([[f, t, t], [t, f, f], [f, f, t], [f, t, f]])
    success = torch.tensor([[f, f, f], [f, f, f], [f, f, t], [t, f, f]])
    # Env 0 carries 2.0 over 3 steps in and records 1 episode; env 1 has recorded its 1 already; env 2 carries
    # 5.0 over 5 steps and a success in, and records 2.
    sums, record, carry = fold_steps(reward, done, success, torch.tensor([2.0, 0.0, 5.0], dtype=torch.float64),
                                     torch.tensor([3.0, 0.0, 5.0], dtype=torch.float64), torch.tensor([f, f, t]),
                                     torch.tensor([0, 1, 0]), torch.tensor([1, 1, 2]))
    # Env 0: 2 + 1 + 1 = 4 over 5 steps; env 2: 5.5 over 6 steps (success once, carried in), then 1.0 over 2
    # steps ending on a success.
    assert torch.equal(sums, torch.tensor([[4.0, 0.0, 6.5], [16.0, 0.0, 5.5**2 + 1.0], [5.0, 0.0, 8.0],
                                           [0.0, 0.0, 1.0], [0.0, 0.0, 2.0]], dtype=torch.float64))
    assert torch.equal(record, torch.tensor([[f, f, t], [t, f, f], [f, f, t], [f, f, f]]))
    returns, lengths, once, finished = carry
    assert torch.equal(returns, torch.tensor([2.0, 0.0, 0.5], dtype=torch.float64))
    assert torch.equal(lengths, torch.tensor([2.0, 0.0, 1.0], dtype=torch.float64))
    assert torch.equal(once, torch.tensor([t, f, f])) and torch.equal(finished, torch.tensor([1, 3, 2]))


def test_with_a_target_each_env_records_only_its_first_episodes_across_blocks():
    # The evaluator's way: env 0 records 1 episode, env 1 records 2; episodes run across the two blocks.
    stats = EpisodeStats(2, "cpu")
    stats.add_steps(torch.ones(2, 2), torch.ones(2, 2, dtype=torch.bool))  # counted before the restart: forgotten
    stats.restart(target=torch.tensor([1, 2]))
    f, t = False, True
    stats.add_steps(torch.tensor([[1.0, 2.0]] * 3), torch.tensor([[f, f], [t, f], [f, f]]),
                    success=torch.tensor([[t, f], [f, f], [f, t]]))
    assert not stats.all_recorded()
    stats.add_steps(torch.tensor([[1.0, 2.0]] * 2), torch.tensor([[t, t], [f, t]]),
                    success=torch.tensor([[f, f], [f, t]]))
    assert stats.all_recorded()
    # Env 0: 2 steps, return 2, success once (not at its end); its second episode is not recorded.
    # Env 1: 4 steps, return 8, success once; then 1 step, return 2, success at its end.
    count, ret, sq, length, at_end, once = stats.take().tolist()
    assert (count, ret, sq, length, at_end, once) == (3.0, 12.0, 4 + 64 + 4, 7.0, 1.0, 3.0)
    assert stats.take().eq(0).all()  # taken: cleared


def test_fold_sums_equals_a_plain_loop_over_episodes():
    gen = torch.Generator().manual_seed(0)
    values = torch.randn(30, 5, 3, generator=gen, dtype=torch.float64)
    done = torch.rand(30, 5, generator=gen) < 0.2
    running = torch.randn(5, 3, generator=gen, dtype=torch.float64)
    sums, carry = fold_sums(values, done, running)
    expected, acc = torch.zeros_like(values), running.clone()
    for t in range(30):
        acc = acc + values[t]
        expected[t] = acc
        acc = torch.where(done[t].unsqueeze(-1), 0.0, acc)
    torch.testing.assert_close(sums, expected, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(carry, acc, rtol=1e-12, atol=1e-12)


def test_reward_terms_are_summed_per_episode_and_survive_a_snapshot():
    stats, restored = EpisodeStats(2, "cpu", reward_terms=("a", "b")), EpisodeStats(2, "cpu", reward_terms=("a", "b"))
    f, t = False, True
    terms = torch.tensor([[[1.0, 0.5], [2.0, 0.0]], [[1.0, 0.5], [2.0, 1.0]]])  # [S=2, N=2, K=2]
    stats.add_steps(terms.sum(-1), torch.tensor([[f, f], [t, f]]), terms=terms)
    restored.load_state_dict(stats.state_dict())
    for s in (stats, restored):  # env 0 ended an episode (a: 2, b: 1); env 1 ends one now (a: 2 + 2 + 3, b: 1 + 1)
        s.add_steps(torch.tensor([[1.0, 4.0]]), torch.tensor([[f, t]]), terms=torch.tensor([[[1.0, 0.0], [3.0, 1.0]]]))
    expected = {"episode/count": 2.0, "episode/return_mean": (3 + 9) / 2, "episode/length_mean": 2.5,
                "episode/rewards/a": (2 + 7) / 2, "episode/rewards/b": (1 + 2) / 2}
    assert stats.pop() == restored.pop() == pytest.approx(expected)
    assert stats.pop() == {"episode/count": 0.0}

import numpy as np
import pytest
import torch

from embodirl.envs.cartpole import CartPole
from embodirl.episode_stats import EpisodeStats


def random_actions(num_envs: int, num_steps: int, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, 2, (num_steps, num_envs), generator=torch.Generator().manual_seed(seed))


def test_episode_stats_match_a_manual_count():
    env, stats = CartPole(num_envs=8, seed=9), EpisodeStats(8, "cpu")
    for act in random_actions(8, 7, seed=3):  # partial episodes before the reset are discarded
        step = env.step(act)
        stats.step(step.reward, step.terminated | step.truncated)
    env.reset()
    stats.discard()
    running = np.zeros(8)
    finished: list[float] = []
    for act in random_actions(8, 300, seed=4):
        step = env.step(act)
        stats.step(step.reward, step.terminated | step.truncated)
        running += step.reward.numpy()
        for i in torch.nonzero(step.terminated | step.truncated).flatten().tolist():
            finished.append(running[i])
            running[i] = 0
    popped = stats.pop()
    assert popped["episode/count"] == len(finished) > 20
    assert popped["episode/return_mean"] == pytest.approx(np.mean(finished))
    assert popped["episode/length_mean"] == pytest.approx(np.mean(finished))  # reward 1 per step
    assert stats.pop() == {"episode/count": 0.0}



def test_hand_counted_returns_lengths_and_success():
    stats = EpisodeStats(3, "cpu")
    done = torch.tensor([False, False, False])
    stats.step(torch.tensor([1.0, 2.0, 0.5]), done, success=done)
    stats.step(torch.tensor([1.0, 2.0, 0.5]), torch.tensor([True, False, True]), success=torch.tensor([True, False, False]))
    stats.step(torch.tensor([3.0, 2.0, 1.0]), torch.tensor([True, True, False]), success=torch.tensor([False, True, False]))
    # episodes: env0 [1,1] ok, env2 [0.5,0.5] no, env0 [3] no, env1 [2,2,2] ok
    assert stats.pop() == pytest.approx({"episode/count": 4.0, "episode/return_mean": (2 + 1 + 3 + 6) / 4,
                                         "episode/length_mean": (2 + 2 + 1 + 3) / 4, "episode/success_rate": 0.5})


def test_state_dict_round_trip_keeps_partial_episodes():
    stats, restored = EpisodeStats(2, "cpu"), EpisodeStats(2, "cpu")
    stats.step(torch.tensor([1.0, 2.0]), torch.tensor([False, True]))
    restored.load_state_dict(stats.state_dict())
    for s in (stats, restored):
        s.step(torch.tensor([1.0, 1.0]), torch.tensor([True, False]))
    assert stats.pop() == restored.pop() == {"episode/count": 2.0, "episode/return_mean": 2.0,
                                             "episode/length_mean": 1.5}

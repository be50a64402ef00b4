"""Real gymnasium vector envs made torch with ``gymnasium.wrappers.vector.NumpyToTorch``, as simulator factories
(``make(num_envs=N)``) for the adapters' tests, and a loop that measures the episodes an adapter reports."""

from __future__ import annotations

import gymnasium as gym
import torch
from gymnasium.wrappers.vector import NumpyToTorch

from embodirl.envs.base import BatchedEnv


def make_torch_cartpole(num_envs: int, autoreset_mode: str = "NextStep") -> NumpyToTorch:
    """``num_envs`` CartPole-v1 copies stepped one after another, in and out as torch tensors."""
    vec = gym.make_vec("CartPole-v1", num_envs, vectorization_mode="sync",
                       vector_kwargs={"autoreset_mode": autoreset_mode})
    return NumpyToTorch(vec)


def finished_episodes(env: BatchedEnv, num_steps: int, seed: int = 0) -> list[tuple[int, float]]:
    """``(length, return)`` of every episode that ended within ``num_steps`` uniformly random steps."""
    generator = torch.Generator().manual_seed(seed)
    env.reset(seed=seed)
    length = torch.zeros(env.num_envs, dtype=torch.int64)
    ret = torch.zeros(env.num_envs, dtype=torch.float64)
    episodes = []
    for _ in range(num_steps):
        action = torch.randint(0, 2, (env.num_envs,), generator=generator)
        result = env.step(action)
        length += 1
        ret += result.reward.double()
        for i in torch.nonzero(result.terminated | result.truncated).flatten().tolist():
            episodes.append((int(length[i]), float(ret[i])))
            length[i], ret[i] = 0, 0.0
    return episodes

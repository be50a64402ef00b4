"""Batched environments: the contract, a pure-torch CartPole, and a gymnasium adapter."""

from embodirl.envs.base import BatchedEnv, EpisodeStats, StepResult
from embodirl.envs.cartpole import CartPole
from embodirl.envs.gym import GymEnv

__all__ = ["BatchedEnv", "CartPole", "EpisodeStats", "GymEnv", "StepResult"]

"""Batched environments: the contract, a pure-torch CartPole, and a gymnasium adapter."""

from embodirl.envs.base import BatchedEnv, EpisodeStats, StepResult

__all__ = ["BatchedEnv", "EpisodeStats", "StepResult"]

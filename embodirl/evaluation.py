"""Deterministic evaluation on separate env instances."""

from __future__ import annotations

import math

import torch

from embodirl.envs.base import BatchedEnv
from embodirl.policies.base import Policy

__all__ = ["evaluate_policy"]

_CHECK_EVERY = 16  # steps between host-side "all episodes done?" checks


@torch.no_grad()
def evaluate_policy(env: BatchedEnv, policy: Policy, num_episodes: int, seed: int) -> dict[str, float]:
    """Run ``num_episodes`` deterministic episodes spread evenly over the env's copies.

    Env ``i`` runs ``num_episodes // E`` episodes (+1 for the first ``num_episodes % E``), so short
    episodes are not over-represented. The env is reset with ``seed`` every call, so successive
    evaluations see the same initial states and differ only through the policy.

    Returns:
        ``eval/return_mean``, ``eval/return_std`` (population), ``eval/length_mean``,
        ``eval/num_episodes``, and ``eval/success_rate`` when the env reports ``success``.
    """
    n = env.num_envs
    device = env.device
    index = torch.arange(n, device=device)
    target = torch.full((n,), num_episodes // n, device=device) + (index < num_episodes % n)
    slots = max(1, math.ceil(num_episodes / n))
    returns = torch.zeros(n, slots, dtype=torch.float64, device=device)
    lengths = torch.zeros(n, slots, dtype=torch.float64, device=device)
    success = torch.zeros(n, slots, dtype=torch.float64, device=device)
    finished = torch.zeros(n, dtype=torch.int64, device=device)
    running_return = torch.zeros(n, dtype=torch.float64, device=device)
    running_length = torch.zeros(n, dtype=torch.float64, device=device)
    reports_success = False

    obs = env.reset(seed=seed)
    for t in range(env.max_episode_steps * slots + 1):
        action, _, _ = policy.act(obs, deterministic=True)
        step = env.step(action)
        running_return += step.reward
        running_length += 1
        done = step.terminated | step.truncated
        record = done & (finished < target)
        slot = finished.clamp(max=slots - 1)
        returns[index, slot] = torch.where(record, running_return, returns[index, slot])
        lengths[index, slot] = torch.where(record, running_length, lengths[index, slot])
        if "success" in step.info:
            reports_success = True
            success[index, slot] = torch.where(record, step.info["success"].double(), success[index, slot])
        finished += record
        running_return *= ~done
        running_length *= ~done
        obs = step.obs
        if t % _CHECK_EVERY == _CHECK_EVERY - 1 and bool((finished >= target).all()):
            break
    env.episode_stats.pop()  # evaluation episodes are not training statistics

    keep = torch.arange(slots, device=device).unsqueeze(0) < target.unsqueeze(1)
    ret = returns[keep]
    metrics = {
        "eval/return_mean": ret.mean().item(),
        "eval/return_std": ret.std(unbiased=False).item(),
        "eval/length_mean": lengths[keep].mean().item(),
        "eval/num_episodes": float(ret.numel()),
    }
    if reports_success:
        metrics["eval/success_rate"] = success[keep].mean().item()
    return metrics

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
    finished = torch.zeros(n, dtype=torch.int64, device=device)
    running = torch.zeros(2, n, dtype=torch.float64, device=device)  # return, length of the current episode
    # Per env sums over its recorded episodes: return, return^2, length, success.
    sums = torch.zeros(4, n, dtype=torch.float64, device=device)
    reports_success = False
    no_success = torch.zeros(n, dtype=torch.float64, device=device)

    obs = env.reset(seed=seed)
    max_steps = env.max_episode_steps * math.ceil(num_episodes / n) + 1
    for t in range(max_steps):
        step = env.step(policy.mode(obs))
        running[0] += step.reward
        running[1] += 1
        done = step.terminated | step.truncated
        record = (done & (finished < target)).double()
        success = step.info.get("success")
        reports_success = reports_success or success is not None
        ret = running[0]
        sums += record * torch.stack((ret, ret * ret, running[1], no_success if success is None else success.double()))
        finished += record.long()
        running *= ~done
        obs = step.obs
        if t % _CHECK_EVERY == _CHECK_EVERY - 1 and bool((finished >= target).all()):
            break
    env.episode_stats.pop()  # evaluation episodes are not training statistics

    total_return, total_sq, total_length, total_success = (sums.sum(dim=1) / num_episodes).tolist()
    metrics = {
        "eval/return_mean": total_return,
        "eval/return_std": math.sqrt(max(total_sq - total_return**2, 0.0)),
        "eval/length_mean": total_length,
        "eval/num_episodes": float(num_episodes),
    }
    if reports_success:
        metrics["eval/success_rate"] = total_success
    return metrics

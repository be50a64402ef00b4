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
        ``eval/num_episodes``, and when the env reports ``success``: ``eval/success_at_end`` (success
        on the episode's last step), ``eval/success_once`` (success at any step) and
        ``eval/success_rate`` (= ``success_at_end``, the stricter one, which decides "solved").
    """
    n = env.num_envs
    device = env.device
    index = torch.arange(n, device=device)
    target = torch.full((n,), num_episodes // n, device=device) + (index < num_episodes % n)
    finished = torch.zeros(n, dtype=torch.int64, device=device)
    running = torch.zeros(2, n, dtype=torch.float64, device=device)  # return, length of the current episode
    ever_success = torch.zeros(n, dtype=torch.bool, device=device)
    # Per env sums over its recorded episodes: return, return^2, length, success at end, success once.
    sums = torch.zeros(5, n, dtype=torch.float64, device=device)
    reports_success = False
    no_success = torch.zeros(n, dtype=torch.bool, device=device)

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
        success = no_success if success is None else success
        ever_success |= success
        ret = running[0]
        sums += record * torch.stack((ret, ret * ret, running[1], success.double(), ever_success.double()))
        finished += record.long()
        running *= ~done
        ever_success &= ~done
        obs = step.obs
        if t % _CHECK_EVERY == _CHECK_EVERY - 1 and bool((finished >= target).all()):
            break
    env.episode_stats.pop()  # evaluation episodes are not training statistics

    total_return, total_sq, total_length, at_end, once = (sums.sum(dim=1) / num_episodes).tolist()
    metrics = {
        "eval/return_mean": total_return,
        "eval/return_std": math.sqrt(max(total_sq - total_return**2, 0.0)),
        "eval/length_mean": total_length,
        "eval/num_episodes": float(num_episodes),
    }
    if reports_success:
        metrics.update({"eval/success_rate": at_end, "eval/success_at_end": at_end, "eval/success_once": once})
    return metrics

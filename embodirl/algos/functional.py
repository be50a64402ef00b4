"""The maths of the algorithms as pure functions: tensors in, tensors out, no module state.

Shapes: ``N`` envs, ``T`` steps, ``B`` a flat batch of transitions.
"""

from __future__ import annotations

import math

import torch
from tensordict import TensorDict
from torch import Tensor

__all__ = [
    "approx_kl",
    "categorical_projection",
    "clip_fraction",
    "clipped_surrogate_loss",
    "complete_episode_mask",
    "compute_gae",
    "compute_step_group_advantages",
    "compute_step_returns_and_mask",
    "episode_steps",
    "explained_variance",
    "gae",
    "group_has_spread",
    "k3_kl",
    "minibatch_indices",
    "normalize",
    "pad_minibatches",
    "policy_gradient_loss",
    "value_loss",
    "weighted_mean",
]


def weighted_mean(x: Tensor, weight: Tensor | None = None) -> Tensor:
    """``mean(x)``, or ``sum(w x) / max(sum(w), 1)`` with per-sample weights (0 for padding; an all-zero
    weight gives 0, not NaN)."""
    if weight is None:
        return x.mean()
    return (x * weight).sum() / weight.sum().clamp_min(1.0)


def minibatch_indices(indices: Tensor, minibatch_size: int, generator: torch.Generator | None = None,
                      shuffle: bool = True) -> tuple[Tensor, Tensor]:
    """A partition of ``indices`` into ``M = ceil(V / B)`` minibatches of exactly ``B = minibatch_size`` samples.

    Every minibatch has the same shape (a compiled or graph-captured step never sees a new one). Shuffled
    (the default), the ``M * B - V`` padding slots repeat index ``indices[0]`` with weight 0 and are spread so
    that minibatch ``m`` holds ``V // M`` or ``V // M + 1`` real samples (like ``tensor_split``): slot ``(m, j)``
    holds ``perm[j M + m]``. With ``shuffle=False`` minibatch ``m`` is the contiguous run
    ``indices[m B : (m + 1) B]`` in order, the padding at the end of the last one.

    Args:
        indices: ``[V]`` the sample indices to partition (``V >= 0``).
        minibatch_size: ``B``, samples per minibatch.
        generator: Random generator for the permutation (None: the default one).
        shuffle: Draw a random permutation first (False: keep the order of ``indices``).

    Returns:
        ``(idx [M, B] int64, weight [M, B] float32)``; ``M >= 1`` (all padding when ``V = 0``).
    """
    count = indices.numel()
    num = max(1, -(-count // minibatch_size))
    perm = indices[torch.randperm(count, device=indices.device, generator=generator)] if shuffle else indices
    flat = torch.zeros(num * minibatch_size, dtype=torch.int64, device=indices.device)
    flat[:count] = perm
    if count:
        flat[count:] = indices[0]
    real = torch.arange(num * minibatch_size, device=indices.device) < count
    if not shuffle:
        return flat.view(num, minibatch_size), real.view(num, minibatch_size).float()
    return flat.view(minibatch_size, num).T, real.view(minibatch_size, num).T.float()


def pad_minibatches(idx: Tensor, weight: Tensor, rows: int) -> tuple[Tensor, Tensor]:
    """Append all-padding minibatches (weight 0, which add no gradient) up to ``rows``.

    Args:
        idx: ``[M, B]`` minibatch indices (from :func:`minibatch_indices`).
        weight: ``[M, B]`` their weights.
        rows: The number of minibatches wanted; nothing changes when ``M >= rows``.

    Returns:
        ``(idx [max(M, rows), B], weight [max(M, rows), B])``.
    """
    missing = rows - idx.shape[0]
    if missing <= 0:
        return idx, weight
    padding = weight.new_zeros(missing, weight.shape[1])
    return torch.cat([idx, idx[:1].expand(missing, -1)]), torch.cat([weight, padding])


def gae(
    reward: Tensor,
    value: Tensor,
    done: Tensor,
    final_value: Tensor,
    gamma: float,
    gae_lambda: float,
) -> tuple[Tensor, Tensor]:
    """Generalized Advantage Estimation that bootstraps time-limit truncations.

    With ``V'_t = final_value_t`` if transition t ended its episode, else ``value_{t+1}``:
    ``delta_t = r_t + gamma * V'_t - V_t`` and ``A_t = delta_t + gamma * lambda * (1 - done_t) * A_{t+1}``,
    ``R_t = A_t + V_t``. A terminated transition has ``final_value = 0`` (no future); a truncated one
    carries V(true final observation), so cutting an episode at the time limit is not mistaken for
    the task ending.

    Args:
        reward: ``[N, T]`` rewards.
        value: ``[N, T+1]`` values; ``value[:, T]`` bootstraps the last step.
        done: ``[N, T]`` bool, ``terminated | truncated``.
        final_value: ``[N, T]`` V(true final obs) where truncated and not terminated, else 0.
        gamma: Discount factor.
        gae_lambda: GAE lambda.

    Returns:
        ``(advantages, returns)``, both ``[N, T]`` float32.
    """
    num_steps = reward.shape[1]
    not_done = (~done).to(reward.dtype)
    next_value = torch.where(done, final_value, value[:, 1:])
    delta = reward + gamma * next_value - value[:, :-1]
    decay = gamma * gae_lambda * not_done
    advantages = torch.empty_like(reward)
    last = torch.zeros_like(reward[:, 0])
    for t in reversed(range(num_steps)):
        last = delta[:, t] + decay[:, t] * last
        advantages[:, t] = last
    return advantages, advantages + value[:, :-1]


def compute_gae(rollout: TensorDict, gamma: float, gae_lambda: float) -> tuple[Tensor, Tensor]:
    """GAE over a ``[N, T+1]`` rollout (see :mod:`embodirl.collect.rollout`); slot T's padding is ignored.

    Args:
        rollout: Rollout with ``reward``, ``value``, ``done``, ``final_value``.
        gamma: Discount factor.
        gae_lambda: GAE lambda.

    Returns:
        ``(advantages, returns)``, both ``[N, T]``.
    """
    return gae(
        rollout["reward"][:, :-1],
        rollout["value"],
        rollout["done"][:, :-1],
        rollout["final_value"][:, :-1],
        gamma,
        gae_lambda,
    )


def normalize(x: Tensor, eps: float = 1e-8) -> Tensor:
    """``(x - mean) / (std + eps)`` over all elements."""
    return (x - x.mean()) / (x.std() + eps)


def clipped_surrogate_loss(
    log_prob: Tensor, old_log_prob: Tensor, advantage: Tensor, clip_coef: float, dual_clip_coef: float | None = None
) -> tuple[Tensor, Tensor]:
    """PPO's clipped surrogate, per sample (negated, so lower is better), optionally dual-clipped.

    ``L = min(rho * A, clip(rho, 1 - eps, 1 + eps) * A)`` with ``rho = exp(log_prob - old_log_prob)``; with
    ``dual_clip_coef`` c (> 1, Ye et al. 2020) the objective of a negative advantage is also bounded below,
    ``max(L, c * A)`` where ``A < 0``, so a huge ratio on a bad action cannot dominate the update.

    Returns:
        ``(loss, ratio)`` = ``(-L, rho)``, both shaped like ``advantage``; reduce ``loss`` with a (masked) mean.
    """
    ratio = torch.exp(log_prob - old_log_prob)
    unclipped = ratio * advantage
    clipped = torch.clamp(ratio, 1.0 - clip_coef, 1.0 + clip_coef) * advantage
    objective = torch.min(unclipped, clipped)
    if dual_clip_coef is not None:
        objective = torch.where(advantage < 0, torch.max(objective, dual_clip_coef * advantage), objective)
    return -objective, ratio


def policy_gradient_loss(log_prob: Tensor, advantage: Tensor) -> Tensor:
    """The vanilla policy-gradient loss per sample, ``-A * log_prob`` (A2C's, REINFORCE's with a baseline):
    its gradient is ``-A * grad log pi(a|s)``; reduce it with a (masked) mean."""
    return -advantage * log_prob


def value_loss(value: Tensor, old_value: Tensor, returns: Tensor, clip_coef: float | None,
               weight: Tensor | None = None) -> Tensor:
    """Mean squared value error, optionally clipped around the collecting value (PPO2 style).

    ``mean((V - R)^2)``; with ``clip_coef`` c: ``mean(max((V - R)^2, (V_old + clip(V - V_old, -c, c) - R)^2))``;
    means are :func:`weighted_mean` with ``weight``.
    """
    unclipped = (value - returns) ** 2
    if clip_coef is None:
        return weighted_mean(unclipped, weight)
    clipped = old_value + torch.clamp(value - old_value, -clip_coef, clip_coef)
    return weighted_mean(torch.max(unclipped, (clipped - returns) ** 2), weight)


def approx_kl(log_prob: Tensor, old_log_prob: Tensor, weight: Tensor | None = None) -> Tensor:
    """k3 estimator of KL(old || new): ``mean((rho - 1) - log rho)``, always >= 0."""
    return weighted_mean(k3_kl(old_log_prob, log_prob), weight)


def clip_fraction(ratio: Tensor, clip_coef: float, weight: Tensor | None = None) -> Tensor:
    """Share of samples whose ratio left ``[1 - clip_coef, 1 + clip_coef]``."""
    return weighted_mean(((ratio - 1.0).abs() > clip_coef).float(), weight)


def explained_variance(predicted: Tensor, target: Tensor) -> Tensor:
    """``1 - Var(target - predicted) / Var(target)``; NaN when the target has no variance."""
    var_target = target.var()
    ev = 1.0 - (target - predicted).var() / var_target
    return torch.where(var_target > 0, ev, torch.full_like(ev, float("nan")))


def compute_step_returns_and_mask(
    rewards: Tensor, dones: Tensor, gamma: float, first_episode_only: bool
) -> tuple[Tensor, Tensor]:
    """GRPO's step-wise discounted returns-to-go and valid-step mask.

    ``G_{T-1} = r_{T-1}``, ``G_t = r_t + gamma * G_{t+1} * (1 - d_t)``: the return restarts at every
    episode end and is never bootstrapped. The mask marks an env as alive *before* step t, so the step
    that ends the first episode still counts: ``m_0 = 1``, ``m_t = m_{t-1} * (1 - d_{t-1})`` when
    ``first_episode_only``, else all ones.

    Args:
        rewards: ``[N, T]`` rewards.
        dones: ``[N, T]`` bool episode ends (``terminated | truncated``).
        gamma: Discount factor.
        first_episode_only: Keep only each env's first episode in the rollout.

    Returns:
        ``(step_returns [N, T], mask [N, T])``, the mask as floats in {0, 1}.
    """
    num_steps = rewards.shape[1]
    not_done = (~dones).to(rewards.dtype)
    returns = torch.empty_like(rewards)
    running = torch.zeros_like(rewards[:, 0])
    for t in reversed(range(num_steps)):
        running = rewards[:, t] + gamma * running * not_done[:, t]
        returns[:, t] = running
    if not first_episode_only:
        return returns, torch.ones_like(rewards)
    alive_after = torch.cumprod(not_done, dim=1)
    mask = torch.cat([torch.ones_like(rewards[:, :1]), alive_after[:, :-1]], dim=1)
    return returns, mask


def compute_step_group_advantages(step_returns: Tensor, mask: Tensor, group_size: int, eps: float,
                                  steps: Tensor | None = None) -> Tensor:
    """Per-step group-relative advantages over the alive members of each group.

    Groups are consecutive envs ``{0..g-1}, {g..2g-1}, ...``. For each group and each step t, over the
    members with ``m = 1``: ``n = max(sum m, 1)``, ``mu = sum(m G) / n``,
    ``sigma = sqrt(sum(m (G - mu)^2) / n)`` (population std), ``A = m (G - mu) / (sigma + eps)``.
    A lone survivor and a group where everyone ties get 0; dead steps get 0.

    With ``steps`` (each transition's steps since its episode started, :func:`episode_steps`), a group's samples
    are its episodes, several per member, compared at equal steps since their start rather than at equal t: the
    same statistics over every alive episode of the group at that step (``steps = t`` gives the above).

    Args:
        step_returns: ``[N, T]`` from :func:`compute_step_returns_and_mask`.
        mask: ``[N, T]`` valid-step mask.
        group_size: Members per group; must divide N.
        eps: Added to the std.
        steps: ``[N, T]`` int64 steps since each transition's episode started; None = ``t``.

    Returns:
        ``[N, T]`` advantages.
    """
    n, t = step_returns.shape
    if steps is None:
        g = step_returns.view(n // group_size, group_size, t)
        m = mask.view(n // group_size, group_size, t)
        count = m.sum(dim=1, keepdim=True).clamp_min(1.0)
        mean = (m * g).sum(dim=1, keepdim=True) / count
        std = torch.sqrt((m * (g - mean) ** 2).sum(dim=1, keepdim=True) / count)
        return (m * (g - mean) / (std + eps)).view(n, t)
    # One bin per (group, steps since the start): sums over the bin's alive transitions, read back per transition.
    bins = _group_step_bins(steps, group_size)

    def bin_sum(x: Tensor) -> Tensor:
        return torch.zeros(n // group_size * t, dtype=x.dtype, device=x.device).index_add_(0, bins, x.reshape(-1))

    m = mask.reshape(-1)
    count = bin_sum(mask).clamp_min(1.0)
    mean = (bin_sum(mask * step_returns) / count)[bins]
    centred = step_returns.reshape(-1) - mean
    std = torch.sqrt(bin_sum(m * centred**2) / count)[bins]
    return (m * centred / (std + eps)).view(n, t)


def _group_step_bins(steps: Tensor, group_size: int) -> Tensor:
    """``[N*T]`` flat bin of each transition: ``group * T + steps`` (one bin per group and step since the start)."""
    n, t = steps.shape
    group = torch.arange(n, device=steps.device).div(group_size, rounding_mode="floor").unsqueeze(1)
    return (group * t + steps).reshape(-1)


def episode_steps(dones: Tensor) -> Tensor:
    """``[N, T]`` int64 steps since each transition's episode started: 0 at t = 0 and after every done.

    Args:
        dones: ``[N, T]`` bool episode ends.
    """
    n, t = dones.shape
    index = torch.arange(t, device=dones.device).expand(n, t)
    ended = torch.where(dones, index, torch.full_like(index, -1))
    # the last end strictly before t (-1 if none): the episode of step t started right after it
    previous = torch.cat([torch.full_like(index[:, :1], -1), ended[:, :-1].cummax(dim=1).values], dim=1)
    return index - previous - 1


def complete_episode_mask(dones: Tensor) -> Tensor:
    """``[N, T]`` bool: True where the transition's episode ends within the rollout (a done at or after t).

    Args:
        dones: ``[N, T]`` bool episode ends.
    """
    return dones.flip(1).cummax(dim=1).values.flip(1)


def group_has_spread(step_returns: Tensor, mask: Tensor, group_size: int, steps: Tensor | None = None) -> Tensor:
    """Whether each env's group teaches anything: at some step, two of its alive samples' returns differ.

    A group without spread (every member succeeds, or every member fails, the same way) gets zero
    advantages everywhere from :func:`compute_step_group_advantages`; DAPO's dynamic sampling drops it.
    Exact comparisons (max - min of the alive samples' returns), so rounding in the mean never keeps one.

    Args:
        step_returns: ``[N, T]`` from :func:`compute_step_returns_and_mask`.
        mask: ``[N, T]`` valid-step mask.
        group_size: Members per group; must divide N.
        steps: ``[N, T]`` steps since each episode's start, as for :func:`compute_step_group_advantages`;
            None = ``t``.

    Returns:
        ``[N]`` bool, the same for every member of a group.
    """
    n, t = step_returns.shape
    if steps is None:
        steps = torch.arange(t, device=step_returns.device).expand(n, t)
    bins = _group_step_bins(steps, group_size)
    alive = mask.reshape(-1) > 0
    returns = step_returns.reshape(-1)
    size = n // group_size * t
    high = returns.new_full((size,), -math.inf).scatter_reduce(
        0, bins, torch.where(alive, returns, -math.inf), "amax")
    low = returns.new_full((size,), math.inf).scatter_reduce(0, bins, torch.where(alive, returns, math.inf), "amin")
    count = torch.zeros(size, dtype=torch.int64, device=steps.device).index_add_(0, bins, alive.long())
    differs = ((count >= 2) & (high > low)).view(n // group_size, t)
    return differs.any(dim=1).repeat_interleave(group_size)


def k3_kl(log_prob: Tensor, ref_log_prob: Tensor) -> Tensor:
    """Per-sample k3 estimator of KL(current || reference) for actions drawn from the current policy:
    ``exp(ref - cur) - (ref - cur) - 1`` (unbiased, always >= 0)."""
    diff = ref_log_prob - log_prob
    return torch.expm1(diff) - diff


def categorical_projection(probs: Tensor, reward: Tensor, discount: Tensor, v_min: float, v_max: float) -> Tensor:
    """C51's projection (Bellemare et al. 2017, algorithm 1): the distribution of ``reward + discount * Z`` on the
    fixed support of ``Z``, ``K`` atoms evenly spaced over ``[v_min, v_max]``.

    Each atom ``z_j`` moves to ``clamp(r + d z_j, v_min, v_max)``, which falls between two atoms of the support; its
    probability is split between them in proportion to the closeness (all of it to one atom where it lands on it).

    Args:
        probs: ``[B, K]`` probabilities of the next state's return on the support.
        reward: ``[B]`` rewards (n-step sums).
        discount: ``[B]`` discounts of the bootstrap, 0 where the episode terminated.
        v_min: Lowest atom.
        v_max: Highest atom.

    Returns:
        ``[B, K]`` probabilities of the target on the same support (each row sums to 1).
    """
    num_atoms = probs.shape[-1]
    support = torch.linspace(v_min, v_max, num_atoms, device=probs.device, dtype=probs.dtype)
    delta = (v_max - v_min) / (num_atoms - 1)
    moved = (reward[:, None] + discount[:, None] * support).clamp(v_min, v_max)
    b = (moved - v_min) / delta  # fractional index of each moved atom
    lower, upper = b.floor().long(), b.ceil().long()
    # Where b is a whole number, lower == upper: its whole probability goes to that atom (fixed shapes, no branch).
    lower_weight = (upper.to(b.dtype) - b) + (lower == upper).to(b.dtype)
    upper_weight = b - lower.to(b.dtype)
    target = torch.zeros_like(probs)
    target.scatter_add_(-1, lower, probs * lower_weight)
    target.scatter_add_(-1, upper.clamp_max(num_atoms - 1), probs * upper_weight)
    return target

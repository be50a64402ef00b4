"""Return-based reward scaling (``algo.normalize_rewards``), as SB3's ``VecNormalize(norm_reward=True)``.

Each env keeps a running discounted return ``R_t = gamma * R_{t-1} + r_t`` (reset after a step that
ends an episode); the rewards that GAE sees are divided by the running standard deviation of these
returns, ``r_t / sqrt(Var[R] + eps)``, clipped to ``[-clip, clip]``. The rewards are not centred
(that would change which behaviour is optimal where episodes can end), only rescaled, so returns
and values stay of order one whatever the env's reward scale: the value loss no longer dominates the
shared gradient-norm clip, which otherwise starves the policy on envs with returns in the hundreds.

Difference from SB3: statistics are updated once per rollout with all its returns (Chan's parallel
merge, the same statistics as SB3's per-step updates) and every reward of the rollout is scaled with
the updated variance, where SB3 scales each step with the variance up to that step.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from embodirl.policies.normalizer import RunningNormalizer

__all__ = ["RewardScaler", "discounted_return_trace", "scale_rewards"]


def discounted_return_trace(reward: Tensor, done: Tensor, gamma: float, initial: Tensor) -> tuple[Tensor, Tensor]:
    """Running discounted returns ``R_t = gamma * R_{t-1} + r_t``, reset to 0 after each done step.

    Args:
        reward: ``[N, T]`` rewards.
        done: ``[N, T]`` bool, the step ended its episode (``terminated | truncated``).
        gamma: Discount factor.
        initial: ``[N]`` the running return carried in from the previous rollout (0 after a done).

    Returns:
        ``(trace [N, T], carry [N])``: ``trace[:, t] = R_t``, and the running return to carry into the
        next rollout (0 where the last step ended an episode).
    """
    trace = torch.empty_like(reward)
    running = initial.to(reward.dtype)
    for t in range(reward.shape[1]):
        running = gamma * running + reward[:, t]
        trace[:, t] = running
        running = running * (~done[:, t]).to(reward.dtype)
    return trace, running


def scale_rewards(reward: Tensor, return_var: Tensor, eps: float = 1e-8, clip: float = 10.0) -> Tensor:
    """``clamp(reward / sqrt(return_var + eps), -clip, clip)``, elementwise; ``return_var`` a scalar tensor."""
    return (reward * torch.rsqrt(return_var + eps)).clamp(-clip, clip)


class RewardScaler:
    """Scales each rollout's rewards by the running std of the discounted return (see the module docstring).

    The statistics are pooled over ranks (a :class:`RunningNormalizer`), so every rank scales alike;
    the running returns are per env. Both are in :meth:`state_dict` and checkpointed with the algorithm.

    Args:
        gamma: Discount of the running return (the algorithm's ``gamma``).
        device: Device of the rollouts.
        eps: Added to the variance.
        clip: Clamp of the scaled rewards.
    """

    def __init__(self, gamma: float, device: torch.device | str, eps: float = 1e-8, clip: float = 10.0) -> None:
        self.gamma = gamma
        self.stats = RunningNormalizer((), eps=eps, clip=clip).to(device)
        self.running_return: Tensor | None = None

    @torch.no_grad()
    def __call__(self, reward: Tensor, done: Tensor) -> Tensor:
        """Update the statistics with this rollout's returns and return its scaled rewards.

        Args:
            reward: ``[N, T]`` rewards (not modified).
            done: ``[N, T]`` bool episode ends.

        Returns:
            ``[N, T]`` scaled rewards.
        """
        if self.running_return is None or self.running_return.shape != reward.shape[:1]:
            self.running_return = torch.zeros_like(reward[:, 0])  # first rollout, or num_envs changed
        trace, self.running_return = discounted_return_trace(reward, done, self.gamma, self.running_return)
        self.stats.update(trace)
        return scale_rewards(reward, self.stats.get_buffer("var"), self.stats.eps, self.stats.clip)

    @property
    def return_std(self) -> float:
        """The current running std of the discounted return (host sync)."""
        return float(self.stats.get_buffer("var").sqrt())

    def state_dict(self) -> dict[str, Any]:
        running = self.running_return if self.running_return is not None else torch.zeros(0)
        return {"stats": self.stats.state_dict(), "running_return": running.clone()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.stats.load_state_dict(state["stats"])
        running = state["running_return"]
        self.running_return = running.to(self.stats.mean.device) if running.numel() else None

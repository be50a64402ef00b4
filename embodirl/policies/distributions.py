"""Action distributions as small modules with closed-form log-prob and entropy.

Chosen from the env's action space: :class:`Categorical` for ``Discrete``, :class:`DiagGaussian`
(state-independent learnable ``log_std``, clamped) for ``Box``. Both avoid ``torch.distributions``
(its per-call validation costs more than the maths for small batches) and sample without host syncs.
"""

from __future__ import annotations

import math

import gymnasium as gym
import torch
from torch import Tensor, nn

from embodirl.errors import ConfigError, check

__all__ = ["ActionDistribution", "Categorical", "DiagGaussian", "make_distribution"]

_LOG_2PI = math.log(2.0 * math.pi)


class ActionDistribution(nn.Module):
    """Maps the actor's output ``params`` ``[B, num_params]`` to actions, log-probs and entropies."""

    num_params: int
    action_shape: tuple[int, ...]
    action_dtype: torch.dtype

    def sample(self, params: Tensor) -> tuple[Tensor, Tensor]:
        """Draw actions; return ``(action, log_prob [B])``."""
        raise NotImplementedError

    def mode(self, params: Tensor) -> Tensor:
        """The most likely action (deterministic evaluation)."""
        raise NotImplementedError

    def log_prob(self, params: Tensor, action: Tensor) -> Tensor:
        """``[B]`` log-probabilities of ``action``."""
        raise NotImplementedError

    def entropy(self, params: Tensor) -> Tensor:
        """``[B]`` entropies."""
        raise NotImplementedError

    def log_prob_entropy(self, params: Tensor, action: Tensor) -> tuple[Tensor, Tensor]:
        """``(log_prob [B], entropy [B])`` together (shares work where the family allows)."""
        return self.log_prob(params, action), self.entropy(params)


class Categorical(ActionDistribution):
    """Categorical over ``num_actions`` logits; actions are int64 ``[B]``."""

    def __init__(self, num_actions: int) -> None:
        super().__init__()
        self.num_params = num_actions
        self.action_shape = ()
        self.action_dtype = torch.int64

    def sample(self, params: Tensor) -> tuple[Tensor, Tensor]:
        # Gumbel-max: argmax(logits + Gumbel noise) is an exact categorical sample.
        gumbel = -torch.log(-torch.log(torch.rand_like(params).clamp_min(1e-20)))
        action = torch.argmax(params + gumbel, dim=-1)
        return action, self.log_prob(params, action)

    def mode(self, params: Tensor) -> Tensor:
        return torch.argmax(params, dim=-1)

    def log_prob(self, params: Tensor, action: Tensor) -> Tensor:
        log_p = torch.log_softmax(params, dim=-1)
        return log_p.gather(-1, action.long().unsqueeze(-1)).squeeze(-1)

    def entropy(self, params: Tensor) -> Tensor:
        log_p = torch.log_softmax(params, dim=-1)
        return -(log_p.exp() * log_p).sum(-1)

    def log_prob_entropy(self, params: Tensor, action: Tensor) -> tuple[Tensor, Tensor]:
        log_p = torch.log_softmax(params, dim=-1)
        return log_p.gather(-1, action.long().unsqueeze(-1)).squeeze(-1), -(log_p.exp() * log_p).sum(-1)


class DiagGaussian(ActionDistribution):
    """Diagonal Gaussian with mean from the actor and a learnable, clamped ``log_std`` per dimension.

    Args:
        action_dim: Number of action dimensions.
        init_log_std: Initial ``log_std``.
        log_std_min: Lower clamp of ``log_std``.
        log_std_max: Upper clamp of ``log_std``.
    """

    def __init__(self, action_dim: int, init_log_std: float, log_std_min: float, log_std_max: float) -> None:
        super().__init__()
        check(log_std_min < log_std_max, "log_std_min", log_std_min, f"a float below log_std_max={log_std_max}")
        self.num_params = action_dim
        self.action_shape = (action_dim,)
        self.action_dtype = torch.float32
        self.log_std = nn.Parameter(torch.full((action_dim,), float(init_log_std)))
        self.log_std_min = log_std_min
        self.log_std_max = log_std_max

    def _log_std(self) -> Tensor:
        return self.log_std.clamp(self.log_std_min, self.log_std_max)

    def sample(self, params: Tensor) -> tuple[Tensor, Tensor]:
        noise = torch.randn_like(params)
        log_std = self._log_std()
        action = params + noise * log_std.exp()
        log_prob = (-0.5 * noise.pow(2) - log_std - 0.5 * _LOG_2PI).sum(-1)
        return action, log_prob

    def mode(self, params: Tensor) -> Tensor:
        return params

    def log_prob(self, params: Tensor, action: Tensor) -> Tensor:
        log_std = self._log_std()
        z = (action - params) * torch.exp(-log_std)
        return (-0.5 * z.pow(2) - log_std - 0.5 * _LOG_2PI).sum(-1)

    def entropy(self, params: Tensor) -> Tensor:
        per_dim = 0.5 + 0.5 * _LOG_2PI + self._log_std()
        return per_dim.sum().expand(params.shape[:-1])


def make_distribution(
    action_space: gym.spaces.Space, init_log_std: float, log_std_min: float, log_std_max: float
) -> ActionDistribution:
    """The distribution that fits ``action_space`` (``Discrete`` or 1-D ``Box``)."""
    check(log_std_min < log_std_max, "log_std_min", log_std_min, f"a float below log_std_max={log_std_max}")
    if isinstance(action_space, gym.spaces.Discrete):
        return Categorical(int(action_space.n))
    if isinstance(action_space, gym.spaces.Box) and len(action_space.shape) == 1:
        return DiagGaussian(int(action_space.shape[0]), init_log_std, log_std_min, log_std_max)
    raise ConfigError(
        "action_space", action_space, "gymnasium Discrete or 1-D Box",
        "use an env whose action space is Discrete or a 1-D Box (flatten other spaces in the env)",
    )

"""Action distributions as small modules with closed-form log-prob and entropy.

Chosen from the env's action space by default: :class:`Categorical` for ``Discrete``, :class:`DiagGaussian`
(state-independent learnable ``log_std``, clamped) for ``Box``. Both avoid ``torch.distributions``
(its per-call validation costs more than the maths for small batches) and sample without host syncs.

``policy.distribution`` overrides the choice for ``Box`` actions with a node whose class is built with
``(cfg, action_space=...)`` (presets in ``conf/policy/distribution/``): :class:`StateDependentGaussian` (the actor
outputs the ``log_std`` too), :class:`Beta` (bounded actions, Chou et al. 2017) or :class:`TanhGaussian` (SAC's
squashed Gaussian, whose :meth:`~TanhGaussian.sample` is reparameterised: its actions carry gradients) or
:class:`DeterministicTanh` (TD3's deterministic actor, explored with Gaussian noise of a std per env).
"""

from __future__ import annotations

import math
import typing

import gymnasium as gym
import torch
from torch import Tensor, nn
from torch.nn import functional as F

from embodirl.config.policies import (
    BetaConfig,
    DeterministicTanhConfig,
    StateDependentGaussianConfig,
    TanhGaussianConfig,
)
from embodirl.errors import ConfigError, check

__all__ = ["ActionDistribution", "Beta", "Categorical", "Chunked", "DeterministicTanh", "DiagGaussian",
           "StateDependentGaussian", "TanhGaussian", "chunk_steps", "make_distribution"]

_LOG_2PI = math.log(2.0 * math.pi)


class ActionDistribution(nn.Module):
    """Maps the actor's output ``params`` ``[B, num_params]`` to actions, log-probs and entropies.

    ``action_chunk`` (H) actions come out of one sample and the collector executes the first ``chunk_execute`` (k) of
    them before the policy acts again: 1 and 1 but for :class:`Chunked`.
    """

    num_params: int
    action_shape: tuple[int, ...]
    action_dtype: torch.dtype
    action_chunk: int = 1
    chunk_execute: int = 1

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


def _box_dim(action_space: gym.spaces.Space, name: str) -> int:
    if not (isinstance(action_space, gym.spaces.Box) and len(action_space.shape) == 1):
        raise ConfigError("distribution", name, "a distribution for the env's action space (this one needs a 1-D "
                          f"Box; the env has {action_space})", "drop the distribution override (the default "
                          "follows the action space)")
    return int(action_space.shape[0])


class StateDependentGaussian(ActionDistribution):
    """Diagonal Gaussian whose mean and ``log_std`` both come from the actor (``params = [mean, raw]``,
    ``[B, 2 D]``): ``log_std = clamp(raw + init_log_std, log_std_min, log_std_max)``.

    Args:
        cfg: ``init_log_std`` (the offset of ``log_std``: the actor's output starts near 0, so this is the initial
            value), ``log_std_min`` and ``log_std_max`` (its clamp).
        action_space: A 1-D ``Box``.
    """

    def __init__(self, cfg: StateDependentGaussianConfig, *, action_space: gym.Space) -> None:
        super().__init__()
        dim = _box_dim(action_space, type(self).__name__)
        self.num_params = 2 * dim
        self.action_shape = (dim,)
        self.action_dtype = torch.float32
        self.init_log_std, self.log_std_min, self.log_std_max = cfg.init_log_std, cfg.log_std_min, cfg.log_std_max

    def _split(self, params: Tensor) -> tuple[Tensor, Tensor]:
        mean, raw = params.chunk(2, dim=-1)
        return mean, (raw + self.init_log_std).clamp(self.log_std_min, self.log_std_max)

    def sample(self, params: Tensor) -> tuple[Tensor, Tensor]:
        mean, log_std = self._split(params)
        noise = torch.randn_like(mean)
        return mean + noise * log_std.exp(), (-0.5 * noise.pow(2) - log_std - 0.5 * _LOG_2PI).sum(-1)

    def mode(self, params: Tensor) -> Tensor:
        return self._split(params)[0]

    def log_prob(self, params: Tensor, action: Tensor) -> Tensor:
        mean, log_std = self._split(params)
        z = (action - mean) * torch.exp(-log_std)
        return (-0.5 * z.pow(2) - log_std - 0.5 * _LOG_2PI).sum(-1)

    def entropy(self, params: Tensor) -> Tensor:
        return (0.5 + 0.5 * _LOG_2PI + self._split(params)[1]).sum(-1)


class Beta(ActionDistribution):
    """Beta distribution per action dimension, scaled to the ``Box``'s ``[low, high]`` (Chou et al. 2017): actions
    never leave the bounds, so none are clipped. ``params = [a, b]`` (``[B, 2 D]``) give ``alpha = 1 + softplus(a)``,
    ``beta = 1 + softplus(b)`` (unimodal). Log-probs and entropies include the ``log(high - low)`` of the scaling;
    the deterministic action is the mean. Sampling uses ``torch.distributions.Beta`` (no host sync).

    Args:
        cfg: The distribution's keys (none).
        action_space: A 1-D ``Box`` with finite bounds.
    """

    _EPS = 1e-6  # keeps x inside (0, 1) where log-probs are finite
    low: Tensor
    scale: Tensor

    def __init__(self, cfg: BetaConfig, *, action_space: gym.Space) -> None:
        super().__init__()
        dim = _box_dim(action_space, type(self).__name__)
        box = typing.cast(gym.spaces.Box, action_space)
        low, high = (torch.as_tensor(b, dtype=torch.float32) for b in (box.low, box.high))
        if not bool(torch.isfinite(low).all() and torch.isfinite(high).all()):
            raise ConfigError("distribution", "Beta", f"a Box with finite bounds (the env's is {action_space})",
                              "drop the distribution override (the default is a Gaussian)")
        self.num_params = 2 * dim
        self.action_shape = (dim,)
        self.action_dtype = torch.float32
        self.register_buffer("low", low, persistent=False)
        self.register_buffer("scale", high - low, persistent=False)

    def _dist(self, params: Tensor) -> torch.distributions.Beta:
        a, b = params.chunk(2, dim=-1)
        return torch.distributions.Beta(1.0 + F.softplus(a), 1.0 + F.softplus(b), validate_args=False)

    def _log_prob(self, dist: torch.distributions.Beta, action: Tensor) -> Tensor:
        x = ((action - self.low) / self.scale).clamp(self._EPS, 1.0 - self._EPS)
        return (dist.log_prob(x) - self.scale.log()).sum(-1)

    def sample(self, params: Tensor) -> tuple[Tensor, Tensor]:
        dist = self._dist(params)
        x = dist.sample().clamp(self._EPS, 1.0 - self._EPS)
        action = self.low + x * self.scale
        return action, self._log_prob(dist, action)

    def mode(self, params: Tensor) -> Tensor:
        return self.low + self._dist(params).mean * self.scale

    def log_prob(self, params: Tensor, action: Tensor) -> Tensor:
        return self._log_prob(self._dist(params), action)

    def entropy(self, params: Tensor) -> Tensor:
        return (self._dist(params).entropy() + self.scale.log()).sum(-1)

    def log_prob_entropy(self, params: Tensor, action: Tensor) -> tuple[Tensor, Tensor]:
        dist = self._dist(params)
        return self._log_prob(dist, action), (dist.entropy() + self.scale.log()).sum(-1)


def _bounds(action_space: gym.Space, name: str, what: str) -> tuple[Tensor, Tensor]:
    """The center and half-range of a 1-D ``Box`` with finite bounds (refused otherwise)."""
    if not (isinstance(action_space, gym.spaces.Box) and len(action_space.shape) == 1):
        raise ConfigError("distribution", name, f"a distribution for the env's action space ({what} need "
                          f"a 1-D Box; the env has {action_space})",
                          "use an env with continuous actions, or an algorithm for discrete ones (algo=ppo)")
    low, high = (torch.as_tensor(b, dtype=torch.float32) for b in (action_space.low, action_space.high))
    if not bool(torch.isfinite(low).all() and torch.isfinite(high).all()):
        raise ConfigError("distribution", name, f"a Box with finite bounds (the env's is {action_space})",
                          "use an env whose actions are bounded, or another algo (algo=ppo)")
    return (high + low) / 2, (high - low) / 2


class TanhGaussian(StateDependentGaussian):
    """SAC's actor distribution (Haarnoja et al. 2018, appendix C): ``u ~ N(mean, std)`` from the actor's
    ``params = [mean, raw]`` (``[B, 2 D]``, ``log_std`` as in :class:`StateDependentGaussian`), squashed into the
    ``Box``'s bounds, ``action = center + half_range * tanh(u)``. Sampling is reparameterised (``mean + std * noise``),
    so a loss on the sampled actions reaches the actor; the log-prob includes the change of variables,
    ``log N(u) - sum log(half_range (1 - tanh(u)^2))``. The deterministic action is ``center + half_range *
    tanh(mean)``; :meth:`entropy` is the Gaussian's before squashing (the squashed one has no closed form).

    Args:
        cfg: ``init_log_std``, ``log_std_min``, ``log_std_max`` (as :class:`StateDependentGaussian`'s).
        action_space: A 1-D ``Box`` with finite bounds.
    """

    _EPS = 1e-6  # keeps tanh(u) inside (-1, 1) where the log-prob of a given action is finite
    center: Tensor
    half_range: Tensor

    def __init__(self, cfg: TanhGaussianConfig, *, action_space: gym.Space) -> None:
        center, half_range = _bounds(action_space, "TanhGaussian", "squashed Gaussian actions")
        super().__init__(typing.cast(StateDependentGaussianConfig, cfg), action_space=action_space)
        self.register_buffer("center", center, persistent=False)
        self.register_buffer("half_range", half_range, persistent=False)

    def _squash(self, u: Tensor, log_prob_u: Tensor) -> tuple[Tensor, Tensor]:
        y = torch.tanh(u)
        log_jacobian = torch.log(self.half_range * (1 - y.pow(2)) + self._EPS).sum(-1)
        return self.center + self.half_range * y, log_prob_u - log_jacobian

    def sample(self, params: Tensor) -> tuple[Tensor, Tensor]:
        mean, log_std = self._split(params)
        noise = torch.randn_like(mean)
        return self._squash(mean + noise * log_std.exp(), (-0.5 * noise.pow(2) - log_std - 0.5 * _LOG_2PI).sum(-1))

    def mode(self, params: Tensor) -> Tensor:
        return self.center + self.half_range * torch.tanh(self._split(params)[0])

    def log_prob(self, params: Tensor, action: Tensor) -> Tensor:
        y = ((action - self.center) / self.half_range).clamp(-1 + self._EPS, 1 - self._EPS)
        return self._squash(torch.atanh(y), super().log_prob(params, torch.atanh(y)))[1]


class DeterministicTanh(ActionDistribution):
    """TD3's actor (Fujimoto et al. 2018): the action is ``center + half_range * tanh(params)`` (``params`` ``[B, D]``),
    explored by adding Gaussian noise to ``tanh(params)`` and clipping it back into ``[-1, 1]``.

    The noise std is a fraction of the half-range, one per env: :attr:`noise_std` ``[num_envs]`` (FastTD3's per-env
    scales, which the algorithm draws and redraws at episode ends with :meth:`set_noise_std`), or one value for all
    (``noise_std``, until the algorithm sets them). It is not in the policy's state (an evaluation or an export of
    the deterministic action never reads it); the algorithm checkpoints it. A noisy action has no density:
    :meth:`log_prob` and :meth:`entropy` are 0 (the off-policy algorithms never read them).

    Args:
        cfg: ``noise_std``.
        action_space: A 1-D ``Box`` with finite bounds.
    """

    center: Tensor
    half_range: Tensor
    noise_std: Tensor

    def __init__(self, cfg: DeterministicTanhConfig, *, action_space: gym.Space) -> None:
        super().__init__()
        center, half_range = _bounds(action_space, "DeterministicTanh", "tanh-bounded actions")
        self.num_params = int(center.shape[0])
        self.action_shape = (self.num_params,)
        self.action_dtype = torch.float32
        self.register_buffer("center", center, persistent=False)
        self.register_buffer("half_range", half_range, persistent=False)
        self.register_buffer("noise_std", torch.full((1,), float(cfg.noise_std)), persistent=False)

    def set_noise_std(self, std: Tensor) -> None:
        """Explore with ``std`` ``[num_envs]`` (row ``i`` of a batch of ``num_envs`` gets ``std[i]``)."""
        self.noise_std = std.to(self.center.device, torch.float32)

    def perturb(self, params: Tensor, noise: Tensor) -> Tensor:
        """``center + half_range * clamp(tanh(params) + noise, -1, 1)``: the action moved by ``noise`` (in units of
        the half-range), kept inside the bounds."""
        return self.center + self.half_range * (torch.tanh(params) + noise).clamp(-1.0, 1.0)

    def sample(self, params: Tensor) -> tuple[Tensor, Tensor]:
        # One std per row when the batch is the envs' (the collector's); otherwise their mean for every row.
        std = self.noise_std if self.noise_std.shape[0] in (1, params.shape[0]) else self.noise_std.mean(0, True)
        action = self.perturb(params, torch.randn_like(params) * std[:, None])
        return action, torch.zeros(params.shape[0], device=params.device)

    def mode(self, params: Tensor) -> Tensor:
        return self.center + self.half_range * torch.tanh(params)

    def log_prob(self, params: Tensor, action: Tensor) -> Tensor:
        return torch.zeros(params.shape[0], device=params.device)

    def entropy(self, params: Tensor) -> Tensor:
        return torch.zeros(params.shape[0], device=params.device)


class Chunked(ActionDistribution):
    """``H`` actions of ``base`` at once (an action chunk): ``params`` ``[B, H * P]`` are ``H`` rows of ``base``'s
    ``P`` parameters, actions are ``[B, H, *base.action_shape]``, each drawn independently.

    One chunk is one decision whose log-prob and entropy are the sums over the first ``k`` actions, the ones the
    collector executes: those alone reach the env, so their joint density (a product: the actions are independent)
    is the probability of what the policy did. The last ``H - k`` are re-planned before they run; counting them
    would add score terms whose advantage they never influenced (noise in the gradient and in PPO's ratio) and
    entropy bonuses for actions never taken. With ``k = H`` (open loop) it is the sum over the whole chunk.

    Args:
        base: The distribution of one action.
        action_chunk: ``H``, actions per chunk.
        chunk_execute: ``k``, actions executed before re-planning (``1 <= k <= H``).
    """

    def __init__(self, base: ActionDistribution, action_chunk: int, chunk_execute: int) -> None:
        super().__init__()
        check(1 <= chunk_execute <= action_chunk, "chunk_execute", chunk_execute,
              f"an int in [1, action_chunk={action_chunk}]")
        self.base = base
        self.action_chunk, self.chunk_execute = action_chunk, chunk_execute
        self.num_params = action_chunk * base.num_params
        self.action_shape = (action_chunk, *base.action_shape)
        self.action_dtype = base.action_dtype

    def _rows(self, params: Tensor) -> Tensor:
        return params.unflatten(-1, (self.action_chunk, self.base.num_params))

    def _executed(self, per_action: Tensor) -> Tensor:
        return per_action[..., :self.chunk_execute].sum(-1)

    def sample(self, params: Tensor) -> tuple[Tensor, Tensor]:
        action, log_prob = self.base.sample(self._rows(params))
        return action, self._executed(log_prob)

    def mode(self, params: Tensor) -> Tensor:
        return self.base.mode(self._rows(params))

    def log_prob(self, params: Tensor, action: Tensor) -> Tensor:
        return self._executed(self.base.log_prob(self._rows(params), action))

    def entropy(self, params: Tensor) -> Tensor:
        return self._executed(self.base.entropy(self._rows(params)))

    def log_prob_entropy(self, params: Tensor, action: Tensor) -> tuple[Tensor, Tensor]:
        log_prob, entropy = self.base.log_prob_entropy(self._rows(params), action)
        return self._executed(log_prob), self._executed(entropy)


def make_distribution(
    action_space: gym.spaces.Space, init_log_std: float, log_std_min: float, log_std_max: float
) -> ActionDistribution:
    """The distribution that fits ``action_space`` (``Discrete`` or 1-D ``Box``)."""
    if isinstance(action_space, gym.spaces.Discrete):
        return Categorical(int(action_space.n))
    if isinstance(action_space, gym.spaces.Box) and len(action_space.shape) == 1:
        return DiagGaussian(int(action_space.shape[0]), init_log_std, log_std_min, log_std_max)
    raise ConfigError(
        "action_space", action_space, "gymnasium Discrete or 1-D Box",
        "use an env whose action space is Discrete or a 1-D Box (flatten other spaces in the env)",
    )


def chunk_steps(dist: ActionDistribution | None) -> int:
    """Env steps one decision of ``dist`` executes as a chunk: its ``chunk_execute`` for a :class:`Chunked`
    distribution, 0 for one action per step (also a policy without a torch distribution, an export)."""
    return dist.chunk_execute if isinstance(dist, Chunked) else 0

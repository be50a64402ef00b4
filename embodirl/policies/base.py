"""The policy interface shared by every algorithm.

Two layers: tensor methods (:meth:`Policy.act`, :meth:`Policy.value`, :meth:`Policy.evaluate`) used in
hot loops, and the TensorDict interface of EmbodiChain's policies (``get_action``, ``forward``,
``get_value``, ``evaluate_actions``) on top of them.
"""

from __future__ import annotations

from collections.abc import Sequence

import gymnasium as gym
import torch
from tensordict import TensorDict
from torch import Tensor, nn

from embodirl.errors import ConfigError
from embodirl.policies.distributions import make_distribution
from embodirl.policies.networks import build_mlp
from embodirl.policies.normalizer import RunningNormalizer

__all__ = ["Policy"]


class Policy(nn.Module):
    """An actor MLP and an action distribution fitted to the action space; no critic (value 0).

    Args:
        observation_space: Single-env observation space (a Box).
        action_space: Single-env action space (Discrete or 1-D Box).
        hidden_sizes: Actor hidden layer sizes.
        activation: Activation name (see :data:`embodirl.policies.networks.ACTIVATIONS`).
        init_log_std: Initial Gaussian ``log_std`` (Box actions only).
        log_std_min: Lower clamp of ``log_std``.
        log_std_max: Upper clamp of ``log_std``.
        normalize_obs: Normalise observations with running statistics (updated by the algorithm
            after each update, checkpointed with the policy).
    """

    has_critic = False

    def __init__(
        self,
        observation_space: gym.spaces.Box,
        action_space: gym.spaces.Space,
        hidden_sizes: Sequence[int] = (64, 64),
        activation: str = "relu",
        init_log_std: float = 0.0,
        log_std_min: float = -5.0,
        log_std_max: float = 2.0,
        normalize_obs: bool = False,
    ) -> None:
        super().__init__()
        if not isinstance(observation_space, gym.spaces.Box) or len(observation_space.shape) != 1:
            raise ConfigError("observation_space", observation_space, "a 1-D gymnasium Box",
                              "flatten the observation in the env")
        self.obs_dim = int(observation_space.shape[0])
        self.dist = make_distribution(action_space, init_log_std, log_std_min, log_std_max)
        self.actor = build_mlp(self.obs_dim, self.dist.num_params, list(hidden_sizes), activation, 0.01)
        self.obs_normalizer = RunningNormalizer((self.obs_dim,)) if normalize_obs else None

    # --- tensor interface ---------------------------------------------------------------------------
    def normalize(self, obs: Tensor) -> Tensor:
        return obs if self.obs_normalizer is None else self.obs_normalizer(obs)

    def _value(self, x: Tensor) -> Tensor:
        """Value of normalised observations ``x``; zeros without a critic."""
        return torch.zeros(x.shape[:-1], dtype=x.dtype, device=x.device)

    @torch.no_grad()
    def act(self, obs: Tensor, deterministic: bool = False) -> tuple[Tensor, Tensor, Tensor]:
        """Sample (or take the mode of) an action for ``obs`` ``[B, obs_dim]``.

        Returns:
            ``(action, log_prob [B], value [B])``.
        """
        x = self.normalize(obs)
        params = self.actor(x)
        if deterministic:
            action = self.dist.mode(params)
            log_prob = self.dist.log_prob(params, action)
        else:
            action, log_prob = self.dist.sample(params)
        return action, log_prob, self._value(x)

    @torch.no_grad()
    def mode(self, obs: Tensor) -> Tensor:
        """The deterministic (most likely) action for ``obs``; skips the critic."""
        return self.dist.mode(self.actor(self.normalize(obs)))

    @torch.no_grad()
    def value(self, obs: Tensor) -> Tensor:
        """``[B]`` values of ``obs``."""
        return self._value(self.normalize(obs))

    def evaluate(self, obs: Tensor, action: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """With gradients: ``(log_prob [B], entropy [B], value [B])`` of ``action`` at ``obs``."""
        x = self.normalize(obs)
        log_prob, entropy = self.dist.log_prob_entropy(self.actor(x), action)
        return log_prob, entropy, self._value(x)

    @torch.no_grad()
    def update_normalizer(self, obs: Tensor) -> None:
        """Merge observations into the running statistics (no-op when normalisation is off)."""
        if self.obs_normalizer is not None:
            self.obs_normalizer.update(obs)

    # --- TensorDict interface (EmbodiChain's) --------------------------------------------------------
    def get_action(self, td: TensorDict, deterministic: bool = False) -> TensorDict:
        """Write ``action``, ``sample_log_prob`` and ``value`` for ``td["obs"]``; return ``td``."""
        action, log_prob, value = self.act(td["obs"], deterministic)
        td.set("action", action)
        td.set("sample_log_prob", log_prob)
        td.set("value", value)
        return td

    def forward(self, td: TensorDict, deterministic: bool = False) -> TensorDict:
        return self.get_action(td, deterministic)

    def get_value(self, td: TensorDict) -> TensorDict:
        """Write ``value`` for ``td["obs"]``; return ``td``."""
        td.set("value", self.value(td["obs"]))
        return td

    def evaluate_actions(self, td: TensorDict) -> TensorDict:
        """A new TensorDict with ``sample_log_prob``, ``entropy`` and ``value`` (with gradients)."""
        log_prob, entropy, value = self.evaluate(td["obs"], td["action"])
        return TensorDict(
            {"sample_log_prob": log_prob, "entropy": entropy, "value": value}, batch_size=td.batch_size
        )

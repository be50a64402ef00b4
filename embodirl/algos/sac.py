"""SAC (Haarnoja et al. 2018, "Soft Actor-Critic Algorithms and Applications"): twin Q critics with Polyak-averaged
targets, a tanh-squashed Gaussian actor (the policy, ``policy=sac_actor``), an automatically tuned entropy
temperature, delayed actor steps; continuous (Box) actions.

The critics read the policy's observation features (its normalisers and encoders); an encoder with weights (images)
is trained by the critic loss and read detached by the actor loss (as DrQ does). Target critics are Polyak averages
of the critics' heads; they read the online features.
"""

from __future__ import annotations

import copy
import typing

import torch
from tensordict import TensorDict
from torch import Tensor, nn

from embodirl.accel.compile import Acceleration
from embodirl.algos.base import EAGER
from embodirl.algos.off_policy import OffPolicyAlgorithm, optimizer_step, polyak_update
from embodirl.config.algos import SACConfig
from embodirl.envs.base import BatchedEnv
from embodirl.errors import ConfigError
from embodirl.policies.base import Policy
from embodirl.policies.distributions import TanhGaussian
from embodirl.policies.networks import build_mlp

__all__ = ["SAC", "TwinQ"]


class TwinQ(nn.Module):
    """Two Q networks over ``[features, action]``; :meth:`forward` returns ``[2, B]``."""

    def __init__(self, in_dim: int, action_dim: int, hidden_sizes: list[int], activation: str) -> None:
        super().__init__()
        self.q = nn.ModuleList([build_mlp(in_dim + action_dim, 1, hidden_sizes, activation, 1.0,
                                          key="critic_hidden_sizes") for _ in range(2)])

    def forward(self, features: Tensor, action: Tensor) -> Tensor:
        x = torch.cat([features, action], dim=-1)
        return torch.stack([q(x).squeeze(-1) for q in self.q])


class SAC(OffPolicyAlgorithm):
    """Soft actor-critic on the replay buffer of :class:`OffPolicyAlgorithm`.

    Args:
        cfg: The keys of ``algo=sac`` (:class:`~embodirl.config.algos.SACConfig`).
        policy: An actor whose distribution is a :class:`~embodirl.policies.distributions.TanhGaussian`
            (``policy=sac_actor``, which ``algo=sac`` selects).
        device: Device of the policy and the critics.
        total_env_steps: Training budget.
        accel: ``compile=true`` compiles the critic and actor losses (:attr:`compiled_steps`).
    """

    cfg: SACConfig
    metric_names = ("loss/critic", "loss/actor", "loss/alpha", "diag/q_mean", "diag/alpha", "diag/entropy",
                    "diag/buffer_size", "diag/num_updates")
    compiled_steps = ("critic_loss", "actor_loss")

    def __init__(self, cfg: SACConfig, *, policy: Policy, device: torch.device, total_env_steps: int,
                 accel: Acceleration = EAGER) -> None:
        super().__init__(cfg, policy=policy, device=device, total_env_steps=total_env_steps, accel=accel)
        if not isinstance(policy.dist, TanhGaussian) or policy.is_recurrent:
            raise ConfigError("policy", type(policy).__name__, "a feedforward actor with a TanhGaussian distribution "
                              "with algo=sac (the actor loss differentiates through squashed samples)",
                              "drop the policy override (algo=sac selects policy=sac_actor) or pass policy=sac_actor",
                              absolute=True)
        module: typing.Any = policy  # an ActorOnly-like module: encode/join/actor/feature_dim are read below
        self.encoder_params = [p for n, p in module.named_parameters() if n.startswith("encoders.")]
        self.actor_params = [p for n, p in module.named_parameters() if not n.startswith("encoders.")]
        self.keys = list(module.actor_keys)
        features = int(module.feature_dim(self.keys))
        self.critics = TwinQ(features, policy.dist.action_shape[0], list(cfg.critic_hidden_sizes),
                             "relu").to(self.device)
        self.target_critics = copy.deepcopy(self.critics).requires_grad_(False)
        self.log_alpha = nn.Parameter(torch.tensor(float(cfg.alpha), device=self.device).log())
        self.target_entropy = (-float(policy.dist.action_shape[0]) if cfg.target_entropy is None
                               else cfg.target_entropy)
        self.critic_optimizer = torch.optim.Adam([*self.critics.parameters(), *self.encoder_params],
                                                 lr=cfg.critic_learning_rate)
        self.actor_optimizer = torch.optim.Adam(self.actor_params, lr=cfg.learning_rate)
        self.alpha_optimizer = torch.optim.Adam([self.log_alpha], lr=cfg.learning_rate)

    def check_env(self, env: BatchedEnv) -> None:
        # The policy's TanhGaussian already refused a non-Box action space; here only the pairing is left.
        self.check_buffer_fits(env)

    def networks(self) -> dict[str, nn.Module]:
        return {"critics": self.critics, "target_critics": self.target_critics,
                "alpha": typing.cast(nn.Module, nn.ParameterDict({"log_alpha": self.log_alpha})),
                **self.rnd_networks()}

    def optimizers(self) -> dict[str, torch.optim.Optimizer]:
        return {"actor_optimizer": self.actor_optimizer, "critic_optimizer": self.critic_optimizer,
                "alpha_optimizer": self.alpha_optimizer, **self.rnd_optimizers()}

    # --- the maths ------------------------------------------------------------------------------------------
    def features(self, obs: TensorDict) -> Tensor:
        """The policy's features of ``obs`` ``[B, F]`` (normalised, encoded): what the actor and critics read."""
        policy = typing.cast(typing.Any, self.policy)
        return policy.join(policy.encode(obs, self.keys), self.keys)

    def sample_action(self, features: Tensor) -> tuple[Tensor, Tensor]:
        """A reparameterised action and its log-prob (gradients reach the actor)."""
        return self.policy.dist.sample(typing.cast(typing.Any, self.policy).actor(features))

    def critic_loss(self, batch: TensorDict) -> tuple[Tensor, Tensor]:
        """Both critics' squared error to the soft target ``r + discount (1 - terminated) (min Q' - alpha log pi)``."""
        with torch.no_grad():
            next_features = self.features(batch["next_obs"])
            next_action, next_log_prob = self.sample_action(next_features)
            next_q = self.target_critics(next_features, next_action).min(0).values
            soft_value = next_q - self.log_alpha.exp() * next_log_prob
            target = batch["reward"] + batch["discount"] * (~batch["terminated"]) * soft_value
        q = self.critics(self.features(batch["obs"]), batch["action"])  # [2, B]
        return (q - target).pow(2).mean(1).sum(), q.mean()

    def actor_loss(self, features: Tensor) -> tuple[Tensor, Tensor]:
        """``alpha log pi(a|s) - min Q(s, a)`` for fresh actions; and their log-probs (for the temperature)."""
        action, log_prob = self.sample_action(features)
        q = self.critics(features, action).min(0).values
        return (self.log_alpha.exp().detach() * log_prob - q).mean(), log_prob.detach()

    def alpha_loss(self, log_prob: Tensor) -> Tensor:
        """Raise alpha while the entropy (``-log pi``) is below its target, lower it while above."""
        return -(self.log_alpha.exp() * (log_prob + self.target_entropy)).mean()

    # --- one update -----------------------------------------------------------------------------------------
    def train_step(self, batch: TensorDict) -> dict[str, Tensor]:
        """A critic step, every ``policy_frequency``-th time an actor (and temperature) step, a target update."""
        critic_loss, q_mean = self.critic_loss(batch)
        optimizer_step(self.critic_optimizer, critic_loss, [*self.critics.parameters(), *self.encoder_params],
                       self.cfg.max_grad_norm)
        terms = {"loss/critic": critic_loss, "diag/q_mean": q_mean}
        if self.num_updates % self.cfg.policy_frequency == 0:
            actor_loss, log_prob = self.actor_loss(self.features(batch["obs"]).detach())
            optimizer_step(self.actor_optimizer, actor_loss, self.actor_params, self.cfg.max_grad_norm)
            terms.update({"loss/actor": actor_loss, "diag/entropy": -log_prob.mean()})
            if self.cfg.autotune:
                alpha_loss = self.alpha_loss(log_prob)
                optimizer_step(self.alpha_optimizer, alpha_loss, [self.log_alpha], None)
                terms["loss/alpha"] = alpha_loss
        terms["diag/alpha"] = self.log_alpha.exp()
        polyak_update(self.target_critics, self.critics, self.cfg.tau)
        return terms

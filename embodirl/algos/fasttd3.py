"""FastTD3 (Seo et al. 2025, "FastTD3: Simple, Fast, and Capable Reinforcement Learning for Humanoid Control"): TD3
(Fujimoto et al. 2018) over many parallel envs. Clipped double Q (the smaller of two critics' values, in the target
and in the actor loss), target policy smoothing (clipped Gaussian noise on the next action), a delayed actor
(``policy_frequency``), an optional distributional critic (C51,
:func:`~embodirl.algos.functional.categorical_projection`), n-step returns (the replay buffer's), an exploration
noise std per env drawn from ``[std_min, std_max]`` and drawn again for the envs whose episode ended, large batches
and several updates per env step (``minibatch_size``, ``updates_per_step``); continuous (Box) actions.

The actor is the policy (``policy=td3_actor``: a deterministic tanh-bounded action, running observation
normalisation); evaluation and export use its deterministic action. As FastTD3 does, the next action of the target
is the online actor's (no target actor); the target critics are Polyak averages of the critics, and read the online
features (the policy's normalisers and encoders) as SAC's do. The per-env stds are redrawn after each rollout for
the envs whose episode ended in it (with ``algo.num_steps=1`` at the episode's end, as FastTD3).
"""

from __future__ import annotations

import copy
import typing

import torch
from tensordict import TensorDict
from torch import Tensor, nn
from torch.nn import functional as F

from embodirl.accel.compile import Acceleration
from embodirl.algos.base import EAGER
from embodirl.algos.functional import categorical_projection
from embodirl.algos.off_policy import OffPolicyAlgorithm, optimizer_step, polyak_update
from embodirl.algos.sac import TwinQ
from embodirl.collect.collector import CollectPlan
from embodirl.config.algos import FastTD3Config
from embodirl.envs.base import BatchedEnv
from embodirl.errors import ConfigError
from embodirl.policies.base import Policy
from embodirl.policies.distributions import DeterministicTanh
from embodirl.policies.networks import build_mlp

__all__ = ["FastTD3", "TwinC51"]


class TwinC51(nn.Module):
    """Two distributional Q networks over ``[features, action]``; :meth:`forward` returns logits ``[2, B, K]`` over
    the ``K`` atoms of the return's support."""

    def __init__(self, in_dim: int, action_dim: int, hidden_sizes: list[int], num_atoms: int) -> None:
        super().__init__()
        self.q = nn.ModuleList([build_mlp(in_dim + action_dim, num_atoms, hidden_sizes, "relu", 1.0,
                                          key="critic_hidden_sizes") for _ in range(2)])

    def forward(self, features: Tensor, action: Tensor) -> Tensor:
        x = torch.cat([features, action], dim=-1)
        return torch.stack([q(x) for q in self.q])


class FastTD3(OffPolicyAlgorithm):
    """FastTD3 on the replay buffer of :class:`OffPolicyAlgorithm` (see the module docstring).

    Args:
        cfg: The keys of ``algo=fasttd3`` (:class:`~embodirl.config.algos.FastTD3Config`).
        policy: A feedforward actor whose distribution is a
            :class:`~embodirl.policies.distributions.DeterministicTanh` (``policy=td3_actor``, which
            ``algo=fasttd3`` selects).
        device: Device of the policy and the critics.
        total_env_steps: Training budget.
        accel: ``compile=true`` compiles the critic and actor losses (:attr:`compiled_steps`).
    """

    cfg: FastTD3Config
    metric_names = ("loss/critic", "loss/actor", "diag/q_mean", "diag/exploration_std", "diag/buffer_size",
                    "diag/num_updates")
    compiled_steps = ("critic_loss", "actor_loss")

    def __init__(self, cfg: FastTD3Config, *, policy: Policy, device: torch.device, total_env_steps: int,
                 accel: Acceleration = EAGER) -> None:
        super().__init__(cfg, policy=policy, device=device, total_env_steps=total_env_steps, accel=accel)
        if not isinstance(policy.dist, DeterministicTanh) or policy.is_recurrent:
            raise ConfigError("policy", type(policy).__name__, "a feedforward actor with a DeterministicTanh "
                              "distribution with algo=fasttd3 (the actor loss differentiates through its action)",
                              "drop the policy override (algo=fasttd3 selects policy=td3_actor) or pass "
                              "policy=td3_actor", absolute=True)
        self.dist: DeterministicTanh = policy.dist
        module: typing.Any = policy  # an ActorOnly-like module: encode/join/actor/feature_dim are read below
        self.encoder_params = [p for n, p in module.named_parameters() if n.startswith("encoders.")]
        self.actor_params = [p for n, p in module.named_parameters() if not n.startswith("encoders.")]
        self.keys = list(module.actor_keys)
        features, action_dim = int(module.feature_dim(self.keys)), policy.dist.action_shape[0]
        hidden = list(cfg.critic_hidden_sizes)
        self.critics: nn.Module = (TwinC51(features, action_dim, hidden, cfg.num_atoms) if cfg.critic == "c51"
                                   else TwinQ(features, action_dim, hidden, "relu")).to(self.device)
        self.target_critics = copy.deepcopy(self.critics).requires_grad_(False)
        self.support = torch.linspace(cfg.v_min, cfg.v_max, cfg.num_atoms, device=self.device)
        self.critic_optimizer = torch.optim.AdamW([*self.critics.parameters(), *self.encoder_params],
                                                  lr=cfg.critic_learning_rate, weight_decay=cfg.weight_decay)
        self.actor_optimizer = torch.optim.AdamW(self.actor_params, lr=cfg.learning_rate,
                                                 weight_decay=cfg.weight_decay)
        self.noise_std: Tensor | None = None  # [num_envs], drawn once the env's num_envs is known

    def check_env(self, env: BatchedEnv) -> None:
        self.check_buffer_fits(env)

    def networks(self) -> dict[str, nn.Module]:
        return {"critics": self.critics, "target_critics": self.target_critics, **self.rnd_networks()}

    def optimizers(self) -> dict[str, torch.optim.Optimizer]:
        return {"actor_optimizer": self.actor_optimizer, "critic_optimizer": self.critic_optimizer,
                **self.rnd_optimizers()}

    # --- exploration ----------------------------------------------------------------------------------------
    def draw_noise_std(self, num_envs: int) -> Tensor:
        """``[num_envs]`` stds drawn uniformly from ``[std_min, std_max]``."""
        low, high = self.cfg.std_min, self.cfg.std_max
        return low + (high - low) * torch.rand(num_envs, device=self.device)

    def collect_plan(self, env: BatchedEnv) -> CollectPlan:
        """The base's plan; and an exploration std per env (kept when a resume restored them first)."""
        plan = super().collect_plan(env)
        if self.noise_std is None or self.noise_std.shape[0] != env.num_envs:
            self.noise_std = self.draw_noise_std(env.num_envs)
        self.dist.set_noise_std(self.noise_std)
        return plan

    def update(self, rollout: TensorDict) -> dict[str, float]:
        """Redraw the std of every env whose episode ended in ``rollout``, then the base's update."""
        assert self.noise_std is not None, "collect_plan draws the stds before the first update"
        num_steps = rollout.get_non_tensor("num_steps_collected", rollout.batch_size[1] - 1)
        ended = rollout["done"][:, :num_steps].any(1).to(self.device)
        # Every env draws (fixed shapes and random-number use); only those whose episode ended keep the new std.
        self.noise_std = torch.where(ended, self.draw_noise_std(ended.shape[0]), self.noise_std)
        self.dist.set_noise_std(self.noise_std)
        metrics = super().update(rollout)
        return {**metrics, "diag/exploration_std": float(self.noise_std.mean())}

    # --- the maths ------------------------------------------------------------------------------------------
    def features(self, obs: TensorDict) -> Tensor:
        """The policy's features of ``obs`` ``[B, F]`` (normalised, encoded): what the actor and critics read."""
        policy = typing.cast(typing.Any, self.policy)
        return policy.join(policy.encode(obs, self.keys), self.keys)

    def actor_params_of(self, features: Tensor) -> Tensor:
        """The actor's output (pre-tanh) for ``features``, with gradients."""
        return typing.cast(Tensor, typing.cast(typing.Any, self.policy).actor(features))

    def smoothed_action(self, features: Tensor) -> Tensor:
        """Target policy smoothing: the actor's action moved by ``clamp(N(0, policy_noise), -noise_clip,
        noise_clip)`` (in units of the half-range), inside the bounds."""
        params = self.actor_params_of(features)
        noise = (torch.randn_like(params) * self.cfg.policy_noise).clamp(-self.cfg.noise_clip, self.cfg.noise_clip)
        return self.dist.perturb(params, noise)

    def q_values(self, critics: nn.Module, features: Tensor, action: Tensor) -> Tensor:
        """Both critics' values ``[2, B]`` (a C51 critic's: the mean of its distribution)."""
        out = critics(features, action)
        return (out.softmax(-1) * self.support).sum(-1) if self.cfg.critic == "c51" else out

    def td_target(self, batch: TensorDict) -> Tensor:
        """Clipped double Q: ``r + discount (1 - terminated) min(Q1', Q2')(s', smoothed a')`` ``[B]``; with C51, the
        projected distribution ``[B, K]`` of the target critic whose projected mean is the smaller."""
        next_features = self.features(batch["next_obs"])
        next_action = self.smoothed_action(next_features)
        bootstrap = batch["discount"] * (~batch["terminated"]).to(batch["discount"].dtype)
        if self.cfg.critic != "c51":
            return batch["reward"] + bootstrap * self.target_critics(next_features, next_action).min(0).values
        probs = self.target_critics(next_features, next_action).softmax(-1)  # [2, B, K]
        projected = torch.stack([categorical_projection(p, batch["reward"], bootstrap, self.cfg.v_min,
                                                        self.cfg.v_max) for p in probs])
        mean = (projected * self.support).sum(-1)  # [2, B]
        return torch.where((mean[0] <= mean[1])[:, None], projected[0], projected[1])

    def critic_loss(self, batch: TensorDict) -> tuple[Tensor, Tensor]:
        """Both critics regressed on :meth:`td_target` (squared error; C51: cross-entropy), summed; and the mean Q."""
        with torch.no_grad():
            target = self.td_target(batch)
        out = self.critics(self.features(batch["obs"]), batch["action"])
        if self.cfg.critic != "c51":
            return (out - target).pow(2).mean(1).sum(), out.mean()
        loss = -(target * F.log_softmax(out, -1)).sum(-1).mean(1).sum()
        return loss, (out.softmax(-1) * self.support).sum(-1).mean()

    def actor_loss(self, features: Tensor) -> Tensor:
        """``-min(Q1, Q2)(s, actor(s))``: the deterministic action moved toward higher value."""
        action = self.dist.mode(self.actor_params_of(features))
        return -self.q_values(self.critics, features, action).min(0).values.mean()

    # --- one update -----------------------------------------------------------------------------------------
    def train_step(self, batch: TensorDict) -> dict[str, Tensor]:
        """A critic step, every ``policy_frequency``-th time an actor step, a target update."""
        critic_loss, q_mean = self.critic_loss(batch)
        optimizer_step(self.critic_optimizer, critic_loss, [*self.critics.parameters(), *self.encoder_params],
                       self.cfg.max_grad_norm)
        terms = {"loss/critic": critic_loss, "diag/q_mean": q_mean}
        if self.num_updates % self.cfg.policy_frequency == 0:
            actor_loss = self.actor_loss(self.features(batch["obs"]).detach())
            optimizer_step(self.actor_optimizer, actor_loss, self.actor_params, self.cfg.max_grad_norm)
            terms["loss/actor"] = actor_loss
        polyak_update(self.target_critics, self.critics, self.cfg.tau)
        return terms

    # --- state ----------------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, typing.Any]:
        """The base's state and the per-env exploration stds."""
        return {**super().state_dict(), "noise_std": None if self.noise_std is None else self.noise_std.clone()}

    def load_state_dict(self, state: dict[str, typing.Any]) -> None:
        super().load_state_dict(state)
        if state.get("noise_std") is not None:
            self.noise_std = state["noise_std"].to(self.device)
            self.dist.set_noise_std(self.noise_std)

"""Proximal Policy Optimization over the shared ``[N, T+1]`` rollout."""

from __future__ import annotations

from typing import Literal

import logging

import torch
from tensordict import TensorDict
from torch import Tensor

from embodirl.algos import functional as F
from embodirl.algos.base import BaseAlgorithm, CollectPlan
from embodirl.algos.reward_scaling import RewardScaler
from embodirl.distributed import allreduce_mean
from embodirl.envs.base import BatchedEnv
from embodirl.errors import check, check_choice
from embodirl.policies.base import Policy
from embodirl.rollout import transitions

__all__ = ["PPO"]

log = logging.getLogger(__name__)

_METRICS = ["loss/policy", "loss/value", "loss/entropy", "diag/approx_kl", "diag/clip_fraction"]


class PPO(BaseAlgorithm):
    """PPO with GAE (truncation-aware), clipped surrogate and value loss, entropy bonus.

    Args:
        policy: An actor-critic policy.
        device: Device of policy and rollouts.
        total_env_steps: Training budget (horizon of the linear schedule).
        num_steps: Rollout length T per env.
        learning_rate: Adam learning rate (initial value under a schedule).
        lr_schedule: ``constant``, or ``linear`` decay to 0 over ``total_env_steps``.
        n_epochs: Passes over the rollout per update.
        batch_size: Minibatch size in transitions (the rollout is split into shuffled minibatches).
        gamma: Discount factor.
        gae_lambda: GAE lambda.
        clip_coef: Surrogate clip range epsilon.
        clip_value_coef: Clip range of the value update around the collecting value; None = no clipping.
        ent_coef: Entropy bonus weight.
        vf_coef: Value loss weight.
        max_grad_norm: Global gradient-norm clip.
        normalize_advantage: Normalise advantages over the whole rollout.
        target_kl: Stop the epochs of an update early once the mean approx-KL of an epoch exceeds it.
        adam_eps: Adam epsilon.
        normalize_rewards: Divide rewards by the running std of the discounted return before GAE
            (SB3's ``VecNormalize`` reward scaling, see :mod:`embodirl.algos.reward_scaling`).
    """

    def __init__(
        self,
        policy: Policy,
        *,
        device: torch.device,
        total_env_steps: int,
        num_steps: int = 32,
        learning_rate: float = 3e-4,
        lr_schedule: Literal["constant", "linear"] = "constant",
        n_epochs: int = 4,
        batch_size: int = 2048,
        gamma: float = 0.99,
        gae_lambda: float = 0.95,
        clip_coef: float = 0.2,
        clip_value_coef: float | None = None,
        ent_coef: float = 0.0,
        vf_coef: float = 0.5,
        max_grad_norm: float = 0.5,
        normalize_advantage: bool = True,
        target_kl: float | None = None,
        adam_eps: float = 1e-5,
        normalize_rewards: bool = False,
    ) -> None:
        super().__init__(policy, device, total_env_steps)
        check(num_steps >= 1, "num_steps", num_steps, "an int >= 1")
        check(learning_rate > 0, "learning_rate", learning_rate, "a float > 0, e.g. 3e-4")
        check_choice("lr_schedule", lr_schedule, ["constant", "linear"])
        check(n_epochs >= 1, "n_epochs", n_epochs, "an int >= 1")
        check(batch_size >= 1, "batch_size", batch_size, "an int >= 1 (transitions per minibatch)")
        check(0.0 <= gamma <= 1.0, "gamma", gamma, "a float in [0, 1]")
        check(0.0 <= gae_lambda <= 1.0, "gae_lambda", gae_lambda, "a float in [0, 1]")
        check(clip_coef > 0, "clip_coef", clip_coef, "a float > 0, e.g. 0.2")
        check(clip_value_coef is None or clip_value_coef > 0, "clip_value_coef", clip_value_coef,
              "null (no value clipping) or a float > 0")
        check(ent_coef >= 0, "ent_coef", ent_coef, "a float >= 0")
        check(vf_coef >= 0, "vf_coef", vf_coef, "a float >= 0")
        check(max_grad_norm > 0, "max_grad_norm", max_grad_norm, "a float > 0, e.g. 0.5")
        check(target_kl is None or target_kl > 0, "target_kl", target_kl, "null (off) or a float > 0")
        if not policy.has_critic:
            log.warning("PPO with an actor-only policy: advantages are discounted returns without a baseline "
                        "(use policy=actor_critic for GAE with a learned value)")
        self.num_steps = num_steps
        self.n_epochs = n_epochs
        self.batch_size = batch_size
        self.gamma = gamma
        self.gae_lambda = gae_lambda
        self.clip_coef = clip_coef
        self.clip_value_coef = clip_value_coef
        self.ent_coef = ent_coef
        self.vf_coef = vf_coef
        self.normalize_advantage = normalize_advantage
        self.target_kl = target_kl
        self.init_optimizer(learning_rate, lr_schedule, max_grad_norm, adam_eps)
        # --- reward scaling hook (algo.normalize_rewards) ---
        self.reward_scaler = RewardScaler(gamma, self.device) if normalize_rewards else None

    def collect_plan(self, env: BatchedEnv) -> CollectPlan:
        return CollectPlan(num_steps=self.num_steps)

    def update(self, rollout: TensorDict) -> dict[str, float]:
        self.check_rollout(rollout)
        lr = self.apply_lr_schedule()
        with torch.no_grad():
            advantage, returns = self._advantages(rollout)
        batch = transitions(rollout, advantage=advantage, returns=returns)
        adv = batch["advantage"]
        if self.normalize_advantage:
            adv = F.normalize(adv)
        data = (batch["obs"], batch["action"], batch["sample_log_prob"], batch["value"], adv, batch["returns"])
        explained_var = F.explained_variance(batch["value"], batch["returns"])

        sums = torch.zeros(len(_METRICS), device=self.device)
        num_minibatches = epochs = 0
        for epochs in range(1, self.n_epochs + 1):
            epoch_sums = torch.zeros(len(_METRICS), device=self.device)
            minibatches = torch.randperm(adv.shape[0], device=self.device).split(self.batch_size)
            for idx in minibatches:
                epoch_sums += self._minibatch_step(*(x[idx] for x in data))
            sums += epoch_sums
            num_minibatches += len(minibatches)
            # Early stop costs one host sync per epoch, only when target_kl is set.
            if self.target_kl is not None and allreduce_mean(epoch_sums[3:4].clone()).item() / len(minibatches) > self.target_kl:
                break

        self.policy.update_normalizer(rollout["obs"][:, :-1])
        self.env_steps_seen += adv.shape[0]
        values = torch.cat([sums / num_minibatches, explained_var.reshape(1)])
        metrics = self.finish_metrics([*_METRICS, "diag/explained_variance"], values)
        metrics.update({"diag/learning_rate": lr, "diag/epochs": float(epochs)})
        return metrics

    def _advantages(self, rollout: TensorDict) -> tuple[Tensor, Tensor]:
        """GAE ``[N, T]`` on the rollout's rewards, scaled first when ``normalize_rewards`` is on."""
        if self.reward_scaler is None:
            return F.compute_gae(rollout, self.gamma, self.gae_lambda)
        done = rollout["done"][:, :-1]
        reward = self.reward_scaler(rollout["reward"][:, :-1], done)
        return F.gae(reward, rollout["value"], done, rollout["final_value"][:, :-1], self.gamma, self.gae_lambda)

    def state_dict(self) -> dict:
        state = super().state_dict()
        if self.reward_scaler is not None:
            state["reward_scaler"] = self.reward_scaler.state_dict()
        return state

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        if self.reward_scaler is not None and "reward_scaler" in state:
            self.reward_scaler.load_state_dict(state["reward_scaler"])

    def _minibatch_step(
        self, obs: Tensor, action: Tensor, old_log_prob: Tensor, old_value: Tensor, adv: Tensor, returns: Tensor
    ) -> Tensor:
        """One gradient step; returns detached ``[policy, value, entropy, approx_kl, clip_fraction]``."""
        log_prob, entropy, value = self.policy.evaluate(obs, action)
        pg_loss, ratio = F.clipped_surrogate_loss(log_prob, old_log_prob, adv, self.clip_coef)
        pg_loss = pg_loss.mean()
        v_loss = F.value_loss(value, old_value, returns, self.clip_value_coef)
        entropy = entropy.mean()
        loss = pg_loss + self.vf_coef * v_loss - self.ent_coef * entropy
        self.optimizer_step(loss)
        with torch.no_grad():
            kl = F.approx_kl(log_prob, old_log_prob)
            frac = F.clip_fraction(ratio, self.clip_coef)
            return torch.stack([pg_loss.detach(), v_loss.detach(), entropy.detach(), kl, frac])

"""Group Relative Policy Optimization: critic-free, advantages relative to a group of attempts.

Consecutive envs form groups of ``group_size``; with ``group_shared_reset`` every member of a group
starts each rollout from the same initial state, so the group baseline compares several attempts at
one situation (EmbodiChain's groups start from different states). Advantages are step-wise and
masked (:func:`embodirl.algos.functional.compute_step_group_advantages`); the loss is a clipped
surrogate plus an entropy bonus and, when ``kl_coef > 0``, a k3 KL penalty to a frozen reference policy.
With ``restart_finished`` an env whose episode ended starts over from its group's start while the others finish
theirs, and every complete episode is a group sample, compared at equal steps since its start; with
``filter_groups`` groups whose returns never differ (zero advantages) are left out of the minibatches.
"""

from __future__ import annotations

import copy
import logging

import torch
from tensordict import TensorDict
from torch import Tensor

from embodirl.accel.compile import Acceleration
from embodirl.algos import functional as F
from embodirl.algos.base import EAGER, OnPolicyAlgorithm
from embodirl.collect.collector import CollectPlan
from embodirl.config.algos import GRPOConfig
from embodirl.envs.base import BatchedEnv
from embodirl.errors import ConfigError
from embodirl.policies.base import Policy

__all__ = ["GRPO"]

log = logging.getLogger(__name__)


class GRPO(OnPolicyAlgorithm):
    """GRPO over ``[N, T+1]`` rollouts with a feedforward actor-only policy.

    Args:
        cfg: The keys of ``algo=grpo`` (:class:`~embodirl.config.algos.GRPOConfig`).
        policy: An actor-only policy (a critic would be trained for nothing).
        device: Device of policy and rollouts.
        total_env_steps: Training budget (horizon of the schedules).
        accel: Compile (and later capture) the update's gradient step.
    """

    cfg: GRPOConfig
    metric_names = ("loss/policy", "loss/entropy", "diag/approx_ref_kl", "diag/approx_kl", "diag/clip_fraction",
                    "diag/valid_fraction", "diag/num_valid", "diag/epochs", "diag/groups_informative",
                    "diag/groups_kept")
    compile_prepare = False  # its returns loop over episode-long rollouts (500 steps on CartPole)

    def __init__(self, cfg: GRPOConfig, *, policy: Policy, device: torch.device, total_env_steps: int,
                 accel: Acceleration = EAGER) -> None:
        if policy.has_critic:
            raise ConfigError("policy", type(policy).__name__, "actor_only with algo=grpo (GRPO has no critic; "
                              "an actor_critic policy would train a critic for nothing)",
                              "drop the policy override (algo=grpo selects policy=actor_only) or pass "
                              "policy=actor_only",
                              absolute=True)
        if policy.is_recurrent:
            raise ConfigError("policy", type(policy).__name__, "a feedforward actor-only policy with algo=grpo "
                              "(recurrent policies are trained by PPO)", "pass policy=actor_only, or algo=ppo",
                              absolute=True)
        super().__init__(cfg, policy=policy, device=device, total_env_steps=total_env_steps, accel=accel)
        if not cfg.reset_every_rollout:
            log.warning("GRPO with reset_every_rollout=false: group members compare steps of different episodes")
        self.num_updates = 0
        self.ref_policy = self._frozen_copy() if cfg.kl_coef > 0 else None
        self.group_fractions: dict[str, Tensor] = {}  # of the last prepared rollout (rollout_metrics)

    def _frozen_copy(self) -> Policy:
        ref = copy.deepcopy(self.policy)
        ref.requires_grad_(False)
        return ref.eval()

    def collect_plan(self, env: BatchedEnv) -> CollectPlan:
        cfg = self.cfg
        if env.num_envs % cfg.group_size != 0:
            raise ConfigError("env.num_envs", env.num_envs, f"a multiple of algo.group_size={cfg.group_size}",
                              f"pass env.num_envs={max(1, env.num_envs // cfg.group_size) * cfg.group_size} "
                              "or another multiple of algo.group_size")
        if cfg.restart_finished and type(env.unwrapped).restart is BatchedEnv.restart:  # wrappers pass it on
            raise ConfigError("algo.restart_finished", True, f"false with {type(env.unwrapped).__name__}, which "
                              "cannot restart envs from their reset state (CartPole and PushCube can, with any of "
                              "the env.* wrappers)",
                              "pass algo.restart_finished=false", absolute=True)
        per_decision = self.policy.dist.chunk_execute  # env steps per rollout slot (k of an action chunk)
        return CollectPlan(num_steps=cfg.num_steps or -(-env.max_episode_steps // per_decision),
                           reset_every_rollout=cfg.reset_every_rollout,
                           group_size=cfg.group_size if cfg.group_shared_reset else 1,
                           first_episode_only=cfg.first_episode_only, restart_finished=cfg.restart_finished,
                           min_valid_fraction=cfg.min_valid_fraction)

    @torch.no_grad()
    def prepare(self, rollout: TensorDict) -> TensorDict:
        """Step-wise group advantages with each transition, ``[N*T]`` samples; ``"valid"`` marks the steps of each
        env's first episode (every step with ``first_episode_only=false``), the only ones trained on, and with
        ``filter_groups`` only in groups whose returns differ (when none does, all: an update never goes empty).
        With a reference policy, its log-probs of the actions (over every transition: one static shape)."""
        cfg = self.cfg
        done = rollout["done"][:, :-1]
        returns, mask = F.compute_step_returns_and_mask(rollout["reward"][:, :-1], done, cfg.gamma,
                                                        cfg.first_episode_only)
        steps = None
        if cfg.restart_finished:  # every episode completed in the rollout (not the padding), aligned at its start
            steps = F.episode_steps(done)
            mask = F.complete_episode_mask(done).to(returns.dtype)
        advantage = F.compute_step_group_advantages(returns, mask, cfg.group_size, cfg.eps, steps)
        informative = F.group_has_spread(returns, mask, cfg.group_size, steps)
        kept = informative | ~informative.any() if cfg.filter_groups else torch.ones_like(informative)
        # Per rollout, not per sample: a minibatch gathers only what the loss reads.
        self.group_fractions = {"diag/groups_informative": informative.float().mean(),
                                "diag/groups_kept": kept.float().mean()}
        transitions = rollout.select("obs", "action", "sample_log_prob")[:, :-1]
        samples = TensorDict({**transitions, "advantage": advantage, "valid": (mask > 0) & kept.unsqueeze(1)},
                             batch_size=advantage.shape)
        samples = samples.reshape(-1)
        if self.ref_policy is not None:
            samples["ref_log_prob"] = self.ref_policy.evaluate(samples["obs"], samples["action"])[0]
        return samples

    def rollout_metrics(self, samples: TensorDict) -> dict[str, Tensor]:
        """The fraction of groups whose returns differ (``diag/groups_informative``) and of groups trained on
        (``diag/groups_kept``: the informative ones with ``filter_groups``, else all), as :meth:`prepare` found
        them for these samples."""
        return dict(self.group_fractions)

    def loss(self, batch: TensorDict) -> dict[str, Tensor]:
        """Clipped surrogate - ``ent_coef`` x entropy (+ ``kl_coef`` x k3 KL to the reference), weighted means."""
        cfg, weight, old_log_prob = self.cfg, batch["weight"], batch["sample_log_prob"]
        log_prob, entropy, _ = self.policy.evaluate(batch["obs"], batch["action"])
        pg_loss, ratio = F.clipped_surrogate_loss(log_prob, old_log_prob, batch["advantage"], cfg.clip_coef,
                                                  cfg.dual_clip_coef)
        pg_loss = F.weighted_mean(pg_loss, weight)
        entropy = F.weighted_mean(entropy, weight)
        loss = pg_loss - self.ent_coef * entropy
        ref_kl = torch.zeros((), device=self.device)
        if self.ref_policy is not None:
            ref_kl = F.weighted_mean(F.k3_kl(log_prob, batch["ref_log_prob"]), weight)
            loss = loss + cfg.kl_coef * ref_kl
        with torch.no_grad():
            kl = F.approx_kl(log_prob, old_log_prob, weight)
            clip_fraction = F.clip_fraction(ratio, cfg.clip_coef, weight)
        return {"loss": loss, "loss/policy": pg_loss, "loss/entropy": entropy, "diag/approx_ref_kl": ref_kl,
                "diag/approx_kl": kl, "diag/clip_fraction": clip_fraction}

    def after_update(self) -> None:
        """Refresh the reference policy every ``ref_update_every`` updates."""
        self.num_updates += 1
        every = self.cfg.ref_update_every
        if self.ref_policy is not None and every and self.num_updates % every == 0:
            self.ref_policy.load_state_dict(self.policy.state_dict())

    def state_dict(self) -> dict:
        state = super().state_dict()
        state["num_updates"] = self.num_updates
        if self.ref_policy is not None:
            state["ref_policy"] = self.ref_policy.state_dict()
        return state

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self.num_updates = int(state.get("num_updates", 0))
        if self.ref_policy is not None and "ref_policy" in state:
            self.ref_policy.load_state_dict(state["ref_policy"])

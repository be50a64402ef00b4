"""Group Relative Policy Optimization: critic-free, advantages relative to a group of attempts.

Consecutive envs form groups of ``group_size``; with ``group_shared_reset`` every member of a group
starts each rollout from the same initial state, so the group baseline compares several attempts at
one situation (EmbodiChain's groups start from different states). Advantages are step-wise and
masked (:func:`embodirl.algos.functional.compute_step_group_advantages`); the loss is a clipped
surrogate plus an entropy bonus and, when ``kl_coef > 0``, a k3 KL penalty to a frozen reference policy.
"""

from __future__ import annotations

import copy
import logging
from typing import Literal

import torch
from tensordict import TensorDict
from torch import Tensor

from embodirl.accel.compile import Acceleration
from embodirl.algos import functional as F
from embodirl.algos.base import BaseAlgorithm, check_removed_adam_eps
from embodirl.algos.optim import OptimizerFactory
from embodirl.algos.schedules import ScheduleKind, ScheduleSpec
from embodirl.collect.collector import CollectPlan
from embodirl.collect.rollout import transitions
from embodirl.envs.base import BatchedEnv
from embodirl.errors import ConfigError, check, check_choice
from embodirl.policies.base import Policy
from embodirl.runtime.distributed import allreduce_max

__all__ = ["GRPO"]

log = logging.getLogger(__name__)

_METRICS = ["loss/policy", "loss/entropy", "diag/approx_ref_kl", "diag/approx_kl", "diag/clip_fraction"]


class GRPO(BaseAlgorithm):
    """GRPO over ``[N, T+1]`` rollouts with an actor-only policy.

    Args:
        policy: An actor-only policy (a critic would be trained for nothing).
        device: Device of policy and rollouts.
        total_env_steps: Training budget (horizon of the linear schedule).
        num_steps: Rollout length T; None = the env's episode limit, so every env can finish an episode.
        learning_rate: Learning rate (the start of a ``linear``/``cosine``/``adaptive_kl`` schedule).
        lr_schedule: ``constant``, ``linear``, ``cosine``, ``adaptive_kl`` or ``[[env_step, value], ...]``
            (see :mod:`embodirl.algos.schedules`).
        lr_schedule_kind: How a list ``lr_schedule`` is read: ``step`` (jump and hold) or ``interp``.
        desired_kl: The approx-KL per minibatch that ``lr_schedule=adaptive_kl`` aims at.
        optimizer: Optimizer factory (a ``_partial_`` node naming a ``torch.optim`` class) called with the
            parameters and the learning rate; None = ``torch.optim.Adam(eps=1e-5)``.
        n_epochs: Passes over the valid transitions per update.
        batch_size: Minibatch size in valid transitions.
        gamma: Discount of the step-wise returns.
        clip_coef: Surrogate clip range.
        ent_coef: Entropy bonus weight (the start of a ``linear``/``cosine`` schedule).
        ent_coef_schedule: ``constant``, ``linear``, ``cosine`` or ``[[env_step, value], ...]`` for ``ent_coef``.
        ent_coef_schedule_kind: How a list ``ent_coef_schedule`` is read: ``step`` or ``interp``.
        dual_clip_coef: Dual-clip bound ``c > 1`` on the objective of negative advantages; None = off.
        kl_coef: Weight of the k3 KL to the reference policy (0 = no reference is built).
        ref_update_every: Refresh the reference from the current policy every this many updates
            (0 = never: the reference stays the initial policy).
        group_size: Envs per group (>= 2, divides num_envs).
        eps: Added to the group std.
        max_grad_norm: Global gradient-norm clip.
        reset_every_rollout: Reset every env before each rollout (GRPO compares same-t steps).
        truncate_at_first_done: Keep only each env's first episode of the rollout.
        group_shared_reset: Members of a group start each rollout from one shared initial state.
        shuffle_minibatches: Shuffle the valid transitions into minibatches every epoch (False: contiguous).
        accumulate_grad_batches: Minibatches whose gradients make one optimizer step (see PPO).
        amp: ``off``, ``bf16`` or ``fp16``: autocast of the forward pass and loss (``fp16`` with a gradient scaler).
        adam_eps: Removed: the optimizer's options live in ``optimizer`` (``algo.optimizer.eps``).
        accel: Compile (and later capture) the minibatch step.
    """

    # The loss/* and diag/* names update() returns (a sweep's objective= is checked against them before training).
    metric_names = (*_METRICS, "diag/valid_fraction", "diag/num_valid")

    def __init__(
        self,
        policy: Policy,
        *,
        device: torch.device,
        total_env_steps: int,
        num_steps: int | None = None,
        learning_rate: float = 1e-4,
        lr_schedule: ScheduleSpec = "constant",
        lr_schedule_kind: ScheduleKind = "step",
        desired_kl: float = 0.01,
        optimizer: OptimizerFactory | None = None,
        n_epochs: int = 10,
        batch_size: int = 8192,
        gamma: float = 0.99,
        clip_coef: float = 0.2,
        ent_coef: float = 0.001,
        ent_coef_schedule: ScheduleSpec = "constant",
        ent_coef_schedule_kind: ScheduleKind = "step",
        dual_clip_coef: float | None = None,
        kl_coef: float = 0.0,
        ref_update_every: int = 0,
        group_size: int = 4,
        eps: float = 1e-8,
        max_grad_norm: float = 0.5,
        reset_every_rollout: bool = True,
        truncate_at_first_done: bool = True,
        group_shared_reset: bool = True,
        shuffle_minibatches: bool = True,
        accumulate_grad_batches: int = 1,
        amp: Literal["off", "bf16", "fp16"] = "off",
        adam_eps: float | None = None,
        accel: Acceleration = Acceleration(),
    ) -> None:
        super().__init__(policy, device, total_env_steps, accel)
        if policy.has_critic:
            raise ConfigError("policy", type(policy).__name__, "actor_only with algo=grpo (GRPO has no critic; "
                              "an actor_critic policy would train a critic for nothing)",
                              "drop the policy override (algo=grpo selects policy=actor_only) or pass policy=actor_only",
                              absolute=True)
        if policy.is_recurrent:
            raise ConfigError("policy", type(policy).__name__, "a feedforward actor-only policy with algo=grpo "
                              "(recurrent policies are trained by PPO)", "pass policy=actor_only, or algo=ppo",
                              absolute=True)
        check(num_steps is None or num_steps >= 1, "num_steps", num_steps, "null (the env's episode limit) or an int >= 1")
        check(n_epochs >= 1, "n_epochs", n_epochs, "an int >= 1")
        check(batch_size >= 1, "batch_size", batch_size, "an int >= 1 (valid transitions per minibatch)")
        check(0.0 <= gamma <= 1.0, "gamma", gamma, "a float in [0, 1]")
        check(clip_coef > 0, "clip_coef", clip_coef, "a float > 0, e.g. 0.2")
        check(dual_clip_coef is None or dual_clip_coef > 1, "dual_clip_coef", dual_clip_coef,
              "null (off) or a float > 1, e.g. 3.0")
        check_removed_adam_eps(adam_eps)
        check(kl_coef >= 0, "kl_coef", kl_coef, "a float >= 0 (0 for training from scratch, ~0.02 for fine-tuning)")
        check(ref_update_every >= 0, "ref_update_every", ref_update_every, "an int >= 0 (0 = never refresh)")
        check(group_size >= 2, "group_size", group_size, "an int >= 2 (a group of one has no baseline)",
              "pass algo.group_size=4 (it must divide env.num_envs)")
        check(eps > 0, "eps", eps, "a float > 0, e.g. 1e-8")
        if not reset_every_rollout:
            log.warning("GRPO with reset_every_rollout=false: group members compare steps of different episodes")
        self.num_steps = num_steps
        self.n_epochs = n_epochs
        self.batch_size = batch_size
        self.gamma = gamma
        self.clip_coef = clip_coef
        self.dual_clip_coef = dual_clip_coef
        self.kl_coef = kl_coef
        self.ref_update_every = ref_update_every
        self.group_size = group_size
        self.eps = eps
        self.reset_every_rollout = reset_every_rollout
        self.truncate_at_first_done = truncate_at_first_done
        self.group_shared_reset = group_shared_reset
        self.num_updates = 0
        self.ref_policy = self._frozen_copy() if kl_coef > 0 else None
        self.init_training(optimizer, learning_rate, lr_schedule, lr_schedule_kind, desired_kl, ent_coef,
                           ent_coef_schedule, ent_coef_schedule_kind, max_grad_norm, accumulate_grad_batches, amp,
                           shuffle_minibatches)
        self._data: dict[str, Tensor] = {}  # the update's flat [N*T] data, allocated at the first update
        self._step = self.make_minibatch_step(self.minibatch_loss)
        self._graphed = ["_step"]

    def _frozen_copy(self) -> Policy:
        ref = copy.deepcopy(self.policy)
        ref.requires_grad_(False)
        return ref.eval()

    def collect_plan(self, env: BatchedEnv) -> CollectPlan:
        if env.num_envs % self.group_size != 0:
            raise ConfigError("env.num_envs", env.num_envs, f"a multiple of algo.group_size={self.group_size}",
                              f"pass env.num_envs={max(1, env.num_envs // self.group_size) * self.group_size} "
                              "or another multiple of algo.group_size")
        return CollectPlan(
            num_steps=self.num_steps or env.max_episode_steps,
            reset_every_rollout=self.reset_every_rollout,
            group_size=self.group_size if self.group_shared_reset else 1,
            first_episode_only=self.truncate_at_first_done,
        )

    def update(self, rollout: TensorDict) -> dict[str, float]:
        self.check_rollout(rollout)
        self.apply_schedules()
        with torch.no_grad():
            returns, mask = F.compute_step_returns_and_mask(
                rollout["reward"][:, :-1], rollout["done"][:, :-1], self.gamma, self.truncate_at_first_done)
            advantage = F.compute_step_group_advantages(returns, mask, self.group_size, self.eps)
            self._load(rollout, advantage)
        valid = mask.reshape(-1).nonzero().squeeze(1)  # one host sync per update

        # Every rank takes the same number of optimizer steps (gradients are all-reduced per step): the
        # minibatches per epoch follow the largest valid count over ranks; a rank with fewer valid
        # transitions gets more (zero-weight) padding.
        most_valid = int(allreduce_max(torch.tensor([valid.numel()], device=self.device)).item())
        num_minibatches = max(1, -(-most_valid // self.batch_size))
        sums = torch.zeros(len(_METRICS), device=self.device)
        kl, num_steps = _METRICS.index("diag/approx_kl"), 0
        for _ in range(self.n_epochs):
            idx, weight = self.minibatches(valid, self.batch_size, rows=num_minibatches)
            for m in range(idx.shape[0]):
                step_metrics = self._step(idx[m], weight[m])
                sums += step_metrics
                self.adapt_learning_rate(step_metrics, kl)
            num_steps += idx.shape[0]

        self.num_updates += 1
        if self.ref_policy is not None and self.ref_update_every and self.num_updates % self.ref_update_every == 0:
            self.ref_policy.load_state_dict(self.policy.state_dict())
        self.policy.update_normalizer(rollout["obs"][:, :-1])
        simulated = rollout.batch_size[0] * rollout.get_non_tensor("num_steps_collected")
        self.env_steps_seen += simulated
        with self.blame_env(rollout):
            metrics = self.finish_metrics(_METRICS, sums / num_steps)
        metrics.update({**self.schedule_metrics(), "diag/valid_fraction": valid.numel() / simulated,
                        "diag/num_valid": float(valid.numel())})
        return metrics

    def _load(self, rollout: TensorDict, advantage: Tensor) -> None:
        """Copy the transitions into flat ``[N*T]`` buffers allocated once (a compiled or captured step reads them):
        the first update allocates them as :func:`~embodirl.collect.rollout.transitions` (one flattening for the project),
        later ones copy into ``[N, T]`` views of them, with no intermediate copy of the (possibly image) data."""
        if not self._data or self._data["advantage"].numel() != advantage.numel():
            flat = transitions(rollout.select("obs", "action", "sample_log_prob"), advantage=advantage)
            self._data = dict(flat.clone().items())
            self._data["ref_log_prob"] = torch.zeros(flat.batch_size, device=self.device)
        else:
            steps = rollout[:, :-1]
            self._data["obs"].view(*advantage.shape).update_(steps["obs"])
            for key, value in (("action", steps["action"]), ("sample_log_prob", steps["sample_log_prob"]),
                               ("advantage", advantage)):
                self._data[key].view(value.shape).copy_(value)
        if self.ref_policy is not None:  # over every transition: one static shape, whatever is valid
            self._data["ref_log_prob"].copy_(self.ref_policy.evaluate(self._data["obs"], self._data["action"])[0])

    def minibatch_loss(self, idx: Tensor, weight: Tensor) -> tuple[Tensor, Tensor]:
        """Loss of minibatch ``idx`` over valid transitions (padding has weight 0) and ``_METRICS`` in order."""
        d = self._data
        old_log_prob = d["sample_log_prob"][idx]
        log_prob, entropy, _ = self.policy.evaluate(d["obs"][idx], d["action"][idx])
        pg_loss, ratio = F.clipped_surrogate_loss(log_prob, old_log_prob, d["advantage"][idx], self.clip_coef,
                                                  self.dual_clip_coef)
        pg_loss = F.weighted_mean(pg_loss, weight)
        entropy = F.weighted_mean(entropy, weight)
        loss = pg_loss - self.ent_coef * entropy
        ref_kl = torch.zeros((), device=self.device)
        if self.ref_policy is not None:
            ref_kl = F.weighted_mean(F.k3_kl(log_prob, d["ref_log_prob"][idx]), weight)
            loss = loss + self.kl_coef * ref_kl
        with torch.no_grad():
            kl = F.approx_kl(log_prob, old_log_prob, weight)
            frac = F.clip_fraction(ratio, self.clip_coef, weight)
            metrics = torch.stack([pg_loss, entropy, ref_kl, kl, frac])
        return loss, metrics

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


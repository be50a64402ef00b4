"""Proximal Policy Optimization over the shared ``[N, T+1]`` rollout."""

from __future__ import annotations

import logging
from typing import Literal

import torch
from tensordict import TensorDict
from torch import Tensor

from embodirl.accel.compile import Acceleration, compile_step
from embodirl.algos import functional as F
from embodirl.algos.base import BaseAlgorithm, check_removed_adam_eps
from embodirl.algos.optim import OptimizerFactory
from embodirl.algos.reward_scaling import RewardScaler
from embodirl.algos.schedules import ScheduleKind, ScheduleSpec
from embodirl.collect.collector import CollectPlan
from embodirl.envs.base import BatchedEnv
from embodirl.errors import check, check_choice
from embodirl.policies.base import Policy
from embodirl.runtime.distributed import allreduce_mean

__all__ = ["PPO"]

log = logging.getLogger(__name__)

_METRICS = ["loss/policy", "loss/value", "loss/entropy", "diag/approx_kl", "diag/clip_fraction"]
_ROLLOUT_KEYS = ("obs", "action", "sample_log_prob", "value", "reward", "done", "final_value")


class PPO(BaseAlgorithm):
    """PPO with GAE (truncation-aware), clipped surrogate and value loss, entropy bonus.

    Args:
        policy: An actor-critic policy.
        device: Device of policy and rollouts.
        total_env_steps: Training budget (horizon of the linear schedule).
        num_steps: Rollout length T per env.
        learning_rate: Learning rate (the start of a ``linear``/``cosine``/``adaptive_kl`` schedule).
        lr_schedule: ``constant``, ``linear`` or ``cosine`` (to 0 over ``total_env_steps``), ``adaptive_kl``
            (rsl_rl's rule, see ``desired_kl``), or ``[[env_step, value], ...]`` (see
            :mod:`embodirl.algos.schedules`).
        lr_schedule_kind: How a list ``lr_schedule`` is read: ``step`` (jump and hold) or ``interp``.
        desired_kl: The approx-KL per minibatch that ``lr_schedule=adaptive_kl`` aims at.
        optimizer: Optimizer factory (a ``_partial_`` node naming a ``torch.optim`` class) called with the
            parameters and the learning rate; None = ``torch.optim.Adam(eps=1e-5)``.
        n_epochs: Passes over the rollout per update.
        batch_size: Minibatch size in transitions (the rollout is split into shuffled minibatches).
        gamma: Discount factor.
        gae_lambda: GAE lambda.
        clip_coef: Surrogate clip range epsilon.
        clip_value_coef: Clip range of the value update around the collecting value; None = no clipping.
        ent_coef: Entropy bonus weight (the start of a ``linear``/``cosine`` schedule).
        ent_coef_schedule: ``constant``, ``linear``, ``cosine`` or ``[[env_step, value], ...]`` for ``ent_coef``.
        ent_coef_schedule_kind: How a list ``ent_coef_schedule`` is read: ``step`` or ``interp``.
        vf_coef: Value loss weight.
        max_grad_norm: Global gradient-norm clip.
        normalize_advantage: Normalise advantages over the whole rollout.
        target_kl: Stop the epochs of an update early once the mean approx-KL of an epoch exceeds it.
        dual_clip_coef: Dual-clip PPO's bound ``c > 1`` on the objective of negative advantages; None = off.
        shuffle_minibatches: Shuffle the rollout into minibatches every epoch (False: contiguous, in order).
        accumulate_grad_batches: Minibatches whose gradients make one optimizer step (their losses weighted by
            their share of the samples, so ``k`` minibatches of ``B`` equal one of ``k B``).
        amp: ``off``, ``bf16`` or ``fp16``: autocast of the forward pass and loss (``fp16`` with a gradient scaler).
        adam_eps: Removed: the optimizer's options live in ``optimizer`` (``algo.optimizer.eps``).
        normalize_rewards: Divide rewards by the running std of the discounted return before GAE
            (SB3's ``VecNormalize`` reward scaling, see :mod:`embodirl.algos.reward_scaling`).
        seq_len: Recurrent policies only: the length of the training sequences (truncated backpropagation
            through time); must divide ``num_steps``. ``batch_size`` still counts transitions.
        accel: Compile (and later capture) the update's preparation and minibatch step.
    """

    # The loss/* and diag/* names update() returns (a sweep's objective= is checked against them before training).
    metric_names = (*_METRICS, "diag/explained_variance", "diag/epochs")

    def __init__(
        self,
        policy: Policy,
        *,
        device: torch.device,
        total_env_steps: int,
        num_steps: int = 32,
        learning_rate: float = 3e-4,
        lr_schedule: ScheduleSpec = "constant",
        lr_schedule_kind: ScheduleKind = "step",
        desired_kl: float = 0.01,
        optimizer: OptimizerFactory | None = None,
        n_epochs: int = 4,
        batch_size: int = 2048,
        gamma: float = 0.99,
        gae_lambda: float = 0.95,
        clip_coef: float = 0.2,
        clip_value_coef: float | None = None,
        ent_coef: float = 0.0,
        ent_coef_schedule: ScheduleSpec = "constant",
        ent_coef_schedule_kind: ScheduleKind = "step",
        vf_coef: float = 0.5,
        max_grad_norm: float = 0.5,
        normalize_advantage: bool = True,
        target_kl: float | None = None,
        dual_clip_coef: float | None = None,
        shuffle_minibatches: bool = True,
        accumulate_grad_batches: int = 1,
        amp: Literal["off", "bf16", "fp16"] = "off",
        adam_eps: float | None = None,
        normalize_rewards: bool = False,
        seq_len: int = 16,
        accel: Acceleration = Acceleration(),
    ) -> None:
        super().__init__(policy, device, total_env_steps, accel)
        check(num_steps >= 1, "num_steps", num_steps, "an int >= 1")
        check(n_epochs >= 1, "n_epochs", n_epochs, "an int >= 1")
        check(batch_size >= 1, "batch_size", batch_size, "an int >= 1 (transitions per minibatch)")
        check(0.0 <= gamma <= 1.0, "gamma", gamma, "a float in [0, 1]")
        check(0.0 <= gae_lambda <= 1.0, "gae_lambda", gae_lambda, "a float in [0, 1]")
        check(clip_coef > 0, "clip_coef", clip_coef, "a float > 0, e.g. 0.2")
        check(clip_value_coef is None or clip_value_coef > 0, "clip_value_coef", clip_value_coef,
              "null (no value clipping) or a float > 0")
        check(vf_coef >= 0, "vf_coef", vf_coef, "a float >= 0")
        check(dual_clip_coef is None or dual_clip_coef > 1, "dual_clip_coef", dual_clip_coef,
              "null (off) or a float > 1, e.g. 3.0")
        check_removed_adam_eps(adam_eps)
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
        self.dual_clip_coef = dual_clip_coef
        self.vf_coef = vf_coef
        self.normalize_advantage = normalize_advantage
        self.target_kl = target_kl
        check(seq_len >= 1, "seq_len", seq_len, "an int >= 1")
        if policy.is_recurrent:
            check(num_steps % seq_len == 0, "seq_len", seq_len, f"a divisor of algo.num_steps={num_steps}",
                  f"pass algo.seq_len=8 or another divisor of {num_steps}")
        self.seq_len = seq_len if policy.is_recurrent else 1
        self.init_training(optimizer, learning_rate, lr_schedule, lr_schedule_kind, desired_kl, ent_coef,
                           ent_coef_schedule, ent_coef_schedule_kind, max_grad_norm, accumulate_grad_batches, amp,
                           shuffle_minibatches)
        self.reward_scaler = RewardScaler(gamma, self.device) if normalize_rewards else None
        self._data: dict[str, Tensor] = {}  # the update's flat [N*T] data, allocated at the first update
        self._prepare = compile_step(self.prepare, accel.compile)
        self._step = self.make_minibatch_step(self.minibatch_loss)
        self._graphed = ["_prepare", "_step"]

    def collect_plan(self, env: BatchedEnv) -> CollectPlan:
        rollout = env.num_envs * self.num_steps
        if self.batch_size > rollout:
            log.warning("algo.batch_size=%d exceeds the rollout of %d transitions (env.num_envs=%d x algo.num_steps=%d): "
                        "each epoch is one minibatch of %d", self.batch_size, rollout, env.num_envs, self.num_steps,
                        rollout)
        return CollectPlan(num_steps=self.num_steps)

    def update(self, rollout: TensorDict) -> dict[str, float]:
        self.check_rollout(rollout)
        self.apply_schedules()
        if not self._data or self._data["value"].numel() != rollout.numel() - rollout.batch_size[0]:
            self._allocate(rollout)
        explained_var = self._prepare(*self.prepare_inputs(rollout))
        sums = torch.zeros(len(_METRICS), device=self.device)
        kl = _METRICS.index("diag/approx_kl")
        num_minibatches = epochs = 0
        for epochs in range(1, self.n_epochs + 1):
            idx, weight = self.minibatches(self._all, max(1, self.batch_size // self.seq_len))
            epoch_sums = torch.zeros(len(_METRICS), device=self.device)
            for m in range(idx.shape[0]):
                step_metrics = self._step(idx[m], weight[m])
                epoch_sums += step_metrics
                self.adapt_learning_rate(step_metrics, kl)
            sums += epoch_sums
            num_minibatches += idx.shape[0]
            # Early stop costs one host sync per epoch, only when target_kl is set.
            if self.target_kl is not None and allreduce_mean(epoch_sums[kl:kl + 1].clone()).item() / idx.shape[0] \
                    > self.target_kl:
                break

        self.policy.update_normalizer(rollout["obs"][:, :-1])
        self.env_steps_seen += self._all.numel() * self.seq_len
        values = torch.cat([sums / num_minibatches, explained_var.reshape(1)])
        with self.blame_env(rollout):
            metrics = self.finish_metrics([*_METRICS, "diag/explained_variance"], values)
        metrics.update({**self.schedule_metrics(), "diag/epochs": float(epochs)})
        return metrics

    def _allocate(self, rollout: TensorDict) -> None:
        """The update's data as ``[S, L]`` sequences (``L = 1`` for a feedforward policy), allocated once
        (a compiled or captured step reads them): env ``n``'s steps ``c L .. c L + L - 1`` are sequence
        ``n C + c``."""
        n, t1 = rollout.batch_size
        size, length = n * (t1 - 1), self.seq_len
        shape = (size // length, length)
        self._data = {key: torch.zeros(*shape, *rollout[key].shape[2:], dtype=rollout[key].dtype, device=self.device)
                      for key in ("action", "sample_log_prob", "value")}
        self._data["obs"] = rollout["obs"][:, :-1].reshape(*shape).clone()
        self._data.update({key: torch.zeros(*shape, device=self.device) for key in ("advantage", "returns")})
        if self.policy.is_recurrent:
            self._data["state0"] = rollout["policy_state"][:, :-1:length].reshape(shape[0]).clone()
            self._data["reset"] = torch.zeros(*shape, dtype=torch.bool, device=self.device)
        self._all = torch.arange(shape[0], device=self.device)

    @torch.no_grad()
    def prepare_inputs(self, rollout: TensorDict) -> list[Tensor | TensorDict]:
        """The rollout entries :meth:`prepare` reads, in its order; with ``normalize_rewards`` the rewards are
        scaled (and the scaler's statistics updated). The rollout itself keeps the env's rewards."""
        data = [rollout[key] for key in _ROLLOUT_KEYS]
        if self.reward_scaler is not None:
            reward, done = rollout["reward"], rollout["done"]
            scaled = self.reward_scaler(reward[:, :-1], done[:, :-1])
            data[_ROLLOUT_KEYS.index("reward")] = torch.cat([scaled, reward[:, -1:]], dim=1)
        if self.policy.is_recurrent:
            data.append(rollout["policy_state"])
        return data

    @torch.no_grad()
    def prepare(self, obs: TensorDict, action: Tensor, log_prob: Tensor, value: Tensor, reward: Tensor, done: Tensor,
                final_value: Tensor, policy_state: TensorDict | None = None) -> Tensor:
        """GAE (and advantage normalisation) into the sequence buffers; returns the explained variance."""
        advantage, returns = F.gae(reward[:, :-1], value, done[:, :-1], final_value[:, :-1], self.gamma,
                                   self.gae_lambda)
        if self.normalize_advantage:
            advantage = F.normalize(advantage)
        d = self._data
        for key, data in (("action", action), ("sample_log_prob", log_prob), ("value", value)):
            d[key].view(*data[:, :-1].shape).copy_(data[:, :-1])
        for key, data in obs.items(include_nested=True, leaves_only=True):
            d["obs"].get(key).view(*data[:, :-1].shape).copy_(data[:, :-1])
        d["advantage"].view_as(advantage).copy_(advantage)
        d["returns"].view_as(returns).copy_(returns)
        if policy_state is not None:  # sequences start from the stored state; inside, it restarts after a done
            for key, data in policy_state.items(include_nested=True, leaves_only=True):
                d["state0"].get(key).copy_(data[:, :-1:self.seq_len].reshape(d["state0"].get(key).shape))
            after_done = torch.cat([torch.zeros_like(done[:, :1]), done[:, :-2]], dim=1)
            d["reset"].view_as(after_done).copy_(after_done)
            d["reset"][:, 0] = False
        return F.explained_variance(d["value"], d["returns"])

    def state_dict(self) -> dict:
        state = super().state_dict()
        if self.reward_scaler is not None:
            state["reward_scaler"] = self.reward_scaler.state_dict()
        return state

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        if self.reward_scaler is not None and "reward_scaler" in state:
            self.reward_scaler.load_state_dict(state["reward_scaler"])

    def minibatch_loss(self, idx: Tensor, weight: Tensor) -> tuple[Tensor, Tensor]:
        """Loss of the sequences ``idx`` (padding has weight 0) and detached ``_METRICS`` in order."""
        d = self._data
        obs, action, old_log_prob, old_value = d["obs"][idx], d["action"][idx], d["sample_log_prob"][idx], d["value"][idx]
        batch, length = obs.batch_size
        if self.policy.is_recurrent:
            log_prob, entropy, value = self.policy.evaluate(obs, action, d["state0"][idx], d["reset"][idx])
        else:
            log_prob, entropy, value = (x.view(batch, length) for x in self.policy.evaluate(
                obs.reshape(batch * length), action.reshape(batch * length, *action.shape[2:])))
        weight = weight.unsqueeze(1).expand(batch, length)
        pg_loss, ratio = F.clipped_surrogate_loss(log_prob, old_log_prob, d["advantage"][idx], self.clip_coef,
                                                  self.dual_clip_coef)
        pg_loss = F.weighted_mean(pg_loss, weight)
        v_loss = F.value_loss(value, old_value, d["returns"][idx], self.clip_value_coef, weight)
        entropy = F.weighted_mean(entropy, weight)
        loss = pg_loss + self.vf_coef * v_loss - self.ent_coef * entropy
        with torch.no_grad():
            kl = F.approx_kl(log_prob, old_log_prob, weight)
            frac = F.clip_fraction(ratio, self.clip_coef, weight)
            metrics = torch.stack([pg_loss, v_loss, entropy, kl, frac])
        return loss, metrics

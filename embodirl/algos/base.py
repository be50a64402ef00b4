"""The algorithm interface: ``update(rollout) -> metrics`` plus what the collector must do for it."""

from __future__ import annotations

import contextlib
import logging
import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
from tensordict import TensorDict
from torch import Tensor

from embodirl.accel.compile import Acceleration, capture, compile_step
from embodirl.algos.functional import minibatch_indices, pad_minibatches
from embodirl.algos.optim import (
    AMP_DTYPES,
    OptimizerFactory,
    autocast_loss,
    build_optimizer,
)
from embodirl.algos.schedules import ScheduleSpec, adaptive_kl_lr, parse_schedule
from embodirl.collect.collector import CollectPlan
from embodirl.collect.rollout import non_finite_env_output, validate_rollout
from embodirl.envs.base import BatchedEnv
from embodirl.errors import NonFiniteLossError, check, check_choice
from embodirl.policies.base import Policy
from embodirl.runtime.distributed import allreduce_grads, allreduce_mean

__all__ = ["BaseAlgorithm", "check_removed_adam_eps"]

log = logging.getLogger(__name__)


def check_removed_adam_eps(adam_eps: float | None) -> None:
    """``adam_eps`` moved into the optimizer node: refuse it, naming the new key."""
    check(adam_eps is None, "adam_eps", adam_eps, "no value: the optimizer's options moved to the node algo.optimizer",
          f"pass algo.optimizer.eps={adam_eps} instead")


MinibatchLoss = Callable[[Tensor, Tensor], tuple[Tensor, Tensor]]


class BaseAlgorithm(ABC):
    """Base class of on-policy algorithms over ``[N, T+1]`` rollouts.

    A subclass writes its update as epochs over static-shape minibatches (:func:`~embodirl.algos.functional.
    minibatch_indices`) and its loss as a function ``(idx [B], weight [B]) -> (loss, metrics [k])`` that reads
    the update's data from tensors allocated once; :meth:`make_minibatch_step` turns it into the gradient
    step (compiled loss with its AOT-compiled backward, all-reduce, clip, optimizer), which
    :meth:`use_cuda_graphs` later records as one CUDA graph.

    Args:
        policy: The policy to train (already on ``device``).
        device: Device of the policy and rollouts.
        total_env_steps: Training budget, the horizon of learning-rate schedules.
        accel: Compile the minibatch step (and capture it as a CUDA graph when training starts).
    """

    def __init__(self, policy: Policy, device: torch.device, total_env_steps: int,
                 accel: Acceleration = Acceleration()) -> None:
        self.policy = policy
        self.device = torch.device(device)
        self.total_env_steps = total_env_steps
        self.accel = accel
        self.env_steps_seen = 0
        self.env_name = "(see env=)"  # named in messages about the env's output; the build sets it
        self._graphed: list[str] = []  # attributes holding steps to capture in use_cuda_graphs()

    @abstractmethod
    def collect_plan(self, env: BatchedEnv) -> CollectPlan:
        """What the collector must do for this algorithm on ``env`` (validates the pairing)."""

    @abstractmethod
    def update(self, rollout: TensorDict) -> dict[str, float]:
        """Update the policy from a rollout; return scalar metrics (``loss/*``, ``diag/*``)."""

    def init_training(self, optimizer: OptimizerFactory | None, learning_rate: float, lr_schedule: ScheduleSpec,
                      lr_schedule_kind: str, desired_kl: float, ent_coef: float, ent_coef_schedule: ScheduleSpec,
                      ent_coef_schedule_kind: str, max_grad_norm: float, accumulate_grad_batches: int,
                      amp: str, shuffle_minibatches: bool) -> None:
        """Check the knobs every algorithm shares and build the optimizer (see the subclasses' Args).

        With CUDA graphs an optimizer that has a ``capturable`` option (Adam, AdamW, ...) gets it, with its
        learning rate a tensor changed in place; otherwise, and with ``amp=fp16`` (the gradient scaler syncs
        with the host), the update is compiled but not captured.
        """
        check(learning_rate > 0, "learning_rate", learning_rate, "a float > 0, e.g. 3e-4")
        check(ent_coef >= 0, "ent_coef", ent_coef, "a float >= 0")
        check(desired_kl > 0, "desired_kl", desired_kl, "a float > 0, e.g. 0.01 (used by lr_schedule=adaptive_kl)")
        check(max_grad_norm > 0, "max_grad_norm", max_grad_norm, "a float > 0, e.g. 0.5")
        check(accumulate_grad_batches >= 1, "accumulate_grad_batches", accumulate_grad_batches,
              "an int >= 1 (minibatches whose gradients make one optimizer step)")
        check_choice("amp", amp, AMP_DTYPES)
        self.lr_schedule = parse_schedule("lr_schedule", lr_schedule, lr_schedule_kind, learning_rate, adaptive=True)
        self.ent_schedule = parse_schedule("ent_coef_schedule", ent_coef_schedule, ent_coef_schedule_kind, ent_coef)
        self.desired_kl = desired_kl
        self.max_grad_norm = max_grad_norm
        self.accumulate_grad_batches = accumulate_grad_batches
        self.amp = amp
        self.shuffle_minibatches = shuffle_minibatches
        # A tensor the (compiled, captured) loss reads: changing it in place never recompiles or re-records.
        self.ent_coef = torch.tensor(self.ent_schedule.start, device=self.device)
        self.params = [p for p in self.policy.parameters() if p.requires_grad]
        self.optimizer, self._capturable = build_optimizer(optimizer, self.params, self.lr_schedule.start,
                                                           self.accel.cuda_graphs, self.device)
        self.grad_scaler = torch.amp.GradScaler(self.device.type) if amp == "fp16" else None
        if amp != "off" and self.device.type == "cpu":
            log.warning("algo.amp=%s on the CPU: autocast casts more than it saves for small networks (the CartPole "
                        "update ran 6x slower in bf16 and fp16); it is meant for CUDA devices", amp)

    def apply_schedules(self) -> None:
        """Set the learning rate (unless adaptive) and the entropy weight for the coming update."""
        if not self.lr_schedule.adaptive:
            self.set_learning_rate(self.lr_schedule.value(self.env_steps_seen, self.total_env_steps))
        self.ent_coef.fill_(self.ent_schedule.value(self.env_steps_seen, self.total_env_steps))

    def set_learning_rate(self, lr: float | Tensor) -> None:
        """Set every parameter group's rate (in place where it is a tensor, as captured steps read it)."""
        for group in self.optimizer.param_groups:
            if isinstance(group["lr"], Tensor):
                group["lr"].copy_(torch.as_tensor(lr))
            else:
                group["lr"] = float(lr)

    @property
    def learning_rate(self) -> float:
        """The optimizer's current learning rate."""
        return float(self.optimizer.param_groups[0]["lr"])

    def adapt_learning_rate(self, metrics: Tensor, kl_index: int) -> None:
        """After a minibatch with ``lr_schedule=adaptive_kl``: rsl_rl's rule on its approx-KL (averaged over
        ranks, so every rank keeps the same rate); the new rate applies from the next minibatch on. A float rate
        costs one host sync per minibatch; a tensor one (CUDA graphs) none."""
        if self.lr_schedule.adaptive:
            kl = allreduce_mean(metrics[kl_index:kl_index + 1].clone())[0]
            lr = self.optimizer.param_groups[0]["lr"]
            self.set_learning_rate(adaptive_kl_lr(lr, kl if isinstance(lr, Tensor) else kl.item(), self.desired_kl))

    def schedule_metrics(self) -> dict[str, float]:
        """``train/learning_rate`` and ``train/ent_coef`` in effect (after an adaptive update: the new rate)."""
        return {"train/learning_rate": self.learning_rate, "train/ent_coef": float(self.ent_coef)}

    def minibatches(self, indices: Tensor, batch_size: int, rows: int | None = None) -> tuple[Tensor, Tensor]:
        """One epoch's minibatches of ``indices`` (shuffled unless ``shuffle_minibatches=false``), padded to at least
        ``rows`` minibatches, grouped ``accumulate_grad_batches`` to an optimizer step.

        Returns:
            ``(idx, weight)``, ``[M, B]`` (one minibatch per step) or ``[G, k, B]`` when accumulating.
        """
        idx, weight = minibatch_indices(indices, batch_size, shuffle=self.shuffle_minibatches)
        if rows is not None:
            idx, weight = pad_minibatches(idx, weight, rows)
        k = self.accumulate_grad_batches
        if k == 1:
            return idx, weight
        idx, weight = pad_minibatches(idx, weight, -(-idx.shape[0] // k) * k)
        return idx.view(-1, k, idx.shape[1]), weight.view(-1, k, weight.shape[1])

    def make_minibatch_step(self, loss_fn: MinibatchLoss) -> Callable[[Tensor, Tensor], Tensor]:
        """The gradient step of one minibatch (or ``accumulate_grad_batches`` of them): compiled loss (under
        autocast with ``amp``), backward, all-reduce, global-norm clip, optimizer step.

        Args:
            loss_fn: ``(idx [B], weight [B]) -> (loss, metrics [k])``, a weighted mean over the minibatch;
                compiled with ``fullgraph=True`` when ``accel.compile`` (its backward is compiled by AOTAutograd).

        Returns:
            ``step(idx, weight) -> metrics`` (detached; no host sync without ``amp=fp16``); ``idx`` and ``weight``
            are ``[B]``, or ``[k, B]`` with accumulation: each minibatch's loss is weighted by its share of the
            real samples, so the step equals one over the ``k B`` samples at once.
        """
        loss_fn = compile_step(autocast_loss(loss_fn, self.amp, self.device), self.accel.compile)
        scaler = self.grad_scaler

        def backward(loss: Tensor) -> None:
            (scaler.scale(loss) if scaler is not None else loss).backward()

        def optimizer_step() -> None:
            allreduce_grads(self.params)  # identical parameters on every rank after every step
            if scaler is not None:
                scaler.unscale_(self.optimizer)
            torch.nn.utils.clip_grad_norm_(self.params, self.max_grad_norm, foreach=True)
            if scaler is not None:
                scaler.step(self.optimizer)
                scaler.update()
            else:
                self.optimizer.step()

        def step(idx: Tensor, weight: Tensor) -> Tensor:
            self.optimizer.zero_grad(set_to_none=True)
            loss, metrics = loss_fn(idx, weight)
            backward(loss)
            optimizer_step()
            return metrics.detach()

        def accumulated_step(idx: Tensor, weight: Tensor) -> Tensor:
            self.optimizer.zero_grad(set_to_none=True)
            total = weight.sum().clamp_min(1.0)
            metrics = None
            for j in range(idx.shape[0]):
                loss, part = loss_fn(idx[j], weight[j])
                share = weight[j].sum() / total
                backward(loss * share)
                metrics = part.detach() * share if metrics is None else metrics + part.detach() * share
            optimizer_step()
            return metrics

        return step if self.accumulate_grad_batches == 1 else accumulated_step

    def use_cuda_graphs(self) -> None:
        """Record the steps named in ``self._graphed`` as CUDA graphs at their next calls (after compile warm-up)."""
        if self.accel.cuda_graphs and not (self._capturable and self.grad_scaler is None):
            log.info("the update is compiled but not captured as a CUDA graph (algo.amp=fp16, or an optimizer "
                     "without a capturable option)")
        elif self.accel.cuda_graphs:
            for name in self._graphed:
                setattr(self, name, capture(getattr(self, name), True, self.device))

    @contextlib.contextmanager
    def blame_env(self, rollout: TensorDict) -> Iterator[None]:
        """Re-raise a :class:`NonFiniteLossError` as the env's fault when the env itself produced NaN or infinite
        rewards or observations in ``rollout`` (a lower learning rate would not help); ``env_name`` names it."""
        try:
            yield
        except NonFiniteLossError:
            what = non_finite_env_output(rollout)
            if what is None:
                raise
            raise NonFiniteLossError(
                f"the env {self.env_name} produced a NaN or infinite {what}, and the loss followed: training stopped, "
                "the last good checkpoint is kept. Fix: check the env's settings (env.*) or its code; its reward and "
                "observations must stay finite") from None

    def check_rollout(self, rollout: TensorDict) -> None:
        """Validate the rollout against the schema and the policy's spaces (metadata only, no sync)."""
        validate_rollout(rollout, getattr(self.policy, "obs_spec", None), self.policy.dist.action_shape)

    def state_dict(self) -> dict[str, Any]:
        """Optimizer, schedule (env steps, the adaptive learning rate) and gradient-scaler state (the policy is
        checkpointed separately)."""
        state = {"optimizer": self.optimizer.state_dict(), "env_steps_seen": self.env_steps_seen,
                 "learning_rate": self.learning_rate}
        if self.grad_scaler is not None:
            state["grad_scaler"] = self.grad_scaler.state_dict()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
        self.env_steps_seen = int(state["env_steps_seen"])
        if "learning_rate" in state:
            self.set_learning_rate(float(state["learning_rate"]))
        if self.grad_scaler is not None and "grad_scaler" in state:
            self.grad_scaler.load_state_dict(state["grad_scaler"])

    @staticmethod
    def finish_metrics(names: list[str], values: torch.Tensor) -> dict[str, float]:
        """Average device-side metrics over ranks, fetch them with one host sync; raise on a non-finite loss."""
        metrics = dict(zip(names, allreduce_mean(values.float()).tolist(), strict=True))
        bad = {k: v for k, v in metrics.items() if k.startswith("loss/") and not math.isfinite(v)}
        if bad:
            raise NonFiniteLossError(
                f"non-finite loss {bad}: training stopped, the last good checkpoint is kept. "
                "Fix: lower algo.learning_rate, keep algo.max_grad_norm set, or enable policy.normalize_obs"
            )
        return metrics

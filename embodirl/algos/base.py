"""The on-policy algorithm: a loss over minibatches of prepared samples, trained by the one update loop.

To add an algorithm (``embodirl/algos/a2c.py`` is the example): declare its keys in a schema, a subclass of
:class:`~embodirl.config.algos.OnPolicyConfig` whose ``target`` names the class; write an option file
``conf/algo/<name>.yaml`` with that ``_target_`` and the values; subclass :class:`OnPolicyAlgorithm` with a
constructor ``(cfg, *, policy, device, total_env_steps, accel)``, its ``metric_names``, and three plain functions:

* ``prepare(rollout) -> samples``: from the ``[N, T+1]`` rollout (:mod:`embodirl.collect.rollout`), the update's
  samples, a TensorDict whose first batch dim indexes them (``[N*T]`` transitions, or ``[S, L]`` sequences),
  with whatever the loss reads (advantages, returns, ...). A boolean ``"valid"`` entry of ``[S]`` samples
  restricts the minibatches to the samples it marks (GRPO's first episodes);
* ``loss(batch) -> {"loss": ..., "loss/<term>": ..., "diag/<name>": ...}``: on a minibatch ``samples[idx]`` with
  its ``"weight"`` (0 for padding, so every minibatch has one static shape), weighted means; ``"loss"`` is
  minimised, the other terms are logged (averaged over the update's steps);
* ``collect_plan(env)``: what the collector must do for it.

The base class owns the rest: the schedules, the epochs of shuffled minibatches, the gradient step
(accumulation, fp16 gradient scaling, all-reduce over ranks, global-norm clip), the adaptive learning rate and
the ``target_kl`` early stop (both read the loss's ``"diag/approx_kl"``), the metrics fetched with one host
sync, and the checkpointed state. Compilation and CUDA graphs wrap ``prepare`` and the gradient step from
outside (:mod:`embodirl.accel.update`): an algorithm holds no acceleration code.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
from abc import ABC, abstractmethod
from collections.abc import Iterator
from typing import Any, ClassVar, Protocol, runtime_checkable

import torch
from tensordict import TensorDict
from torch import Tensor

from embodirl.accel.compile import Acceleration
from embodirl.accel.update import LossAndMetrics, UpdateSteps
from embodirl.algos.functional import minibatch_indices, pad_minibatches
from embodirl.algos.optim import build_optimizer
from embodirl.algos.schedules import adaptive_kl_lr
from embodirl.collect.collector import CollectPlan
from embodirl.collect.rollout import non_finite_env_output, validate_rollout
from embodirl.config.algos import OnPolicyConfig
from embodirl.envs.base import BatchedEnv
from embodirl.errors import NonFiniteLossError
from embodirl.policies.base import Policy
from embodirl.runtime.distributed import allreduce_grads, allreduce_max, allreduce_mean

__all__ = ["EAGER", "Algorithm", "OnPolicyAlgorithm", "blame_env", "finish_metrics"]

log = logging.getLogger(__name__)

EAGER = Acceleration()  # neither compiled nor captured


@runtime_checkable
class Algorithm(Protocol):
    """What the core calls on an algorithm: the Trainer, the checkpoints, the build and its compile warm-up.

    Two families implement it: :class:`OnPolicyAlgorithm` (epochs of minibatches over each rollout) and
    :class:`~embodirl.algos.off_policy.OffPolicyAlgorithm` (a replay buffer sampled several times per env step).

    Attributes:
        policy: The policy that acts in the collector and the evaluator (what ``best.pt`` and export keep).
        env_name: Names the env in messages about its output (the build sets it).
    """

    policy: Policy
    env_name: str

    @property
    def metric_names(self) -> tuple[str, ...]:
        """The ``loss/*`` and ``diag/*`` names :meth:`update` returns (an ``objective=`` is checked against them)."""

    @property
    def learning_rate(self) -> float:
        """The (first) optimizer's current learning rate, named in the divergence message."""

    def collect_plan(self, env: BatchedEnv) -> CollectPlan:
        """What the collector must do for this algorithm on ``env`` (validates the pairing)."""

    def update(self, rollout: TensorDict) -> dict[str, float]:
        """Learn from a freshly collected ``[N, T+1]`` rollout; the metrics to log (fetched with one host sync)."""

    def optimizers(self) -> dict[str, torch.optim.Optimizer]:
        """The optimizers by their key in :meth:`state_dict` (a resume checks their state's shapes)."""

    def networks(self) -> dict[str, torch.nn.Module]:
        """The algorithm's own trained networks besides the policy (critics, targets), by their key in
        :meth:`state_dict`; every rank must hold the same ones (the run's end compares them)."""

    def use_cuda_graphs(self) -> None:
        """Capture the update's steps at their next calls, where it does (the Trainer calls it before training)."""

    def state_dict(self) -> dict[str, Any]:
        """Everything but the policy that a resume needs (optimizers, counters, networks of its own)."""

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned."""


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


class OnPolicyAlgorithm(ABC):
    """Base class of on-policy algorithms over ``[N, T+1]`` rollouts (see the module docstring).

    Args:
        cfg: The algorithm's keys (its schema, a subclass of :class:`OnPolicyConfig`).
        policy: The policy to train (already on ``device``).
        device: Device of the policy and rollouts.
        total_env_steps: Training budget, the horizon of the schedules.
        accel: Compile the update's steps (and capture them as CUDA graphs when training starts).

    Attributes:
        metric_names: The ``loss/*`` and ``diag/*`` names :meth:`update` returns (a sweep's ``objective=`` is
            checked against them before training).
        compile_prepare: Whether the acceleration layer compiles ``prepare`` (False where it loops over
            episode-long rollouts, which would compile slowly).
    """

    metric_names: tuple[str, ...] = ()  # an algorithm may extend it per instance (PPO's symmetry loss, curiosity)
    compile_prepare: ClassVar[bool] = True

    def __init__(self, cfg: OnPolicyConfig, *, policy: Policy, device: torch.device, total_env_steps: int,
                 accel: Acceleration = EAGER) -> None:
        self.cfg = cfg
        self.policy = policy
        self.device = torch.device(device)
        self.total_env_steps = total_env_steps
        self.env_steps_seen = 0
        self.env_name = "(see env=)"  # named in messages about the env's output; the build sets it
        self.lr_schedule, self.ent_schedule = cfg.lr(), cfg.ent()
        # A tensor the (compiled, captured) loss reads: changing it in place never recompiles or re-records.
        self.ent_coef = torch.tensor(self.ent_schedule.start, device=self.device)
        self.params = [p for p in policy.parameters() if p.requires_grad]
        self.optimizer, self._capturable = build_optimizer(cfg.optimizer, self.params, self.lr_schedule.start,
                                                           accel.cuda_graphs, self.device)
        self.grad_scaler = torch.amp.GradScaler(self.device.type) if cfg.amp == "fp16" else None
        if cfg.amp != "off" and self.device.type == "cpu":
            log.warning("algo.amp=%s on the CPU: autocast casts more than it saves for small networks; it is meant "
                        "for CUDA devices", cfg.amp)
        self.steps = UpdateSteps(self.prepare, self.rollout_metrics, self.loss, self.gradient_step, accel=accel,
                                 device=self.device, amp=cfg.amp, compile_prepare=self.compile_prepare)

    # --- what an algorithm writes ---------------------------------------------------------------------------
    @abstractmethod
    def collect_plan(self, env: BatchedEnv) -> CollectPlan:
        """What the collector must do for this algorithm on ``env`` (validates the pairing)."""

    @abstractmethod
    def prepare(self, rollout: TensorDict) -> TensorDict:
        """The update's samples from an ``[N, T+1]`` rollout (see the module docstring)."""

    @abstractmethod
    def loss(self, batch: TensorDict) -> dict[str, Tensor]:
        """Named terms of a minibatch with ``"weight"``: ``"loss"`` (minimised), ``"loss/*"``, ``"diag/*"``."""

    def rollout_metrics(self, samples: TensorDict) -> dict[str, Tensor]:
        """Diagnostics of the whole rollout's samples (scalars), logged with the update's metrics."""
        return {}

    def after_update(self) -> None:  # noqa: B027 (an optional hook: most algorithms need none)
        """Called after an update's gradient steps (GRPO refreshes its reference policy here)."""

    # --- the one update loop ----------------------------------------------------------------------------------
    def update(self, rollout: TensorDict) -> dict[str, float]:
        """Update the policy from a rollout: prepare the samples, then epochs x minibatches of gradient steps.

        Returns:
            The loss terms averaged over the steps, the rollout's diagnostics, ``diag/epochs`` (fewer than
            ``num_epochs`` after a ``target_kl`` stop) and the schedules in effect.
        """
        self.check_rollout(rollout)
        self.apply_schedules()
        samples, rollout_metrics = self.steps.prepare(rollout)
        indices, count = self.sample_indices(samples)
        sums = torch.zeros((), device=self.device)  # grows to the metrics' shape at the first step
        num_steps = epochs = 0
        for _ in range(self.cfg.num_epochs):
            idx, weight = self.minibatches(samples, indices, count)
            epoch_sums = torch.zeros((), device=self.device)
            for step_idx, step_weight in zip(idx, weight, strict=True):
                step_metrics = self.steps.step(step_idx, step_weight)
                epoch_sums = epoch_sums + step_metrics
                self.adapt_learning_rate(step_metrics)
            sums = sums + epoch_sums
            num_steps, epochs = num_steps + idx.shape[0], epochs + 1
            if self.kl_beyond_target(epoch_sums, idx.shape[0]):  # one host sync per epoch, with target_kl only
                break
        self.after_update()
        self.policy.update_normalizer(rollout["obs"][:, :-1])
        simulated = rollout.batch_size[0] * rollout.get_non_tensor("num_steps_collected", rollout.batch_size[1] - 1)
        self.env_steps_seen += simulated
        values = torch.cat([sums / num_steps, *(v.reshape(1) for v in rollout_metrics.values())])
        with self.blame_env(rollout):
            metrics = finish_metrics([*self.steps.metric_names, *rollout_metrics], values)
        metrics.update({**self.schedule_metrics(), "diag/epochs": float(epochs)})
        if "valid" in samples:
            metrics.update({"diag/valid_fraction": indices.numel() / simulated,
                            "diag/num_valid": float(indices.numel())})
        return metrics

    def sample_indices(self, samples: TensorDict) -> tuple[Tensor, int]:
        """The indices of the samples to train on (the ``"valid"`` ones where ``prepare`` marks them; one host
        sync) and how many minibatches' worth to cover: the most over ranks, so every rank takes the same number
        of optimizer steps (gradients are all-reduced per step); a rank with fewer gets zero-weight padding."""
        if "valid" not in samples:
            return torch.arange(samples.batch_size[0], device=self.device), samples.batch_size[0]
        valid = samples["valid"].nonzero().squeeze(1)
        return valid, int(allreduce_max(torch.tensor([valid.numel()], device=self.device)).item())

    def minibatches(self, samples: TensorDict, indices: Tensor, count: int) -> tuple[Tensor, Tensor]:
        """One epoch's minibatches of ``indices`` (shuffled unless ``shuffle_minibatches=false``), at least enough
        for ``count`` samples, grouped ``accumulate_minibatches`` to an optimizer step.

        ``minibatch_size`` counts transitions: a sample of ``L`` steps (a sequence) counts ``L``.

        Returns:
            ``(idx, weight)``, both ``[G, k, B]``: ``G`` optimizer steps of ``k`` minibatches of ``B`` samples.
        """
        length, num = math.prod(samples.batch_size[1:]), samples.batch_size[0]
        # beyond the samples, one minibatch of them (padding to minibatch_size would be computed, weighted 0)
        size = num if self.cfg.minibatch_size is None else min(num, max(1, self.cfg.minibatch_size // length))
        idx, weight = minibatch_indices(indices, size, shuffle=self.cfg.shuffle_minibatches)
        k = self.cfg.accumulate_minibatches
        idx, weight = pad_minibatches(idx, weight, -(-max(1, -(-count // size)) // k) * k)
        return idx.view(-1, k, size), weight.view(-1, k, size)

    def gradient_step(self, loss_and_metrics: LossAndMetrics, idx: Tensor, weight: Tensor) -> Tensor:
        """One optimizer step over ``k`` minibatches (``idx``, ``weight``: ``[k, B]``).

        Each minibatch's loss (and metrics) is weighted by its share of the real samples, so ``k`` minibatches of
        ``B`` make the step of one of ``k B``; then backward (scaled with fp16), the all-reduce of the gradients
        (identical parameters on every rank), the global-norm clip and the optimizer step.

        Returns:
            The detached metrics of the step, ``[len(metric_names)]``.
        """
        self.optimizer.zero_grad(set_to_none=True)
        total = weight.sum().clamp_min(1.0)
        parts = []
        for j in range(idx.shape[0]):
            loss, metrics = loss_and_metrics(idx[j], weight[j])
            share = weight[j].sum() / total
            loss = loss * share
            (self.grad_scaler.scale(loss) if self.grad_scaler is not None else loss).backward()
            parts.append(metrics * share)
        allreduce_grads(self.params)
        if self.grad_scaler is not None:
            self.grad_scaler.unscale_(self.optimizer)
        torch.nn.utils.clip_grad_norm_(self.params, self.cfg.max_grad_norm, foreach=True)
        if self.grad_scaler is not None:
            self.grad_scaler.step(self.optimizer)
            self.grad_scaler.update()
        else:
            self.optimizer.step()
        return functools.reduce(torch.add, parts)

    def use_cuda_graphs(self) -> None:
        """Capture the update's steps as CUDA graphs at their next calls (with ``cuda_graphs``); the trainer calls
        it before training, once every buffer they read is final."""
        self.steps.capture(self._capturable and self.grad_scaler is None)

    # --- schedules and the approx-KL rules -------------------------------------------------------------------
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

    def schedule_metrics(self) -> dict[str, float]:
        """``train/learning_rate`` and ``train/ent_coef`` in effect (after an adaptive update: the new rate)."""
        return {"train/learning_rate": self.learning_rate, "train/ent_coef": float(self.ent_coef)}

    def _kl(self, metrics: Tensor) -> Tensor:
        """The ``diag/approx_kl`` entry of a step's (or an epoch's) metrics, averaged over ranks."""
        if "diag/approx_kl" not in self.steps.metric_names:
            raise TypeError(f"{type(self).__name__}.loss must return 'diag/approx_kl' for algo.lr_schedule="
                            "adaptive_kl and algo.target_kl")
        i = self.steps.metric_names.index("diag/approx_kl")
        return allreduce_mean(metrics[i:i + 1].clone())[0]

    def adapt_learning_rate(self, metrics: Tensor) -> None:
        """After a step with ``lr_schedule=adaptive_kl``: rsl_rl's rule on its approx-KL (averaged over ranks, so
        every rank keeps the same rate); the new rate applies from the next step on. A float rate costs one host
        sync per step; a tensor one (CUDA graphs) none."""
        if self.lr_schedule.adaptive:
            kl = self._kl(metrics)
            lr = self.optimizer.param_groups[0]["lr"]
            self.set_learning_rate(adaptive_kl_lr(lr, kl if isinstance(lr, Tensor) else kl.item(), self.cfg.desired_kl))

    def kl_beyond_target(self, epoch_sums: Tensor, num_steps: int) -> bool:
        """Whether an epoch's mean approx-KL exceeds ``target_kl`` (never when it is null)."""
        return self.cfg.target_kl is not None and self._kl(epoch_sums).item() / num_steps > self.cfg.target_kl

    # --- checks, state, metrics -------------------------------------------------------------------------------
    def blame_env(self, rollout: TensorDict) -> contextlib.AbstractContextManager[None]:
        """:func:`blame_env` for this algorithm's env."""
        return blame_env(self.env_name, rollout)

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

    def optimizers(self) -> dict[str, torch.optim.Optimizer]:
        return {"optimizer": self.optimizer}

    def networks(self) -> dict[str, torch.nn.Module]:
        """None: the policy is the only trained network of an on-policy algorithm."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
        self.env_steps_seen = int(state["env_steps_seen"])
        if "learning_rate" in state:
            self.set_learning_rate(float(state["learning_rate"]))
        if self.grad_scaler is not None and "grad_scaler" in state:
            self.grad_scaler.load_state_dict(state["grad_scaler"])


@contextlib.contextmanager
def blame_env(env_name: str, rollout: TensorDict) -> Iterator[None]:
    """Re-raise a :class:`NonFiniteLossError` as the env's fault when the env ``env_name`` itself produced NaN or
    infinite rewards or observations in ``rollout`` (a lower learning rate would not help)."""
    try:
        yield
    except NonFiniteLossError:
        what = non_finite_env_output(rollout)
        if what is None:
            raise
        raise NonFiniteLossError(
            f"the env {env_name} produced a NaN or infinite {what}, and the loss followed: training stopped, "
            "the last good checkpoint is kept. Fix: check the env's settings (env.*) or its code; its reward and "
            "observations must stay finite") from None

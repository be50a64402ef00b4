"""The acceleration layer of an algorithm's update: its ``prepare`` and its gradient step, eager or compiled and
captured.

An algorithm (:class:`embodirl.algos.base.OnPolicyAlgorithm`) writes plain functions over TensorDicts: ``prepare``
(rollout -> samples), ``loss`` (a minibatch of samples with its ``"weight"`` -> named terms) and the gradient step
around the loss. :class:`UpdateSteps` runs them:

* eager: ``prepare`` is called and each minibatch is gathered from its output, ``samples[idx]``;
* compiled (``accel.compile``) or captured (``accel.cuda_graphs``): ``prepare``'s output is copied into buffers
  that this class allocates at the first update and owns, so every later update reads and writes the same memory;
  the minibatch's gather from them, the loss and (with ``amp``) its autocast region are one compiled graph
  (``fullgraph=True``); ``prepare`` is compiled too, with the copy into the buffers, unless the algorithm says
  ``compile_prepare = False``;
* :meth:`UpdateSteps.capture` records ``prepare`` and the whole gradient step (loss, backward, all-reduce, clip,
  optimizer step) as CUDA graphs, where the optimizer is capturable and no fp16 gradient scaler (which syncs
  with the host) takes part.

Compilation happens at the first update, which the build's warm-up runs before training.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable

import torch
from tensordict import TensorDict
from torch import Tensor

from embodirl.accel.compile import Acceleration, capture, compile_step

__all__ = ["AMP_DTYPES", "GradientStep", "LossAndMetrics", "UpdateSteps"]

log = logging.getLogger(__name__)

AMP_DTYPES = {"off": None, "bf16": torch.bfloat16, "fp16": torch.float16}

Prepare = Callable[[TensorDict], TensorDict]
RolloutMetrics = Callable[[TensorDict], dict[str, Tensor]]
Loss = Callable[[TensorDict], dict[str, Tensor]]
# (idx [B], weight [B]) -> (loss to minimise, its detached named terms stacked in metric_names order)
LossAndMetrics = Callable[[Tensor, Tensor], tuple[Tensor, Tensor]]
# (loss_and_metrics, idx [k, B], weight [k, B]) -> the step's detached metrics
GradientStep = Callable[[LossAndMetrics, Tensor, Tensor], Tensor]


class UpdateSteps:
    """Runs an algorithm's ``prepare`` and gradient steps, compiled and captured as ``accel`` says.

    Args:
        prepare: ``rollout -> samples``: the update's samples (first batch dim: the sample index); run without
            gradients.
        rollout_metrics: ``samples -> {name: scalar}``, diagnostics of the whole rollout (explained variance).
        loss: ``batch -> {"loss": total, "loss/...": ..., "diag/...": ...}`` over ``samples[idx]`` with ``"weight"``.
        gradient_step: The optimizer step around the loss (:meth:`~embodirl.algos.base.OnPolicyAlgorithm.
            gradient_step`).
        accel: Compile (and later capture) the steps.
        device: The device of the update.
        amp: ``off``, ``bf16`` or ``fp16``: the loss runs under ``torch.autocast`` in that dtype.
        compile_prepare: Compile (and capture) ``prepare``; False for one that loops over long rollouts.

    Attributes:
        metric_names: The names of the loss's terms (other than ``"loss"``), in the order of a step's metrics;
            known after the first step.
    """

    def __init__(self, prepare: Prepare, rollout_metrics: RolloutMetrics, loss: Loss, gradient_step: GradientStep, *,
                 accel: Acceleration, device: torch.device, amp: str = "off", compile_prepare: bool = True) -> None:
        self.accel = accel
        self.device = device
        self.amp_dtype = AMP_DTYPES[amp]
        self.buffered = accel.compile or accel.cuda_graphs
        self.samples: TensorDict | None = None
        self.metric_names: list[str] = []
        self._user_prepare, self._rollout_metrics, self._loss = prepare, rollout_metrics, loss
        self._gradient_step = gradient_step
        self._shape: torch.Size | None = None
        self._compile_prepare = compile_prepare
        self._prepare = compile_step(self._prepare_into, accel.compile and compile_prepare)
        self._compiled_loss = compile_step(self.minibatch_loss, accel.compile)
        self._step: Callable[[Tensor, Tensor], Tensor] = self._plain_step

    def prepare(self, rollout: TensorDict) -> tuple[TensorDict, dict[str, Tensor]]:
        """The update's samples and the rollout's diagnostics (eager: ``prepare``'s output; else the buffers)."""
        rollout = rollout.filter_non_tensor_data()  # counts such as num_steps_collected are the loop's business
        if not self.buffered:
            with torch.no_grad():
                self.samples = self._user_prepare(rollout)
                return self.samples, self._rollout_metrics(self.samples)
        if self.samples is None or rollout.batch_size != self._shape:
            with torch.no_grad():
                self.samples = self._user_prepare(rollout).clone()  # the buffers, allocated once, owned here
            self._shape = rollout.batch_size
        return self.samples, self._prepare(rollout)

    def _prepare_into(self, rollout: TensorDict) -> dict[str, Tensor]:
        assert self.samples is not None
        with torch.no_grad():
            self.samples.update_(self._user_prepare(rollout))
            return self._rollout_metrics(self.samples)

    def minibatch_loss(self, idx: Tensor, weight: Tensor) -> dict[str, Tensor]:
        """The loss's terms on ``samples[idx]`` with ``weight`` (broadcast over a sequence's steps); the terms
        other than ``"loss"`` detached, all in float32."""
        assert self.samples is not None
        batch = self.samples[idx]
        batch.set("weight", weight.view(-1, *(1,) * (batch.batch_dims - 1)).expand(batch.batch_size))
        autocast = (torch.autocast(self.device.type, dtype=self.amp_dtype) if self.amp_dtype is not None
                    else contextlib.nullcontext())
        with autocast:
            terms = self._loss(batch)
        return {name: (value if name == "loss" else value.detach()).float() for name, value in terms.items()}

    def loss_and_metrics(self, idx: Tensor, weight: Tensor) -> tuple[Tensor, Tensor]:
        """The (compiled) loss of one minibatch and its other terms stacked in :attr:`metric_names` order."""
        terms = self._compiled_loss(idx, weight)
        loss = terms.pop("loss")
        self.metric_names = list(terms)
        return loss, torch.stack(list(terms.values()))

    def step(self, idx: Tensor, weight: Tensor) -> Tensor:
        """One gradient step over the minibatches ``idx`` ``[k, B]`` with ``weight`` ``[k, B]``; its metrics."""
        return self._step(idx, weight)

    def _plain_step(self, idx: Tensor, weight: Tensor) -> Tensor:
        return self._gradient_step(self.loss_and_metrics, idx, weight)

    def capture(self, allowed: bool) -> None:
        """Record the gradient step (and a compiled ``prepare``) as CUDA graphs at their next calls, when
        ``accel.cuda_graphs`` and ``allowed`` (a capturable optimizer, no fp16 gradient scaler)."""
        if not self.accel.cuda_graphs:
            return
        if not allowed:
            log.info("the update is compiled but not captured as a CUDA graph (algo.amp=fp16, or an optimizer "
                     "without a capturable option)")
            return
        self._step = capture(self._plain_step, True, self.device)
        if self._compile_prepare:
            self._prepare = capture(self._prepare, True, self.device)

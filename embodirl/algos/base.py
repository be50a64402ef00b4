"""The algorithm interface: ``update(rollout) -> metrics`` plus what the collector must do for it."""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from tensordict import TensorDict
from torch import Tensor

from embodirl.algos.functional import scheduled_value
from embodirl.compiled import Acceleration, capture, compile_step
from embodirl.runtime.distributed import allreduce_grads, allreduce_mean
from embodirl.envs.base import BatchedEnv
from embodirl.errors import NonFiniteLossError
from embodirl.policies.base import Policy
from embodirl.rollout import validate_rollout

__all__ = ["BaseAlgorithm", "CollectPlan"]


@dataclass(frozen=True)
class CollectPlan:
    """How the collector fills rollouts for an algorithm.

    Attributes:
        num_steps: Rollout length ``T``.
        reset_every_rollout: Reset every env before each rollout (episodes start at t = 0).
        group_size: With ``reset_every_rollout``, envs in consecutive groups of this size start from
            one shared initial state (1 = independent).
        stop_when_all_done: Stop stepping once every env has finished an episode in this rollout
            (the rest would be masked out); later slots are padding with ``done = True``.
    """

    num_steps: int
    reset_every_rollout: bool = False
    group_size: int = 1
    stop_when_all_done: bool = False


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
        self._graphed: list[str] = []  # attributes holding steps to capture in use_cuda_graphs()

    @abstractmethod
    def collect_plan(self, env: BatchedEnv) -> CollectPlan:
        """What the collector must do for this algorithm on ``env`` (validates the pairing)."""

    @abstractmethod
    def update(self, rollout: TensorDict) -> dict[str, float]:
        """Update the policy from a rollout; return scalar metrics (``loss/*``, ``diag/*``)."""

    def init_optimizer(self, learning_rate: float, lr_schedule: str, max_grad_norm: float, adam_eps: float) -> None:
        """Adam over the policy's trainable parameters, with a constant or linear learning rate.

        With CUDA graphs the optimizer is ``capturable`` and its learning rate a tensor changed in place.
        """
        self.learning_rate = learning_rate
        self.lr_schedule = lr_schedule
        self.max_grad_norm = max_grad_norm
        self.params = [p for p in self.policy.parameters() if p.requires_grad]
        if self.accel.cuda_graphs:
            lr = torch.tensor(learning_rate, dtype=torch.float32, device=self.device)
            self.optimizer = torch.optim.Adam(self.params, lr=lr, eps=adam_eps, capturable=True, foreach=True)
        else:
            self.optimizer = torch.optim.Adam(self.params, lr=learning_rate, eps=adam_eps)

    def apply_lr_schedule(self) -> float:
        """Set and return the learning rate for the coming update."""
        lr = scheduled_value(self.learning_rate, self.lr_schedule, self.progress)
        for group in self.optimizer.param_groups:
            if isinstance(group["lr"], Tensor):
                group["lr"].fill_(lr)
            else:
                group["lr"] = lr
        return lr

    def make_minibatch_step(self, loss_fn: MinibatchLoss) -> Callable[[Tensor, Tensor], Tensor]:
        """The gradient step of one minibatch: compiled loss, backward, all-reduce, global-norm clip, Adam.

        Args:
            loss_fn: ``(idx [B], weight [B]) -> (loss, metrics [k])``; compiled with ``fullgraph=True`` when
                ``accel.compile`` (its backward is compiled by AOTAutograd).

        Returns:
            ``step(idx, weight) -> metrics`` (detached); no host sync.
        """
        loss_fn = compile_step(loss_fn, self.accel.compile)

        def step(idx: Tensor, weight: Tensor) -> Tensor:
            self.optimizer.zero_grad(set_to_none=True)
            loss, metrics = loss_fn(idx, weight)
            loss.backward()
            allreduce_grads(self.params)  # identical parameters on every rank after every step
            torch.nn.utils.clip_grad_norm_(self.params, self.max_grad_norm, foreach=True)
            self.optimizer.step()
            return metrics.detach()

        return step

    def use_cuda_graphs(self) -> None:
        """Record the steps named in ``self._graphed`` as CUDA graphs at their next calls (after compile warm-up)."""
        if self.accel.cuda_graphs:
            for name in self._graphed:
                setattr(self, name, capture(getattr(self, name), True, self.device))

    def check_rollout(self, rollout: TensorDict) -> None:
        """Validate the rollout against the schema and the policy's spaces (metadata only, no sync)."""
        validate_rollout(rollout, getattr(self.policy, "obs_spec", None), self.policy.dist.action_shape)

    @property
    def progress(self) -> float:
        """Share of the training budget consumed, in [0, 1]."""
        return min(self.env_steps_seen / max(self.total_env_steps, 1), 1.0)

    def state_dict(self) -> dict[str, Any]:
        """Optimizer and schedule state (the policy is checkpointed separately)."""
        return {"optimizer": self.optimizer.state_dict(), "env_steps_seen": self.env_steps_seen}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
        self.env_steps_seen = int(state["env_steps_seen"])

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

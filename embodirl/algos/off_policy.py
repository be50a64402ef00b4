"""The off-policy algorithm: a replay buffer filled by every rollout and sampled for several gradient steps.

To add one (``embodirl/algos/sac.py`` is the example): declare its keys in a subclass of
:class:`~embodirl.config.algos.OffPolicyConfig` whose ``target`` names the class; write ``conf/algo/<name>.yaml``;
subclass :class:`OffPolicyAlgorithm` with a constructor ``(cfg, *, policy, device, total_env_steps, accel)`` that
builds its networks (critics, targets) and optimizers, its ``metric_names``, and:

* ``train_step(batch) -> {"loss/<term>": ..., "diag/<name>": ...}``: one gradient step (or one critic step and,
  when due, an actor step) on a batch sampled from the buffer; plain eager PyTorch, the terms as device tensors
  (a term missing from a step, an actor loss between delayed actor steps, is averaged over the steps that have it);
* ``check_env(env)``: refuse an env it cannot train on (continuous actions only, ...; ``check_buffer_fits``);
* ``networks()`` and ``optimizers()``: what its checkpointed state holds besides the policy, with the base's
  :meth:`~OffPolicyAlgorithm.rnd_networks` and :meth:`~OffPolicyAlgorithm.rnd_optimizers` (curiosity's, where on).

The base class owns the rest: the buffer on the env's device (:class:`~embodirl.collect.replay.ReplayBuffer`, sized
once the env's ``num_envs`` is known), ``learning_starts``, ``updates_per_step`` gradient steps per collected step
of the envs, the metrics fetched with one host sync (a non-finite loss stops the run), the state, and curiosity
(``algo.rnd.weight > 0``, :class:`~embodirl.algos.rnd.ReplayRND`): the weighted bonus of each sampled batch's next
observations is added to its rewards before ``train_step`` sees them (so ``train_step`` and its compiled losses are
the same with and without it), and the predictor takes one step on the batch per gradient step; it runs eagerly,
as its statistics change at every step and its optimizer is not the algorithm's.

The replay buffer is not part of :meth:`~OffPolicyAlgorithm.state_dict` (``last.pt`` stays small): the
checkpointer saves it apart, in ``checkpoints/replay.pt`` beside each ``last.pt``, and restores it on resume.
"""

from __future__ import annotations

import contextlib
import logging
import typing
from abc import ABC, abstractmethod
from typing import Any, ClassVar

import torch
from tensordict import TensorDict
from torch import Tensor, nn

from embodirl.accel.compile import Acceleration
from embodirl.accel.steps import accelerate_steps
from embodirl.algos.augment import shift_batch
from embodirl.algos.base import EAGER, blame_env, finish_metrics
from embodirl.algos.rnd import ReplayRND
from embodirl.collect.collector import CollectPlan
from embodirl.collect.replay import TRANSITION_KEYS, ReplayBuffer
from embodirl.collect.rollout import validate_rollout
from embodirl.config.algos import OffPolicyConfig
from embodirl.envs.base import BatchedEnv
from embodirl.errors import ConfigError
from embodirl.policies.base import Policy
from embodirl.runtime.distributed import allreduce_grads

__all__ = ["OffPolicyAlgorithm", "optimizer_step", "polyak_update"]

log = logging.getLogger(__name__)


def optimizer_step(optimizer: torch.optim.Optimizer, loss: Tensor, params: list[nn.Parameter],
                   max_grad_norm: float | None) -> None:
    """zero_grad, backward, the all-reduce of the gradients over ranks (a no-op for one process), an optional
    global-norm clip, step."""
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    allreduce_grads(params)
    if max_grad_norm is not None:
        torch.nn.utils.clip_grad_norm_(params, max_grad_norm, foreach=True)
    optimizer.step()


@torch.no_grad()
def polyak_update(target: nn.Module, online: nn.Module, tau: float) -> None:
    """``target <- (1 - tau) target + tau online``, parameter by parameter."""
    torch._foreach_lerp_(list(target.parameters()), list(online.parameters()), tau)


class OffPolicyAlgorithm(ABC):
    """Base class of off-policy algorithms over a replay buffer (see the module docstring).

    Args:
        cfg: The algorithm's keys (a subclass of :class:`OffPolicyConfig`).
        policy: The policy that acts (already on ``device``).
        device: Device of the policy and the networks.
        total_env_steps: Training budget.
        accel: ``compile=true`` compiles the step functions named in :attr:`compiled_steps` (at their first call).
    """

    metric_names: tuple[str, ...] = ()  # curiosity adds its own terms per instance
    #: The methods the acceleration layer compiles (one graph each, with their backward); subclasses name theirs.
    compiled_steps: ClassVar[tuple[str, ...]] = ()

    def __init__(self, cfg: OffPolicyConfig, *, policy: Policy, device: torch.device, total_env_steps: int,
                 accel: Acceleration = EAGER) -> None:
        if policy.dist.action_chunk > 1:  # a replay buffer of single steps and a critic of one action
            raise ConfigError("policy.action_chunk", policy.dist.action_chunk, "1 with an off-policy algorithm (action "
                              "chunks are trained by the on-policy ones: ppo, a2c, grpo)",
                              "pass policy.action_chunk=1, or algo=ppo", absolute=True)
        self.cfg, self.policy = cfg, policy
        self.device = torch.device(device)
        self.total_env_steps = total_env_steps
        self.env_steps_seen = 0
        self.num_updates = 0  # gradient steps taken
        self.env_name = "(see env=)"
        self.buffer: ReplayBuffer | None = None  # sized by collect_plan, once the env's num_envs is known
        self.rnd = ReplayRND(cfg.rnd, typing.cast(typing.Any, policy).obs_spec, self.device) if cfg.rnd.enabled \
            else None
        if self.rnd is not None:
            self.metric_names = (*self.metric_names, "diag/rnd_bonus", "diag/rnd_loss")
        accelerate_steps(self, self.compiled_steps, accel)

    # --- what an algorithm writes -----------------------------------------------------------------------------
    @abstractmethod
    def train_step(self, batch: TensorDict) -> dict[str, Tensor]:
        """One update on a sampled batch; its ``loss/*`` and ``diag/*`` terms (see the module docstring)."""

    @abstractmethod
    def check_env(self, env: BatchedEnv) -> None:
        """Refuse an env this algorithm cannot train on (raise :class:`~embodirl.errors.ConfigError`)."""

    @abstractmethod
    def networks(self) -> dict[str, nn.Module]:
        """The algorithm's own networks (critics, targets, temperature) by their key in :meth:`state_dict`."""

    @abstractmethod
    def optimizers(self) -> dict[str, torch.optim.Optimizer]:
        """The optimizers by their key in :meth:`state_dict`."""

    def check_buffer_fits(self, env: BatchedEnv) -> None:
        """Refuse a buffer smaller than one rollout of ``env`` (a ``check_env`` calls it)."""
        if env.num_envs * self.cfg.num_steps > self.cfg.buffer_size:
            raise ConfigError("algo.buffer_size", self.cfg.buffer_size, f"at least env.num_envs x algo.num_steps = "
                              f"{env.num_envs * self.cfg.num_steps} (one rollout must fit)",
                              f"pass algo.buffer_size={env.num_envs * self.cfg.num_steps * 100}", absolute=True)

    # --- the loop ---------------------------------------------------------------------------------------------
    def collect_plan(self, env: BatchedEnv) -> CollectPlan:
        """Rollouts of ``num_steps`` with the true next observations; allocates the buffer on ``env.device``."""
        self.check_env(env)
        self.buffer = ReplayBuffer(max(self.cfg.buffer_size, env.num_envs), env.num_envs, env.device,
                                   self.cfg.n_step, self.cfg.gamma)
        return CollectPlan(num_steps=self.cfg.num_steps, next_obs=True)

    def update(self, rollout: TensorDict) -> dict[str, float]:
        """Store the rollout's transitions, then (from ``learning_starts`` on) ``round(T x updates_per_step)``
        gradient steps on uniformly sampled batches.

        Returns:
            The terms of :meth:`train_step` averaged over the steps (none before ``learning_starts``),
            ``diag/buffer_size`` and ``diag/num_updates`` (gradient steps so far).
        """
        assert self.buffer is not None, "collect_plan sizes the buffer before the first update"
        validate_rollout(rollout, getattr(self.policy, "obs_spec", None), self.policy.dist.action_shape)
        num_steps = rollout.get_non_tensor("num_steps_collected", rollout.batch_size[1] - 1)
        self.buffer.extend(rollout[:, :num_steps].select(*TRANSITION_KEYS))
        self.policy.update_normalizer(rollout["obs"][:, :num_steps])
        weight = self.rnd_weight()  # curiosity's weight over the env steps before this rollout, as on-policy
        if self.rnd is not None:
            self.rnd.observe(rollout["next_obs"][:, :num_steps])
        self.env_steps_seen += rollout.batch_size[0] * num_steps
        sums: dict[str, Tensor] = {}
        counts: dict[str, int] = {}
        if self.env_steps_seen >= self.cfg.learning_starts:
            for _ in range(max(1, round(num_steps * self.cfg.updates_per_step))):
                batch, curiosity = self.sample(weight)
                for name, value in {**self.train_step(batch), **curiosity}.items():
                    sums[name] = sums[name] + value.detach() if name in sums else value.detach().float()
                    counts[name] = counts.get(name, 0) + 1
                self.num_updates += 1
        values = torch.stack([sums[k] / counts[k] for k in sums]) if sums else torch.zeros(0, device=self.device)
        with self.blame_env(rollout):
            metrics = finish_metrics(list(sums), values)
        if weight is not None:
            metrics["train/rnd_weight"] = weight
        return {**metrics, "diag/buffer_size": float(len(self.buffer)), "diag/num_updates": float(self.num_updates)}

    def rnd_weight(self) -> float | None:
        """Curiosity's weight after the env steps seen so far; None where curiosity is off."""
        return None if self.rnd is None else self.rnd.weight(self.env_steps_seen, self.total_env_steps)

    def sample(self, weight: float | None) -> tuple[TensorDict, dict[str, Tensor]]:
        """A batch for one gradient step (images DrQ-shifted); with curiosity (``weight`` not None) its rewards hold
        ``weight`` x the bonus of their next observations, the predictor has taken a step on them, and the terms
        ``diag/rnd_bonus`` (the mean weighted bonus of the sampled transitions) and ``diag/rnd_loss``."""
        assert self.buffer is not None
        if self.rnd is None or weight is None:
            return shift_batch(self.buffer.sample(self.cfg.minibatch_size), self.cfg.random_shift), {}
        rnd, added = self.rnd, []

        def bonus(next_obs: TensorDict) -> Tensor:  # [B, n] next observations of each sample's n-step sum
            weighted = weight * rnd.batch_bonus(next_obs)
            added.append(weighted[:, 0])
            return weighted

        batch = self.buffer.sample(self.cfg.minibatch_size, bonus)
        terms = {"diag/rnd_bonus": added[0].mean(), "diag/rnd_loss": rnd.fit_step(batch["next_obs"])}
        return shift_batch(batch, self.cfg.random_shift), terms

    def rnd_networks(self) -> dict[str, nn.Module]:
        """Curiosity's networks and statistics under ``rnd``, where it is on (a subclass's ``networks`` adds them)."""
        return {"rnd": self.rnd.networks} if self.rnd is not None else {}

    def rnd_optimizers(self) -> dict[str, torch.optim.Optimizer]:
        """The predictor's optimizer under ``rnd_optimizer``, where curiosity is on (``optimizers`` adds it last)."""
        return {"rnd_optimizer": self.rnd.optimizer} if self.rnd is not None else {}

    def blame_env(self, rollout: TensorDict) -> contextlib.AbstractContextManager[None]:
        """:func:`~embodirl.algos.base.blame_env` for this algorithm's env."""
        return blame_env(self.env_name, rollout)

    def use_cuda_graphs(self) -> None:  # noqa: B027 (part of the Algorithm protocol; nothing to capture here)
        """Nothing captured: the optimizer steps between the compiled losses run eager."""

    @property
    def learning_rate(self) -> float:
        """The first optimizer's learning rate."""
        return float(next(iter(self.optimizers().values())).param_groups[0]["lr"])

    # --- state ------------------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """The networks, the optimizers and the counters (the policy is checkpointed separately; the buffer is
        not saved)."""
        return {**{k: m.state_dict() for k, m in self.networks().items()},
                **{k: o.state_dict() for k, o in self.optimizers().items()},
                "env_steps_seen": self.env_steps_seen, "num_updates": self.num_updates}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`; the buffer restarts empty (the checkpointer refills it from its own file)."""
        for key, module in self.networks().items():
            module.load_state_dict(state[key])
        for key, optimizer in self.optimizers().items():
            optimizer.load_state_dict(state[key])
        self.env_steps_seen, self.num_updates = int(state["env_steps_seen"]), int(state["num_updates"])
        if self.buffer is not None:
            self.buffer.load_state_dict({"size": 0})

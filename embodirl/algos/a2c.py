"""Advantage actor-critic (A2C, the synchronous A3C of Mnih et al. 2016) over the shared ``[N, T+1]`` rollout.

One gradient step per rollout (``num_epochs=1``, the whole rollout as one minibatch): the policy-gradient loss
``-A log pi(a|s)``, a value loss towards the returns and an entropy bonus. Advantages are GAE over the rollout
with ``gae_lambda=1`` by default, i.e. the n-step returns of the classic algorithm (``n = num_steps``, bootstrapped
from the critic, truncation-aware) minus the value.
"""

from __future__ import annotations

import logging

import torch
from tensordict import TensorDict
from torch import Tensor

from embodirl.accel.compile import Acceleration
from embodirl.algos import functional as F
from embodirl.algos.base import EAGER, OnPolicyAlgorithm
from embodirl.collect.collector import CollectPlan
from embodirl.config.algos import A2CConfig
from embodirl.envs.base import BatchedEnv
from embodirl.errors import ConfigError
from embodirl.policies.base import Policy

__all__ = ["A2C"]

log = logging.getLogger(__name__)


class A2C(OnPolicyAlgorithm):
    """A2C with GAE advantages (n-step returns at ``gae_lambda=1``), a value loss and an entropy bonus.

    Args:
        cfg: The keys of ``algo=a2c`` (:class:`~embodirl.config.algos.A2CConfig`).
        policy: A feedforward actor-critic policy.
        device: Device of policy and rollouts.
        total_env_steps: Training budget (horizon of the schedules).
        accel: Compile (and later capture) the update's steps.
    """

    cfg: A2CConfig
    metric_names = ("loss/policy", "loss/value", "loss/entropy", "diag/explained_variance", "diag/epochs")

    def __init__(self, cfg: A2CConfig, *, policy: Policy, device: torch.device, total_env_steps: int,
                 accel: Acceleration = EAGER) -> None:
        if policy.is_recurrent:
            raise ConfigError("policy", type(policy).__name__, "a feedforward policy with algo=a2c (recurrent "
                              "policies are trained by PPO)", "pass policy=actor_critic, or algo=ppo", absolute=True)
        super().__init__(cfg, policy=policy, device=device, total_env_steps=total_env_steps, accel=accel)
        if not policy.has_critic:
            log.warning("A2C with an actor-only policy: advantages are discounted returns without a baseline "
                        "(use policy=actor_critic)")

    def collect_plan(self, env: BatchedEnv) -> CollectPlan:
        return CollectPlan(num_steps=self.cfg.num_steps)

    @torch.no_grad()
    def prepare(self, rollout: TensorDict) -> TensorDict:
        """GAE advantages and returns with each transition, ``[N*T]`` samples."""
        advantage, returns = F.compute_gae(rollout, self.cfg.gamma, self.cfg.gae_lambda)
        if self.cfg.normalize_advantage:
            advantage = F.normalize(advantage)
        steps = rollout.select("obs", "action", "value")[:, :-1]
        return TensorDict({**steps, "advantage": advantage, "returns": returns}, batch_size=advantage.shape).reshape(-1)

    def rollout_metrics(self, samples: TensorDict) -> dict[str, Tensor]:
        return {"diag/explained_variance": F.explained_variance(samples["value"], samples["returns"])}

    def loss(self, batch: TensorDict) -> dict[str, Tensor]:
        """Policy gradient + ``vf_coef`` x value loss - ``ent_coef`` x entropy, weighted means over the batch."""
        weight = batch["weight"]
        log_prob, entropy, value = self.policy.evaluate(batch["obs"], batch["action"])
        pg_loss = F.weighted_mean(F.policy_gradient_loss(log_prob, batch["advantage"]), weight)
        v_loss = F.value_loss(value, batch["value"], batch["returns"], None, weight)
        entropy = F.weighted_mean(entropy, weight)
        return {"loss": pg_loss + self.cfg.vf_coef * v_loss - self.ent_coef * entropy, "loss/policy": pg_loss,
                "loss/value": v_loss, "loss/entropy": entropy}

"""Proximal Policy Optimization over the shared ``[N, T+1]`` rollout.

``prepare``: GAE advantages (truncation-aware, normalised over the rollout) and returns, optionally on rewards
scaled by the running std of the discounted return (``normalize_rewards``), after adding a curiosity bonus
(``rnd.weight > 0``, :mod:`embodirl.algos.rnd`). ``loss``: the clipped surrogate
(optionally dual-clipped), the (optionally clipped) value loss and the entropy bonus. A recurrent policy trains on
sequences of ``seq_len`` steps (truncated backpropagation through time) that start from the state stored in the
rollout and restart it after each episode end.
"""

from __future__ import annotations

import logging

import torch
from tensordict import TensorDict
from torch import Tensor

from embodirl.accel.compile import Acceleration
from embodirl.algos import functional as F
from embodirl.algos import symmetry
from embodirl.algos.base import EAGER, OnPolicyAlgorithm, finish_metrics
from embodirl.algos.reward_scaling import RewardScaler
from embodirl.algos.rnd import RND
from embodirl.collect.collector import CollectPlan
from embodirl.config.algos import PPOConfig
from embodirl.envs.base import BatchedEnv
from embodirl.envs.observations import ObsSpec
from embodirl.errors import ConfigError, check
from embodirl.policies.base import Policy

__all__ = ["PPO"]

log = logging.getLogger(__name__)


class PPO(OnPolicyAlgorithm):
    """PPO with GAE (truncation-aware), clipped surrogate and value loss, entropy bonus.

    Args:
        cfg: The keys of ``algo=ppo`` (:class:`~embodirl.config.algos.PPOConfig`).
        policy: An actor-critic policy (feedforward or recurrent).
        device: Device of policy and rollouts.
        total_env_steps: Training budget (horizon of the schedules).
        accel: Compile (and later capture) the update's steps.
    """

    cfg: PPOConfig
    metric_names: tuple[str, ...] = ("loss/policy", "loss/value", "loss/entropy", "diag/approx_kl",
                                     "diag/clip_fraction", "diag/explained_variance", "diag/epochs")

    def __init__(self, cfg: PPOConfig, *, policy: Policy, device: torch.device, total_env_steps: int,
                 accel: Acceleration = EAGER) -> None:
        super().__init__(cfg, policy=policy, device=device, total_env_steps=total_env_steps, accel=accel)
        if not policy.has_critic:
            log.warning("PPO with an actor-only policy: advantages are discounted returns without a baseline "
                        "(use policy=actor_critic for GAE with a learned value)")
        if policy.is_recurrent:
            check(cfg.num_steps % cfg.seq_len == 0, "seq_len", cfg.seq_len,
                  f"a divisor of algo.num_steps={cfg.num_steps}",
                  f"pass algo.seq_len=8 or another divisor of {cfg.num_steps}")
        self.seq_len = cfg.seq_len if policy.is_recurrent else 1
        self.reward_scaler = RewardScaler(cfg.gamma, self.device) if cfg.normalize_rewards else None
        self.mirror = symmetry.load_mirror(cfg.symmetry, policy)  # None unless algo.symmetry is on
        if self.mirror is not None and cfg.symmetry.loss_coef > 0:
            self.metric_names = (*self.metric_names, "loss/symmetry")
        self.rnd = RND(cfg.rnd, self._obs_spec(), cfg.gamma, self.device) if cfg.rnd.enabled else None
        if self.rnd is not None:
            self.metric_names = (*self.metric_names, "diag/rnd_bonus", "diag/rnd_loss")

    def _obs_spec(self) -> ObsSpec:
        """The policy's observation spec, which sizes RND's networks."""
        spec = getattr(self.policy, "obs_spec", None)
        if spec is None:
            raise ConfigError("rnd.weight", self.cfg.rnd.weight, f"0 with {type(self.policy).__name__}, a policy "
                              "without an obs_spec (which sizes RND's networks)", "pass algo.rnd.weight=0, or use "
                              "policy=actor_critic")
        return spec

    def collect_plan(self, env: BatchedEnv) -> CollectPlan:
        rollout, size = env.num_envs * self.cfg.num_steps, self.cfg.minibatch_size
        if size is not None and size > rollout:
            log.warning("algo.minibatch_size=%d exceeds the rollout of %d transitions (env.num_envs=%d x "
                        "algo.num_steps=%d): each epoch is one minibatch of %d", size, rollout, env.num_envs,
                        self.cfg.num_steps, rollout)
        if self.mirror is not None:
            symmetry.check_mirror(self.mirror, str(self.cfg.symmetry.mirror), env, self.policy.dist.action_dtype)
        return CollectPlan(num_steps=self.cfg.num_steps)

    def update(self, rollout: TensorDict) -> dict[str, float]:
        curiosity: dict[str, float] = {}
        if self.rnd is not None:
            rollout, curiosity = self.add_curiosity(rollout, self.rnd)
        if self.reward_scaler is not None:  # its running statistics change with every rollout: kept out of prepare
            reward, done = rollout["reward"], rollout["done"]
            scaled = self.reward_scaler(reward[:, :-1], done[:, :-1])
            rollout = rollout.copy().set("reward", torch.cat([scaled, reward[:, -1:]], dim=1))  # the env's stay
        return {**super().update(rollout), **curiosity}

    def add_curiosity(self, rollout: TensorDict, rnd: RND) -> tuple[TensorDict, dict[str, float]]:
        """The rollout with the weighted bonus of ``rnd`` added to its rewards (a new TensorDict: the collector's
        stay), after which the predictor trains on the same next observations; the metrics to log."""
        next_obs = rollout["next_obs"][:, :-1] if "next_obs" in rollout.keys() else rollout["obs"][:, 1:]  # noqa: SIM118
        weight = rnd.weight(self.env_steps_seen, self.total_env_steps)
        bonus = weight * rnd.bonus(next_obs, rollout["done"][:, :-1])
        reward = rollout["reward"]
        rollout = rollout.copy().set("reward", torch.cat([reward[:, :-1] + bonus, reward[:, -1:]], dim=1))
        loss = rnd.fit(next_obs, self.cfg.num_epochs, self.cfg.minibatch_size)
        metrics = finish_metrics(["diag/rnd_bonus", "diag/rnd_loss"], torch.stack([bonus.mean(), loss]))
        return rollout, {**metrics, "train/rnd_weight": weight}

    @torch.no_grad()
    def prepare(self, rollout: TensorDict) -> TensorDict:
        """GAE advantages and returns with each transition: ``[N*T]`` samples, or ``[N*T/L, L]`` sequences of
        ``L = seq_len`` steps for a recurrent policy (env ``n``'s steps ``c L .. c L + L - 1`` are sequence
        ``n T/L + c``)."""
        advantage, returns = F.compute_gae(rollout, self.cfg.gamma, self.cfg.gae_lambda)
        if self.cfg.normalize_advantage:
            advantage = F.normalize(advantage)
        steps = rollout.select("obs", "action", "sample_log_prob", "value")[:, :-1]
        samples = TensorDict({**steps, "advantage": advantage, "returns": returns}, batch_size=advantage.shape)
        if self.policy.is_recurrent:  # a sequence starts from its first stored state and restarts it after a done
            samples["policy_state"] = rollout["policy_state"][:, :-1]
            done = rollout["done"]
            after_done = torch.cat([torch.zeros_like(done[:, :1]), done[:, :-2]], dim=1)
            first = torch.arange(after_done.shape[1], device=done.device) % self.seq_len == 0
            samples["reset"] = after_done & ~first
        return samples.reshape(-1, self.seq_len) if self.policy.is_recurrent else samples.reshape(-1)

    def rollout_metrics(self, samples: TensorDict) -> dict[str, Tensor]:
        return {"diag/explained_variance": F.explained_variance(samples["value"], samples["returns"])}

    def loss(self, batch: TensorDict) -> dict[str, Tensor]:
        """Clipped surrogate + ``vf_coef`` x value loss - ``ent_coef`` x entropy, weighted means over the batch;
        with ``algo.symmetry``, over the batch and its mirror image, plus ``loss_coef`` x the mirror loss."""
        cfg, size = self.cfg, batch.batch_size[0]  # the original samples: the first `size` of an augmented batch
        if self.mirror is not None and cfg.symmetry.augment:
            batch = symmetry.augment(batch, self.mirror)
        weight, old_log_prob = batch["weight"], batch["sample_log_prob"]
        if self.policy.is_recurrent:
            log_prob, entropy, value = self.policy.evaluate(batch["obs"], batch["action"], batch["policy_state"][:, 0],
                                                            batch["reset"])
        else:
            log_prob, entropy, value = self.policy.evaluate(batch["obs"], batch["action"])
        pg_loss, ratio = F.clipped_surrogate_loss(log_prob, old_log_prob, batch["advantage"], cfg.clip_coef,
                                                  cfg.dual_clip_coef)
        pg_loss = F.weighted_mean(pg_loss, weight)
        v_loss = F.value_loss(value, batch["value"], batch["returns"], cfg.clip_value_coef, weight)
        # Entropy and the approx-KL rules read the original samples only, as without symmetry (rsl_rl does the same).
        original = weight[:size]
        entropy = F.weighted_mean(entropy[:size], original)
        with torch.no_grad():
            kl = F.approx_kl(log_prob[:size], old_log_prob[:size], original)
            clip_fraction = F.clip_fraction(ratio[:size], cfg.clip_coef, original)
        terms = {"loss": pg_loss + cfg.vf_coef * v_loss - self.ent_coef * entropy, "loss/policy": pg_loss,
                 "loss/value": v_loss, "loss/entropy": entropy, "diag/approx_kl": kl,
                 "diag/clip_fraction": clip_fraction}
        if self.mirror is not None and cfg.symmetry.loss_coef > 0:
            terms["loss/symmetry"] = self.mirror_loss(batch, size)
            terms["loss"] = terms["loss"] + cfg.symmetry.loss_coef * terms["loss/symmetry"]
        return terms

    def mirror_loss(self, batch: TensorDict, size: int) -> Tensor:
        """:func:`~embodirl.algos.symmetry.mirror_loss` of the first ``size`` samples of ``batch`` (an augmented
        batch holds their mirrored observations after them)."""
        assert self.mirror is not None
        obs = batch["obs"][:size]
        mirrored = batch["obs"][size:] if batch.batch_size[0] > size else self.mirror(obs, batch["action"])[0]
        mean = self.policy.dist.mode(self.policy.action_params(torch.cat([obs, mirrored])))  # type: ignore[attr-defined]
        return symmetry.mirror_loss(mean[:size], mean[size:], obs, batch["weight"][:size], self.mirror)

    def optimizers(self) -> dict[str, torch.optim.Optimizer]:
        return {**super().optimizers(), **({"rnd_optimizer": self.rnd.optimizer} if self.rnd is not None else {})}

    def networks(self) -> dict[str, torch.nn.Module]:
        """RND's target and predictor, where curiosity is on."""
        return {"rnd": self.rnd.networks} if self.rnd is not None else {}

    def state_dict(self) -> dict:
        state = super().state_dict()
        if self.reward_scaler is not None:
            state["reward_scaler"] = self.reward_scaler.state_dict()
        if self.rnd is not None:
            state["rnd"] = self.rnd.state_dict()
        return state

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        if self.reward_scaler is not None and "reward_scaler" in state:
            self.reward_scaler.load_state_dict(state["reward_scaler"])
        if self.rnd is not None:
            self.rnd.load_state_dict(state["rnd"])

"""Curiosity from random network distillation (``algo.rnd.*``; Burda et al. 2018, as rsl_rl's RND extension).

A fixed, randomly initialised target network ``f`` and a trained predictor ``f_hat`` both map an observation to an
embedding of ``embedding_size``. The bonus of a transition is the predictor's error on the observation it led to,

    ``e(s') = mean_k (f_hat(x)_k - f(x)_k)^2``,  ``x = clamp((s' - mu) / sqrt(var + 1e-8), -5, 5)``,

which stays high where the predictor has seen few such observations: novel states pay. ``mu`` and ``var`` are the
running statistics of the observations the bonus was computed on (``normalize_obs``; Burda et al.'s input
normalisation). The bonus is divided by the running std of its own discounted return (``normalize_bonus``;
rsl_rl's ``EmpiricalDiscountedVariationNormalization``, here :class:`~embodirl.algos.reward_scaling.RewardScaler`),
so its scale does not drift as the predictor learns, then weighted (``weight`` and its ``weight_schedule`` over env
steps) and added to the env's reward before the advantages, with one critic for the sum (as rsl_rl does).

The next observation of transition ``t`` is ``obs[:, t + 1]`` of the rollout (after an episode end: the next
episode's first observation, which rsl_rl reads too), or ``next_obs`` where the collector wrote it. The predictor
trains on the same observations after the bonus is computed: ``num_epochs`` passes of shuffled minibatches of
``minibatch_size``, its own Adam. This runs eagerly, outside the compiled and captured steps: like
``normalize_rewards``, it rewrites the rollout's rewards with statistics that change every rollout, before
``prepare``, and its optimizer is not the policy's.

The off-policy algorithms (SAC, FastTD3) use :class:`ReplayRND`: the bonus is not stored in the replay buffer (it
would freeze an old predictor's error into every stored reward) but computed on each sampled batch's next
observations when it is sampled, the predictor takes one step on the same batch at every gradient step, and the bonus
is divided by the running std of the raw bonus (see :class:`ReplayRND` for why not its discounted return).
"""

from __future__ import annotations

import math
from typing import Any

import torch
from tensordict import TensorDict
from torch import Tensor, nn

from embodirl.algos.reward_scaling import RewardScaler, scale_rewards
from embodirl.config.algos import RNDConfig
from embodirl.envs.observations import ObsKey, ObsSpec, key_name
from embodirl.errors import ConfigError
from embodirl.policies.encoders import is_image
from embodirl.policies.networks import build_mlp
from embodirl.policies.normalizer import RunningNormalizer
from embodirl.runtime.distributed import allreduce_grads

__all__ = ["RND", "ReplayRND", "prediction_error", "rnd_input_keys"]

OBS_CLIP = 5.0  # Burda et al. clip the normalised observations to [-5, 5]
#: Gradient steps over which :class:`ReplayRND` averages the raw bonus's std (a batch weighs at least 1/this).
BONUS_WINDOW = 100


def prediction_error(predicted: Tensor, target: Tensor) -> Tensor:
    """``mean_k (predicted_k - target_k)^2`` per sample: ``[B, K]`` embeddings in, ``[B]`` out."""
    return (predicted - target).pow(2).mean(dim=-1)


def rnd_input_keys(obs_spec: ObsSpec, weight: float = 0.0) -> list[ObsKey]:
    """The observation keys RND reads: every key but images (uint8 ``[H, W, C]``), flattened and concatenated.

    Raises:
        ConfigError: The observations are images only (key ``rnd.weight``, relative to ``algo.``).
    """
    keys = [k for k, (shape, dtype) in obs_spec.items() if not is_image(shape, dtype)]
    if not keys:
        names = ", ".join(key_name(k) for k in obs_spec)
        raise ConfigError("rnd.weight", weight, f"0 where the observations are images only ({names}): RND reads "
                          "vector observations", "pass algo.rnd.weight=0, or an env with a state vector "
                          "(push_cube: env.obs_mode=state_rgb)")
    return keys


class RND:
    """The target, the predictor, their input normaliser, the bonus scaler and the predictor's optimizer.

    Args:
        cfg: The keys of ``algo.rnd`` (:class:`~embodirl.config.algos.RNDConfig`).
        obs_spec: The env's observations (the policy's ``obs_spec``).
        gamma: Discount of the bonus's running return (the algorithm's ``gamma``).
        device: Device of the rollouts.

    Attributes:
        networks: ``target``, ``predictor`` and (with ``normalize_obs``) ``obs_normalizer``, one module (what the
            ranks must hold alike).
    """

    def __init__(self, cfg: RNDConfig, obs_spec: ObsSpec, gamma: float, device: torch.device) -> None:
        self.keys = rnd_input_keys(obs_spec, cfg.weight)
        dim = sum(math.prod(obs_spec[k][0]) for k in self.keys)
        layers = (dim, cfg.embedding_size, cfg.hidden_sizes, cfg.activation, 1.0, "algo.rnd.hidden_sizes")
        self.target, self.predictor = build_mlp(*layers).requires_grad_(False), build_mlp(*layers)
        self.obs_normalizer = RunningNormalizer((dim,), clip=OBS_CLIP) if cfg.normalize_obs else None
        named = {"target": self.target, "predictor": self.predictor, "obs_normalizer": self.obs_normalizer}
        self.networks = nn.ModuleDict({k: m for k, m in named.items() if m is not None}).to(device)
        self.bonus_scaler = RewardScaler(gamma, device) if cfg.normalize_bonus else None
        self.optimizer = torch.optim.Adam(self.predictor.parameters(), lr=cfg.learning_rate)
        self.schedule = cfg.schedule()

    def features(self, obs: TensorDict) -> Tensor:
        """The network input of ``obs`` (batch ``[*B]``): its keys flattened and concatenated, ``[*B, D]`` float."""
        batch = obs.batch_size
        return torch.cat([obs.get(k).reshape(*batch, -1).float() for k in self.keys], dim=-1)

    def normalize(self, x: Tensor) -> Tensor:
        """Features ``x`` normalised with the current observation statistics (as they are without them)."""
        return self.obs_normalizer(x) if self.obs_normalizer is not None else x

    def error(self, x: Tensor) -> Tensor:
        """The predictor's error on features ``x`` ``[B, D]``: ``[B]``."""
        x = self.normalize(x)
        return prediction_error(self.predictor(x), self.target(x))

    def weight(self, env_step: int, total_env_steps: int) -> float:
        """The bonus weight in effect after ``env_step`` of ``total_env_steps``."""
        return self.schedule.value(env_step, total_env_steps)

    @torch.no_grad()
    def bonus(self, next_obs: TensorDict, done: Tensor) -> Tensor:
        """The normalised (unweighted) bonus of ``[N, T]`` transitions that led to ``next_obs`` and ended episodes
        where ``done``; updates the observation and bonus statistics with them first."""
        x = self.features(next_obs)
        if self.obs_normalizer is not None:
            self.obs_normalizer.update(x)
        error = self.error(x.flatten(0, 1)).view(done.shape)
        return self.bonus_scaler(error, done) if self.bonus_scaler is not None else error

    def fit(self, next_obs: TensorDict, num_epochs: int, minibatch_size: int | None) -> Tensor:
        """Train the predictor on ``next_obs`` (any batch shape): ``num_epochs`` passes of shuffled minibatches of
        ``minibatch_size`` (None: all of them); its mean loss over the steps (a device scalar, no host sync)."""
        with torch.no_grad():  # the inputs and the fixed target's embeddings, once for every step
            x = self.normalize(self.features(next_obs).flatten(0, -2))
            goal = self.target(x)
        size = x.shape[0] if minibatch_size is None else min(minibatch_size, x.shape[0])
        total, steps = torch.zeros((), device=x.device), 0
        for _ in range(num_epochs):
            for idx in torch.randperm(x.shape[0], device=x.device).split(size):
                total, steps = total + self.step(x[idx], goal[idx]), steps + 1
        return total / steps

    def step(self, x: Tensor, goal: Tensor) -> Tensor:
        """One Adam step of the predictor towards the target's embeddings ``goal`` of normalised features ``x``;
        the loss before it (detached)."""
        loss = prediction_error(self.predictor(x), goal).mean()
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        allreduce_grads(list(self.predictor.parameters()))
        self.optimizer.step()
        return loss.detach()

    def state_dict(self) -> dict[str, Any]:
        """The networks and the observation statistics, the optimizer, the bonus scaler."""
        state = {"networks": self.networks.state_dict(), "optimizer": self.optimizer.state_dict()}
        if self.bonus_scaler is not None:
            state["bonus_scaler"] = self.bonus_scaler.state_dict()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned."""
        self.networks.load_state_dict(state["networks"])
        self.optimizer.load_state_dict(state["optimizer"])
        if self.bonus_scaler is not None:
            self.bonus_scaler.load_state_dict(state["bonus_scaler"])


class ReplayRND(RND):
    """RND for the off-policy algorithms: the bonus of a sampled batch, the predictor trained per gradient step.

    The input statistics (``normalize_obs``) merge each collected transition's next observation once, when it is
    stored (:meth:`observe`), as the policy's observation normaliser does; sampling would count a transition as
    often as it is drawn. The bonus (``normalize_bonus``) is divided by the running std of the raw bonus (the error)
    of the sampled transitions, not by that of its discounted return as on-policy: rsl_rl's return normaliser
    follows each env's bonus forward in time through an on-policy rollout, while a replay batch holds transitions
    drawn at random from every env and age, with no order to discount along, so a "return" over it would measure
    nothing. The std is an average over about the last :data:`BONUS_WINDOW` gradient steps, not over all of
    training: the predictor's errors fall by more than ten times in its first few thousand steps, and a std over all
    of them would shrink the bonus as much, while SAC and FastTD3, unlike PPO with its normalised advantages, feel
    the bonus's absolute size against their rewards and entropy term. It is not centred (a centred bonus would be
    negative for half the transitions, a penalty for states the agent knows). The statistics are in
    :attr:`networks` (checkpointed, alike on every rank).

    Args:
        cfg: The keys of ``algo.rnd``.
        obs_spec: The env's observations (the policy's ``obs_spec``).
        device: Device of the replay buffer.
    """

    def __init__(self, cfg: RNDConfig, obs_spec: ObsSpec, device: torch.device) -> None:
        super().__init__(cfg, obs_spec, gamma=0.0, device=device)
        self.bonus_scaler = None  # the on-policy return normaliser; replaced by the raw bonus's statistics
        self.bonus_normalizer = RunningNormalizer((), min_weight=1 / BONUS_WINDOW).to(device) if cfg.normalize_bonus \
            else None
        if self.bonus_normalizer is not None:
            self.networks["bonus_normalizer"] = self.bonus_normalizer

    @torch.no_grad()
    def observe(self, next_obs: TensorDict) -> None:
        """Merge the next observations of collected transitions (any batch shape) into the input statistics."""
        if self.obs_normalizer is not None:
            self.obs_normalizer.update(self.features(next_obs).flatten(0, -2))

    @torch.no_grad()
    def batch_bonus(self, next_obs: TensorDict) -> Tensor:
        """The normalised (unweighted) bonus of sampled transitions' next observations ``[B, n]``: column 0 the
        sampled transitions' own (uniform over the buffer), the others the n-step return's later transitions. The
        raw bonus of column 0 is merged into the bonus statistics first."""
        error = self.error(self.features(next_obs).flatten(0, 1)).view(next_obs.batch_size)
        if self.bonus_normalizer is None:
            return error
        self.bonus_normalizer.update(error[:, 0])
        stats = self.bonus_normalizer
        return scale_rewards(error, stats.var, stats.eps, stats.clip)

    def fit_step(self, next_obs: TensorDict) -> Tensor:
        """One step of the predictor on a sampled batch's next observations ``[B]``; its loss (a device scalar)."""
        with torch.no_grad():
            x = self.normalize(self.features(next_obs))
            goal = self.target(x)
        return self.step(x, goal)

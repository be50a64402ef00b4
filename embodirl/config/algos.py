"""Schemas of the algorithms (``algo=ppo|grpo|a2c|distill|sac|fasttd3``); their optimizers' are in
:mod:`embodirl.config.optim`.

The keys every on-policy algorithm shares (learning rate and its schedule, epochs and minibatches, entropy
bonus, clipping of the gradient norm, mixed precision) are declared once in :class:`OnPolicyConfig`; those of
the off-policy ones (replay buffer, batch, update-to-data ratio, target networks) in :class:`OffPolicyConfig`.
Each schema's defaults are the values of its option file in ``conf/algo/``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar, Literal

from embodirl.config.policies import Activation
from embodirl.config.schedule import Schedule, ScheduleKind, ScheduleSpec, parse_schedule
from embodirl.config.schema import Node, Schema, key
from embodirl.errors import ConfigError

__all__ = ["MOVED_KEYS", "A2CConfig", "DistillConfig", "FastTD3Config", "GRPOConfig", "OffPolicyConfig",
           "OnPolicyConfig", "PPOConfig", "RNDConfig", "SACConfig", "SymmetryConfig", "TeacherConfig"]

_RENAMED = {"n_epochs": "num_epochs", "batch_size": "minibatch_size",
            "accumulate_grad_batches": "accumulate_minibatches", "adam_eps": "optimizer.eps"}
_GRPO_RENAMED = {**_RENAMED, "truncate_at_first_done": "first_episode_only"}

#: The algorithm keys renamed in 0.2 (old full path -> new full path): overriding an old name gets a "renamed to"
#: line, and a resumed or evaluated run's stored config is read through it.
MOVED_KEYS: Mapping[str, str] = {f"algo.{old}": f"algo.{new}" for old, new in _GRPO_RENAMED.items()}


@dataclass(frozen=True, kw_only=True)
class OnPolicyConfig(Schema):
    """What every on-policy algorithm shares: the update's epochs of minibatch gradient steps and its schedules."""

    renamed: ClassVar[Mapping[str, str]] = _RENAMED
    learning_rate: float = key(3e-4, gt=0, doc="learning rate (the start of a linear/cosine/adaptive_kl schedule)")
    lr_schedule: ScheduleSpec = key("constant", doc="constant | linear | cosine (learning_rate -> 0 over "
                                    "trainer.total_env_steps) | adaptive_kl | [[env_step, lr], ...]")
    lr_schedule_kind: ScheduleKind = key("step", doc="how a list lr_schedule is read: step (jump and hold) | interp")
    desired_kl: float = key(0.01, gt=0, doc="lr_schedule=adaptive_kl: lr /1.5 when a minibatch's approx-KL > 2x "
                            "this, x1.5 when < half (clamped to [1e-5, 1e-2])")
    optimizer: Node | None = key(None, doc="a torch.optim class and its keys (conf/algo/optimizer/); "
                                 "null = Adam(eps=1e-5)")
    num_epochs: int = key(4, ge=1, doc="passes over each rollout per update")
    minibatch_size: int | None = key(2048, ge=1, doc="transitions per minibatch; null = the whole rollout")
    shuffle_minibatches: bool = key(True, doc="shuffle into minibatches every epoch; false = contiguous, in order")
    accumulate_minibatches: int = key(1, ge=1, doc="minibatches whose gradients make one optimizer step")
    target_kl: float | None = key(None, gt=0, doc="stop an update's epochs once an epoch's approx-KL exceeds "
                                  "this; null = off")
    gamma: float = key(0.99, ge=0, le=1, doc="discount")
    ent_coef: float = key(0.0, ge=0, doc="entropy bonus weight (the start of a linear/cosine ent_coef_schedule)")
    ent_coef_schedule: ScheduleSpec = key("constant", doc="constant | linear | cosine (ent_coef -> 0 over "
                                          "trainer.total_env_steps) | [[env_step, ent_coef], ...]")
    ent_coef_schedule_kind: ScheduleKind = key("step", doc="how a list ent_coef_schedule is read: step | interp")
    max_grad_norm: float = key(0.5, gt=0, doc="global gradient-norm clip")
    amp: Literal["off", "bf16", "fp16"] = key("off", doc="mixed precision of forward and loss: off | bf16 | fp16 "
                                              "(with a gradient scaler); for CUDA (slower on a CPU)")

    def check(self) -> None:
        self.lr()
        self.ent()

    def lr(self) -> Schedule:
        """The learning-rate schedule."""
        return parse_schedule("lr_schedule", self.lr_schedule, self.lr_schedule_kind, self.learning_rate,
                              adaptive=True)

    def ent(self) -> Schedule:
        """The entropy-weight schedule."""
        return parse_schedule("ent_coef_schedule", self.ent_coef_schedule, self.ent_coef_schedule_kind, self.ent_coef)


@dataclass(frozen=True, kw_only=True)
class SymmetryConfig(Schema):
    """``algo.symmetry``: a mirror map of the env's observations and actions, used to augment every minibatch with
    mirrored samples and/or to pull the policy towards a mirror-symmetric one (rsl_rl's symmetry extension)."""

    mirror: str | None = key(None, doc="import path of a function (obs, action) -> (mirrored obs, mirrored action) "
                             "that reflects the env (a map applied twice gives back its input); code you name on the "
                             "command line, like a _target_; null = off",
                             example="embodirl.envs.push_cube.symmetry.mirror")
    augment: bool = key(False, doc="append the mirrored copy of each minibatch (the original's advantage, return, "
                        "value and log-prob) to the policy and value losses")
    loss_coef: float = key(0.0, ge=0, doc="weight of the mirror loss: mean squared difference between the policy's "
                           "mean action on mirrored observations and the mirrored mean action (Box actions); 0 = off")

    def check(self) -> None:
        if self.mirror is None and (self.augment or self.loss_coef > 0):
            raise ConfigError("mirror", None, "the import path of a mirror function with augment=true or "
                              "loss_coef > 0", "pass mirror=embodirl.envs.cartpole_symmetry.mirror (env=cartpole; "
                              "env=push_cube: embodirl.envs.push_cube.symmetry.mirror; another env: the import path "
                              "of its reflection, a function (obs, action) -> (obs, action))")


@dataclass(frozen=True, kw_only=True)
class RNDConfig(Schema):
    """``algo.rnd``: curiosity from random network distillation (:mod:`embodirl.algos.rnd`); off at weight 0."""

    weight: float = key(0.0, ge=0, doc="weight of the normalised curiosity bonus added to the env's reward (the "
                        "start of a linear/cosine weight_schedule); 0 = off")
    weight_schedule: ScheduleSpec = key("constant", doc="constant | linear | cosine (weight -> 0 over "
                                        "trainer.total_env_steps) | [[env_step, weight], ...]")
    weight_schedule_kind: ScheduleKind = key("step", doc="how a list weight_schedule is read: step | interp")
    learning_rate: float = key(1e-3, gt=0, doc="the predictor's learning rate (Adam; trained on each rollout with "
                               "algo.num_epochs x algo.minibatch_size; off-policy: one step on each gradient "
                               "step's sampled batch)")
    hidden_sizes: list[int] = key(factory=lambda: [64, 64], ge=1, doc="hidden layers of the target and the "
                                  "predictor network")
    embedding_size: int = key(16, ge=1, doc="outputs of the target and the predictor network")
    activation: Activation = key("elu", doc="activation of their hidden layers")
    normalize_obs: bool = key(True, doc="running normalisation of their input observations (clipped to +-5)")
    normalize_bonus: bool = key(True, doc="divide the bonus by the running std of its discounted return "
                                "(off-policy: of the raw bonus of the sampled transitions)")

    def check(self) -> None:
        self.schedule()

    def schedule(self) -> Schedule:
        """The weight's schedule."""
        return parse_schedule("weight_schedule", self.weight_schedule, self.weight_schedule_kind, self.weight)

    @property
    def enabled(self) -> bool:
        """Whether the weight is above 0 anywhere in its schedule (else no network is built: the algorithm as
        without curiosity)."""
        schedule = self.schedule()
        return any(v > 0 for _, v in schedule.points) if schedule.shape == "points" else self.weight > 0


@dataclass(frozen=True, kw_only=True)
class PPOConfig(OnPolicyConfig):
    """PPO: clipped surrogate + (optionally clipped) value loss + entropy bonus, GAE with truncation bootstrap."""

    target = "embodirl.algos.ppo.PPO"
    learning_rate: float = key(2e-3, gt=0, doc="learning rate (the start of a linear/cosine/adaptive_kl schedule)")
    num_epochs: int = key(2, ge=1, doc="passes over each rollout per update")
    minibatch_size: int | None = key(4096, ge=1, doc="transitions per minibatch; null = the whole rollout")
    num_steps: int = key(32, ge=1, doc="rollout length T per env (batch = env.num_envs x num_steps)")
    gae_lambda: float = key(0.95, ge=0, le=1, doc="GAE lambda")
    clip_coef: float = key(0.2, gt=0, doc="surrogate clip range")
    clip_value_coef: float | None = key(None, gt=0, doc="value-update clip range around the collecting value; "
                                        "null = off")
    dual_clip_coef: float | None = key(None, gt=1, doc="dual-clip PPO: bound the objective of negative "
                                       "advantages at this x A (e.g. 3.0); null = off")
    vf_coef: float = key(0.5, ge=0, doc="value loss weight")
    normalize_advantage: bool = key(True, doc="normalise advantages over the rollout")
    normalize_rewards: bool = key(False, doc="divide rewards by the running std of the discounted return "
                                  "(SB3 VecNormalize reward scaling)")
    seq_len: int = key(16, ge=1, doc="recurrent policies: training sequence length (truncated BPTT); divides "
                       "num_steps")
    symmetry: SymmetryConfig = key(factory=SymmetryConfig, doc="mirror augmentation and mirror loss (off by default)")
    rnd: RNDConfig = key(factory=RNDConfig, doc="curiosity from random network distillation (weight 0 = off)")


@dataclass(frozen=True, kw_only=True)
class A2CConfig(OnPolicyConfig):
    """A2C: one gradient step per rollout (policy gradient, value loss, entropy bonus) with n-step returns.

    The advantages are GAE's; ``gae_lambda=1`` gives the classic n-step returns (``n = num_steps``).
    """

    target = "embodirl.algos.a2c.A2C"
    learning_rate: float = key(2e-3, gt=0, doc="learning rate (the start of a linear/cosine schedule)")
    num_epochs: int = key(1, ge=1, doc="passes over each rollout per update (A2C: 1)")
    minibatch_size: int | None = key(None, ge=1, doc="transitions per minibatch; null = the whole rollout (A2C)")
    num_steps: int = key(16, ge=1, doc="rollout length T per env (the n of the n-step returns)")
    gae_lambda: float = key(1.0, ge=0, le=1, doc="GAE lambda (1 = n-step returns)")
    vf_coef: float = key(0.5, ge=0, doc="value loss weight")
    normalize_advantage: bool = key(False, doc="normalise advantages over the rollout")

    def check(self) -> None:
        super().check()
        why = "(A2C measures no approx-KL: its one step per rollout starts where the rollout was collected)"
        if self.lr_schedule == "adaptive_kl":
            raise ConfigError("lr_schedule", self.lr_schedule,
                              f"constant, linear, cosine or a list with algo=a2c {why}", "pass lr_schedule=constant")
        if self.target_kl is not None:
            raise ConfigError("target_kl", self.target_kl, f"null with algo=a2c {why}", "pass target_kl=null")


@dataclass(frozen=True, kw_only=True)
class GRPOConfig(OnPolicyConfig):
    """GRPO: critic-free, group-relative advantages over groups of envs that share their start."""

    target = "embodirl.algos.grpo.GRPO"
    renamed: ClassVar[Mapping[str, str]] = _GRPO_RENAMED
    learning_rate: float = key(4e-3, gt=0, doc="learning rate (the start of a linear/cosine/adaptive_kl schedule)")
    minibatch_size: int | None = key(4096, ge=1, doc="valid transitions per minibatch; null = all of them")
    ent_coef: float = key(0.001, ge=0, doc="entropy bonus weight (the start of a linear/cosine ent_coef_schedule)")
    num_steps: int | None = key(None, ge=1, doc="rollout length T; null = the env's episode limit (every env can "
                                "finish one episode)")
    clip_coef: float = key(0.2, gt=0, doc="surrogate clip range")
    dual_clip_coef: float | None = key(None, gt=1, doc="dual clip: bound the objective of negative advantages at "
                                       "this x A (e.g. 3.0); null = off")
    kl_coef: float = key(0.0, ge=0, doc="k3 KL to a frozen reference policy; 0 = no reference (from scratch), "
                         "~0.02 fine-tuning")
    ref_update_every: int = key(0, ge=0, doc="refresh the reference every this many updates; 0 = never")
    group_size: int = key(4, ge=2, doc="envs per group (must divide env.num_envs)")
    eps: float = key(1e-8, gt=0, doc="added to the group std")
    reset_every_rollout: bool = key(True, doc="reset every env before each rollout (steps compared at equal t)")
    first_episode_only: bool = key(True, doc="keep only each env's first episode per rollout (collection stops "
                                   "once every env has finished one)")
    group_shared_reset: bool = key(True, doc="members of a group start from one shared initial state")
    filter_groups: bool = key(False, doc="train only on groups whose returns differ (DAPO's dynamic sampling: "
                              "a group that ties everywhere has zero advantages); all groups if none differs")
    restart_finished: bool = key(False, doc="an env whose episode ends starts over from its group's shared start "
                                 "while the others finish their first; every complete episode is a group sample, "
                                 "compared at equal steps since its start (the env must support restart)")
    min_valid_fraction: float | None = key(None, gt=0, le=1, doc="with restart_finished: after every env has "
                                           "finished an episode, go on stepping until this share of the simulated "
                                           "steps lies in complete episodes (or the rollout is full); null = stop "
                                           "as soon as every env has finished one")

    def check(self) -> None:
        super().check()
        if self.min_valid_fraction is not None and not self.restart_finished:
            raise ConfigError("min_valid_fraction", self.min_valid_fraction, "null unless restart_finished is true "
                              "(without restarts, steps after an env's first episode are never kept)",
                              "pass algo.restart_finished=true, or algo.min_valid_fraction=null")
        if self.restart_finished and not (self.first_episode_only and self.reset_every_rollout
                                          and self.group_shared_reset):
            raise ConfigError("restart_finished", True, "false unless first_episode_only, reset_every_rollout and "
                              "group_shared_reset are true (restarts repeat the group's shared start of the rollout)",
                              "pass algo.restart_finished=false, or keep those three keys at their default true")


@dataclass(frozen=True, kw_only=True)
class TeacherConfig(Schema):
    """``algo.teacher``: the trained run whose policy labels the student's observations."""

    run: str | None = key(None, doc="run directory of the teacher's training (embodirl-train), e.g. "
                          "outputs/<date>/<time>", example="outputs/<date>/<time>")
    checkpoint: str = key("best", doc="best | last | a file name in <run>/checkpoints/")
    trusted_targets: list[str] = key(factory=list, doc="classes of your own the teacher's stored config may name "
                                     "(as embodirl-eval's trusted_targets)", example=["my_rl.policy.MyPolicy"])
    allow_change: bool = key(False, doc="resume a student whose teacher's weights changed since the student's "
                             "checkpoint (refused otherwise: the student would go on learning from another teacher)")


@dataclass(frozen=True, kw_only=True)
class DistillConfig(OnPolicyConfig):
    """Teacher-student distillation (DAgger): the student acts, a frozen teacher labels every visited observation
    with its deterministic action, the student regresses on those labels (MSE on the action mean for Box actions,
    cross-entropy for Discrete)."""

    target = "embodirl.algos.distill.Distill"
    teacher: TeacherConfig = key(factory=TeacherConfig, doc="the teacher's run and checkpoint")
    learning_rate: float = key(1e-3, gt=0, doc="learning rate (the start of a linear/cosine schedule)")
    num_steps: int = key(16, ge=1, doc="rollout length T per env (batch = env.num_envs x num_steps)")
    num_epochs: int = key(2, ge=1, doc="passes over each rollout per update")
    minibatch_size: int | None = key(1024, ge=1, doc="transitions per minibatch; null = the whole rollout")
    max_grad_norm: float = key(1.0, gt=0, doc="global gradient-norm clip (experiment=distill_push_cube_rgb was "
                               "tuned with 1.0)")
    loss: Literal["mse", "huber"] = key("mse", doc="regression of Box actions on the teacher's: mse | huber "
                                        "(Discrete actions: cross-entropy)")

    def check(self) -> None:
        super().check()
        if self.teacher.run is None:
            raise ConfigError("teacher.run", None, "the run directory of a trained teacher",
                              "train one (embodirl-train experiment=ppo_push_cube) and pass "
                              "teacher.run=<its run directory>")
        why = "(distillation measures no approx-KL: its loss is a regression on the teacher's actions)"
        if self.lr_schedule == "adaptive_kl":
            raise ConfigError("lr_schedule", self.lr_schedule, f"constant, linear, cosine or a list with algo=distill "
                              f"{why}", "pass lr_schedule=constant")
        if self.target_kl is not None:
            raise ConfigError("target_kl", self.target_kl, f"null with algo=distill {why}", "pass target_kl=null")


@dataclass(frozen=True, kw_only=True)
class OffPolicyConfig(Schema):
    """What every off-policy algorithm shares: a replay buffer on the env's device, sampled ``updates_per_step``
    times per collected step of the envs once ``learning_starts`` env steps are stored, and Polyak-averaged targets."""

    num_steps: int = key(8, ge=1, doc="env steps per env collected between updates (one iteration; a logged line)")
    buffer_size: int = key(1_000_000, ge=1, doc="transitions the replay buffer keeps (capacity / env.num_envs per "
                           "env; the oldest are overwritten)")
    minibatch_size: int = key(256, ge=1, doc="transitions sampled from the buffer per gradient step")
    learning_starts: int = key(5000, ge=0, doc="env steps collected before the first gradient step")
    updates_per_step: float = key(1.0, gt=0, doc="gradient steps per collected step of all envs (update-to-data "
                                  "ratio): an iteration takes round(num_steps x this)")
    gamma: float = key(0.99, ge=0, le=1, doc="discount")
    n_step: int = key(1, ge=1, doc="transitions summed into each sampled return (computed when sampling)")
    tau: float = key(0.005, gt=0, le=1, doc="Polyak step of the target networks after each critic step")
    max_grad_norm: float | None = key(None, gt=0, doc="global gradient-norm clip of each network; null = off")
    random_shift: int = key(4, ge=0, doc="DrQ: pixels by which each sampled image (uint8 obs and next_obs keys) is "
                            "shifted, border repeated, an offset per sample; vector keys untouched; 0 = off")
    rnd: RNDConfig = key(factory=RNDConfig, doc="curiosity from random network distillation, computed on each "
                         "sampled batch (weight 0 = off)")


@dataclass(frozen=True, kw_only=True)
class SACConfig(OffPolicyConfig):
    """SAC: twin Q critics with Polyak targets, a tanh-squashed Gaussian actor, automatic entropy temperature
    (Haarnoja et al. 2018, the version with a learned alpha); continuous (Box) actions."""

    target = "embodirl.algos.sac.SAC"
    learning_rate: float = key(3e-4, gt=0, doc="the actor's (and the temperature's) learning rate")
    critic_learning_rate: float = key(1e-3, gt=0, doc="the critics' learning rate")
    critic_hidden_sizes: list[int] = key(factory=lambda: [256, 256], ge=1, doc="hidden layers of each Q critic")
    policy_frequency: int = key(2, ge=1, doc="critic steps per actor (and temperature) step (delayed actor)")
    alpha: float = key(0.2, gt=0, doc="the entropy temperature (its start when autotune)")
    autotune: bool = key(True, doc="learn alpha so the policy's entropy stays near target_entropy")
    target_entropy: float | None = key(None, doc="the autotune's entropy target; null = -(action dimensions)")


@dataclass(frozen=True, kw_only=True)
class FastTD3Config(OffPolicyConfig):
    """FastTD3 (Seo et al. 2025): TD3's clipped double Q, target policy smoothing and delayed actor, with a
    distributional (C51) critic option, n-step returns, per-env exploration noise drawn from a range, large batches
    and several updates per env step; a deterministic tanh-bounded actor; continuous (Box) actions."""

    target = "embodirl.algos.fasttd3.FastTD3"
    learning_rate: float = key(3e-4, gt=0, doc="the actor's learning rate")
    critic_learning_rate: float = key(3e-4, gt=0, doc="the critics' learning rate")
    n_step: int = key(3, ge=1, doc="transitions summed into each sampled return (computed when sampling; FastTD3: 3)")
    tau: float = key(0.1, gt=0, le=1, doc="Polyak step of the target networks after each critic step (FastTD3: 0.1)")
    critic_hidden_sizes: list[int] = key(factory=lambda: [256, 256], ge=1, doc="hidden layers of each Q critic")
    policy_frequency: int = key(2, ge=1, doc="critic steps per actor step (delayed actor)")
    policy_noise: float = key(0.2, ge=0, doc="target policy smoothing: std of the noise added to the next action "
                              "(a fraction of the action half-range)")
    noise_clip: float = key(0.5, ge=0, doc="target policy smoothing: the noise is clipped to +-this")
    std_min: float = key(0.001, ge=0, doc="exploration: each env's noise std is drawn from [std_min, std_max] "
                         "(a fraction of the action half-range), again at each of its episode ends")
    std_max: float = key(0.4, ge=0, doc="exploration: the upper end of the per-env noise std range")
    critic: Literal["twin", "c51"] = key("c51", doc="twin: two scalar Q critics | c51: two distributional critics "
                                         "over num_atoms atoms in [v_min, v_max] (Bellemare et al. 2017)")
    num_atoms: int = key(101, ge=2, doc="critic=c51: atoms of the return distribution's support")
    v_min: float = key(-10.0, doc="critic=c51: the lowest return of the support (below the worst discounted return)")
    v_max: float = key(10.0, doc="critic=c51: the highest return of the support (above the best discounted return)")
    weight_decay: float = key(0.0, ge=0, doc="AdamW weight decay of the actor and the critics (FastTD3: 0.1)")

    def check(self) -> None:
        if not self.v_min < self.v_max:
            raise ConfigError("v_min", self.v_min, f"a float below v_max={self.v_max} (the C51 support)",
                              f"pass v_min={self.v_max - 20.0} or a v_max above it")
        if not self.std_min <= self.std_max:
            raise ConfigError("std_min", self.std_min, f"at most std_max={self.std_max} (the exploration noise "
                              f"range)", f"pass std_min={self.std_max / 10}")

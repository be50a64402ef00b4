"""Schemas of the training side: the ``trainer`` node, its ``divergence`` limits and ``stop_on`` entries, the
``logger`` node with its ``wandb`` part, and the ``eval`` node (evaluation cadence, sizes and videos).

Each node's keys live in the schema of the component that reads them: the Trainer reads ``trainer.*`` (the run
lifecycle, :mod:`embodirl.app.run`, also reads ``trainer.allow_config_change`` before the Trainer exists: the
key keeps the name users know), the periodic evaluation reads ``eval.*`` (the composition root builds the
evaluation env from ``eval.num_envs`` and ``eval.env_overrides``), the loggers read ``logger.*``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from embodirl.config.schema import Node, Schema, key
from embodirl.errors import ConfigError

__all__ = ["MOVED_KEYS", "CurriculumConfig", "DivergenceConfig", "EvalConfig", "LoggerConfig", "PlateauConfig",
           "StopOnConfig", "TrainerConfig", "VideoConfig", "WandbConfig"]

#: Keys that moved to another node (old full path -> new full path): the evaluation cadence and sizes left
#: ``trainer`` for ``eval``. Refused with a "renamed to" line; a resumed run's stored config is read through it.
MOVED_KEYS: Mapping[str, str] = {
    "trainer.eval_every_env_steps": "eval.every_env_steps",
    "trainer.num_eval_envs": "eval.num_envs",
    "trainer.num_eval_episodes": "eval.num_episodes",
    "trainer.eval_env_overrides": "eval.env_overrides",
}


# --- trainer -----------------------------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class DivergenceConfig(Schema):
    """``trainer.divergence``: upper limits on an update's metrics (null: that metric is not checked)."""

    max_approx_kl: float | None = key(10.0, gt=0, doc="fail the run once an update's diag/approx_kl exceeds this")
    max_value_loss: float | None = key(1e10, gt=0, doc="fail the run once an update's loss/value exceeds this")
    max_distill_loss: float | None = key(1e6, gt=0, doc="fail the run once an update's loss/distill (algo=distill) "
                                         "exceeds this")

    def limits(self) -> dict[str, tuple[str, float]]:
        """``metric -> (key, limit)`` of the checks that are on."""
        pairs = {"diag/approx_kl": "max_approx_kl", "loss/value": "max_value_loss", "loss/distill": "max_distill_loss"}
        return {metric: (name, limit) for metric, name in pairs.items() if (limit := getattr(self, name)) is not None}


@dataclass(frozen=True, kw_only=True)
class PlateauConfig(Schema):
    """A plateau: no gain beyond ``min_delta`` over the best value for ``patience_evals`` values in a row."""

    patience_evals: int = key(doc="values in a row without beating the best before the run stops", ge=1)
    min_delta: float = key(0.0, ge=0, doc="a value must beat the best by more than this to count as a gain")
    mode: Literal["max", "min"] = key("max", doc="whether the metric should rise (max) or fall (min)")


def is_rate(metric: str | None) -> bool:
    """Whether ``metric`` is a rate in [0, 1] (``eval/success_rate``, ``episode/success_rate``, ...)."""
    return metric is not None and metric.rsplit("/", 1)[-1].endswith("success_rate")


def never_met(op: str, value: float) -> bool:
    """Whether ``rate op value`` is false for every rate in [0, 1]."""
    return {">=": value > 1, ">": value >= 1, "==": not 0 <= value <= 1, "<=": value < 0, "<": value <= 0}[op]


@dataclass(frozen=True, kw_only=True)
class StopOnConfig(Schema):
    """One ``trainer.stop_on`` entry: a threshold ``{metric, op, value}`` or a plateau ``{metric, plateau}``."""

    metric: str = key(doc="a logged metric name, e.g. eval/return_mean")
    op: Literal[">=", ">", "<=", "<", "=="] | None = key(None, doc="threshold: how the metric compares to value")
    value: float | None = key(None, doc="threshold: the value the metric is compared to")
    plateau: PlateauConfig | None = key(None, doc="plateau: stop once the metric stops improving")

    def check(self) -> None:
        if not self.metric:
            raise ConfigError("metric", self.metric, "a logged metric name such as eval/return_mean",
                              "pass metric=eval/return_mean (or another name in metrics.jsonl)")
        if self.plateau is not None:
            extra = "op" if self.op is not None else "value" if self.value is not None else None
            if extra:
                raise ConfigError(extra, getattr(self, extra), "no other key next to metric and plateau",
                                  f"remove {extra}")
            return
        missing = "op" if self.op is None else "value" if self.value is None else None
        if missing:
            example = "'>='" if missing == "op" else "400"
            raise ConfigError(missing, None, "a threshold {metric, op, value} or a plateau {metric, plateau: {...}}",
                              f"pass {missing}={example}, or make the entry a plateau: {{metric: eval/return_mean, "
                              "plateau: {patience_evals: 5}}")


@dataclass(frozen=True, kw_only=True)
class CurriculumConfig(Schema):
    """One ``trainer.curriculum`` entry: moves an ``env.randomize`` range through ``levels``, on a schedule
    (``every_env_steps``) or when a logged metric reaches ``threshold`` (one level per crossing)."""

    param: str = key(doc="the env.randomize entry whose range moves, e.g. goal_offset")
    levels: list[tuple[float, float]] = key(doc="its range at each level, [[low, high], ...] in the entry's scale; "
                                            "level 0 replaces env.randomize's range at the start")
    every_env_steps: int | None = key(None, ge=1, doc="schedule: one level up every this many env steps")
    metric: str | None = key(None, doc="threshold: one level up each time this logged metric is >= threshold, "
                             "e.g. eval/success_rate or episode/success_rate", example="eval/success_rate")
    threshold: float | None = key(None, doc="threshold: the metric's value that moves one level up", example=0.8)

    def check(self) -> None:
        if not self.levels:
            raise ConfigError("levels", [], "at least one [low, high] range", "pass levels=[[1,1],[0.5,2]]")
        for i, (low, high) in enumerate(self.levels):
            if not 0 <= low <= high:
                raise ConfigError(f"levels[{i}]", [low, high], "[low, high] with 0 <= low <= high",
                                  f"pass [{min(abs(low), abs(high)):g},{max(abs(low), abs(high)):g}]")
        scheduled, triggered = self.every_env_steps is not None, self.metric is not None or self.threshold is not None
        if scheduled == triggered:
            raise ConfigError("every_env_steps", self.every_env_steps, "either every_env_steps (a schedule) or "
                              "metric and threshold (a trigger), not both and not neither",
                              "pass every_env_steps=500000, or metric=eval/success_rate threshold=0.8")
        if triggered and (self.metric is None or self.threshold is None):
            missing = "metric" if self.metric is None else "threshold"
            raise ConfigError(missing, None, "metric and threshold together",
                              "pass metric=eval/success_rate threshold=0.8")
        if is_rate(self.metric) and self.threshold is not None and self.threshold > 1:
            raise ConfigError("threshold", self.threshold, f"a threshold in [0, 1] ({self.metric} is a rate in [0, 1]: "
                              "no level would ever be reached)", "pass threshold=0.8 (an 80 % success rate)")


@dataclass(frozen=True, kw_only=True)
class TrainerConfig(Schema):
    """The training loop: its budget and stop conditions, checkpoints, the best checkpoint, callbacks, resuming."""

    target = "embodirl.training.trainer.Trainer"
    moved: ClassVar[Mapping[str, str]] = {k.removeprefix("trainer."): v for k, v in MOVED_KEYS.items()}
    total_env_steps: int = key(2_000_000, ge=1, doc="stop after this many env steps")
    stop_on_solved: bool = key(True, doc="stop once deterministic evaluation reaches the env's solved threshold")
    stop_on: list[StopOnConfig] = key(factory=list, doc="more stop conditions: thresholds {metric, op, value} and "
                                      "plateaus {metric, plateau: {patience_evals, min_delta, mode}}")
    max_wall_time_s: float | None = key(None, gt=0, doc="stop after this much training wall time; null = no limit")
    checkpoint_every_env_steps: int = key(250_000, ge=1, doc="save checkpoints/last.pt and a periodic step_*.pt "
                                          "when crossing a multiple")
    log_every_env_steps: int = key(0, ge=0, doc="log the mean of the iterations since the last log once this many "
                                   "env steps passed (and at every evaluation and the end); 0 = every iteration")
    keep_checkpoints: int = key(3, ge=0, doc="periodic checkpoints kept, oldest deleted first (last.pt always)")
    best_metric: str | None = key(None, doc="checkpoints/best.pt keeps the state with the best value of this "
                                  "metric; null = env.solved_metric")
    best_mode: Literal["max", "min"] = key("max", doc="whether a higher (max) or lower (min) best_metric is better")
    callbacks: list[Node] = key(factory=list, doc="objects called with each record, checkpoint and the summary "
                                "(embodirl.training.callbacks)")
    resume: str | None = key(None, doc="checkpoint to start from when the run directory has no checkpoints/last.pt "
                             "of its own (which wins)")
    allow_config_change: bool = key(False, doc="continue a run directory whose checkpoint was trained with other "
                                    "algo/env/policy/seed values")
    curriculum: dict[str, CurriculumConfig] = key(factory=dict, doc="randomization ranges moved during training, "
                                                  "logged as curriculum/<name> (guides/domain-randomization.md)",
                                                  example={"goal": {"param": "goal_offset", "every_env_steps": 500000,
                                                                    "levels": [[1, 1], [0.75, 1.5]]}})
    divergence: DivergenceConfig | None = key(factory=DivergenceConfig, doc="fail the run as diverged when an "
                                              "update's metric exceeds its limit; null = no check")

    def check(self) -> None:
        for i, stop in enumerate(self.stop_on):  # here, not in StopOnConfig: the fix rewrites the whole list
            if is_rate(stop.metric) and stop.op is not None and stop.value is not None and \
                    never_met(stop.op, stop.value):
                raise ConfigError(f"stop_on[{i}].value", stop.value, f"a value {stop.metric} {stop.op} value can "
                                  f"meet ({stop.metric} is a rate in [0, 1])", f"pass trainer.stop_on=[{{metric: "
                                  f"{stop.metric}, op: '{stop.op}', value: 0.9}}] (a 90 % success rate)")
        if self.best_metric is not None and not self.best_metric:
            raise ConfigError("best_metric", self.best_metric, "null or a metric name",
                              "pass trainer.best_metric=null (the env's solved_metric)")


# --- logger ------------------------------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class WandbConfig(Schema):
    """``logger.wandb``: the Weights & Biases run."""

    enabled: bool = key(False, doc="log to Weights & Biases")
    project: str = key("embodirl", doc="wandb project the runs go to")
    entity: str | None = key(None, doc="your wandb team or user; null = wandb's default")
    mode: Literal["online", "offline", "disabled"] | None = key(None, doc="null = $WANDB_MODE if set, else online")
    group: str | None = key(None, doc="null = the sweep directory for multirun jobs, else <algo>-<env>")
    name: str | None = key(None, doc="null = <algo>-<env>-seed<seed> (plus the job's overrides in a sweep)")
    tags: list[str] = key(factory=list, doc="extra wandb tags, e.g. [baseline, cluster-a]")


@dataclass(frozen=True, kw_only=True)
class LoggerConfig(Schema):
    """Where metrics go besides metrics.jsonl (always written): the console, TensorBoard, wandb."""

    target = "embodirl.training.loggers.Loggers"
    console: Literal["auto", "bar", "lines", "none"] = key("auto", doc="the progress line: auto = a bar on a "
                                                          "terminal, plain lines otherwise")
    console_every_s: float = key(5.0, gt=0, doc="seconds between plain lines")
    tensorboard: bool = key(True, doc="event files under <run_dir>/tb")
    wandb: WandbConfig = key(factory=WandbConfig, doc="Weights & Biases")


# --- eval --------------------------------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class VideoConfig(Schema):
    """How evaluation acts, and its videos (envs that render frames): embodirl-train films every evaluation,
    embodirl-eval once."""

    deterministic: bool = key(True, doc="evaluation episodes take the policy's most likely action (true) or sample "
                              "it from its distribution (false; seeded by the evaluation's seed; videos stay "
                              "deterministic)")
    video: bool = key(False, doc="save a video of a deterministic episode into <run_dir>/videos (and "
                      "TensorBoard/wandb)")
    video_num_envs: int | None = key(None, ge=1, doc="envs shown side by side in a grid (at most the evaluation "
                                     "envs); null = up to 4")
    video_size: int = key(192, ge=16, le=2048, doc="pixels per env frame")
    video_fps: int = key(20, ge=1, doc="frames per second of the saved video")
    video_format: Literal["mp4", "gif"] = key("mp4", doc="the video file's format (mp4: H.264)")

    def num_filmed(self, num_envs: int) -> int:
        """Envs in the video grid when the evaluation env has ``num_envs``."""
        return self.video_num_envs if self.video_num_envs is not None else min(4, num_envs)


@dataclass(frozen=True, kw_only=True)
class EvalConfig(VideoConfig):
    """Periodic evaluation during training, on env copies of its own, and its videos."""

    target = "embodirl.training.evaluation.PeriodicEvaluation"
    every_env_steps: int = key(16384, ge=1, doc="evaluate when a multiple of this is crossed (and at the end)")
    num_envs: int = key(20, ge=1, doc="separate env copies for deterministic evaluation")
    num_episodes: int = key(20, ge=1, doc="episodes per evaluation, spread evenly over the evaluation envs")
    env_overrides: dict[str, Any] | None = key(None, doc="env keys that differ for the evaluation envs, e.g. "
                                               "{max_episode_steps: 1000}")

"""The schema of a whole ``embodirl-train`` config: the top-level keys and one node per config group.

:func:`check_run_config` checks the composed config against it, and every group's node against its class's
schema, before torch is imported: a misspelt key or an impossible value costs a fraction of a second, not the
seconds torch takes to import.
"""

from __future__ import annotations

import re
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from embodirl.config import algos, training
from embodirl.config.envs import EnvNode
from embodirl.config.policies import PolicyNode
from embodirl.config.randomize import SweepConfig
from embodirl.config.schema import Node, Schema, key, parse
from embodirl.config.training import EvalConfig, LoggerConfig, TrainerConfig, VideoConfig
from embodirl.errors import ConfigError

__all__ = ["MAX_SEED", "MOVED_KEYS", "EvaluateConfig", "EvaluateEvalConfig", "ExportConfig", "RunConfig",
           "check_evaluate_config", "check_export_config", "check_run_config"]

#: Every key renamed or moved, old full path -> new full path: overriding an old name gets a "renamed to" line,
#: and a resumed run's stored config is read through it.
MOVED_KEYS: Mapping[str, str] = {**algos.MOVED_KEYS, **training.MOVED_KEYS}

# Seeds plus the rank and evaluation offsets must stay int64 (torch and numpy seeds); 2^62 leaves room for any
# number of ranks.
MAX_SEED = 2**62
_DEVICE = re.compile(r"auto|cpu|cuda(:\d+)?")


@dataclass(frozen=True, kw_only=True)
class RunConfig(Schema):
    """The composed config of ``embodirl-train`` (``train.yaml`` and the options chosen for each group)."""

    seed: int = key(0, ge=-MAX_SEED, le=MAX_SEED, range_text="in [-2^62, 2^62]",
                    doc="seeds torch (policy init, sampling) and the envs; evaluation and other ranks add offsets")
    device: str = key("auto", doc="auto (CUDA when present, else CPU) | cpu | cuda | cuda:N")
    num_threads: int = key(1, ge=1, doc="torch intra-op threads; 1 is fastest for small nets on small or shared CPUs")
    num_update_threads: int | None = key(None, ge=1, doc="threads during the update only (large nets or batches may "
                                         "gain from 2); null = num_threads")
    objective: str = key("eval/return_mean", doc="summary value returned to Hydra sweepers (e.g. eval/success_rate, "
                         "solved_wall_time_s)")
    compile: bool | Literal["auto"] = key("auto", doc="torch.compile the collection, update and evaluation steps: "
                                          "true | false | auto (on CUDA only)")
    cuda_graphs: bool | Literal["auto"] = key("auto", doc="replay those steps as CUDA graphs: true | false | auto "
                                              "(on CUDA with one process)")
    policy: PolicyNode = key(doc="the policy (config group policy)")
    algo: Node = key(doc="the algorithm (config group algo)")
    env: EnvNode = key(doc="the training env (config group env)")
    trainer: Node = key(doc="the training loop: budget, stop conditions, checkpoints (config group trainer)")
    logger: Node = key(doc="where metrics go besides metrics.jsonl (config group logger)")
    eval: Node = key(doc="the periodic evaluation and its videos")

    def check(self) -> None:
        check_device(self.device)
        for name, schema in (("trainer", TrainerConfig), ("eval", EvalConfig), ("logger", LoggerConfig)):
            node: Node = getattr(self, name)
            if not isinstance(node.cfg, schema):  # the run reads these keys itself
                raise ConfigError(f"{name}._target_", node.target, f"a class whose constructor takes a "
                                  f"{schema.__name__}", f"pass {name}._target_={schema.target}, or a subclass of it")

    def trainer_config(self) -> TrainerConfig:
        """The trainer node's keys (the budget, the stop conditions, resuming)."""
        return typing.cast(TrainerConfig, self.trainer.cfg)

    def eval_config(self) -> EvalConfig:
        """The eval node's keys (the periodic evaluation's cadence, sizes and videos)."""
        return typing.cast(EvalConfig, self.eval.cfg)


def check_device(device: str) -> None:
    """``auto``, ``cpu``, ``cuda`` or ``cuda:N`` (whether that device exists is known once torch is imported)."""
    if device.startswith("cpu:"):
        raise ConfigError("device", device, "auto, cpu, cuda or cuda:N (the CPU is one device: it takes no index)",
                          "pass device=cpu")
    if not _DEVICE.fullmatch(device):
        raise ConfigError("device", device, "auto, cpu, cuda or cuda:N", "pass device=auto")


@dataclass(frozen=True, kw_only=True)
class EvaluateEvalConfig(VideoConfig):
    """``embodirl-eval``'s ``eval`` node: its video, the env's conditions and a held-out sweep of one randomizable
    env parameter."""

    conditions: Literal["nominal", "training"] = key("nominal", doc="the env's randomization: nominal (none: the "
                                                      "task as defined, which the sweep's x1 bin repeats) | training "
                                                      "(the run's env.randomize, as its periodic evaluation drew it)")
    sweep: SweepConfig = key(factory=SweepConfig, doc="held-out conditions: one evaluation per value of one env "
                             "parameter, the others as in eval.conditions (guides/domain-randomization.md)")


@dataclass(frozen=True, kw_only=True)
class EvaluateConfig(Schema):
    """The config of ``embodirl-eval`` (``eval.yaml``): which checkpoint, how many episodes, where and how to film."""

    export: str | None = key(None, doc="a directory of embodirl-export: run its policy file beside the checkpoint "
                             "it came from, and in a second env chosen with env=NAME (guides/export.md)")
    run: str | None = key(None, doc="a run directory of embodirl-train (evaluates its checkpoints/<checkpoint>.pt)")
    checkpoint: str = key("last", doc="with run: last | best | a file name in checkpoints/ (step_*.pt); without "
                          "run: a .pt path (or a run directory); last, as embodirl-export")
    num_episodes: int = key(100, ge=1, doc="episodes (deterministic unless eval.deterministic=false), spread "
                                          "evenly over the env copies")
    seed: int = key(12345, ge=-MAX_SEED, le=MAX_SEED, range_text="in [-2^62, 2^62]",
                    doc="reset seed of the evaluation env")
    device: str = key("auto", doc="auto | cpu | cuda | cuda:N")
    trusted_targets: list[str] = key(factory=list, doc="classes of your own that the checkpoint's config may name "
                                     "(never taken from the file)")
    num_threads: int = key(1, ge=1, doc="torch intra-op threads")
    env: dict[str, Any] = key(factory=dict, doc="env keys changed for evaluation: num_envs (null = the run's "
                              "evaluation envs), others with +env.KEY=VALUE (checked by the env's schema)")
    eval: EvaluateEvalConfig = key(factory=EvaluateEvalConfig, doc="evaluation videos and the held-out sweep")

    def check(self) -> None:
        check_device(self.device)
        num_envs = self.env.get("num_envs")
        if num_envs is not None and (isinstance(num_envs, bool) or not isinstance(num_envs, int) or num_envs < 1):
            raise ConfigError("env.num_envs", num_envs, "null (the run's evaluation envs) or an int >= 1",
                              "pass env.num_envs=8")


@dataclass(frozen=True, kw_only=True)
class ExportConfig(Schema):
    """The config of ``embodirl-export`` (``export.yaml``): which checkpoint, which format, where."""

    run: str | None = key(None, doc="a run directory of embodirl-train (exports its checkpoints/<checkpoint>.pt)")
    checkpoint: str = key("last", doc="with run: last | best | a file name in checkpoints/ (step_*.pt); without "
                          "run: a .pt path (or a run directory); last, as embodirl-eval")
    format: Literal["onnx", "torchscript"] = key("onnx", doc="onnx (policy.onnx, for onnxruntime; needs the "
                                                 "export extra) | torchscript (policy.pt, for torch.jit.load)")
    out: str | None = key(None, doc="the directory to write policy.<onnx|pt> and manifest.json into; "
                          "null = <run>/export/<format> (next to the checkpoint's run)")
    overwrite: bool = key(False, doc="replace an earlier export in out (refused otherwise)")
    trusted_targets: list[str] = key(factory=list, doc="classes of your own that the checkpoint's config may name "
                                     "(never taken from the file)")


def check_evaluate_config(cfg: Any) -> EvaluateConfig:
    """``embodirl-eval``'s composed config checked against :class:`EvaluateConfig`, before torch is imported."""
    return parse(EvaluateConfig, _plain(cfg))


def check_export_config(cfg: Any) -> ExportConfig:
    """``embodirl-export``'s composed config checked against :class:`ExportConfig`, before torch is imported."""
    return parse(ExportConfig, _plain(cfg))


def _plain(cfg: Any) -> dict[str, Any]:
    from omegaconf import DictConfig, OmegaConf

    values = OmegaConf.to_container(cfg, resolve=True) if isinstance(cfg, DictConfig) else cfg
    if not isinstance(values, Mapping):
        raise ConfigError("config", values, "a mapping of keys", "compose it with the command line")
    return {str(k): v for k, v in values.items()}


def check_run_config(cfg: Any) -> RunConfig:
    """The composed config (a Hydra ``DictConfig`` or a plain mapping) checked against :class:`RunConfig` and each
    group's schema.

    Raises:
        ConfigError: The first bad key, naming its full path, the value, what is valid and a fix.
    """
    return parse(RunConfig, _plain(cfg))

"""The schema of a whole ``embodirl-train`` config: the top-level keys and one node per config group.

:func:`check_run_config` checks the composed config against it, and every group's node against its class's
schema, before torch is imported: a misspelt key or an impossible value costs a fraction of a second, not the
seconds torch takes to import.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from embodirl.config.schema import Node, Schema, key, parse
from embodirl.errors import ConfigError

__all__ = ["MAX_SEED", "RunConfig", "check_run_config"]

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
    policy: Node = key(doc="the policy (config group policy)")
    algo: Node = key(doc="the algorithm (config group algo)")
    env: Node = key(doc="the training env (config group env)")
    trainer: Node = key(doc="the training loop: budget, stop conditions, checkpoints (config group trainer)")
    logger: Node = key(doc="where metrics go besides metrics.jsonl (config group logger)")
    eval: Node = key(doc="the periodic evaluation and its videos")

    def check(self) -> None:
        if self.device.startswith("cpu:"):
            raise ConfigError("device", self.device, "auto, cpu, cuda or cuda:N (the CPU is one device: it takes no "
                              "index)", "pass device=cpu")
        if not _DEVICE.fullmatch(self.device):
            raise ConfigError("device", self.device, "auto, cpu, cuda or cuda:N", "pass device=auto")


def check_run_config(cfg: Any) -> RunConfig:
    """The composed config (a Hydra ``DictConfig`` or a plain mapping) checked against :class:`RunConfig` and each
    group's schema.

    Raises:
        ConfigError: The first bad key, naming its full path, the value, what is valid and a fix.
    """
    from omegaconf import DictConfig, OmegaConf

    values = OmegaConf.to_container(cfg, resolve=True) if isinstance(cfg, DictConfig) else cfg
    if not isinstance(values, Mapping):
        raise ConfigError("config", values, "a mapping of keys", "compose it with embodirl-train")
    return parse(RunConfig, {str(k): v for k, v in values.items()})

"""Schemas of the optimizers (``algo/optimizer=adam|adamw|sgd``): ``torch.optim`` classes take these keys as keyword
arguments; the algorithm passes the parameters and the learning rate."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

from embodirl.config.schema import Schema, key
from embodirl.errors import ConfigError

__all__ = ["AdamConfig", "AdamWConfig", "OptimizerConfig", "SGDConfig"]


@dataclass(frozen=True, kw_only=True)
class OptimizerConfig(Schema):
    """Keys every shipped optimizer takes; the algorithm passes the parameters and the learning rate."""

    takes_keywords: ClassVar[bool] = True
    unknown_hint: ClassVar[str] = ", or select the optimizer whose key it is (algo/optimizer=adam, adamw or sgd)"
    refused: ClassVar[Mapping[str, tuple[str, str]]] = {"lr": ("no value: the algorithm passes the learning rate",
                      "remove it, and set algo.learning_rate (and algo.lr_schedule) instead"),
               "params": ("no value: the algorithm passes the parameters", "remove it")}
    weight_decay: float = key(0.0, ge=0, doc="L2 penalty (AdamW: decoupled weight decay)")
    foreach: bool | None = key(None, doc="torch's multi-tensor implementation; null = torch's choice")
    fused: bool | None = key(None, doc="one fused kernel for every parameter; null = on where the class has it")


@dataclass(frozen=True, kw_only=True)
class AdamConfig(OptimizerConfig):
    """``torch.optim.Adam``."""

    target = "torch.optim.Adam"
    eps: float = key(1e-5, gt=0, doc="added to the denominator (torch's default is 1e-8; 1e-5 is the RL habit)")
    betas: tuple[float, float] = key((0.9, 0.999), ge=0, lt=1, doc="decay of the moment estimates")
    amsgrad: bool = key(False, doc="the AMSGrad variant")


@dataclass(frozen=True, kw_only=True)
class AdamWConfig(AdamConfig):
    """``torch.optim.AdamW`` (decoupled weight decay)."""

    target = "torch.optim.AdamW"
    weight_decay: float = key(0.01, ge=0, doc="decoupled weight decay")


@dataclass(frozen=True, kw_only=True)
class SGDConfig(OptimizerConfig):
    """``torch.optim.SGD``."""

    target = "torch.optim.SGD"
    momentum: float = key(0.9, ge=0, doc="momentum factor (0 = plain SGD)")
    dampening: float = key(0.0, ge=0, le=1, doc="dampening of the momentum")
    nesterov: bool = key(False, doc="Nesterov momentum (needs momentum > 0 and dampening 0)")

    def check(self) -> None:
        if self.nesterov and (self.momentum <= 0 or self.dampening != 0):
            raise ConfigError("nesterov", True, "false unless momentum > 0 and dampening = 0",
                              "pass nesterov=false, or momentum=0.9 dampening=0")

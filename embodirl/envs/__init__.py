"""Batched environments: the contract, a pure-torch CartPole, the planar push_cube task, push_cube with a UR10
arm in MuJoCo, and adapters between gymnasium and the batched contract (both directions).

The names below are imported on first use: a run builds one env, and importing every env's simulator (gymnasium,
MuJoCo) for it would lengthen every start-up.
"""

from __future__ import annotations

import importlib
from typing import Any

_HOMES = {"BatchedEnv": "embodirl.envs.base", "StepResult": "embodirl.envs.base",
          "CartPole": "embodirl.envs.cartpole", "GymEnv": "embodirl.envs.adapters.gym",
          "PushCube": "embodirl.envs.push_cube.env", "PushCubeArm": "embodirl.envs.push_cube.arm",
          "SingleEnvAdapter": "embodirl.envs.adapters.gymnasium_api"}

__all__ = sorted(_HOMES)


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_HOMES[name]), name)

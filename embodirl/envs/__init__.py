"""Batched environments: the contract, a pure-torch CartPole, the planar push_cube task, push_cube with a UR10
arm in MuJoCo, and adapters between gymnasium and the batched contract (both directions)."""

from embodirl.envs.adapters.gym import GymEnv
from embodirl.envs.adapters.gymnasium_api import SingleEnvAdapter
from embodirl.envs.base import BatchedEnv, StepResult
from embodirl.envs.cartpole import CartPole
from embodirl.envs.push_cube.arm import PushCubeArm
from embodirl.envs.push_cube.env import PushCube

__all__ = ["BatchedEnv", "CartPole", "GymEnv", "PushCube", "PushCubeArm", "SingleEnvAdapter",
           "StepResult"]

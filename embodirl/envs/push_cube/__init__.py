"""The push_cube task family: the planar torch env, its physics and view, the UR10 arm."""

from embodirl.envs.push_cube.arm import PushCubeArm
from embodirl.envs.push_cube.env import PushCube

__all__ = ["PushCube", "PushCubeArm"]

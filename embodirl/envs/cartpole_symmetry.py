"""The sign flip of CartPole's observations and actions (``algo.symmetry.mirror``).

Reflecting the track (``x -> -x``) maps a CartPole state ``(x, x_dot, theta, theta_dot)`` to ``-state`` and a push
to the right to a push to the left: gymnasium's equations of motion are odd in ``(x, theta, force)`` (``sin`` and
the force change sign, ``cos`` and ``theta_dot^2`` do not), the termination bounds ``|x| > 2.4`` and
``|theta| > 12 deg`` and the reset range ``U(-0.05, 0.05)`` are symmetric, and the reward is 1 every step. Negation
is exact in floating point, so the mirrored trajectory is the negated one bit for bit
(``tests/envs/test_cartpole_symmetry.py``). ``hide_velocities`` observations ``(x, theta)`` are negated the same way.
"""

from __future__ import annotations

from tensordict import TensorDict
from torch import Tensor

from embodirl.envs.observations import STATE_KEY

__all__ = ["mirror"]


def mirror(obs: TensorDict, action: Tensor) -> tuple[TensorDict, Tensor]:
    """Negate CartPole's observations ``[B]`` (the key ``"state"``, ``[B, 4]`` or ``[B, 2]``) and swap its actions
    ``[B]`` (``0``: push left, ``1``: push right).

    Raises:
        ValueError: Observations or actions that are not CartPole's: keys other than ``"state"``, another width,
            or actions that are not integers.
    """
    keys = sorted(str(k) for k in obs.keys())  # noqa: SIM118 (iterating a TensorDict walks its batch)
    if keys != [STATE_KEY]:
        raise ValueError(f"CartPole's mirror reads its observation, the key 'state'; got keys {keys}")
    width = obs.get(STATE_KEY).shape[-1]
    if width not in (2, 4) or action.is_floating_point():
        raise ValueError(f"CartPole's mirror reads 4 (hide_velocities: 2) state columns and integer actions; got "
                         f"{width} columns and {action.dtype} actions: the env is not CartPole")
    mirrored = obs.copy()  # a shallow copy: the caller's TensorDict keeps its leaves
    mirrored.set(STATE_KEY, -obs.get(STATE_KEY))
    return mirrored, 1 - action

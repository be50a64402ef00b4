"""The left/right mirror image of push_cube's observations and actions (``algo.symmetry.mirror``).

Reflecting the scene across the x axis (``y -> -y``) maps a push_cube state to another state whose trajectory is
the reflected one: the table, the tip's workspace, the goal's offset ``(0.2, 0)``, the reset ranges and the arm's
base ``(-0.615, 0)`` are symmetric about ``y = 0``, friction and contact do not depend on handedness, and the
square cube looks the same at yaw ``-theta`` reflected. So every planar vector keeps its ``x`` and negates its
``y``, the yaw and the spin change sign (``cos`` kept, ``sin`` negated), and in joint mode the arm's angles and
velocities change sign (the elbow bends the other way). The tip's commanded velocity (``ee_delta_pos``) negates
its ``y``; a joint step (``joint_delta_pos``) negates both joints. ``t / T`` (``time_obs``) is unchanged.

``tests/envs/push_cube/test_symmetry.py`` steps the env from states and their mirror images with mirrored actions
and checks that the trajectories stay mirror images. The map assumes the default geometry: a workspace, table or
arm base moved off ``y = 0`` breaks the symmetry.
"""

from __future__ import annotations

import torch
from tensordict import TensorDict
from torch import Tensor

from embodirl.envs.observations import STATE_KEY

__all__ = ["mirror", "mirror_state_features"]

# Columns of the 17 features whose sign flips: p_y, (v_p)_y, c_y, sin(theta), v_y, omega, g_y, (g - c)_y, (c - p)_y.
_FLIPPED = (1, 3, 5, 7, 9, 10, 12, 14, 16)
_JOINT = (17, 18, 19, 20)  # joint mode: q (2) and the scaled joint velocity (2)
# Feature width -> whether the width has the joint columns: ee (17), ee + time (18), joint (21), joint + time (22).
_WIDTHS = {17: False, 18: False, 21: True, 22: True}


def mirror_state_features(state: Tensor) -> Tensor:
    """The mirror image of ``[..., D]`` push_cube state features (``obs_mode`` state's vector, ``D`` in 17, 18, 21,
    22: ee or joint mode, with or without ``time_obs``).

    Raises:
        ValueError: Another width (another env's observation).
    """
    width = state.shape[-1]
    if width not in _WIDTHS:
        raise ValueError(f"push_cube's mirror reads state features of 17, 18, 21 or 22 columns (ee or joint mode, "
                         f"with or without time_obs); got {width}: the observation is not push_cube's")
    signs = torch.ones(width, dtype=state.dtype, device=state.device)
    for column in _FLIPPED + (_JOINT if _WIDTHS[width] else ()):
        signs[column] = -1.0  # one column at a time: no index tensor copied from the host (CUDA-graph safe)
    return state * signs


def mirror(obs: TensorDict, action: Tensor) -> tuple[TensorDict, Tensor]:
    """Reflect push_cube's observations ``[B]`` (``obs_mode=state``: the key ``"state"``) and actions ``[B, 2]``
    across the x axis.

    An ``ee_delta_pos`` action ``(v_x, v_y)`` becomes ``(v_x, -v_y)``; a ``joint_delta_pos`` action ``(dq_1, dq_2)``
    becomes ``(-dq_1, -dq_2)``. Which mode is read from the width of the observation.

    Raises:
        ValueError: An observation with keys other than ``"state"`` (the top view of ``obs_mode=rgb`` is not
            mirrored here) or of another width.
    """
    keys = sorted(str(k) for k in obs.keys())  # noqa: SIM118 (iterating a TensorDict walks its batch)
    if keys != [STATE_KEY]:
        raise ValueError(f"push_cube's mirror reads obs_mode=state observations (the key 'state'); got keys {keys}")
    state = obs.get(STATE_KEY)
    joint = _WIDTHS.get(state.shape[-1], False)
    action_signs = action.new_ones(action.shape[-1])
    action_signs[-1] = -1.0
    if joint:
        action_signs[0] = -1.0
    mirrored = obs.copy()  # a shallow copy: the caller's TensorDict keeps its leaves
    mirrored.set(STATE_KEY, mirror_state_features(state))
    return mirrored, action * action_signs

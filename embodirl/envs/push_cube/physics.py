"""The maths of :mod:`embodirl.envs.push_cube.env` as pure functions: physics, reset scenes, reward, drawing.

A kinematic disk (the tool tip, radius ``r``) pushes a square cube (half-size ``h``) that slides on a table
with Coulomb friction. Conventions shared by every function:

* A 2-vector is a pair ``(x, y)`` of ``[N]`` tensors (:data:`Vec2`); a ``[2, N]`` tensor (row 0 = x,
  row 1 = y) works wherever one is passed in. Scalars per env are ``[N]``. Everything broadcasts over ``N``
  without Python branches, and every operation is elementwise over ``N`` with one shape, so
  ``torch.compile`` fuses a whole physics step into a handful of kernels (mixing ``[2, N]`` and ``[N]``
  tensors split it into about 40).
* ``R(theta)`` rotates the cube frame into the world; ``n`` points from the cube to the pusher and the
  tangent is ``t = (-n_y, n_x)``; ``a x b = a_x b_y - a_y b_x`` is the planar cross product.

The functions follow the task specification (``docs/envs/push_cube.md``): table friction as an exact velocity-level
stop, the disk-vs-oriented-box signed distance, a sequential-impulse contact solve with speculative contact,
the 2-link (SCARA) arm's kinematics, ManiSkill's reset distribution and staged reward, and the view box and
colours of the top views (drawn by :mod:`embodirl.envs.push_cube.view`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch
from torch import Tensor

from embodirl.config.envs import CUBE_SPAWN, TIP_SPAWN_HIGH, TIP_SPAWN_LOW

__all__ = [
    "CUBE_SPAWN",
    "MEAN_LEVER_ARM",
    "REACH_TOLERANCE",
    "SUCCESS_REWARD",
    "TANH_SCALE",
    "TIP_SPAWN_HIGH",
    "TIP_SPAWN_LOW",
    "YAW_SPAWN",
    "Scalar",
    "Vec2",
    "arm_forward",
    "arm_inverse",
    "box_contact",
    "push_point",
    "rotate",
    "solve_contact",
    "spawn_scenes",
    "staged_reward",
    "table_friction",
    "view_box",
    "world_to_pixel",
]

Vec2 = tuple[Tensor, Tensor]  #: a 2-vector per env: ``(x, y)``, each ``[N]``
Vec2Like = Vec2 | Sequence[Tensor] | Tensor  # also accepted as input: a [2, N] tensor
Scalar = float | Tensor  #: a constant, or ``[N]`` per-env values (domain randomization)

#: Mean distance of a uniformly loaded unit half-size square's points from its centre:
#: ``(sqrt(2) + ln(1 + sqrt(2))) / 3`` (times ``h``), the lever arm of the table's friction torque.
MEAN_LEVER_ARM = (math.sqrt(2.0) + math.log(1.0 + math.sqrt(2.0))) / 3.0
_TINY = 1e-30  # guards divisions by a speed that may be exactly zero
YAW_SPAWN = math.pi / 4  #: randomize_yaw: yaw ~ U(-pi/4, pi/4)
REACH_TOLERANCE = 0.015  #: |p - p*| below this counts as "reached" (gates the place term)
TANH_SCALE = 5.0  #: distance scale of the reach and place terms (1/m)
SUCCESS_REWARD = 3.0  #: dense reward while successful; "normalized_dense" divides by it


def _norm(x: Tensor, y: Tensor) -> Tensor:
    return (x * x).addcmul_(y, y).sqrt_()


def rotate(cos_t: Tensor, sin_t: Tensor, vec: Vec2Like) -> Vec2:
    """``R(theta) vec``.

    Args:
        cos_t: ``[N]`` cosine of the angle.
        sin_t: ``[N]`` sine of the angle.
        vec: 2-vector ``(x, y)``.

    Returns:
        The rotated 2-vector.
    """
    x, y = vec[0], vec[1]
    return x * cos_t - y * sin_t, x * sin_t + y * cos_t


def box_contact(p: Vec2Like, c: Vec2Like, cos_t: Tensor, sin_t: Tensor, half_size: Scalar,
                radius: Scalar) -> tuple[Tensor, Vec2, Vec2]:
    """Signed distance, normal and contact lever arm of a disk against an oriented square.

    In the cube frame the pusher is at ``q = R^T (p - c)``; with per-axis excess ``a = |q| - h``:

    * outside (some ``a_i > 0``): ``phi = |max(a, 0)| - r``, ``n_l = (q - clamp(q)) / |q - clamp(q)|`` and
      the contact point is ``clamp(q, -h, h)``;
    * inside: ``phi = max(a) - r``, ``n_l = sign(q_k) e_k`` with ``k = argmax a`` (the nearest face) and the
      contact point is ``q`` with component ``k`` set to ``sign(q_k) h``.

    Both cases are computed branch-free: the folded normal ``w`` is ``max(a, 0) / |max(a, 0)|`` outside and
    the one-hot of ``k`` inside, and the folded contact point is ``h + (1 - w) min(a, 0)``.

    Args:
        p: Pusher centre.
        c: Cube centre.
        cos_t: ``[N]`` cosine of the cube's yaw.
        sin_t: ``[N]`` sine of the cube's yaw.
        half_size: Cube half-size ``h``.
        radius: Pusher radius ``r``.

    Returns:
        ``phi`` ``[N]`` signed gap (negative = penetration), ``n`` unit world normal (cube -> pusher) and
        ``r_c`` world lever arm from the cube centre to the contact point.
    """
    dx, dy = p[0] - c[0], p[1] - c[1]
    q = (dx * cos_t + dy * sin_t, dy * cos_t - dx * sin_t)
    excess = [qi.abs() - half_size for qi in q]
    outside = [a.clamp(min=0.0) for a in excess]
    dist = _norm(*outside)
    x_nearer = excess[0] >= excess[1]
    one_hot = (x_nearer.to(dist.dtype), (~x_nearer).to(dist.dtype))
    normal, arm = [], []
    for qi, a, o, k in zip(q, excess, outside, one_hot, strict=True):  # w and h + (1 - w) min(a, 0) are >= 0
        w = torch.where(dist > 0.0, o / dist, k)
        inside = a.clamp(max=0.0)
        normal.append(torch.copysign(w, qi))
        arm.append(torch.copysign(torch.addcmul(inside, w, inside, value=-1.0).add_(half_size), qi))
    phi = dist + torch.maximum(*excess).clamp(max=0.0) - radius
    return phi, rotate(cos_t, sin_t, normal), rotate(cos_t, sin_t, arm)


def table_friction(v: Vec2Like, omega: Tensor, dv: Scalar, domega: Scalar) -> tuple[Vec2, Tensor]:
    """Coulomb table friction over one substep, at velocity level, stopping exactly (no reversal).

    ``v <- v max(0, 1 - dv / |v|)`` and ``omega <- omega max(0, 1 - domega / |omega|)`` (the decoupled
    "box" limit surface), computed as ``max(0, |v| - dv) / |v|`` so that zero velocities and zero friction
    stay finite.

    Args:
        v: Cube velocity.
        omega: ``[N]`` cube angular velocity.
        dv: Speed lost per substep, ``mu_table g delta``.
        domega: Angular speed lost per substep, ``mu_table g rho m / I delta``.

    Returns:
        The new ``v`` and ``omega`` ``[N]``.
    """
    speed = _norm(v[0], v[1])
    scale = (speed - dv).clamp_(min=0.0).div_(speed.clamp_(min=_TINY))
    spin = omega.abs()
    omega = omega * (spin - domega).clamp_(min=0.0).div_(spin.clamp_(min=_TINY))
    return (v[0] * scale, v[1] * scale), omega


def solve_contact(v_p: Vec2Like, v: Vec2Like, omega: Tensor, phi: Tensor, n: Vec2Like, r_c: Vec2Like, *,
                  mass: Scalar, inertia: Scalar, friction: Scalar, dt: float, baumgarte: float, margin: Scalar,
                  iterations: int) -> tuple[Vec2, Tensor]:
    """Sequential normal + friction impulses between the (infinitely heavy) pusher and the cube.

    The contact is active when ``phi < margin`` (speculative). The target separating velocity is ``-phi / dt`` for
    a gap (never close it faster than it exists) and ``-baumgarte phi / dt`` for a penetration. Each iteration
    projects the accumulated normal impulse onto ``>= 0`` and the friction impulse onto ``[-mu lambda_n, mu
    lambda_n]``. The relative velocity ``(v_n, v_t)`` of the pusher with respect to the cube's contact point is
    updated through the 2x2 effective-mass matrix instead of being recomputed from the cube's velocity (identical
    in exact arithmetic, fewer kernels).

    Args:
        v_p, v: Pusher velocity over the substep; cube velocity (after table friction).
        omega: ``[N]`` cube angular velocity.
        phi: ``[N]`` signed gap at the start of the substep.
        n: Unit normal, cube -> pusher.
        r_c: Lever arm of the contact point.
        mass, inertia: Cube mass ``m`` and moment of inertia ``I``.
        friction: Pusher-cube friction coefficient ``mu_push``.
        dt: Substep ``delta``.
        baumgarte: Fraction of a penetration removed per substep.
        margin: Speculative margin: gaps below it are solved.
        iterations: Number of solver sweeps.

    Returns:
        The cube's new ``v`` and ``omega`` ``[N]``.
    """
    inv_mass, inv_inertia = 1.0 / mass, 1.0 / inertia
    nx, ny = n[0], n[1]
    rn = r_c[0] * ny - r_c[1] * nx  # r_c x n
    rt = r_c[0] * nx + r_c[1] * ny  # r_c x t
    k_n = rn.square().mul_(inv_inertia).add_(inv_mass)  # effective inverse masses
    k_t = rt.square().mul_(inv_inertia).add_(inv_mass)
    k_nt = rn * rt * inv_inertia
    inv_k_n = (phi < margin) / k_n  # inactive contacts: 0, so lambda_n (and with it lambda_t) stays 0
    inv_k_t = k_t.reciprocal()
    ux, uy = v_p[0] - v[0], v_p[1] - v[1]
    v_n = (ux * nx + uy * ny).sub_(omega * rn)  # relative velocity along n
    v_t = (uy * nx - ux * ny).sub_(omega * rt)  # ... and along t
    target = phi.clamp(max=0.0).mul_(1.0 - baumgarte).sub_(phi).mul_(1.0 / dt)  # -phi/dt, or -beta phi/dt if < 0
    lam_n = torch.zeros_like(phi)
    lam_t = torch.zeros_like(phi)
    for _ in range(iterations):
        new_n = torch.addcmul(lam_n, target - v_n, inv_k_n).clamp_(min=0.0)
        d = new_n - lam_n
        lam_n = new_n
        v_n.addcmul_(d, k_n)
        v_t.addcmul_(d, k_nt)
        bound = lam_n * friction
        new_t = torch.addcmul(lam_t, v_t, inv_k_t).clamp_(min=-bound, max=bound)
        d = new_t - lam_t
        lam_t = new_t
        v_t.addcmul_(d, k_t, value=-1.0)
        v_n.addcmul_(d, k_nt, value=-1.0)
    # Cube impulse J = -lambda_n n + lambda_t t; its torque is r_c x J = -lambda_n rn + lambda_t rt.
    v = (v[0] + (-lam_n * nx - lam_t * ny) * inv_mass, v[1] + (lam_t * nx - lam_n * ny) * inv_mass)
    omega = omega + (lam_t * rt - lam_n * rn) * inv_inertia
    return v, omega


def push_point(p_cube: Vec2Like, goal: Vec2Like, cos_t: Tensor, sin_t: Tensor, half_size: Scalar,
               radius: Scalar) -> tuple[Vec2, Tensor]:
    """Where the pusher touches the cube when approaching it along the push direction ``u``.

    ``u = (g - c) / |g - c|``, support distance ``s = h (|cos(angle(u) - theta)| + |sin(angle(u) - theta)|)
    + r`` and push point ``p* = c - s u``.

    Args:
        p_cube: Cube centre ``c``.
        goal: Goal ``g``.
        cos_t: ``[N]`` cosine of the cube's yaw.
        sin_t: ``[N]`` sine of the cube's yaw.
        half_size: Cube half-size ``h``.
        radius: Pusher radius ``r``.

    Returns:
        ``p*`` and ``|g - c|`` ``[N]``.
    """
    to_goal = (goal[0] - p_cube[0], goal[1] - p_cube[1])
    dist = _norm(*to_goal)
    inv = dist.clamp(min=1e-12)
    ux, uy = to_goal[0] / inv, to_goal[1] / inv
    along = (ux * cos_t + uy * sin_t).abs()
    across = (uy * cos_t - ux * sin_t).abs()
    support = (along + across) * half_size + radius
    return (p_cube[0] - ux * support, p_cube[1] - uy * support), dist


def staged_reward(p: Vec2Like, p_cube: Vec2Like, goal: Vec2Like, cos_t: Tensor, sin_t: Tensor, half_size: Scalar,
                  radius: Scalar, goal_radius: float) -> tuple[dict[str, Tensor], Tensor, Tensor, Tensor]:
    """ManiSkill's staged PushCube reward in the plane (maximum :data:`SUCCESS_REWARD`), as the terms it sums.

    ``reach = 1 - tanh(5 |p - p*|)`` (see :func:`push_point`), ``place = 1 - tanh(5 |c - g|)``,
    ``r = reach + place [|p - p*| < REACH_TOLERANCE]``, and ``r = 3`` on success (``|c - g| < goal_radius``).
    The terms: ``reach``, ``place`` (``place [reached]``) and ``success`` (3 on success, where the other two are 0),
    so ``r = reach + place + success``.

    Args:
        p: Tip position.
        p_cube: Cube centre.
        goal: Goal.
        cos_t: ``[N]`` cosine of the cube's yaw.
        sin_t: ``[N]`` sine of the cube's yaw.
        half_size: Cube half-size.
        radius: Tip radius.
        goal_radius: Success radius.

    Returns:
        The terms ``{"reach", "place", "success"}`` (each ``[N]``; they sum to the reward in ``[0, 3]``), success
        ``[N]`` bool, reached ``[N]`` bool and ``|c - g|`` ``[N]``.
    """
    p_star, dist_to_goal = push_point(p_cube, goal, cos_t, sin_t, half_size, radius)
    d_reach = _norm(p[0] - p_star[0], p[1] - p_star[1])
    reached = d_reach < REACH_TOLERANCE
    success = dist_to_goal < goal_radius
    reach = 1.0 - torch.tanh(TANH_SCALE * d_reach)
    place = (1.0 - torch.tanh(TANH_SCALE * dist_to_goal)) * reached
    terms = {"reach": reach.masked_fill(success, 0.0), "place": place.masked_fill(success, 0.0),
             "success": success.to(reach.dtype) * SUCCESS_REWARD}
    return terms, success, reached, dist_to_goal


def spawn_scenes(u: Tensor, goal_offset: float | Tensor, goal_direction: str,
                 randomize_yaw: bool) -> tuple[Vec2, Vec2, Tensor, Vec2]:
    """Start scenes from uniforms (ManiSkill's PushCube distribution in the plane).

    Cube ``c ~ U([-0.1, 0.1]^2)`` (``u[0:2]``), tip ``~ U([-0.3, -0.2] x [-0.1, 0.1])`` (``u[2:4]``), yaw 0 or
    ``~ U(-pi/4, pi/4)`` (``u[4]``), goal ``c + goal_offset (cos h, sin h)`` with heading ``h = 0`` (``fixed``)
    or ``~ U(-pi, pi)`` (``u[5]``); ``random_aligned`` also rotates the tip about the cube and the yaw by ``h``.

    Args:
        u: ``[4, M]`` (or ``[6, M]`` with ``randomize_yaw`` or a random direction) uniforms in ``[0, 1)``.
        goal_offset: Goal distance from the cube (a float, or ``[M]`` per scene).
        goal_direction: ``fixed``, ``random`` or ``random_aligned``.
        randomize_yaw: Draw the yaw.

    Returns:
        Tip, cube, yaw ``[M]`` and goal (``u``'s dtype and device).
    """
    cube = ((2.0 * u[0] - 1.0) * CUBE_SPAWN, (2.0 * u[1] - 1.0) * CUBE_SPAWN)
    (x_low, y_low), (x_high, y_high) = TIP_SPAWN_LOW, TIP_SPAWN_HIGH
    tip = (x_low + (x_high - x_low) * u[2], y_low + (y_high - y_low) * u[3])
    yaw = (2.0 * u[4] - 1.0) * YAW_SPAWN if randomize_yaw else torch.zeros_like(u[0])
    heading = (2.0 * u[5] - 1.0) * math.pi if goal_direction != "fixed" else torch.zeros_like(u[0])
    cos_h, sin_h = heading.cos(), heading.sin()
    goal = (cube[0] + goal_offset * cos_h, cube[1] + goal_offset * sin_h)
    if goal_direction == "random_aligned":
        turned = rotate(cos_h, sin_h, (tip[0] - cube[0], tip[1] - cube[1]))
        tip = (cube[0] + turned[0], cube[1] + turned[1])
        yaw = yaw + heading
    return tip, cube, yaw, goal


def arm_forward(q: Vec2Like, base: tuple[float, float], l1: float, l2: float) -> Vec2:
    """Tool-tip position of the planar 2-link arm.

    Args:
        q: Joint angles (shoulder, elbow relative to the upper link).
        base: Shoulder position ``(x, y)``.
        l1: Upper link length.
        l2: Forearm length.

    Returns:
        Tip position ``base + l1 (cos q1, sin q1) + l2 (cos q12, sin q12)``.
    """
    elbow_angle, tip_angle = q[0], q[0] + q[1]
    return (elbow_angle.cos() * l1 + tip_angle.cos() * l2 + base[0],
            elbow_angle.sin() * l1 + tip_angle.sin() * l2 + base[1])


def arm_inverse(p: Vec2Like, base: tuple[float, float], l1: float, l2: float) -> Vec2:
    """Analytic elbow-left inverse kinematics (``q2 <= 0``); unreachable points give the stretched arm.

    Args:
        p: Tip position.
        base: Shoulder position ``(x, y)``.
        l1: Upper link length.
        l2: Forearm length.

    Returns:
        Joint angles ``q`` with ``arm_forward(q) == p`` for reachable ``p``.
    """
    x, y = p[0] - base[0], p[1] - base[1]
    cos_q2 = ((x * x + y * y - l1 * l1 - l2 * l2) / (2.0 * l1 * l2)).clamp(-1.0, 1.0)
    q2 = -torch.acos(cos_q2)
    q1 = torch.atan2(y, x) - torch.atan2(l2 * torch.sin(q2), l1 + l2 * cos_q2)
    return q1, q2


# --- the top view's frame and colours (drawn by embodirl.envs.push_cube.view) ---------------------------
#: RGB colours of the top views (:func:`embodirl.envs.push_cube.view.draw_top_view`).
COLORS = {"floor": (150, 140, 125), "table": (214, 205, 186), "border": (90, 85, 80), "goal": (140, 210, 140),
          "goal_edge": (40, 140, 60), "arm": (105, 110, 125), "cube": (205, 60, 50), "tip": (40, 80, 210)}
VIEW_MARGIN = 0.05  # m of floor shown around the workspace (and the arm base)


def view_box(workspace: tuple[tuple[float, float], tuple[float, float]],
             arm_base: tuple[float, float] | None = None) -> tuple[float, float, float]:
    """The square region a top view shows: ``(centre_x, centre_y, half_width)`` in metres."""
    (x0, y0), (x1, y1) = workspace
    if arm_base is not None:
        x0, x1, y0, y1 = min(x0, arm_base[0]), max(x1, arm_base[0]), min(y0, arm_base[1]), max(y1, arm_base[1])
    return (x0 + x1) / 2, (y0 + y1) / 2, max(x1 - x0, y1 - y0) / 2 + VIEW_MARGIN


def world_to_pixel(x: float, y: float, size: int, view: tuple[float, float, float]) -> tuple[int, int]:
    """``(row, col)`` of the pixel containing world point ``(x, y)`` in a ``size`` x ``size`` frame."""
    cx, cy, half = view
    scale = size / (2 * half)
    return int(np.floor((cy - y) * scale + size / 2)), int(np.floor((x - cx) * scale + size / 2))

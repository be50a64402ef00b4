"""The maths of :mod:`embodirl.envs.push_cube.arm` as pure functions: the MJCF scene, UR10 kinematics, reset
scenes, the staged reward and a numpy top view.

Conventions: batched values are row-major, ``[N, ...]`` (MuJoCo's layout: one row per simulation); the arm's
six joints come first in ``qpos``/``qvel`` (``[0:6]``), then the cube's free joint (position ``[6:9]``,
quaternion ``w x y z`` ``[9:13]``; velocities ``[6:12]``). World frame: the table top is the plane ``z = 0``,
the goal lies in ``+x`` of the cube, the arm's base stands at ``(-0.8, 0, 0)``. Every function works on
float32 or float64 tensors on any device.
"""

from __future__ import annotations

import math
from importlib import resources

import numpy as np
import torch
from torch import Tensor

from embodirl.envs.push_cube import physics as planar

__all__ = [
    "ASSET",
    "CUBE_SPAWN",
    "DH_A",
    "DH_ALPHA",
    "DH_D",
    "HOME_QPOS",
    "NUM_JOINTS",
    "REACH_TOLERANCE",
    "SUCCESS_REWARD",
    "TABLE_TOLERANCE",
    "ArmGeometry",
    "draw_arm_scene",
    "forward_kinematics",
    "load_model",
    "spawn_scenes",
    "staged_reward",
    "yaw_of",
]

ASSET = "ur10_push_cube.xml"  #: the MJCF file in ``embodirl/envs/push_cube/assets``
NUM_JOINTS = 6
#: UR10 standard Denavit-Hartenberg parameters (m, m, rad): ``T_i = Rz(q_i) Tz(d_i) Tx(a_i) Rx(alpha_i)``.
DH_D = (0.1273, 0.0, 0.0, 0.163941, 0.1157, 0.0922)
DH_A = (0.0, -0.612, -0.5723, 0.0, 0.0, 0.0)
DH_ALPHA = (math.pi / 2, 0.0, 0.0, math.pi / 2, -math.pi / 2, 0.0)
#: Start configuration: the rod's tip at (-0.25, 0, 0.06) pointing straight down, elbow up (found by IK).
HOME_QPOS = (-0.3027, -1.5079, 2.3738, -2.4366, -1.5708, 0.0)
CUBE_SPAWN = planar.CUBE_SPAWN  #: cube centre ~ U([-0.1, 0.1]^2), as in the planar task
REACH_TOLERANCE = planar.REACH_TOLERANCE  #: |tcp - p*| below this counts as "reached" (gates the place term)
TABLE_TOLERANCE = 0.005  #: the cube is "on the table" while its centre height is within this of its half-size
SUCCESS_REWARD = planar.SUCCESS_REWARD  #: dense reward while successful; "normalized_dense" divides by it


class ArmGeometry:
    """What the kinematics needs from the compiled scene: base pose and the TCP's offset from the flange.

    Args:
        model: The compiled ``mujoco.MjModel`` of :data:`ASSET`.
    """

    def __init__(self, model) -> None:
        self.base_pos = tuple(float(x) for x in model.body("base").pos)
        w, _, _, z = (float(x) for x in model.body("base").quat)
        self.base_yaw = 2.0 * math.atan2(z, w)  # the base is turned about z only
        flange, tcp = model.site("flange").pos, model.site("tcp").pos
        self.tool_length = float(tcp[2] - flange[2])  # the rod runs along the flange's z axis
        self.rod_radius = float(model.geom("rod").size[0])
        self.cube_half_size = float(model.geom("cube").size[0])
        half_x, half_y = (float(x) for x in model.geom("table").size[:2])
        self.table_half_size = (half_x, half_y)


def load_model(timestep: float | None = None):
    """Compile the packaged MJCF scene; ``timestep`` (s) overrides the file's ``0.01``."""
    import mujoco

    path = resources.files("embodirl.envs.push_cube") / "assets" / ASSET
    with resources.as_file(path) as file:
        model = mujoco.MjModel.from_xml_path(str(file))
    if timestep is not None:
        model.opt.timestep = timestep
    return model


def forward_kinematics(q: Tensor, geometry: ArmGeometry) -> tuple[Tensor, Tensor]:
    """The UR10's DH chain from the base: frame origins and the rod's axis.

    Args:
        q: ``[N, 6]`` joint angles (rad).
        geometry: Base pose and tool length.

    Returns:
        Points ``[N, 8, 3]``: the base, the DH frames 1..6 (frame 6 is the flange) and the TCP (the rod's tip),
        and the rod's unit axis ``[N, 3]`` (the flange's z axis; ``(0, 0, -1)`` points straight down).
    """
    n, dtype, device = q.shape[0], q.dtype, q.device
    cos_b, sin_b = math.cos(geometry.base_yaw), math.sin(geometry.base_yaw)
    rot = torch.tensor([[cos_b, -sin_b, 0.0], [sin_b, cos_b, 0.0], [0.0, 0.0, 1.0]], dtype=dtype, device=device)
    rot = rot.expand(n, 3, 3)
    pos = torch.tensor(geometry.base_pos, dtype=dtype, device=device).expand(n, 3)
    points = [pos]
    cos_q, sin_q = q.cos(), q.sin()
    for i in range(NUM_JOINTS):
        c, s = cos_q[:, i], sin_q[:, i]
        x_axis = rot[:, :, 0] * c[:, None] + rot[:, :, 1] * s[:, None]  # Rz(q_i): the new x and y axes
        y_axis = rot[:, :, 1] * c[:, None] - rot[:, :, 0] * s[:, None]
        z_axis = rot[:, :, 2]
        pos = pos + z_axis * DH_D[i] + x_axis * DH_A[i]  # Tz(d_i) Tx(a_i)
        ca, sa = math.cos(DH_ALPHA[i]), math.sin(DH_ALPHA[i])  # Rx(alpha_i)
        rot = torch.stack((x_axis, y_axis * ca + z_axis * sa, z_axis * ca - y_axis * sa), dim=2)
        points.append(pos)
    axis = rot[:, :, 2]
    points.append(pos + axis * geometry.tool_length)
    return torch.stack(points, dim=1), axis


def yaw_of(quat: Tensor) -> tuple[Tensor, Tensor]:
    """Cosine and sine of the heading of the cube's x axis in the table plane.

    Args:
        quat: ``[N, 4]`` unit quaternions ``w x y z``.

    Returns:
        ``cos`` and ``sin`` ``[N]`` (exactly the yaw's for a cube lying flat; ``(1, 0)`` if its x axis is vertical).
    """
    w, x, y, z = quat.unbind(1)
    hx, hy = 1.0 - 2.0 * (y * y + z * z), 2.0 * (x * y + w * z)  # the rotated x axis' horizontal part
    norm = torch.sqrt(hx * hx + hy * hy)
    flat = norm > 1e-9
    safe = torch.where(flat, norm, torch.ones_like(norm))
    return torch.where(flat, hx / safe, torch.ones_like(hx)), torch.where(flat, hy / safe, torch.zeros_like(hy))


def spawn_scenes(u: Tensor, joint_noise: Tensor, goal_offset: float,
                 randomize_yaw: bool) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Start scenes from uniforms: cube ``c ~ U([-0.1, 0.1]^2)`` (``u[:, 0:2]``), yaw 0 or ``~ U(-pi/4, pi/4)``
    (``u[:, 2]``), goal ``c + (goal_offset, 0)``, joints ``HOME_QPOS + joint_noise (2 u - 1)`` (``u[:, 3:9]``).

    Args:
        u: ``[M, 9]`` uniforms in ``[0, 1)``.
        joint_noise: ``[6]`` half-widths of the joints' start ranges (rad).
        goal_offset: Goal distance from the cube (m).
        randomize_yaw: Draw the cube's yaw.

    Returns:
        Joints ``[M, 6]``, cube centre ``[M, 2]``, yaw ``[M]`` and goal ``[M, 2]`` (``u``'s dtype and device).
    """
    cube = (2.0 * u[:, 0:2] - 1.0) * CUBE_SPAWN
    yaw = (2.0 * u[:, 2] - 1.0) * planar.YAW_SPAWN if randomize_yaw else torch.zeros_like(u[:, 2])
    goal = cube + torch.tensor([goal_offset, 0.0], dtype=u.dtype, device=u.device)
    home = torch.tensor(HOME_QPOS, dtype=u.dtype, device=u.device)
    joints = home + joint_noise.to(u.dtype) * (2.0 * u[:, 3:9] - 1.0)
    return joints, cube, yaw, goal


def staged_reward(tcp: Tensor, cube: Tensor, cos_t: Tensor, sin_t: Tensor, goal: Tensor, half_size: float,
                  rod_radius: float, goal_radius: float) -> tuple[dict[str, Tensor], Tensor, Tensor, Tensor, Tensor]:
    """The planar task's staged reward in 3D (maximum :data:`SUCCESS_REWARD`), as the terms it sums.

    Push point ``p*``: the planar one (:func:`~embodirl.envs.push_cube.physics.push_point`, behind the cube on
    the line from the goal, one rod radius off its face) at the height of the cube's centre ``h``.
    ``reach = 1 - tanh(5 |tcp - p*|)``, ``place = 1 - tanh(5 |c_xy - g|)``, on the table ``|c_z - h| < 5 mm``,
    ``r = reach + place [|tcp - p*| < 1.5 cm] [on table]``; ``r = 3`` on success (``|c_xy - g| < goal_radius``
    and on the table). The terms: ``reach``, ``place`` (``place [reached] [on table]``) and ``success`` (3 on success,
    where the other two are 0), so ``r = reach + place + success``.

    Args:
        tcp: ``[N, 3]`` the rod's tip.
        cube: ``[N, 3]`` the cube's centre.
        cos_t: ``[N]`` cosine of the cube's yaw.
        sin_t: ``[N]`` sine of the cube's yaw.
        goal: ``[N, 2]`` the goal (on the table).
        half_size: Cube half-size ``h``.
        rod_radius: Radius of the rod's tip.
        goal_radius: Success radius.

    Returns:
        The terms ``{"reach", "place", "success"}`` (each ``[N]``; they sum to the reward in ``[0, 3]``), success,
        reached and on-table flags ``[N]`` bool, and ``|c_xy - g|`` ``[N]``.
    """
    p_star, dist_to_goal = planar.push_point(cube[:, 0:2].T, goal.T, cos_t, sin_t, half_size, rod_radius)
    offset = torch.stack((tcp[:, 0] - p_star[0], tcp[:, 1] - p_star[1], tcp[:, 2] - half_size), dim=1)
    d_reach = offset.norm(dim=1)
    reached = d_reach < REACH_TOLERANCE
    on_table = (cube[:, 2] - half_size).abs() < TABLE_TOLERANCE
    success = (dist_to_goal < goal_radius) & on_table
    reach = 1.0 - torch.tanh(planar.TANH_SCALE * d_reach)
    place = 1.0 - torch.tanh(planar.TANH_SCALE * dist_to_goal)
    place = place * (reached & on_table)
    terms = {"reach": reach.masked_fill(success, 0.0), "place": place.masked_fill(success, 0.0),
             "success": success.to(reach.dtype) * SUCCESS_REWARD}
    return terms, success, reached, on_table, dist_to_goal


# --- drawing (numpy, host side) -------------------------------------------------------------------------
ARM_WIDTHS = (0.075, 0.06, 0.045, 0.045, 0.045, 0.045, 0.01)  # m, drawn half-widths of the 7 segments


def _segment_distance(x: np.ndarray, y: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Distance of pixel centres ``(x, y)`` to segments ``a -> b`` (``[2, k, 1, 1]`` each)."""
    d = b - a
    length2 = np.maximum(d[0] ** 2 + d[1] ** 2, 1e-12)
    t = np.clip(((x - a[0]) * d[0] + (y - a[1]) * d[1]) / length2, 0.0, 1.0)
    return np.hypot(x - a[0] - t * d[0], y - a[1] - t * d[1])


def draw_arm_scene(points: np.ndarray, cube: np.ndarray, yaw: np.ndarray, goal: np.ndarray, size: int, *,
                   half_size: float, goal_radius: float, table_half_size: tuple[float, float]) -> np.ndarray:
    """Top views of arm scenes with plain array masks (no display, no OpenGL), in the planar env's style.

    The frame shows the table and the arm's base with +x to the right and +y up: the table (outlined), the
    goal disk, the cube (a rotated square), the arm's links from :func:`forward_kinematics` drawn from the
    lowest up (farther from the camera is darker) and the rod's tip.

    Args:
        points: ``[k, 8, 3]`` arm points (base, frames 1..6, TCP).
        cube: ``[k, 3]`` cube centres.
        yaw: ``[k]`` cube yaws.
        goal: ``[k, 2]`` goals.
        size: Frame width and height in pixels.
        half_size: Cube half-size.
        goal_radius: Goal radius.
        table_half_size: Table half extents ``(x, y)``.

    Returns:
        ``[k, size, size, 3]`` uint8 RGB frames.
    """
    colors = planar.COLORS
    (tx, ty), base = table_half_size, points[0, 0]
    cx, cy, half = planar.view_box(((-tx, -ty), (tx, ty)), (float(base[0]), float(base[1])))
    pixel = 2 * half / size
    centres = (np.arange(size) + 0.5 - size / 2) * pixel
    x, y = (cx + centres)[None, None, :], (cy - centres)[None, :, None]
    k = points.shape[0]
    inside = (np.abs(x) <= tx) & (np.abs(y) <= ty)
    edge = inside & ((np.abs(x) > tx - pixel) | (np.abs(y) > ty - pixel))
    frames = np.empty((k, size, size, 3), dtype=np.uint8)
    frames[:] = np.where(inside[0, :, :, None], colors["table"], colors["floor"]).astype(np.uint8)
    frames[:, edge[0]] = colors["border"]
    goal_d2 = (x - goal[:, 0, None, None]) ** 2 + (y - goal[:, 1, None, None]) ** 2
    frames[goal_d2 <= goal_radius**2] = colors["goal"]
    frames[(goal_d2 <= goal_radius**2) & (goal_d2 >= (goal_radius - 1.5 * pixel) ** 2)] = colors["goal_edge"]
    dx, dy = x - cube[:, 0, None, None], y - cube[:, 1, None, None]
    cos_t, sin_t = np.cos(yaw)[:, None, None], np.sin(yaw)[:, None, None]
    cube_half = max(half_size, pixel)
    frames[(np.abs(dx * cos_t + dy * sin_t) <= cube_half) & (np.abs(dy * cos_t - dx * sin_t) <= cube_half)] = \
        colors["cube"]
    arm = np.asarray(colors["arm"], dtype=np.float64)
    heights = (points[:, :-1, 2] + points[:, 1:, 2]) / 2  # [k, 7]
    for seg in np.argsort(heights.mean(0)):  # lowest first: higher links cover lower ones
        a, b = points[:, seg, :2].T[:, :, None, None], points[:, seg + 1, :2].T[:, :, None, None]
        mask = _segment_distance(x, y, a, b) <= max(ARM_WIDTHS[seg], 1.5 * pixel)
        shade = np.clip(0.75 + 0.5 * heights[:, seg], 0.6, 1.15)[:, None, None, None]  # [k, 1, 1, 1]
        colored = np.broadcast_to(np.clip(arm * shade, 0, 255).astype(np.uint8), frames.shape)
        frames[mask] = colored[mask]
    tip = points[:, -1]
    tip_d2 = (x - tip[:, 0, None, None]) ** 2 + (y - tip[:, 1, None, None]) ** 2
    frames[tip_d2 <= max(0.012, 2.0 * pixel) ** 2] = colors["tip"]
    return frames

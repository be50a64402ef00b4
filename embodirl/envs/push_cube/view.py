"""Batched top views of push scenes in torch: the picture a pixel policy sees and the videos show.

:func:`draw_top_view` turns ``[16, N]`` PushCube states into ``uint8`` ``[N, size, size, 3]`` frames on the
states' device with tensor operations only (distance fields over the pixel centres, no host copy, no branch on
data), so an env step that draws its observation still compiles into one graph and can be captured in a CUDA
graph. What does not depend on the state (the frame's geometry and its background) is made once by
:func:`make_top_view` and passed in, so drawing creates no tensor from host data.

Cheap at small sizes: the frame is a packed RGB ``int32`` per pixel, initialised from the static background,
and the goal, cube and tip are painted only inside a small window around each (a fixed number of pixels per
env, placed with integer arithmetic and written back with ``scatter``), so drawing costs about two passes over
the frame whatever the scene. The arm links (joint mode) span the frame and are a full-frame distance field.

The frame shows :func:`~embodirl.envs.push_cube.physics.view_box` with +x to the right and +y up: the floor,
the tip's workspace (table colour, dark outline), the goal disk (with a darker rim), the cube (a rotated
square), the arm links (joint mode; they pass above the cube) and the tip, each painted over the earlier
ones. Shapes smaller than a pixel are drawn at least about a pixel wide (cube half-size at least one pixel, tip
radius at least two, links 1.5 pixels either side), so a 64x64 frame still shows the 4 cm cube and the 1 cm
tip. No antialiasing: a pixel shows a shape iff its centre lies inside it.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
from torch import Tensor

from embodirl.envs.push_cube.physics import COLORS, view_box

__all__ = ["LABELS", "TopView", "ViewStyle", "draw_packed", "draw_styled", "draw_top_view", "make_top_view",
           "pack_rgb", "palette_of", "unpack_rgb", "warp_labels"]

#: The parts of a top view, in label order (a labelled frame holds each pixel's index here): the floor first, so
#: label 0 is what a moved camera sees beyond the nominal frame.
LABELS = ("floor", "table", "border", "goal", "goal_edge", "cube", "arm", "tip")
_LABEL = {name: index for index, name in enumerate(LABELS)}


def pack_rgb(color: tuple[int, int, int]) -> int:
    """An RGB colour as the ``int32`` whose little-endian bytes are ``(r, g, b, 0)`` (a packed frame pixel)."""
    return int(color[0]) | int(color[1]) << 8 | int(color[2]) << 16


_PACKED = {name: pack_rgb(color) for name, color in COLORS.items()}


class ViewStyle(NamedTuple):
    """Each env's look (visual randomization): its palette and where its camera is.

    Attributes:
        palette: ``[N, len(LABELS)]`` packed ``int32`` colours (:func:`palette_of`), one per label.
        shift: Camera centre minus the nominal one, ``([N], [N])`` in metres (x, y), or None (nominal camera).
        roll: ``[N]`` the camera's turn about its axis (rad, counter-clockwise), or None.
        zoom: ``[N]`` the field of view as a multiple of the nominal one (> 1 sees more, smaller), or None.
    """

    palette: Tensor
    shift: tuple[Tensor, Tensor] | None = None
    roll: Tensor | None = None
    zoom: Tensor | None = None


def palette_of(colors: Tensor, light: Tensor | float = 1.0) -> Tensor:
    """Packed ``int32`` palettes ``[N, L]`` of RGB colours ``[N, L, 3]`` (0-255, any float dtype) lit by ``light``
    ``[N]`` (a multiplier of every colour), rounded and clipped to 0-255."""
    if isinstance(light, Tensor):
        light = light.view(-1, 1, 1)
    rgb = (colors * light).round().clamp(0, 255).to(torch.int32)
    return rgb[..., 0] | rgb[..., 1] << 8 | rgb[..., 2] << 16


class TopView(NamedTuple):
    """The state-independent part of a top view (see :func:`make_top_view`); tensors on the frames' device.

    Attributes:
        size: Frame width and height ``S`` in pixels.
        left: World x of the frame's left edge (m).
        top: World y of the frame's top edge (m).
        pixel: Pixel width (m).
        background: ``[S, S]`` packed ``int32`` colours (:func:`pack_rgb`) of the floor, the table and its outline.
        labels: ``[S, S]`` ``int32`` the same as labels (:data:`LABELS`).
        offsets: ``[S]`` int64 ``0 .. S-1`` (window pixel offsets).
        half_size: Cube half-size as drawn (at least one pixel).
        tip_radius: Tip radius as drawn (at least two pixels).
        goal_radius: Goal radius.
        arm: ``(base, link_lengths)`` of the 2-link arm to draw, or None.
    """

    size: int
    left: float
    top: float
    pixel: float
    background: Tensor
    labels: Tensor
    offsets: Tensor
    half_size: float
    tip_radius: float
    goal_radius: float
    arm: tuple[tuple[float, float], tuple[float, float]] | None


def make_top_view(size: int, *, half_size: float, radius: float, goal_radius: float,
                  workspace: tuple[tuple[float, float], tuple[float, float]],
                  arm: tuple[tuple[float, float], tuple[float, float]] | None = None,
                  device: torch.device | str = "cpu") -> TopView:
    """The frame geometry and background of ``size`` x ``size`` top views.

    Args:
        size: Frame width and height in pixels.
        half_size: Cube half-size (m).
        radius: Tip radius (m).
        goal_radius: Goal radius (m).
        workspace: ``((x_low, y_low), (x_high, y_high))`` of the tip, drawn as the table.
        arm: ``(base, link_lengths)`` to draw the 2-link arm from the joint rows (and include its base in the
            view), or None.
        device: Device of the frames.

    Returns:
        A :class:`TopView` for :func:`draw_top_view`.
    """
    cx, cy, half = view_box(workspace, arm[0] if arm is not None else None)
    pixel = 2 * half / size
    centres = (torch.arange(size, dtype=torch.float64, device=device) + 0.5 - size / 2) * pixel
    x, y = (cx + centres).view(1, size), (cy - centres).view(size, 1)
    (x0, y0), (x1, y1) = workspace
    inside = (x >= x0) & (x <= x1) & (y >= y0) & (y <= y1)
    edge = inside & ((x < x0 + pixel) | (x > x1 - pixel) | (y < y0 + pixel) | (y > y1 - pixel))
    labels = torch.full((size, size), _LABEL["floor"], dtype=torch.int32, device=device)
    labels[inside] = _LABEL["table"]
    labels[edge] = _LABEL["border"]
    nominal = torch.tensor([_PACKED[name] for name in LABELS], dtype=torch.int32, device=device)
    background = nominal[labels.long()]
    offsets = torch.arange(size, device=device)
    return TopView(size, cx - half, cy + half, pixel, background, labels, offsets, max(half_size, pixel),
                   max(radius, 2.0 * pixel), goal_radius, arm)


def _window(view: TopView, cx: Tensor, cy: Tensor, reach: float) -> tuple[Tensor, Tensor, Tensor]:
    """The pixels around world points that a shape reaching ``reach`` m from them can cover.

    A ``w`` x ``w`` window (``w = 2 ceil(reach / pixel) + 5``, at most ``S``) centred on each point's pixel and
    shifted to lie inside the frame (so it still covers the shape's part inside the frame).

    Args:
        view: The frame.
        cx: ``[N, 1, 1]`` world x of the points.
        cy: ``[N, 1, 1]`` world y of the points.
        reach: Largest distance of a shape's point from its centre (m).

    Returns:
        ``[N, w, w]`` flat indices into the ``[N, S, S]`` frame, and the window's pixel centres: x ``[N, 1, w]``
        and y ``[N, w, 1]`` (float32).
    """
    size, pixel = view.size, view.pixel
    width = min(size, 2 * math.ceil(reach / pixel) + 5)
    start = []
    for coord in ((cx - view.left) * (1.0 / pixel), (view.top - cy) * (1.0 / pixel)):  # column, row (float)
        start.append((coord.floor().long() - width // 2).clamp(0, size - width))
    cols = start[0] + view.offsets[:width].view(1, 1, width)
    rows = start[1] + view.offsets[:width].view(1, width, 1)
    env = torch.arange(cx.shape[0], device=cx.device).view(-1, 1, 1)
    index = (env * size + rows) * size + cols
    x = view.left + (cols.to(torch.float32) + 0.5) * pixel
    y = view.top - (rows.to(torch.float32) + 0.5) * pixel
    return index, x, y


def _paint(frame: Tensor, index: Tensor, mask: Tensor, color: int | Tensor) -> None:
    """Set the packed ``frame`` ``[N * S * S]`` to ``color`` where ``mask`` ``[N, w, w]`` holds at ``index``."""
    flat = index.view(-1)
    current = frame.gather(0, flat)
    value = color.reshape(-1) if isinstance(color, Tensor) else color
    frame.scatter_(0, flat, torch.where(mask.view(-1), value, current))


def _near_segment(x: Tensor, y: Tensor, a: tuple[Tensor, Tensor], b: tuple[Tensor, Tensor], width: float) -> Tensor:
    """``[N, S, S]`` pixels within ``width`` of the segments ``a -> b`` (endpoints ``[N, 1, 1]`` each)."""
    abx, aby = b[0] - a[0], b[1] - a[1]
    dx, dy = x - a[0], y - a[1]
    t = ((dx * abx + dy * aby) / (abx * abx + aby * aby).clamp(min=1e-12)).clamp(0.0, 1.0)
    ex, ey = dx - t * abx, dy - t * aby
    return ex * ex + ey * ey <= width * width


def unpack_rgb(packed: Tensor) -> Tensor:
    """``[..., S, S]`` packed ``int32`` frames as ``uint8`` ``[..., S, S, 3]`` RGB (a view: channel stride 4)."""
    return packed.view(torch.uint8).unflatten(-1, (packed.shape[-1], 4))[..., :3]


def draw_top_view(state: Tensor, view: TopView) -> Tensor:
    """Top views of push scenes (module docstring): ``[16, N]`` states -> ``uint8`` ``[N, S, S, 3]`` RGB frames
    (a view of :func:`draw_packed`'s pixels, see :func:`unpack_rgb`)."""
    return unpack_rgb(draw_packed(state, view))


def draw_packed(state: Tensor, view: TopView, labelled: bool = False) -> Tensor:
    """Top views of push scenes as packed RGB pixels (:func:`pack_rgb`): ``[16, N]`` -> ``int32`` ``[N, S, S]``.

    A pixel shows a shape iff its centre lies inside it: the goal disk (its outer 1.5 pixels in the rim
    colour), the cube square (in its own frame, ``max(|u|, |v|) <= h``), the arm links and the tip disk.

    Args:
        state: ``[16, N]`` PushCube states (rows as in :mod:`embodirl.envs.push_cube.env`), any float dtype.
        view: The frame from :func:`make_top_view` (on ``state``'s device).
        labelled: Paint each part's label (:data:`LABELS`) instead of its nominal colour.

    Returns:
        ``[N, S, S]`` int32 packed frames, or labels when ``labelled`` (one pass over them makes RGB:
        :func:`unpack_rgb`; selecting between two packed frames, e.g. at an auto-reset, costs a third of selecting
        between RGB ones).
    """
    s = state.to(torch.float32)[:, :, None, None]  # [16, N, 1, 1]
    num, size = s.shape[1], view.size
    paint = _LABEL if labelled else _PACKED
    frame = (view.labels if labelled else view.background).expand(num, size, size).clone().view(-1)
    index, x, y = _window(view, s[10], s[11], view.goal_radius)
    goal_d2 = (x - s[10]).square() + (y - s[11]).square()
    rim = (view.goal_radius - 1.5 * view.pixel) ** 2
    _paint(frame, index, goal_d2 <= view.goal_radius**2,
           torch.where(goal_d2 >= rim, paint["goal_edge"], paint["goal"]).to(torch.int32))
    index, x, y = _window(view, s[4], s[5], math.sqrt(2.0) * view.half_size)
    dx, dy, cos_t, sin_t = x - s[4], y - s[5], s[6].cos(), s[6].sin()
    along, across = dx * cos_t + dy * sin_t, dy * cos_t - dx * sin_t  # the pixel in the cube's frame
    _paint(frame, index, torch.maximum(along.abs(), across.abs()) <= view.half_size, paint["cube"])
    if view.arm is not None:
        (bx, by), (l1, _) = view.arm
        centres = (view.offsets.to(torch.float32) + 0.5) * view.pixel
        x, y = (view.left + centres).view(1, 1, size), (view.top - centres).view(1, size, 1)
        elbow = (bx + l1 * s[12].cos(), by + l1 * s[12].sin())
        base = (torch.full_like(elbow[0], bx), torch.full_like(elbow[1], by))
        width = 1.5 * view.pixel
        links = _near_segment(x, y, base, elbow, width) | _near_segment(x, y, elbow, (s[0], s[1]), width)
        frame = frame.view(num, size, size).masked_fill(links, paint["arm"]).view(-1)
    index, x, y = _window(view, s[0], s[1], view.tip_radius)
    _paint(frame, index, (x - s[0]).square() + (y - s[1]).square() <= view.tip_radius**2, paint["tip"])
    return frame.view(num, size, size)


def warp_labels(labels: Tensor, view: TopView, style: ViewStyle) -> Tensor:
    """The labelled frames ``[N, S, S]`` as each env's moved camera sees them (nearest pixel; floor outside).

    Output pixel ``(row, col)``, at ``(u, w)`` pixels right of and above the frame's centre, shows the nominal
    frame's point ``shift / pixel + zoom R(roll) (u, w)``: an orthographic top camera moved by ``shift``, turned
    by ``roll`` and seeing ``zoom`` times as wide. The nominal camera maps every pixel to itself exactly.
    """
    num, size = labels.shape[0], view.size
    centres = view.offsets.to(torch.float32) + (0.5 - size / 2)
    u, w = centres.view(1, 1, size), -centres.view(1, size, 1)
    if style.roll is not None:
        cos_r, sin_r = style.roll.cos().view(-1, 1, 1), style.roll.sin().view(-1, 1, 1)
        u, w = cos_r * u - sin_r * w, sin_r * u + cos_r * w
    if style.zoom is not None:
        zoom = style.zoom.view(-1, 1, 1)
        u, w = zoom * u, zoom * w
    if style.shift is not None:
        u = u + (style.shift[0] * (1.0 / view.pixel)).view(-1, 1, 1)
        w = w + (style.shift[1] * (1.0 / view.pixel)).view(-1, 1, 1)
    col, row = (u + size / 2).floor().long(), (size / 2 - w).floor().long()
    col, row = col.expand(num, size, size), row.expand(num, size, size)
    inside = (col >= 0) & (col < size) & (row >= 0) & (row < size)
    env = torch.arange(num, device=labels.device).view(-1, 1, 1)
    index = (env * size + row.clamp(0, size - 1)) * size + col.clamp(0, size - 1)
    return torch.where(inside, labels.reshape(-1)[index], _LABEL["floor"])


def draw_styled(state: Tensor, view: TopView, style: ViewStyle) -> Tensor:
    """:func:`draw_packed` in each env's own look: ``[16, N]`` states -> packed ``int32`` ``[N, S, S]`` frames
    with the palettes, camera poses and fields of view of ``style`` (module docstring)."""
    labels = draw_packed(state, view, labelled=True)
    if style.shift is not None or style.roll is not None or style.zoom is not None:
        labels = warp_labels(labels, view, style)
    num = labels.shape[0]
    return style.palette.gather(1, labels.view(num, -1).long()).view(labels.shape)

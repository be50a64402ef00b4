"""Visual randomization of push_cube's top view: ``env.randomize``'s colour, lighting and camera entries as rows of
the env's :class:`~embodirl.envs.randomization.Randomization`, and each env's :class:`~.view.ViewStyle` from them.

A colour entry (``cube_color``, ...) is three rows, ``<name>.r``, ``.g`` and ``.b``, drawn on their own from the
entry's range (nominal: the channel of :data:`~embodirl.envs.push_cube.physics.COLORS`); the goal's rim keeps its
nominal ratio to the goal's fill. ``camera_shift`` and ``camera_roll`` draw a magnitude; a hidden row beside each
(``_camera_direction`` in ``[0, 2 pi)``, ``_camera_side`` in ``[0, 1)``) draws its direction, so the camera moves
and turns every way alike. Every row is drawn per env at its resets like the physical parameters, so the look
is a pure function of ``(seed, env, episode)`` and the ranges, and stays fixed for an episode.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import torch
from torch import Tensor

from embodirl.config.randomize import COLOR_PARAMS, VISUAL_PARAMS, RandomizeConfig
from embodirl.envs.push_cube.physics import COLORS
from embodirl.envs.push_cube.view import LABELS, ViewStyle, palette_of
from embodirl.envs.randomization import Randomization

__all__ = ["HIDDEN_ROWS", "is_visual", "nominal_colors", "style_of", "visual_rows"]

#: The hidden row drawn beside an entry: its name and range (absolute).
HIDDEN_ROWS = {"camera_shift": ("_camera_direction", (0.0, 2 * math.pi)), "camera_roll": ("_camera_side", (0.0, 1.0))}
_PARTS = {"cube_color": "cube", "table_color": "table", "goal_color": "goal", "floor_color": "floor"}


def visual_rows(name: str, spec: RandomizeConfig) -> tuple[dict[str, RandomizeConfig], dict[str, float]]:
    """The rows (their specs and nominal values) that the visual entry ``name`` adds to the env's randomization."""
    if name in COLOR_PARAMS:
        color = COLORS[_PARTS[name]]
        return ({f"{name}.{c}": spec for c in "rgb"}, {f"{name}.{c}": float(v) for c, v in zip("rgb", color,
                                                                                               strict=True)})
    specs, nominal = {name: spec}, {name: 1.0 if name in ("light", "camera_fov") else 0.0}
    if name in HIDDEN_ROWS:
        hidden, span = HIDDEN_ROWS[name]
        specs[hidden], nominal[hidden] = RandomizeConfig(range=span, scale="absolute"), 0.0
    return specs, nominal


def is_visual(names: Mapping[str, object]) -> bool:
    """Whether ``env.randomize`` (its names) randomizes the view."""
    return any(name in VISUAL_PARAMS for name in names)


def nominal_colors(device: torch.device) -> Tensor:
    """``[len(LABELS), 3]`` float32 nominal RGB colours of the labels."""
    return torch.tensor([COLORS[name] for name in LABELS], dtype=torch.float32, device=device)


def style_of(rand: Randomization, params: Tensor, nominal: Tensor) -> ViewStyle:
    """The look of envs with randomized values ``params`` ``[P, M]`` (rows of ``rand``).

    Args:
        rand: The env's randomization (names its rows).
        params: ``[P, M]`` drawn values of ``M`` envs.
        nominal: :func:`nominal_colors` (on ``params``' device).
    """
    def row(name: str) -> Tensor | None:
        index = rand.index(name)
        return None if index is None else params[index].to(torch.float32)

    colors = []
    for label, color in zip(LABELS, nominal, strict=True):
        entry = "goal_color" if label == "goal_edge" else f"{label}_color"
        channels = [channel for channel in (row(f"{entry}.{c}") for c in "rgb") if channel is not None]
        if len(channels) < 3:  # not randomized: the nominal colour
            colors.append(color.expand(params.shape[1], 3))
            continue
        drawn = torch.stack(channels, dim=1)  # [M, 3]
        colors.append(drawn * (color / nominal[LABELS.index("goal")]) if label == "goal_edge" else drawn)
    light = row("light")
    palette = palette_of(torch.stack(colors, dim=1), 1.0 if light is None else light)
    shift, direction = row("camera_shift"), row("_camera_direction")
    moved = None if shift is None or direction is None else (shift * direction.cos(), shift * direction.sin())
    roll, side = row("camera_roll"), row("_camera_side")
    turned = None if roll is None or side is None else \
        torch.where(side < 0.5, -1.0, 1.0) * roll * (math.pi / 180.0)
    return ViewStyle(palette, moved, turned, row("camera_fov"))

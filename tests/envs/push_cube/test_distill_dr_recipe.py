"""The randomized pixel student's recipe (``experiment=distill_push_cube_rgb_dr``) keeps the cube visible."""

from __future__ import annotations

from pathlib import Path

from omegaconf import OmegaConf

from embodirl.envs.push_cube.physics import COLORS

RECIPE = Path(__file__).parents[3] / "embodirl" / "conf" / "experiment" / "distill_push_cube_rgb_dr.yaml"


def worst_gap(randomize: dict, a: str, b: str) -> float:
    """The smallest difference, in its most different channel, between parts ``a`` and ``b`` over every draw."""
    def channel_range(part: str, c: int) -> tuple[float, float]:
        entry = randomize.get(f"{part}_color")
        if entry is None:
            return COLORS[part][c], COLORS[part][c]
        low, high = entry["range"]
        scale = 1.0 if entry.get("scale") == "absolute" else COLORS[part][c]
        return low * scale, high * scale

    gaps = []
    for light in randomize.get("light", {"range": [1.0, 1.0]})["range"]:  # light scales both parts alike
        def lit(v: float, light: float = light) -> float:
            return min(255.0, v * light)
        per_channel = []
        for c in range(3):
            (a_low, a_high), (b_low, b_high) = channel_range(a, c), channel_range(b, c)
            per_channel.append(max(0.0, lit(b_low) - lit(a_high), lit(a_low) - lit(b_high)))
        gaps.append(max(per_channel))
    return min(gaps)


def test_the_recipe_never_draws_a_cube_in_the_table_s_colour():
    randomize = OmegaConf.to_container(OmegaConf.load(RECIPE))["env"]["randomize"]
    # cube green 60 x 1.4 = 84 at most, table green 205 x 0.8 = 164 at least; both x0.7 in the dimmest light: 56
    assert worst_gap(randomize, "cube", "table") >= 50
    # What the first attempt drew (any colour) does reach the table's colour, so a label can point at no cube
    anything = {**randomize, "cube_color": {"range": [0, 255], "scale": "absolute"}}
    assert worst_gap(anything, "cube", "table") == 0

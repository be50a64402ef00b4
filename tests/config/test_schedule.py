"""Schedules against hand-computed values at given env steps; bad schedules are one-line ConfigErrors."""

import math

import pytest

from embodirl.config.schedule import cosine_decay, linear_decay, parse_schedule, piecewise
from embodirl.errors import ConfigError


def test_linear_and_cosine_by_hand():
    assert linear_decay(1e-3, 0.25) == pytest.approx(7.5e-4)  # 1e-3 * (1 - 0.25)
    assert linear_decay(1e-3, 2.0) == 0.0  # past the budget: clamped at the end
    assert cosine_decay(1e-3, 0.0) == pytest.approx(1e-3)
    assert cosine_decay(1e-3, 0.5) == pytest.approx(5e-4)  # (1 + cos(pi/2)) / 2 = 1/2
    assert cosine_decay(1e-3, 0.25) == pytest.approx(1e-3 * (1 + math.sqrt(0.5)) / 2)  # cos(pi/4) = 0.7071
    assert cosine_decay(1e-3, 1.0) == pytest.approx(0.0, abs=1e-12)


def test_point_lists_step_and_interp_by_hand():
    points = [(100, 1.0), (300, 0.5), (500, 0.1)]
    # step: jump and hold; before the first point its value, after the last the last value
    assert [piecewise(points, s, "step") for s in (0, 100, 299, 300, 450, 500, 10**6)] == [1.0, 1.0, 1.0, 0.5, 0.5,
                                                                                            0.1, 0.1]
    # interp: at 200, halfway from 1.0 to 0.5 -> 0.75; at 400, halfway from 0.5 to 0.1 -> 0.3
    assert piecewise(points, 200, "interp") == pytest.approx(0.75)
    assert piecewise(points, 400, "interp") == pytest.approx(0.3)
    assert piecewise(points, 350, "interp") == pytest.approx(0.5 - 0.4 * 50 / 200)  # 0.4
    assert piecewise(points, 50, "interp") == 1.0 and piecewise(points, 900, "interp") == 0.1


def test_parse_schedule_names_and_lists():
    assert parse_schedule("lr_schedule", "constant", "step", 3e-4).value(10**9, 100) == 3e-4
    linear = parse_schedule("lr_schedule", "linear", "step", 1e-3)
    assert linear.value(250, 1000) == pytest.approx(7.5e-4) and linear.start == 1e-3
    cosine = parse_schedule("lr_schedule", "cosine", "step", 1e-3)
    assert cosine.value(500, 1000) == pytest.approx(5e-4)
    # what Hydra gives for algo.lr_schedule=[[0,1e-3],[5e5,3e-4]] (5e5 is a float on the command line)
    listed = parse_schedule("lr_schedule", [[0, 1e-3], [5e5, 3e-4]], "interp", 2e-3)
    assert listed.points == ((0, 1e-3), (500_000, 3e-4)) and listed.start == 1e-3  # learning_rate is unused
    assert listed.value(250_000, 10**6) == pytest.approx(6.5e-4)
    assert parse_schedule("lr_schedule", "adaptive_kl", "step", 1e-3, adaptive=True).adaptive


@pytest.mark.parametrize("spec,kind,message", [
    ("cosinus", "step", r"lr_schedule='cosinus' is invalid: expected one of: constant, linear, cosine, adaptive_kl"),
    ([[500, 1e-3], [0, 3e-4]], "step", r"strictly increasing order \(got \[500, 0\]\).*Fix: sort the pairs"),
    ([[0, 1e-3], [0, 3e-4]], "step", r"strictly increasing"),
    ([[0, -1e-3]], "step", r"values >= 0 \(got -0.001 at env step 0\)"),
    ([[0, 1e-3]], "smooth", r"lr_schedule_kind='smooth' is invalid: expected one of: step, interp"),
    ([[0, 1e-3, 5]], "step", r"\[env_step, value\] pairs"),
    ([[-1, 1e-3]], "step", r"integer env_step >= 0"),
    ([[0.5, 1e-3]], "step", r"integer env_step >= 0"),
    ([], "step", r"non-empty list"),
])
def test_bad_schedules_are_one_line_config_errors(spec, kind, message):
    with pytest.raises(ConfigError, match=message) as info:
        parse_schedule("lr_schedule", spec, kind, 1e-3, adaptive=True)
    assert "\n" not in str(info.value) and "Fix:" in str(info.value)


def test_adaptive_kl_is_only_for_the_learning_rate():
    with pytest.raises(ConfigError, match=r"ent_coef_schedule='adaptive_kl'.*constant, linear, cosine, or a list"):
        parse_schedule("ent_coef_schedule", "adaptive_kl", "step", 0.01)

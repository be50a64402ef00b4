"""Schedules against hand-computed values at given env steps; bad schedules are one-line ConfigErrors;
the algorithms apply them (learning rate, entropy weight, adaptive KL) and checkpoint their state."""

import math

import pytest
import torch

from embodirl.algos.schedules import (ADAPTIVE_LR_MAX, ADAPTIVE_LR_MIN, adaptive_kl_lr, cosine_decay, linear_decay,
                                      parse_schedule, piecewise)
from embodirl.errors import ConfigError
from tests.conftest import ppo_on_cartpole


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


def test_adaptive_kl_rule_by_hand():
    # desired 0.01: above 0.02 divide by 1.5, below 0.005 (and > 0) multiply by 1.5, else keep; clamped
    assert adaptive_kl_lr(3e-3, 0.03, 0.01) == pytest.approx(2e-3)
    assert adaptive_kl_lr(2e-3, 0.001, 0.01) == pytest.approx(3e-3)
    assert adaptive_kl_lr(2e-3, 0.01, 0.01) == 2e-3
    assert adaptive_kl_lr(2e-3, 0.0, 0.01) == 2e-3  # kl = 0 (e.g. an all-padding minibatch): unchanged
    assert adaptive_kl_lr(1.2e-5, 1.0, 0.01) == ADAPTIVE_LR_MIN
    assert adaptive_kl_lr(9e-3, 0.0001, 0.01) == ADAPTIVE_LR_MAX
    # tensors (a capturable optimizer's rate, a device-side KL): the same rule, no host sync
    lr = adaptive_kl_lr(torch.tensor(3e-3), torch.tensor(0.03), 0.01)
    assert isinstance(lr, torch.Tensor) and lr.item() == pytest.approx(2e-3)
    assert adaptive_kl_lr(torch.tensor(2e-3), torch.tensor(0.001), 0.01).item() == pytest.approx(3e-3)


def test_ppo_follows_lr_and_entropy_lists_per_env_step():
    # 8 envs x 16 steps = 128 env steps per update; the schedule is read before each update
    algo, collector = ppo_on_cartpole(lr_schedule=[[0, 1e-3], [256, 5e-4]], lr_schedule_kind="step", ent_coef=0.5,
                             ent_coef_schedule=[[0, 0.02], [256, 0.0]], ent_coef_schedule_kind="interp")
    seen = [algo.update(collector.collect()) for _ in range(3)]
    assert [m["train/learning_rate"] for m in seen] == pytest.approx([1e-3, 1e-3, 5e-4])  # at 0, 128, 256
    assert [m["train/ent_coef"] for m in seen] == pytest.approx([0.02, 0.01, 0.0])  # interp: 128 is halfway


def test_cosine_entropy_schedule_reaches_the_loss():
    algo, collector = ppo_on_cartpole(ent_coef=0.1, ent_coef_schedule="cosine")
    algo.env_steps_seen = 512  # half the budget: (1 + cos(pi/2)) / 2 = 0.5
    assert algo.update(collector.collect())["train/ent_coef"] == pytest.approx(0.05)
    assert algo.ent_coef.item() == pytest.approx(0.05)  # the tensor the loss reads


def test_adaptive_kl_moves_the_rate_and_survives_a_checkpoint():
    algo, collector = ppo_on_cartpole(learning_rate=1e-3, lr_schedule="adaptive_kl", desired_kl=1e-9, n_epochs=2)
    metrics = algo.update(collector.collect())
    # every minibatch after the first moves the policy, KL >> 2 x 1e-9: the rate is divided by 1.5 each time
    # (4 minibatches per epoch x 2 epochs = 8 steps; the first step's KL is 0 -> unchanged)
    assert metrics["train/learning_rate"] == pytest.approx(1e-3 / 1.5 ** 7, rel=1e-6)
    state = algo.state_dict()
    fresh, _ = ppo_on_cartpole(learning_rate=1e-3, lr_schedule="adaptive_kl", desired_kl=1e-9, n_epochs=2)
    fresh.load_state_dict(state)
    assert fresh.learning_rate == pytest.approx(metrics["train/learning_rate"])


def test_env_step_schedules_resume_from_the_checkpointed_step():
    algo, collector = ppo_on_cartpole(lr_schedule=[[0, 1e-3], [128, 4e-4]])
    algo.update(collector.collect())
    fresh, fresh_collector = ppo_on_cartpole(lr_schedule=[[0, 1e-3], [128, 4e-4]])
    fresh.load_state_dict(algo.state_dict())
    assert fresh.update(fresh_collector.collect())["train/learning_rate"] == pytest.approx(4e-4)

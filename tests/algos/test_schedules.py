"""The algorithms apply the schedules (learning rate, entropy weight) per env step and adapt the learning rate to
the approx-KL (rsl_rl's rule, by hand); the schedules' state survives a checkpoint."""

import pytest
import torch

from embodirl.algos.schedules import ADAPTIVE_LR_MAX, ADAPTIVE_LR_MIN, adaptive_kl_lr
from tests.conftest import ppo_on_cartpole


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
    algo, collector = ppo_on_cartpole(learning_rate=1e-3, lr_schedule="adaptive_kl", desired_kl=1e-9, num_epochs=2)
    metrics = algo.update(collector.collect())
    # every minibatch after the first moves the policy, KL >> 2 x 1e-9: the rate is divided by 1.5 each time
    # (4 minibatches per epoch x 2 epochs = 8 steps; the first step's KL is 0 -> unchanged)
    assert metrics["train/learning_rate"] == pytest.approx(1e-3 / 1.5 ** 7, rel=1e-6)
    state = algo.state_dict()
    fresh, _ = ppo_on_cartpole(learning_rate=1e-3, lr_schedule="adaptive_kl", desired_kl=1e-9, num_epochs=2)
    fresh.load_state_dict(state)
    assert fresh.learning_rate == pytest.approx(metrics["train/learning_rate"])


def test_env_step_schedules_resume_from_the_checkpointed_step():
    algo, collector = ppo_on_cartpole(lr_schedule=[[0, 1e-3], [128, 4e-4]])
    algo.update(collector.collect())
    fresh, fresh_collector = ppo_on_cartpole(lr_schedule=[[0, 1e-3], [128, 4e-4]])
    fresh.load_state_dict(algo.state_dict())
    assert fresh.update(fresh_collector.collect())["train/learning_rate"] == pytest.approx(4e-4)

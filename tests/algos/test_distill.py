"""Distillation: the student's actions come to match a frozen teacher's, and a teacher that cannot teach this env is
refused in one line (exit status 2) before training."""

import json
import os
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from embodirl.algos.distill import clipped_action_error
from embodirl.app.build import build_env, build_policy
from embodirl.config.algos import DistillConfig
from embodirl.config.schema import parse
from embodirl.envs.observations import as_tensordict
from embodirl.errors import ConfigError

QUIET = ["device=cpu", "logger.tensorboard=false", "logger.console=none"]
PUSH = ["env=push_cube", "env.num_envs=64", "policy.hidden_sizes=[64,64]", "eval.num_envs=8", "eval.num_episodes=8"]


def _teacher(cli, run: Path, *overrides: str) -> Path:
    """A teacher run: two short PPO iterations (its policy is what gets distilled, trained or not)."""
    out = cli("embodirl-train", [*QUIET, "trainer=debug", "trainer.total_env_steps=2048", "algo.num_steps=16",
                                 "algo.minibatch_size=512", *overrides, f"hydra.run.dir={run}"])
    assert out.code == 0, out.err
    return run


def _give_actions_of_size_one(run: Path) -> None:
    """Replace the teacher's actor by a random one whose mean actions are of order 1 (a freshly initialised actor's
    are about 0.01, as are the student's: copying it would pass without learning anything)."""
    for name in ("last.pt", "best.pt"):
        path = run / "checkpoints" / name
        state = torch.load(path, weights_only=True)
        generator = torch.Generator().manual_seed(7)
        for key, value in state["policy"].items():
            if key.startswith("actor.") and key.endswith("weight"):
                value.copy_(torch.randn(value.shape, generator=generator) * 1.5 / value.shape[1] ** 0.5)
        torch.save(state, path)


def _actions(run: Path) -> tuple[torch.Tensor, torch.Tensor]:
    """The deterministic actions of the run's policy and of its teacher on the same fresh push_cube states."""
    state = torch.load(run / "checkpoints" / "last.pt", weights_only=True)
    cfg = OmegaConf.create(state["config"])
    env = build_env(OmegaConf.merge(cfg.env, {"num_envs": 256}), torch.device("cpu"), seed=123)
    student = build_policy(cfg.policy, env, torch.device("cpu"))
    student.load_state_dict(state["policy"])
    teacher_run = Path(cfg.algo.teacher.run)
    teacher_state = torch.load(teacher_run / "checkpoints" / "last.pt", weights_only=True)
    teacher = build_policy(OmegaConf.create(teacher_state["config"]).policy, env, torch.device("cpu"))
    teacher.load_state_dict(teacher_state["policy"])
    obs = as_tensordict(env.reset(seed=5), env.num_envs)
    for _ in range(10):  # states along the student's own trajectories, not only first states
        obs = as_tensordict(env.step(student.mode(obs)[0]).obs, env.num_envs)
    return student.mode(obs)[0], teacher.mode(obs)[0].clamp(-1, 1)


@pytest.mark.slow  # learning to a threshold; the fast tier's distillation run is the wrapped one below
def test_the_student_comes_to_act_as_the_teacher(cli, tmp_path):
    teacher = _teacher(cli, tmp_path / "teacher", *PUSH)
    _give_actions_of_size_one(teacher)
    student_run = tmp_path / "student"
    out = cli("embodirl-train", [*QUIET, *PUSH, "algo=distill", f"algo.teacher.run={teacher}",
                                 "algo.teacher.checkpoint=last", "policy=actor_only", "seed=1", "trainer=debug",
                                 "trainer.total_env_steps=12288", "algo.num_epochs=8", "algo.minibatch_size=256",
                                 "algo.learning_rate=3e-3", "policy.normalize_obs=true",
                                 f"hydra.run.dir={student_run}"])
    assert out.code == 0, out.err
    student, teacher_actions = _actions(student_run)
    # An untrained student acts about 0 (its last layer starts at gain 0.01): its squared error would be the
    # teacher's mean squared action.
    untrained = teacher_actions.square().mean().item()
    assert untrained > 0.1
    metrics = [json.loads(line) for line in (student_run / "metrics.jsonl").open()]
    losses = [m["loss/distill"] for m in metrics if "loss/distill" in m]
    assert losses[-1] < 0.01 * untrained and losses[-1] < losses[0]
    assert (student - teacher_actions).abs().mean() < 0.05  # on states along the student's own trajectories


def test_overshooting_a_bound_the_teacher_sits_on_costs_nothing():
    low, high = torch.tensor([-1.0, -1.0, -1.0, -1.0]), torch.tensor([1.0, 1.0, 1.0, 1.0])
    target = torch.tensor([[1.0, -1.0, 0.5, 1.0]])
    action = torch.tensor([[1.5, -0.5, 0.7, 0.2]])
    # beyond +1 where the teacher says +1: 0; short of -1: 0.5; inside: 0.2; short of +1: -0.8
    torch.testing.assert_close(clipped_action_error(action, target, low, high), torch.tensor([[0.0, 0.5, 0.2, -0.8]]))


def test_a_missing_teacher_run_is_one_line_before_training(cli, tmp_path):
    out = cli("embodirl-train", [*QUIET, *PUSH, "algo=distill", f"algo.teacher.run={tmp_path / 'nowhere'}",
                                 f"hydra.run.dir={tmp_path / 'run'}"])
    assert out.code == 2
    line = out.err.strip()
    assert "\n" not in line and "algo.teacher.run=" in line and "nowhere" in line
    assert "Fix: train a teacher first (embodirl-train experiment=ppo_push_cube_teacher)" in line
    assert not (tmp_path / "run" / "checkpoints").exists()


def test_a_teacher_whose_keys_the_env_lacks_is_refused(cli, tmp_path):
    teacher = _teacher(cli, tmp_path / "teacher", *PUSH, "trainer.total_env_steps=256")  # a checkpoint is all it takes
    out = cli("embodirl-train", [*QUIET, *PUSH, "env.obs_mode=rgb", "algo=distill", f"algo.teacher.run={teacher}",
                                 "algo.teacher.checkpoint=last", f"hydra.run.dir={tmp_path / 'run'}"])
    assert out.code == 2
    line = out.err.strip()
    assert "\n" not in line and "algo.teacher.run=" in line
    assert "the teacher reads state [17] float32; the env gives rgb [64, 64, 3] uint8" in line
    assert "env.obs_mode=state_rgb" in line


def test_a_teacher_acting_in_another_action_space_is_refused(cli, tmp_path):
    # CartPole without velocities observes [x, theta]; MountainCarContinuous observes [position, velocity] too, but
    # pushes with a force in [-1, 1] where CartPole's teacher chooses left or right.
    teacher = _teacher(cli, tmp_path / "teacher", "env=cartpole", "env.hide_velocities=true", "env.num_envs=16")
    out = cli("embodirl-train", [*QUIET, "env=gym", "env.id=MountainCarContinuous-v0", "env.num_envs=2",
                                 "algo=distill", f"algo.teacher.run={teacher}", "algo.teacher.checkpoint=last",
                                 f"hydra.run.dir={tmp_path / 'run'}"])
    assert out.code == 2
    line = out.err.strip()
    assert "\n" not in line and "algo.teacher.run=" in line
    assert "the teacher acts in Discrete(2), the env in Box(-1.0, 1.0, (1,), float32)" in line


def test_a_distillation_without_a_teacher_is_refused_by_the_schema():
    with pytest.raises(ConfigError, match=r"algo.teacher.run=None is invalid: expected the run directory of a trained "
                                          r"teacher\. Fix: train one"):
        parse(DistillConfig, {}, "algo.")


def test_the_pixel_student_and_the_pixel_ppo_recipe_read_pixels_alike():
    """``ppo_push_cube_rgb`` can continue from a ``distill_push_cube_rgb`` student (``policy.init_from``). The
    encoder's input normalisation follows from the config, not from the weights: the two recipes must declare
    the same, or the continued actor would see differently scaled pixels than it was trained on."""
    from tests.conftest import compose_config

    student = compose_config(["experiment=distill_push_cube_rgb", "algo.teacher.run=x"]).policy
    ppo = compose_config(["experiment=ppo_push_cube_rgb"]).policy
    assert student.encoders.rgb == ppo.encoders.rgb and student.encoders.rgb.pixel_std is not None
    assert student.hidden_sizes == ppo.hidden_sizes and student.actor_keys == ppo.actor_keys


CARTPOLE = ["env=cartpole", "env.num_envs=8", "eval.num_envs=2", "eval.num_episodes=2"]


def _student(cli, teacher: Path, run: Path, steps: int, *overrides: str):
    return cli("embodirl-train", [*QUIET, *CARTPOLE, "algo=distill", f"algo.teacher.run={teacher}",
                                  "policy=actor_only", "trainer=debug", "algo.num_steps=16", "algo.minibatch_size=64",
                                  f"trainer.total_env_steps={steps}", "trainer.checkpoint_every_env_steps=128",
                                  *overrides, f"hydra.run.dir={run}"])


def _trained_on(path: Path) -> bytes:
    """``path``'s checkpoint with every policy weight moved a little, as if the teacher had trained on."""
    state = torch.load(path, weights_only=True)
    for value in state["policy"].values():
        if value.is_floating_point():
            value.add_(0.01)
    torch.save(state, path)
    return path.read_bytes()


@pytest.mark.slow
def test_a_resumed_student_refuses_a_changed_teacher(cli, tmp_path):
    teacher = _teacher(cli, tmp_path / "teacher", *CARTPOLE, "trainer.total_env_steps=256")
    student = tmp_path / "student"
    assert _student(cli, teacher, student, 256).code == 0  # stopped at its budget: the same command continues it
    best = teacher / "checkpoints" / "best.pt"
    kept = best.read_bytes()
    changed = _trained_on(best)  # the teacher "went on training"
    out = _student(cli, teacher, student, 512)
    assert out.code == 2
    line = out.err.strip()
    assert "\n" not in line and "the student's checkpoint was trained by the teacher sha256:" in line
    assert f"from {str(best)!r}" in line and "Fix: restore the teacher's checkpoint" in line
    assert "algo.teacher.allow_change=true" in line
    best.write_bytes(kept)  # restored: the student continues
    assert _student(cli, teacher, student, 512).code == 0
    best.write_bytes(changed)
    out = _student(cli, teacher, student, 768, "algo.teacher.allow_change=true")  # accepted knowingly, and said
    assert out.code == 0, out.err
    assert "algo.teacher.allow_change=true: the student, trained by the teacher sha256:" in out.out + out.err


def test_a_student_of_a_teacher_still_training_says_so(cli, tmp_path):
    teacher = _teacher(cli, tmp_path / "teacher", *CARTPOLE, "trainer.total_env_steps=256")
    status = json.loads((teacher / "status.json").read_text())
    (teacher / "status.json").write_text(json.dumps({**status, "status": "running", "pid": os.getpid()}))
    out = _student(cli, teacher, tmp_path / "student", 128)
    assert out.code == 0, out.err
    assert f"the teacher {teacher} is still training (its status.json says running" in out.out + out.err


def test_a_teacher_trained_inside_wrappers_teaches_a_student_in_the_same_wrappers(cli, tmp_path):
    # The teacher's policy reads what its env's wrappers gave it (here 2 observations of history): its weights
    # are built for those spaces, not the bare env's (which refused them as "weights that do not fit").
    wrapped = [*PUSH, "env.obs_history=2"]
    teacher = _teacher(cli, tmp_path / "teacher", *wrapped, "trainer.total_env_steps=256")  # it need not have learnt
    out = cli("embodirl-train", [*QUIET, *wrapped, "algo=distill", f"algo.teacher.run={teacher}",
                                 "algo.teacher.checkpoint=last", "policy=actor_only", "trainer=debug",
                                 "trainer.total_env_steps=512", f"hydra.run.dir={tmp_path / 'student'}"])
    assert out.code == 0, out.err

"""Hostile checkpoints: every entry embodirl reads back is checked, and each refusal is one line naming the file,
the entry, the value and the fix (exit status 2), before anything is built, allocated or trained."""

from __future__ import annotations

import copy
import sys

import pytest
import torch

from embodirl.config.envs import CartPoleConfig
from embodirl.config.policies import ActorCriticConfig
from embodirl.errors import CheckpointError
from embodirl.runtime.checkpoint import load_checkpoint, serialize_checkpoint
from tests.conftest import TINY, compose_config, in_process_run


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> dict:
    """A real checkpoint of a tiny PPO run (loaded, so each test can alter a copy)."""
    from embodirl.app.run import run_training

    run_dir = tmp_path_factory.mktemp("run")
    run_training(compose_config(TINY), run_dir)
    state = load_checkpoint(run_dir / "checkpoints" / "last.pt")
    del state["format"], state["version"]
    return state


def _write(tmp_path, state: dict, name: str = "hostile.pt"):
    path = tmp_path / name
    path.write_bytes(serialize_checkpoint(state))
    return path


def _weight(state: dict) -> str:
    return next(k for k, v in state["policy"].items() if v.is_floating_point() and v.dim() == 2)


def _huge_view() -> torch.Tensor:
    """Four terabytes of float32 as a stride-0 view of one stored number: the file holds 4 bytes."""
    return torch.zeros(1).as_strided((2**20, 2**20), (0, 0))


HOSTILE = {
    "negative env_steps": (lambda s: s["trainer"].update(env_steps=-5), "trainer.env_steps=-5", "an int >= 0"),
    "string env_steps": (lambda s: s["trainer"].update(env_steps="abc"), "trainer.env_steps='abc'", "an int >= 0"),
    "bool iteration": (lambda s: s["trainer"].update(iteration=True), "trainer.iteration=True", "an int >= 0"),
    "iterations beyond steps": (lambda s: s["trainer"].update(iteration=10**6), "trainer.iteration=1000000",
                                "at most trainer.env_steps"),
    "solved after the end": (lambda s: s["trainer"].update(solved_env_steps=10**9), "trainer.solved_env_steps=",
                             "null or an int in [0, trainer.env_steps="),
    "nan wall time": (lambda s: s["trainer"].update(wall_time_s=float("nan")), "trainer.wall_time_s=nan",
                      "a finite float >= 0"),
    "trainer not a mapping": (lambda s: s.update(trainer=[1, 2]), "trainer=[1, 2]", "a mapping"),
    "rng of floats": (lambda s: s["rng"].update(torch=s["rng"]["torch"].float()), "rng.torch=",
                      "a uint8 tensor of shape [5056]"),
    "rng cut short": (lambda s: s["rng"].update(torch=s["rng"]["torch"][:10]), "rng.torch=",
                      "a uint8 tensor of shape [5056]"),
    "rng not a tensor": (lambda s: s["rng"].update(torch="seed"), "rng.torch='seed'", "a uint8 tensor"),
    "cuda rng not a list": (lambda s: s["rng"].update(cuda=3), "rng.cuda=3", "a list of uint8 tensors"),
    "stride-0 weight": (lambda s: s["policy"].update({_weight(s): _huge_view()}), "policy[",
                        "a dense CPU tensor"),
    "overlapping weight": (lambda s: s["policy"].update({_weight(s): torch.zeros(8).as_strided((4, 4), (1, 1))}),
                           "policy[", "a dense CPU tensor"),
    "complex weight": (lambda s: s["policy"].update({_weight(s): s["policy"][_weight(s)].to(torch.complex64)}),
                       "policy[", "a real tensor"),
    "sparse weight": (lambda s: s["policy"].update({_weight(s): s["policy"][_weight(s)].to_sparse()}),
                      "policy[", "a dense CPU tensor"),
    "string weight": (lambda s: s["policy"].update({_weight(s): "w"}), "policy[", "a tensor"),
    "stride-0 optimizer state": (lambda s: s["algo"]["optimizer"]["state"][0].update(exp_avg=_huge_view()),
                                 "algo.optimizer.state.0.exp_avg=", "a dense CPU tensor"),
    "nan optimizer state": (lambda s: s["algo"]["optimizer"]["state"][0]["exp_avg"].fill_(float("nan")),
                            "algo.optimizer.state.0.exp_avg=", "finite"),
    "negative env_steps_seen": (lambda s: s["algo"].update(env_steps_seen=-1), "algo.env_steps_seen=-1",
                                "an int >= 0"),
    "inf learning rate": (lambda s: s["algo"].update(learning_rate=float("inf")), "algo.learning_rate=inf",
                          "a finite float > 0"),
}


@pytest.mark.parametrize("case", list(HOSTILE))
def test_a_hostile_checkpoint_is_refused_in_one_line_naming_the_entry(tmp_path, saved, case):
    alter, entry, expected = HOSTILE[case]
    state = copy.deepcopy(saved)
    alter(state)
    path = _write(tmp_path, state)
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(path)
    text = str(info.value)
    assert "\n" not in text and text.startswith(f"checkpoint={str(path)!r}: {entry}"), text
    assert expected in text and "Fix: " in text


def test_optimizer_state_that_does_not_fit_the_parameters_is_refused_on_resume(tmp_path, saved, monkeypatch, capsys):
    from embodirl.cli.train import main

    state = copy.deepcopy(saved)
    state["algo"]["optimizer"]["state"][0]["exp_avg"] = torch.zeros(3)
    path = _write(tmp_path, state)
    monkeypatch.setattr(sys, "argv", ["embodirl-train", *TINY, f"trainer.resume={path}",
                                      f"hydra.run.dir={tmp_path / 'run'}"])
    with in_process_run(120), pytest.raises(SystemExit) as info:
        main()
    assert info.value.code == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert f"trainer.resume={str(path)!r}: algo.optimizer.state.0.exp_avg=" in line
    assert "shape [3]" in line and "the shape of its parameter" in line and "Fix: " in line
    assert not (tmp_path / "run" / "metrics.jsonl").exists()


def test_a_negative_env_steps_checkpoint_is_refused_by_eval_in_one_line(tmp_path, saved, monkeypatch, capsys):
    from embodirl.cli.evaluate import main

    state = copy.deepcopy(saved)
    state["trainer"]["env_steps"] = -5
    path = _write(tmp_path, state)
    monkeypatch.setattr(sys, "argv", ["embodirl-eval", f"checkpoint={path}", f"hydra.run.dir={tmp_path / 'e'}"])
    with in_process_run(120), pytest.raises(SystemExit) as info:
        main()
    assert info.value.code == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "trainer.env_steps=-5" in line


def test_the_checkpoints_embodirl_writes_pass_and_resume_unchanged(tmp_path, saved):
    state = copy.deepcopy(saved)
    state["rng"]["cuda"] = [torch.zeros(16, dtype=torch.uint8)] * 3  # more GPUs than this machine: the rest are left
    loaded = load_checkpoint(_write(tmp_path, state))
    assert loaded["trainer"] == saved["trainer"]
    assert all(torch.equal(loaded["policy"][k], v) for k, v in saved["policy"].items())


def test_init_from_weights_are_checked_like_a_checkpoints(tmp_path, saved):
    from embodirl.envs.cartpole import CartPole
    from embodirl.policies import ActorCritic
    from embodirl.policies.pretrained import load_pretrained

    env = CartPole(CartPoleConfig(num_envs=2), seed=0)
    policy = ActorCritic(ActorCriticConfig(hidden_sizes=[64, 64]), observation_space=env.observation_space,
                         action_space=env.action_space)
    weights = {k: v.clone() for k, v in saved["policy"].items()}
    weights[_weight(saved)] = _huge_view()
    path = tmp_path / "weights.pt"
    torch.save(weights, path)
    with pytest.raises(CheckpointError) as info:
        load_pretrained(policy, path)
    text = str(info.value)
    assert text.startswith(f"policy.init_from={str(path)!r}: policy[") and "a dense CPU tensor" in text

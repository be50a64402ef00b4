"""``trainer.curriculum``: schedules, thresholds, its log and metric, bad input, and resuming where it was."""

from __future__ import annotations

import json
import logging

import pytest
import torch

from embodirl.app.run import run_training
from embodirl.config.envs import CartPoleConfig
from embodirl.config.randomize import RandomizeConfig
from embodirl.config.schema import parse
from embodirl.config.training import CurriculumConfig
from embodirl.envs.cartpole import CartPole
from embodirl.errors import CheckpointError, ConfigError
from embodirl.runtime.checkpoint import load_checkpoint
from embodirl.training.curriculum import Curriculum
from tests.conftest import compose_config

LEVELS = [[1.0, 1.0], [0.8, 1.2], [0.5, 2.0]]


def env(dist: str = "uniform") -> CartPole:
    randomize = {"pole_length": RandomizeConfig(range=(1.0, 1.0), dist=dist)}
    return CartPole(CartPoleConfig(num_envs=4, randomize=randomize), seed=0)


def test_a_schedule_moves_one_level_every_n_env_steps_and_stops_at_the_last(caplog):
    cartpole = env()
    curriculum = Curriculum({"pole": parse(CurriculumConfig, {"param": "pole_length", "levels": LEVELS,
                                                              "every_env_steps": 100})}, cartpole)
    curriculum.start({})
    assert cartpole.randomization.ranges["pole_length"] == (1.0, 1.0)
    with caplog.at_level(logging.INFO, logger="embodirl.training.curriculum"):
        assert curriculum.update(99, {}) == {"curriculum/pole": 0.0}
        assert curriculum.update(100, {}) == {"curriculum/pole": 1.0}
    assert cartpole.randomization.ranges["pole_length"] == (0.8, 1.2)
    assert "curriculum pole: level 1 of 2 at env_steps=100: pole_length in [0.8, 1.2]" in caplog.text
    assert curriculum.update(10_000, {}) == {"curriculum/pole": 2.0}
    assert cartpole.randomization.ranges["pole_length"] == (0.5, 2.0)


def test_a_threshold_moves_one_level_per_crossing():
    cartpole = env()
    entry = parse(CurriculumConfig, {"param": "pole_length", "levels": LEVELS, "metric": "eval/success_rate",
                                     "threshold": 0.8})
    curriculum = Curriculum({"pole": entry}, cartpole)
    curriculum.start({})
    levels = [curriculum.update(0, record)["curriculum/pole"] for record in (
        {}, {"eval/success_rate": 0.7}, {"eval/success_rate": 0.8}, {"episode/return_mean": 9.0},
        {"eval/success_rate": 0.95}, {"eval/success_rate": 1.0})]
    assert levels == [0, 0, 1, 1, 2, 2]
    assert cartpole.randomization.ranges["pole_length"] == (0.5, 2.0)


def test_start_restores_a_checkpoint_s_levels():
    cartpole = env()
    curriculum = Curriculum({"pole": parse(CurriculumConfig, {"param": "pole_length", "levels": LEVELS,
                                                              "metric": "eval/success_rate", "threshold": 0.8})},
                            cartpole)
    curriculum.start({"pole": 2})
    assert curriculum.levels == {"pole": 2} and cartpole.randomization.ranges["pole_length"] == (0.5, 2.0)


@pytest.mark.parametrize(("values", "key"), [
    ({"param": "x", "levels": LEVELS}, "every_env_steps"),
    ({"param": "x", "levels": LEVELS, "every_env_steps": 10, "metric": "eval/success_rate", "threshold": 1},
     "every_env_steps"),
    ({"param": "x", "levels": LEVELS, "metric": "eval/success_rate"}, "threshold"),
    ({"param": "x", "levels": [], "every_env_steps": 10}, "levels"),
    ({"param": "x", "levels": [[2.0, 1.0]], "every_env_steps": 10}, "levels[0]"),
])
def test_bad_entries_name_the_key(values, key):
    with pytest.raises(ConfigError) as info:
        parse(CurriculumConfig, values, "trainer.curriculum.c.")
    assert info.value.key == f"trainer.curriculum.c.{key}"


def test_a_parameter_the_env_does_not_randomize_or_a_level_it_refuses_is_one_line():
    entry = parse(CurriculumConfig, {"param": "cart_mass", "levels": LEVELS, "every_env_steps": 10})
    with pytest.raises(ConfigError, match=r"trainer\.curriculum\.c\.param='cart_mass'.*randomized here: pole_length"):
        Curriculum({"c": entry}, env())
    entry = parse(CurriculumConfig, {"param": "pole_length", "levels": [[1, 1], [0, 2]], "every_env_steps": 10})
    with pytest.raises(ConfigError, match=r"trainer\.curriculum\.c\.levels\[1\]=\[0, 2\].*log_uniform"):
        Curriculum({"c": entry}, env(dist="log_uniform"))


CURRICULUM = ["+env.randomize.pole_length.range=[1,1]",
              "+trainer.curriculum.pole={param: pole_length, levels: [[1,1],[0.8,1.2],[0.5,2]], every_env_steps: 200}"]


def records(run_dir):
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_a_training_run_logs_its_levels_and_the_drawn_values(tmp_path, tiny):
    run_training(compose_config([*tiny, *CURRICULUM, "trainer.total_env_steps=512"]), tmp_path)
    logged = records(tmp_path)
    assert [r["curriculum/pole"] for r in logged] == [0, 1, 1, 2]  # 128, 256, 384, 512 env steps
    lengths = [r["episode/metrics/randomize/pole_length"] for r in logged if "episode/metrics/randomize/pole_length"
               in r]
    assert lengths and lengths[0] == pytest.approx(0.5)  # level 0: the nominal half-length, x1
    assert load_checkpoint(tmp_path / "checkpoints" / "last.pt")["trainer"]["curriculum"] == {"pole": 2}


def test_a_resumed_run_continues_the_curriculum_where_it_was(tmp_path, tiny):
    common = [*tiny, *CURRICULUM, "trainer.total_env_steps=640", "trainer.keep_checkpoints=10", "seed=3"]
    full, resumed = tmp_path / "full", tmp_path / "resumed"
    run_training(compose_config(common), full)
    step = full / "checkpoints" / "step_000000000256.pt"
    assert load_checkpoint(step)["trainer"]["curriculum"] == {"pole": 1}
    run_training(compose_config([*common, f"trainer.resume={step}"]), resumed)
    a, b = records(full), records(resumed)
    assert [r["curriculum/pole"] for r in b] == [1, 2, 2] == [r["curriculum/pole"] for r in a[2:]]
    for x, y in zip(a[2:], b, strict=True):  # the same draws and the same learning as without the interruption
        assert x["loss/policy"] == y["loss/policy"] and x["loss/value"] == y["loss/value"]
    last_a, last_b = (load_checkpoint(d / "checkpoints" / "last.pt") for d in (full, resumed))
    assert torch.equal(last_a["env"]["randomize_values"], last_b["env"]["randomize_values"])


@pytest.mark.parametrize("level", ["abc", [1], -1, 1.5, True])
def test_a_checkpoint_s_bad_level_is_refused_in_one_line(level, caplog):
    cartpole = env()
    curriculum = Curriculum({"pole": parse(CurriculumConfig, {"param": "pole_length", "levels": LEVELS,
                                                              "every_env_steps": 10})}, cartpole)
    with caplog.at_level(logging.INFO), pytest.raises(CheckpointError) as info:
        curriculum.start({"pole": level})
    text = str(info.value)
    assert "\n" not in text and "curriculum level of trainer.curriculum.pole is" in text
    assert "expected a level 0..2" in text and "Fix: the file is damaged or was edited" in text
    assert curriculum.levels == {"pole": 0} and "curriculum pole" not in caplog.text  # no spurious change


@pytest.mark.parametrize(("key", "value", "match"), [
    ("randomize_low", -5.0, r"pole_length=\[-5, 1\] is invalid: expected \[low, high\] with 0 <= low <= high"),
    ("randomize_high", 1e30, r"pole_length=\[1, 1e\+30\] is invalid: expected values up to x100"),
    ("randomize_values", -0.93, r"randomize_values of pole_length holds -0.93"),
    ("randomize_values", 3e29, r"randomize_values of pole_length holds 3e\+29"),
])
def test_a_checkpoint_s_randomization_state_is_checked_as_env_randomize(key, value, match):
    cartpole = env()
    state = cartpole.state_dict()
    state[key] = torch.full_like(state[key], value)
    with pytest.raises(CheckpointError, match=match):
        cartpole.load_state_dict(state)
    assert cartpole.randomization.ranges["pole_length"] == (1.0, 1.0)


def test_a_resume_from_a_checkpoint_with_a_negative_range_is_one_line(cli, tmp_path, tiny):
    run = tmp_path / "run"
    args = [*tiny, "+env.randomize.pole_length.range=[1,1]", f"hydra.run.dir={run}"]
    assert cli("embodirl-train", args).code == 0
    last = run / "checkpoints" / "last.pt"
    state = torch.load(last, weights_only=True)
    state["env"]["randomize_low"].fill_(-5.0)
    state["env"]["randomize_high"].fill_(-1.0)
    torch.save(state, last)
    out = cli("embodirl-train", [*args, "trainer.total_env_steps=512"])
    assert out.code == 2
    line = out.err.strip()
    assert "\n" not in line and "randomize_low/high of pole_length=[-5, -1] is invalid" in line

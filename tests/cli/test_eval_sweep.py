"""``embodirl-eval ... eval.sweep.param=P eval.sweep.values=[...]``: held-out conditions, one bin per value."""

from __future__ import annotations

import json

import pytest

from embodirl.app.run import run_training
from tests.conftest import compose_config


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> str:
    """A tiny CartPole run (its checkpoint is evaluated under swept pole lengths)."""
    from tests.conftest import TINY

    run_dir = tmp_path_factory.mktemp("run")
    run_training(compose_config(list(TINY)), run_dir)
    return str(run_dir)


def test_a_sweep_writes_one_bin_per_value_and_x1_is_the_nominal_env(cli, tmp_path, trained):
    out = tmp_path / "eval"
    result = cli("embodirl-eval", [f"run={trained}", "num_episodes=8", "device=cpu", "eval.sweep.param=pole_length",
                                   "eval.sweep.values=[0.25,1,4]", f"hydra.run.dir={out}"])
    assert result.code == 0, result.err
    written = json.loads((out / "eval.json").read_text())
    sweep = written["sweep"]
    assert sweep["param"] == "pole_length" and sweep["scale"] == "relative"
    assert [row["value"] for row in sweep["bins"]] == [0.25, 1, 4]
    assert all(row["eval/num_episodes"] == 8 for row in sweep["bins"])
    nominal = sweep["bins"][1]
    assert nominal["eval/return_mean"] == written["eval/return_mean"]  # x1: the same episodes as the nominal env
    assert sweep["bins"][0]["eval/return_mean"] != nominal["eval/return_mean"]  # a quarter of the pole: other ones
    assert "held-out sweep of pole_length (relative): pole_length fixed per bin, the rest nominal" in result.out


@pytest.fixture(scope="module")
def randomized(tmp_path_factory) -> str:
    """A tiny CartPole run trained with randomized pole lengths and masses."""
    from tests.conftest import TINY

    run_dir = tmp_path_factory.mktemp("randomized")
    run_training(compose_config([*TINY, "+env.randomize.pole_length={range: [0.25, 4]}",
                                 "+env.randomize.cart_mass={range: [0.5, 2]}"]), run_dir)
    return str(run_dir)


def test_a_randomized_run_is_evaluated_nominal_and_its_x1_bin_repeats_it(cli, tmp_path, randomized):
    out = tmp_path / "eval"
    result = cli("embodirl-eval", [f"run={randomized}", "num_episodes=8", "device=cpu", "eval.sweep.param=pole_length",
                                   "eval.sweep.values=[0.25,1]", f"hydra.run.dir={out}"])
    assert result.code == 0, result.err
    written = json.loads((out / "eval.json").read_text())
    assert written["sweep"]["bins"][1]["eval/return_mean"] == written["eval/return_mean"]
    assert written["randomize"] == {}
    assert written["conditions"].startswith("nominal: no randomization; the run trained with pole_length, cart_mass")
    assert "conditions: nominal: no randomization; the run trained with pole_length, cart_mass randomized" in result.out


def test_conditions_training_draws_the_runs_randomization_in_the_plain_evaluation_and_the_bins(cli, tmp_path,
                                                                                             randomized):
    runs = {}
    for conditions in ("nominal", "training"):
        out = tmp_path / conditions
        result = cli("embodirl-eval", [f"run={randomized}", "num_episodes=8", "device=cpu",
                                       f"eval.conditions={conditions}", "eval.sweep.param=pole_length",
                                       "eval.sweep.values=[4]", f"hydra.run.dir={out}"])
        assert result.code == 0, result.err
        runs[conditions] = json.loads((out / "eval.json").read_text())
    training = runs["training"]
    assert set(training["randomize"]) == {"pole_length", "cart_mass"}
    assert training["conditions"] == "training: pole_length, cart_mass randomized as the run trained"
    assert training["eval/return_mean"] != runs["nominal"]["eval/return_mean"]
    assert training["sweep"]["conditions"] == "pole_length fixed per bin, cart_mass randomized as in the plain " \
        "evaluation"
    assert training["sweep"]["bins"][0]["eval/return_mean"] != runs["nominal"]["sweep"]["bins"][0]["eval/return_mean"]


def test_an_absolute_sweep_sets_the_value_itself(cli, tmp_path, trained):
    out = tmp_path / "eval"
    result = cli("embodirl-eval", [f"run={trained}", "num_episodes=4", "device=cpu", "eval.sweep.param=pole_length",
                                   "eval.sweep.values=[0.5]", "eval.sweep.scale=absolute", f"hydra.run.dir={out}"])
    assert result.code == 0, result.err
    written = json.loads((out / "eval.json").read_text())
    assert written["sweep"]["bins"][0]["eval/return_mean"] == written["eval/return_mean"]  # 0.5 m is the nominal


@pytest.mark.parametrize(("args", "fragments"), [
    (["eval.sweep.param=frction", "eval.sweep.values=[1]"],
     ["eval.sweep.param='frction'", "one of: pole_length, pole_mass, cart_mass, force_mag",
      "Fix: pass eval.sweep.param=pole_length"]),
    (["eval.sweep.param=pole_length"], ["eval.sweep.values=[]", "a non-empty list", "Fix: pass eval.sweep.values="]),
    (["eval.sweep.param=pole_length", "eval.sweep.values=[-1]"], ["eval.sweep.values", "Fix:"]),
    (["eval.sweep.values=[1,2]"], ["eval.sweep.param=None", "Fix: pass eval.sweep.param=table_friction"]),
    (["eval.sweep.param=pole_length", "eval.sweep.values=[1]", "eval.sweep.scale=log"],
     ["eval.sweep.scale='log'", "relative, absolute", "Fix:"]),
])
def test_bad_sweeps_are_one_line_and_exit_2(cli, tmp_path, trained, args, fragments):
    out = tmp_path / "eval"
    result = cli("embodirl-eval", [f"run={trained}", "num_episodes=2", "device=cpu", *args, f"hydra.run.dir={out}"])
    lines = result.err.strip().splitlines()
    assert result.code == 2 and len(lines) == 1 and lines[0].startswith("embodirl-eval: error: "), result.err
    for text in fragments:
        assert text in lines[0], lines[0]
    assert not (out / "eval.json").exists()

"""``embodirl-train --help``: our page (examples, groups, every key with its doc), fast, and Hydra's flags kept."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_module
from hydra.core.global_hydra import GlobalHydra
from omegaconf import OmegaConf

from embodirl.cli.help import (
    STRUCTURAL_KEYS,
    file_description,
    help_page,
    help_request,
    key_comments,
    key_help,
)
from tests.conftest import representatives

CONF = Path(__file__).resolve().parents[2] / "embodirl" / "conf"


def test_key_comments_reads_inline_comments_by_dotted_path():
    text = ("# file header\n"
            "defaults:\n  - algo: ppo\n"
            "a:            # node\n"
            "  b: 1        # one # with a hash\n"
            "  c: 'x # y'\n"
            "  d: [1, 2]   # list\n"
            "  e:\n    - 1\n"
            "url: http://h/#anchor  # a glued # is text\n"
            "top: 2\n")
    assert key_comments(text) == {"a": "node", "a.b": "one # with a hash", "a.c": None, "a.d": "list", "a.e": None,
                                  "url": "a glued # is text", "top": None}
    assert file_description("# @package _global_\n# First line,\n# second.\nkey: 1\n") == "First line, second."


def _compositions() -> list:
    """The default config, every option of every group, and every experiment, one at a time; the defaults, the
    off-policy algorithms and one experiment are the fast tier's representatives."""
    cases: dict[str, list[str]] = {"defaults": []}
    with initialize_config_module("embodirl.conf", version_base="1.3"):
        loader = GlobalHydra.instance().config_loader()
        for group in ("algo", "policy", "env", "trainer", "logger", "experiment"):
            cases |= {f"{group}={option}": [f"{group}={option}"] for option in loader.get_group_options(group)}
    return representatives(["defaults", "algo=sac", "algo=fasttd3", "experiment=ppo_push_cube"], cases)


def _keys(node: dict, prefix: str = ""):
    for key, value in node.items():
        if key not in STRUCTURAL_KEYS:
            yield f"{prefix}{key}"
            if isinstance(value, dict) and value:
                yield from _keys(value, f"{prefix}{key}.")


@pytest.mark.parametrize("overrides", _compositions())
def test_every_key_of_the_composed_config_is_documented(overrides):
    """A key that no schema documents and no YAML comment explains (or an option file without a header) fails."""
    with initialize_config_module("embodirl.conf", version_base="1.3"):
        cfg = compose("train", overrides=overrides, return_hydra_config=True)
    choices = OmegaConf.to_container(cfg.hydra.runtime.choices)
    job = OmegaConf.to_container(cfg, resolve=False)
    job.pop("hydra")
    docs = key_help(job, choices)
    assert [key for key in _keys(job) if not docs.get(key)] == []


def test_schema_docs_win_over_yaml_comments_and_recipes_add_why():
    page = help_page(["algo/optimizer=sgd", "experiment=ppo_push_cube"])
    momentum = next(line for line in page.splitlines() if line.strip().startswith("algo.optimizer.momentum="))
    assert momentum.split("# ", 1)[1] == "momentum factor (0 = plain SGD) (a float >= 0)"
    seed = next(line for line in page.splitlines() if line.strip().startswith("seed="))
    assert seed.endswith("add offsets (an int in [-2^62, 2^62])")


def test_every_key_of_the_eval_config_has_a_comment():
    comments = key_comments((CONF / "eval.yaml").read_text())
    missing = [k for k, v in comments.items() if v is None and not k.startswith("hydra")
               and k.split(".")[-1] not in STRUCTURAL_KEYS]
    assert missing == []


def test_help_page_shows_examples_groups_and_commented_keys():
    page = help_page([])
    assert page.startswith("embodirl-train: ") and "Usage: embodirl-train" in page
    for command in ("embodirl-train -m algo.learning_rate=1e-3,2e-3", "hydra/launcher=slurm", "embodirl-eval run=",
                    "embodirl-eval checkpoint=",
                    "embodirl-report multirun/"):
        assert command in page
    lines = page.splitlines()
    # the selected option is starred
    assert any(line.split() == ["algo", "a2c,", "distill,", "fasttd3,", "grpo,", "ppo*,", "sac"] for line in lines)
    assert any(line.startswith("  experiment ") and "ppo_push_cube" in line for line in lines)  # no + needed
    assert any(line.startswith("  logger ") and "none" in line and "wandb" in line for line in lines)
    clip = next(line for line in lines if line.strip().startswith("algo.clip_coef="))
    assert clip.split() == ["algo.clip_coef=0.2", "#", "surrogate", "clip", "range", "(a", "float", ">", "0)"]
    assert any(line.startswith("  algo=ppo (embodirl.algos.ppo.PPO): PPO: clipped surrogate") for line in lines)
    assert "(undocumented)" not in page


@pytest.mark.parametrize("env", ["cartpole", "gym"])
def test_a_sizing_file_notes_its_keys_and_leaves_the_algorithm_described(env):
    # algo/ppo_sizing@algo's header replaced PPO's description on the page ("algo=ppo (...): PPO's tuning for ...")
    lines = help_page([f"env={env}"]).splitlines()
    assert any(line.startswith("  algo=ppo (embodirl.algos.ppo.PPO): PPO: clipped surrogate") for line in lines)
    minibatch = next(line for line in lines if line.strip().startswith("algo.minibatch_size="))
    assert f"[{env}: " in minibatch, minibatch


def test_help_request_reads_hydras_flags():
    assert help_request(["algo=ppo", "--cfg", "job"]) is None
    assert help_request(["--hydra-help"]) is None
    assert help_request(["-m", "algo=grpo", "-h"]) == ["algo=grpo"]
    site = str(Path("launch").resolve())
    assert help_request(["--help", "--config-dir", "launch", "+site=example"]) == [
        f"hydra.searchpath=[file://{site}]", "+site=example"]


def test_help_page_follows_the_overrides_and_leaves_sweeps_out():
    page = help_page(["experiment=ppo_push_cube", "seed=0,1"])
    assert "Composed with: experiment=ppo_push_cube (sweep overrides left out: seed=0,1)" in page
    lines = page.splitlines()
    assert any(line.strip().startswith("env=push_cube (embodirl.envs.push_cube.env.PushCube)") for line in lines)
    gamma = next(line for line in lines if line.strip().startswith("algo.gamma="))
    assert gamma.startswith("  algo.gamma=0.8")
    assert "discount (a float in [0, 1]) [ppo_push_cube: short horizon" in gamma  # the schema's doc, the recipe's why


def test_help_cli_keeps_hydra_flags(tmp_path, cli, monkeypatch):
    # That --help never imports torch needs a fresh process: tests/cli/test_startup.py runs it there.
    monkeypatch.chdir(tmp_path)
    result = cli("embodirl-train", ["algo=grpo", "--help"])
    assert result.code == 0 and "policy=actor_only (embodirl.policies.actor_only.ActorOnly)" in result.out
    hydra_help = cli("embodirl-train", ["--hydra-help"])
    assert hydra_help.code == 0 and "== Flags ==" in hydra_help.out
    bad = cli("embodirl-train", ["--help", "algo=bogus"])
    assert bad.code == 2 and bad.err.strip().splitlines() == [
        "embodirl-train: error: algo=bogus is invalid: expected one of: a2c, distill, fasttd3, grpo, ppo, sac (the "
        "options in algo/). Fix: pass algo=a2c (or another of: a2c, distill, fasttd3, grpo, ppo, sac)"]


@pytest.mark.slow  # a fresh process per flag, to close its real stdout pipe
@pytest.mark.parametrize("flag", ["--help", "--cfg=job"])
def test_a_closed_output_pipe_ends_quietly(tmp_path, flag):
    """``embodirl-train --cfg job | head -1`` printed "error: a file: Broken pipe" before."""
    proc = subprocess.Popen([sys.executable, "-m", "embodirl.cli.train", *flag.split("=")], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    proc.stdout.close()  # the reader is gone before the first line is written, as `head` after its lines
    err = proc.stderr.read()
    assert proc.wait(timeout=60) == 141 and err == ""

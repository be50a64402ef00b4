"""The whole embodirl-train config checked against its schemas: top-level keys, devices, seeds, group nodes."""

from __future__ import annotations

import pytest
from hydra import compose, initialize_config_module

from embodirl.config.run import MAX_SEED, RunConfig, check_run_config
from embodirl.config.schema import Node
from embodirl.errors import ConfigError


def _composed(*overrides: str):
    with initialize_config_module("embodirl.conf", version_base="1.3"):
        return compose("train", overrides=list(overrides))


def test_the_default_config_passes_and_keeps_every_group_as_a_node():
    run = check_run_config(_composed())
    assert isinstance(run, RunConfig) and run.seed == 0 and run.device == "auto" and run.compile == "auto"
    for group in ("policy", "algo", "env", "trainer", "logger", "eval"):
        assert isinstance(getattr(run, group), Node)
    assert run.algo.target.endswith(".PPO") and run.env.target.endswith(".CartPole")


@pytest.mark.parametrize(("override", "words"), [
    ("seed=abc", ["seed='abc' is invalid", "an int in [-2^62, 2^62]"]),
    (f"seed={MAX_SEED + 1}", ["an int in [-2^62, 2^62]"]),
    ("device=cpu:1", ["device='cpu:1'", "takes no index", "Fix: pass device=cpu"]),
    ("device=tpu", ["device='tpu'", "auto, cpu, cuda or cuda:N"]),
    ("num_threads=0", ["num_threads=0", "an int >= 1"]),
    ("compile=sometimes", ["compile='sometimes'", "one of: true, false, auto"]),
    ("+colour=blue", ["colour='blue'", "a top-level key", "remove it with ~colour"]),
    ("+num_thread=2", ["did you mean num_threads?"]),
])
def test_a_bad_top_level_key_is_one_line_naming_it(override, words):
    with pytest.raises(ConfigError) as info:
        check_run_config(_composed(override))
    text = str(info.value)
    assert "\n" not in text and "Fix:" in text
    for word in words:
        assert word in text

"""The training-side schemas: their defaults are the shipped YAML's, moved keys name their new place."""

import dataclasses
from importlib.resources import files

import pytest
import yaml
from omegaconf import OmegaConf

from embodirl.config.schema import STRUCTURAL_KEYS, parse
from embodirl.config.training import MOVED_KEYS, EvalConfig, LoggerConfig, TrainerConfig
from embodirl.errors import ConfigError
from tests.conftest import compose_config


@pytest.mark.parametrize(("node", "schema"), [("trainer", TrainerConfig), ("eval", EvalConfig),
                                              ("logger", LoggerConfig)])
def test_schema_defaults_are_the_default_options_values(node, schema):
    values = OmegaConf.to_container(compose_config([])[node])
    parsed = parse(schema, {k: v for k, v in values.items() if k not in STRUCTURAL_KEYS})
    assert dataclasses.asdict(parsed) == dataclasses.asdict(schema())


def test_the_evaluation_cadence_and_sizes_keep_their_numbers_under_the_eval_node():
    default, debug = compose_config([]).eval, compose_config(["trainer=debug"]).eval
    assert (default.every_env_steps, default.num_envs, default.num_episodes, default.env_overrides) == \
        (16384, 20, 20, None)
    assert (debug.every_env_steps, debug.num_envs, debug.num_episodes) == (8192, 2, 2)


def test_the_debug_budget_applied_after_an_experiment_equals_trainer_debug():
    # debug/trainer.yaml restates trainer/debug.yaml's budget (Hydra applies one file once per composition).
    appended = yaml.safe_load(files("embodirl.conf").joinpath("debug/trainer.yaml").read_text(encoding="utf-8"))
    debug = compose_config(["trainer=debug"])
    both = compose_config(["experiment=ppo_push_cube", "trainer=debug", "debug=trainer"])
    for node, keys in appended.items():
        for key, value in keys.items():
            assert debug[node][key] == both[node][key] == value, f"{node}.{key}"


@pytest.mark.parametrize(("old", "new"), sorted(MOVED_KEYS.items()))
def test_a_moved_trainer_key_names_its_new_full_path(old, new):
    with pytest.raises(ConfigError) as info:
        parse(TrainerConfig, {old.removeprefix("trainer."): 4}, "trainer.")
    assert str(info.value) == (f"{old}=4 is invalid: expected no key of this name: it was renamed to {new}. "
                               f"Fix: pass {new}=4 instead.")

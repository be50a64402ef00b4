"""The env schemas: each shipped env option's keys and values are its schema's, every key is documented, and the
rules across keys (push_cube's workspace, speed and geometry) name the key and a fix that works."""

from __future__ import annotations

import dataclasses
from importlib import resources

import pytest
import yaml

from embodirl.config.envs import (
    WRAPPER_KEYS,
    CartPoleConfig,
    EnvConfig,
    EnvNode,
    EnvSetupConfig,
    GenesisConfig,
    GymConfig,
    GymVectorConfig,
    PlaygroundConfig,
    PushCubeArmConfig,
    PushCubeConfig,
    TorchVectorConfig,
)
from embodirl.config.schema import Schema, key_docs, parse, parse_node
from embodirl.errors import ConfigError

OPTIONS = {"cartpole": CartPoleConfig, "push_cube": PushCubeConfig, "push_cube_arm": PushCubeArmConfig,
           "gym": GymConfig, "gym_vector": GymVectorConfig, "torch_vector": TorchVectorConfig,
           "playground": PlaygroundConfig, "genesis": GenesisConfig}


def option(group: str, name: str) -> dict:
    return yaml.safe_load(resources.files("embodirl.conf").joinpath(f"{group}/{name}.yaml").read_text())


def defaults(schema: type[Schema]) -> dict:
    return {f.name: f.default if f.default is not dataclasses.MISSING else f.default_factory()
            for f in dataclasses.fields(schema)}


def as_yaml(value):
    return [as_yaml(v) for v in value] if isinstance(value, list | tuple) else value


# Setup values an option file sets apart from EnvSetupConfig's defaults: the example task's threshold.
OPTION_SETUP = {"genesis": {"solved_threshold": 475.0}}


@pytest.mark.parametrize("name", OPTIONS)
def test_each_env_option_holds_its_schemas_keys_with_their_defaults(name):
    node, schema = option("env", name), OPTIONS[name]
    assert node["_target_"] == schema.target and issubclass(schema, EnvConfig)
    values = {k: v for k, v in node.items() if not k.startswith("_")}
    setup = {**defaults(EnvSetupConfig), **OPTION_SETUP.get(name, {})}
    assert values == {k: as_yaml(v) for k, v in {**defaults(schema), **setup}.items()}
    parsed = parse_node(node, "env.", EnvNode)
    assert {k: as_yaml(getattr(parsed.cfg, k)) for k in parsed.values} == {k: values[k] for k in parsed.values}
    assert {k: as_yaml(getattr(parsed.setup, k)) for k in setup} == {k: values[k] for k in setup}


def test_every_env_key_has_a_one_line_doc_and_each_key_has_one_owner():
    for schema in (*OPTIONS.values(), EnvSetupConfig):
        for row in key_docs(schema):
            assert row.doc and "\n" not in row.doc, (schema.__name__, row.path)
    setup = {f.name for f in dataclasses.fields(EnvSetupConfig)}
    assert setup == {"solved_metric", "solved_threshold", *WRAPPER_KEYS}
    assert {f.name for f in dataclasses.fields(EnvConfig)} == {"num_envs"}
    assert all(not setup & {f.name for f in dataclasses.fields(s)} for s in OPTIONS.values())


@pytest.mark.parametrize(("values", "key", "fix"), [
    ({"workspace_low": [-0.1, -0.3]}, "workspace_low", "workspace_low=[-0.35,-0.3]"),
    ({"workspace_high": [0.45, 0.05]}, "workspace_high", "workspace_high=[0.45,0.3]"),
    ({"max_speed": 1.2}, "max_speed", "lower env.max_speed or raise substeps"),
    ({"max_speed": 1.2, "substeps": 20}, None, None),
    ({"control_mode": "joint_delta_pos", "max_joint_delta": 0.2}, "max_joint_delta", "raise substeps"),
    ({"cube_half_size": 0.07}, "cube_half_size", "cube_half_size=0.02"),
])
def test_push_cube_rules_across_keys_name_the_key_and_the_fix(values, key, fix):
    if key is None:
        assert parse(PushCubeConfig, values).max_speed == values["max_speed"]  # more substeps: no tunnelling
        return
    with pytest.raises(ConfigError) as info:
        parse(PushCubeConfig, values, "env.")
    assert info.value.key == f"env.{key}" and fix in str(info.value)


@pytest.mark.parametrize(("schema", "values", "key", "fix"), [
    (PlaygroundConfig, {"config_overrides": {"impl": "warp"}}, "config_overrides.impl", "set env.impl"),
    (PlaygroundConfig, {"config_overrides": {"ctrl_dt": float("nan")}}, "config_overrides.ctrl_dt", "finite"),
    (GenesisConfig, {"model": "robot.obj"}, "model", "env.model=<path>/robot.xml"),
    (GenesisConfig, {"action_joints": []}, "action_joints", "env.action_joints=[slider]"),
])
def test_simulator_keys_are_checked_before_the_simulator_is_imported(schema, values, key, fix):
    with pytest.raises(ConfigError) as info:
        parse(schema, values, "env.")
    assert info.value.key == f"env.{key}" and fix in str(info.value)


def test_push_cube_spawn_boxes_are_the_physics_ones():
    from embodirl.envs.push_cube import physics

    assert (physics.TIP_SPAWN_LOW, physics.TIP_SPAWN_HIGH, physics.CUBE_SPAWN) == (
        (-0.30, -0.10), (-0.20, 0.10), 0.1)


def test_nan_inside_a_mapping_key_is_refused_naming_the_nested_key():
    with pytest.raises(ConfigError, match=r"^env.env_kwargs.g=nan .*finite"):
        parse(GymConfig, {"env_kwargs": {"g": float("nan")}}, "env.")
    with pytest.raises(ConfigError, match=r"^env.make.scale=inf "):
        parse(TorchVectorConfig, {"make": {"_target_": "m.f", "scale": float("inf")}}, "env.")


def test_the_arm_needs_one_noise_per_joint():
    with pytest.raises(ConfigError, match=r"^env.joint_noise=\[0.1, 0.1\] .*6 numbers"):
        parse(PushCubeArmConfig, {"joint_noise": [0.1, 0.1]}, "env.")


def test_a_config_solved_criterion_replaces_the_envs_own():
    import torch

    from embodirl.app.build import build_env

    cpu = torch.device("cpu")
    assert build_env({"_target_": CartPoleConfig.target, "num_envs": 1}, cpu, 0).solved_threshold == 475.0
    env = build_env({"_target_": PushCubeConfig.target, "num_envs": 1, "solved_metric": "eval/return_mean",
                     "solved_threshold": 20}, cpu, 0)
    assert (env.solved_metric, env.solved_threshold) == ("eval/return_mean", 20.0)


def test_the_setup_keys_are_checked_for_an_env_class_of_ones_own_and_never_reach_it():
    node = parse_node({"_target_": "collections.OrderedDict", "frame_stack": 2, "size": 3}, "env.", EnvNode)
    assert node.values == {"size": 3} and node.setup == EnvSetupConfig(frame_stack=2)
    with pytest.raises(ConfigError, match=r"^env.solved_metric='success_rate' .*Fix: pass env.solved_metric=eval/ret"):
        parse_node({"_target_": PushCubeConfig.target, "solved_metric": "success_rate"}, "env.", EnvNode)
    with pytest.raises(ConfigError, match=r"^env.frame_stak=2 .*one of: num_envs, .*, frame_stack.* did you mean "
                       r"env.frame_stack\?"):
        parse_node({"_target_": CartPoleConfig.target, "frame_stak": 2}, "env.", EnvNode)

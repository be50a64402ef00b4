"""The policy, encoder and distribution schemas: each shipped option's keys and values are its schema's, the keys
every policy takes are declared once, and nested encoder and distribution nodes are checked by their own schema."""

from __future__ import annotations

import dataclasses
import typing

import pytest

from embodirl.config.policies import (
    Activation,
    ActorCriticConfig,
    ActorCriticRNNConfig,
    ActorOnlyConfig,
    BetaConfig,
    CNNEncoderConfig,
    FlattenEncoderConfig,
    MLPEncoderConfig,
    PolicyConfig,
    PolicySetupConfig,
    StateDependentGaussianConfig,
    TanhGaussianConfig,
)
from embodirl.config.schema import key_docs, parse
from embodirl.errors import ConfigError
from tests.config.test_envs import as_yaml, defaults, option

OPTIONS = {("policy", "actor_only"): ActorOnlyConfig, ("policy", "actor_critic"): ActorCriticConfig,
           ("policy", "actor_critic_rnn"): ActorCriticRNNConfig, ("policy/encoder", "cnn"): CNNEncoderConfig,
           ("policy/encoder", "mlp"): MLPEncoderConfig, ("policy/encoder", "flatten"): FlattenEncoderConfig,
           ("policy/distribution", "beta"): BetaConfig,
           ("policy/distribution", "state_dependent_gaussian"): StateDependentGaussianConfig,
           ("policy/distribution", "tanh_gaussian"): TanhGaussianConfig}


@pytest.mark.parametrize("where", OPTIONS, ids="/".join)
def test_each_option_holds_its_schemas_keys_with_their_defaults(where):
    node, schema = option(*where), OPTIONS[where]
    assert node["_target_"] == schema.target
    values = {k: v for k, v in node.items() if not k.startswith("_")}
    setup = defaults(PolicySetupConfig) if where[0] == "policy" else {}
    expected = {k: as_yaml(v) for k, v in {**defaults(schema), **setup}.items()}
    interpolated = {k for k, v in values.items() if isinstance(v, str) and v.startswith("${")}
    assert values.keys() == expected.keys()
    assert {k: v for k, v in values.items() if k not in interpolated} == {
        k: v for k, v in expected.items() if k not in interpolated}
    for row in key_docs(schema):
        assert row.doc and "\n" not in row.doc, (schema.__name__, row.path)


def test_the_policy_keys_are_declared_once():
    shared = {f.name for f in dataclasses.fields(PolicyConfig)}
    assert len(shared) == 11 and {"encoders", "distribution", "action_chunk"} <= shared
    assert {f.name for f in dataclasses.fields(PolicySetupConfig)} == {"init_from", "freeze"}
    assert not {"init_from", "freeze"} & shared
    for schema in (ActorOnlyConfig, ActorCriticConfig, ActorCriticRNNConfig):
        assert shared <= {f.name for f in dataclasses.fields(schema)}
    assert "critic_keys" not in {f.name for f in dataclasses.fields(ActorOnlyConfig)}  # no critic to read them


def test_the_activation_names_are_the_networks():
    from embodirl.policies.networks import ACTIVATIONS

    assert set(typing.get_args(Activation)) == set(ACTIVATIONS)


def test_nested_encoder_and_distribution_nodes_are_checked_by_their_schema():
    encoder = {"_target_": "embodirl.policies.encoders.CNNEncoder", "kernels": [8, 4]}
    with pytest.raises(ConfigError, match=r"^policy.encoders.rgb.kernels=\[8, 4\] .*one entry per convolution \(3"
                                          r".*Fix: pass policy.encoders.rgb.kernels with 3 entries"):
        parse(ActorCriticConfig, {"encoders": {"rgb": encoder}}, "policy.")
    dist = {"_target_": "embodirl.policies.distributions.StateDependentGaussian", "log_std_min": 1.0,
            "log_std_max": 0.0}
    with pytest.raises(ConfigError, match=r"^policy.distribution.log_std_min=1.0 .*below log_std_max=0.0"):
        parse(ActorOnlyConfig, {"distribution": dist}, "policy.")
    cfg = parse(ActorOnlyConfig, {"encoders": {"state": {"_target_": "embodirl.policies.encoders.MLPEncoder",
                                                         "hidden_sizes": [32]}}})
    assert cfg.encoders["state"].cfg == MLPEncoderConfig(hidden_sizes=[32])


@pytest.mark.parametrize(("values", "fragment"), [
    ({"log_std_min": 3.0}, "policy.log_std_min=3.0 is invalid: expected a float below log_std_max=2.0"),
    ({"hidden_sizes": [0]}, "policy.hidden_sizes=[0] is invalid: expected a list of ints >= 1. Fix: pass "
                            "policy.hidden_sizes=[64,64] (the default)"),
    ({"init_log_std": float("nan")}, "policy.init_log_std=nan is invalid: expected a float (finite"),
    ({"critic_keys": ["x"]}, "policy.critic_keys=['x'] is invalid: expected a key of policy (one of: "),
])
def test_bad_policy_keys_give_one_line_naming_the_key(values, fragment):
    with pytest.raises(ConfigError) as info:
        parse(ActorOnlyConfig, values, "policy.")
    assert str(info.value).startswith(fragment)

"""Encoders per observation key, and policies over Dict observations with actor and critic keys."""

import gymnasium as gym
import numpy as np
import pytest
import torch
from tensordict import TensorDict

from embodirl.config.policies import ActorCriticConfig, CNNEncoderConfig, FlattenEncoderConfig, MLPEncoderConfig
from embodirl.config.schema import parse_node
from embodirl.config.trust import packaged_targets
from embodirl.errors import ConfigError
from embodirl.policies.actor_critic import ActorCritic
from embodirl.policies.encoders import CNNEncoder, FlattenEncoder, MLPEncoder, default_encoder

SPACE = gym.spaces.Dict({
    "rgb": gym.spaces.Box(0, 255, (64, 64, 3), np.uint8),
    "state": gym.spaces.Box(-1, 1, (5,), np.float32),
    "privileged": gym.spaces.Dict({"cube": gym.spaces.Box(-1, 1, (3,), np.float32)}),
})


def _obs(batch: int) -> TensorDict:
    return TensorDict({"rgb": torch.randint(0, 256, (batch, 64, 64, 3), dtype=torch.uint8),
                       "state": torch.randn(batch, 5), "privileged": {"cube": torch.randn(batch, 3)}},
                      batch_size=[batch])


def test_cnn_maps_a_64x64_image_to_its_features_and_scales_uint8():
    encoder = CNNEncoder(CNNEncoderConfig(out_dim=32), shape=(64, 64, 3), dtype=torch.uint8)
    image = torch.full((2, 64, 64, 3), 255, dtype=torch.uint8)
    assert encoder(image).shape == (2, 32)
    # The convolutions see [0, 1]: a uint8 255 image equals a float 1.0 image with scale 1.
    float_encoder = CNNEncoder(CNNEncoderConfig(out_dim=32), shape=(64, 64, 3), dtype=torch.float32)
    float_encoder.load_state_dict(encoder.state_dict())
    torch.testing.assert_close(encoder(image), float_encoder(torch.ones(2, 64, 64, 3)))


def test_default_encoders_and_their_sizes():
    assert isinstance(default_encoder((64, 64, 3), torch.uint8), CNNEncoder)
    flat = default_encoder((2, 3), torch.float32)
    assert isinstance(flat, FlattenEncoder) and flat.out_dim == 6
    assert flat(torch.arange(12.0).view(2, 2, 3)).tolist() == [[0, 1, 2, 3, 4, 5], [6, 7, 8, 9, 10, 11]]
    assert MLPEncoder(MLPEncoderConfig(hidden_sizes=[16, 8]), shape=(5,)).out_dim == 8
    with pytest.raises(ConfigError, match="kernels"):
        CNNEncoder(CNNEncoderConfig(kernels=[8, 4, 3], strides=[4, 2, 1]),
                   shape=(8, 8, 3))  # too small an image for the stack


def test_every_shipped_encoder_can_be_named_in_a_checkpoint_config():
    names = {f"embodirl.policies.encoders.{cls.__name__}" for cls in (FlattenEncoder, MLPEncoder, CNNEncoder)}
    assert names <= packaged_targets()


def test_the_critic_can_read_privileged_keys_the_actor_never_sees():
    cfg = ActorCriticConfig(hidden_sizes=[16], actor_keys=["rgb", "state"], critic_keys=["state", "privileged.cube"])
    policy = ActorCritic(cfg, observation_space=SPACE, action_space=gym.spaces.Box(-1, 1, (2,)))
    obs = _obs(4)
    action, log_prob, value, _ = policy.act(obs, None)
    assert action.shape == (4, 2) and log_prob.shape == value.shape == (4,)
    changed = obs.clone()
    changed["privileged", "cube"] = changed["privileged", "cube"] + 10.0
    torch.manual_seed(0)
    a1 = policy.mode(obs)[0]
    a2 = policy.mode(changed)[0]
    torch.testing.assert_close(a1, a2)  # the actor does not read the privileged key ...
    assert not torch.allclose(policy.value(obs), policy.value(changed))  # ... the critic does
    image_changed = obs.clone()
    image_changed["rgb"] = 255 - image_changed["rgb"]
    torch.testing.assert_close(policy.value(obs), policy.value(image_changed))  # and not the image
    assert not any("privileged" in name for name, _ in policy.actor.named_parameters())


def test_unknown_keys_are_refused_naming_the_choices():
    box = gym.spaces.Box(-1, 1, (2,))
    with pytest.raises(ConfigError, match=r"actor_keys=\['pixels'\].*privileged.cube, rgb, state"):
        ActorCritic(ActorCriticConfig(actor_keys=["pixels"]), observation_space=SPACE, action_space=box)
    with pytest.raises(ConfigError, match=r"encoders=\['depth'\]"):
        flatten = parse_node({"_target_": "embodirl.policies.encoders.FlattenEncoder"})
        ActorCritic(ActorCriticConfig(encoders={"depth": flatten}), observation_space=SPACE, action_space=box)


def test_an_encoder_is_chosen_per_key_from_the_command_line():
    from embodirl.app.build import build_components
    from tests.conftest import compose_config

    cfg = compose_config(["+policy/encoder@policy.encoders.state=mlp", "policy.encoders.state.hidden_sizes=[32]",
                          "device=cpu", "env.num_envs=4"])
    policy = build_components(cfg).policy
    assert isinstance(policy.encoders["state"], MLPEncoder) and policy.feature_dim(["state"]) == 32


def test_flatten_passes_float_vectors_through_and_policies_skip_it_only_then():
    flatten = FlattenEncoderConfig()
    assert FlattenEncoder(flatten, shape=(4,)).passthrough
    assert not FlattenEncoder(flatten, shape=(2, 3)).passthrough
    assert not FlattenEncoder(flatten, shape=(4,), dtype=torch.uint8).passthrough
    x = torch.randn(5, 4)
    assert torch.equal(FlattenEncoder(flatten, shape=(4,))(x), x)
    space = gym.spaces.Dict({"a": gym.spaces.Box(-1, 1, (4,)), "b": gym.spaces.Box(0, 255, (2, 3), np.uint8)})
    policy = ActorCritic(ActorCriticConfig(), observation_space=space, action_space=gym.spaces.Discrete(2))
    obs = TensorDict({"a": torch.randn(5, 4), "b": torch.randint(0, 255, (5, 2, 3), dtype=torch.uint8)}, [5])
    features = policy.encode(obs, ["a", "b"])
    assert features["a"] is obs["a"]  # passed through
    assert features["b"].dtype == torch.float32 and features["b"].shape == (5, 6)
    torch.testing.assert_close(features["b"], obs["b"].reshape(5, 6).float())

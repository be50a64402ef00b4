"""Schemas of the policies (``policy=actor_only|actor_critic|actor_critic_rnn``), their encoders
(``policy/encoder``) and action distributions (``policy/distribution``).

The keys every policy class takes are declared once in :class:`PolicyConfig`, those the build applies to any policy
(``init_from``, ``freeze``) in :class:`PolicySetupConfig`; a policy holds its encoders and its
distribution as nodes (``_target_`` and their own keys), each checked by that class's schema.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from embodirl.config.schema import Node, Schema, key
from embodirl.errors import ConfigError

__all__ = [
    "Activation",
    "ActorCriticConfig",
    "ActorCriticRNNConfig",
    "ActorOnlyConfig",
    "BetaConfig",
    "CNNEncoderConfig",
    "DeterministicTanhConfig",
    "FlattenEncoderConfig",
    "MLPEncoderConfig",
    "PolicyConfig",
    "PolicyNode",
    "PolicySetupConfig",
    "StateDependentGaussianConfig",
    "TanhGaussianConfig",
]

Activation = Literal["relu", "elu", "tanh", "gelu", "silu", "leaky_relu"]  #: embodirl.policies.networks.ACTIVATIONS


def _check_log_std(log_std_min: float, log_std_max: float) -> None:
    if not log_std_min < log_std_max:
        raise ConfigError("log_std_min", log_std_min, f"a float below log_std_max={log_std_max}",
                          "pass log_std_min=-5.0 (the default) or a log_std_max above it")


# --- policies ------------------------------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class PolicyConfig(Schema):
    """What every policy takes: the actor, its action distribution, the encoders, and how training starts."""

    hidden_sizes: list[int] = key(factory=lambda: [64, 64], ge=1, doc="actor hidden layer sizes")
    activation: Activation = key("relu", doc="activation of the hidden layers")
    init_log_std: float = key(0.0, doc="initial Gaussian log_std (Box actions)")
    log_std_min: float = key(-5.0, doc="lower log_std clamp")
    log_std_max: float = key(2.0, doc="upper log_std clamp")
    distribution: Node | None = key(None, doc="null = by action space (Categorical | Gaussian above); or "
                                    "+policy/distribution@policy.distribution=beta | state_dependent_gaussian")
    normalize_obs: bool = key(False, doc="running normalisation of float vector observations (saved with the "
                              "policy)")
    encoders: dict[str, Node] = key(factory=dict, doc="observation key -> encoder node; unlisted keys: images get "
                                    "a CNN, vectors are used as they are")
    actor_keys: list[str] | None = key(None, doc="observation keys the actor sees; null = all", example=["state"])
    action_chunk: int = key(1, ge=1, doc="H: actions the policy emits at once (an action chunk, one decision); "
                            "1 = one action per step")
    chunk_execute: int | None = key(None, ge=1, doc="k: actions of a chunk executed before the policy acts again "
                                    "(receding horizon); null = action_chunk (open loop)", example=2)

    def check(self) -> None:
        _check_log_std(self.log_std_min, self.log_std_max)
        if self.chunk_execute is not None and self.chunk_execute > self.action_chunk:
            raise ConfigError("chunk_execute", self.chunk_execute, f"an int in [1, action_chunk={self.action_chunk}] "
                              "(a chunk holds action_chunk actions)",
                              f"pass chunk_execute={self.action_chunk} (open loop), or action_chunk="
                              f"{self.chunk_execute}")


@dataclass(frozen=True, kw_only=True)
class PolicySetupConfig(Schema):
    """The keys of every policy node that the build applies to the policy it made: the weights it starts from and
    the parameters kept fixed; the policy class never sees them."""

    init_from: str | None = key(None, doc="start from these weights: an embodirl checkpoint or a state_dict file "
                                "(loaded weights_only; applied by the build)",
                                example="<run_dir>/checkpoints/last.pt")
    freeze: list[str] = key(factory=list, doc="fnmatch patterns of parameters to keep fixed, e.g. ['encoders.*', "
                            "'actor.0.*'] (applied by the build)", example=["encoders.*"])


class PolicyNode(Node):
    """A ``policy`` node: the policy class's keys, and the setup keys (:class:`PolicySetupConfig`) the build
    applies."""

    setup_schema = PolicySetupConfig


@dataclass(frozen=True, kw_only=True)
class ActorOnlyConfig(PolicyConfig):
    """Actor MLP only (value is always 0): for critic-free algorithms such as GRPO."""

    target = "embodirl.policies.actor_only.ActorOnly"


@dataclass(frozen=True, kw_only=True)
class ActorCriticConfig(PolicyConfig):
    """Actor and critic MLPs over shared encoders; the critic may read privileged keys."""

    target = "embodirl.policies.actor_critic.ActorCritic"
    critic_hidden_sizes: list[int] | None = key(None, ge=1, doc="critic hidden layers; null = same as hidden_sizes",
                                                example=[64, 64])
    critic_keys: list[str] | None = key(None, doc="observation keys the critic sees (may add privileged keys); "
                                        "null = actor_keys", example=["state"])


@dataclass(frozen=True, kw_only=True)
class ActorCriticRNNConfig(ActorCriticConfig):
    """Recurrent actor-critic: a GRU or LSTM core between the encoders and each head."""

    target = "embodirl.policies.recurrent.ActorCriticRNN"
    core: Literal["gru", "lstm"] = key("gru", doc="the recurrent cell of each core")
    core_size: int = key(64, ge=1, doc="hidden size of each core")
    hidden_sizes: list[int] = key(factory=lambda: [64], ge=1, doc="actor head hidden layers (after the core)")

    def check(self) -> None:
        super().check()
        if self.action_chunk != 1:
            raise ConfigError("action_chunk", self.action_chunk, "1 with policy=actor_critic_rnn (a recurrent policy "
                              "acts every step; action chunks are for feedforward policies)",
                              "pass policy.action_chunk=1, or policy=actor_critic")


# --- encoders ------------------------------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class FlattenEncoderConfig(Schema):
    """The observation itself, flattened, as the features (the default for vector keys)."""

    target = "embodirl.policies.encoders.FlattenEncoder"


@dataclass(frozen=True, kw_only=True)
class MLPEncoderConfig(Schema):
    """An MLP over one flattened vector key (e.g. a trunk of its own for a privileged critic key)."""

    target = "embodirl.policies.encoders.MLPEncoder"
    hidden_sizes: list[int] = key(factory=lambda: [64], ge=1, doc="layer sizes; the last is the feature size")
    activation: Activation = key("relu", doc="activation after each layer")

    def check(self) -> None:
        if not self.hidden_sizes:
            raise ConfigError("hidden_sizes", [], "at least one layer size, e.g. [64]", "pass hidden_sizes=[64]")


@dataclass(frozen=True, kw_only=True)
class CNNEncoderConfig(Schema):
    """A convolutional encoder for one image key (uint8 [H, W, C], scaled to [0, 1] inside)."""

    target = "embodirl.policies.encoders.CNNEncoder"
    channels: list[int] = key(factory=lambda: [32, 64, 64], ge=1, doc="output channels of each convolution "
                              "(NatureCNN)")
    kernels: list[int] = key(factory=lambda: [8, 4, 3], ge=1, doc="kernel size of each convolution")
    strides: list[int] = key(factory=lambda: [4, 2, 1], ge=1, doc="stride of each convolution")
    out_dim: int = key(256, ge=1, doc="feature size after the linear layer")
    random_shift: int = key(0, ge=0, doc="DrQ augmentation in the update only: pad by this many pixels (border "
                            "repeated) and crop back at a random offset per sample; 0 = off (DrQ uses 4)")
    pixel_mean: list[float] | None = key(None, doc="per-channel mean subtracted after uint8 / 255 (one value, or one "
                                         "per channel of a frame); null = 0", example=[0.5, 0.5, 0.5])
    pixel_std: list[float] | None = key(None, gt=0, doc="per-channel std divided by after the mean (one value, or "
                                        "one per channel of a frame); null = 1", example=[0.25, 0.25, 0.25])

    def check(self) -> None:
        if not self.channels:
            raise ConfigError("channels", [], "at least one convolution", "pass channels=[32,64,64] (NatureCNN's)")
        layers = len(self.channels)
        for name in ("kernels", "strides"):
            values = list(getattr(self, name))
            if len(values) != layers:
                raise ConfigError(name, values, f"one entry per convolution ({layers}: channels has {layers})",
                                  f"pass {name} with {layers} entries, or as many channels as it has")


# --- action distributions ------------------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class BetaConfig(Schema):
    """Beta actions scaled to the Box's bounds (Chou et al. 2017: no clipped actions); 1-D Box, finite bounds."""

    target = "embodirl.policies.distributions.Beta"


@dataclass(frozen=True, kw_only=True)
class TanhGaussianConfig(Schema):
    """A state-dependent Gaussian squashed by tanh into the Box's bounds (SAC's actor, Haarnoja et al. 2018)."""

    target = "embodirl.policies.distributions.TanhGaussian"
    init_log_std: float = key(0.0, doc="initial log_std before squashing (the actor's output is added to it); the "
                              "YAML option takes policy.init_log_std")
    log_std_min: float = key(-5.0, doc="lower log_std clamp; the YAML option takes policy.log_std_min")
    log_std_max: float = key(2.0, doc="upper log_std clamp; the YAML option takes policy.log_std_max")

    def check(self) -> None:
        _check_log_std(self.log_std_min, self.log_std_max)


@dataclass(frozen=True, kw_only=True)
class DeterministicTanhConfig(Schema):
    """A deterministic actor squashed by tanh into the Box's bounds, explored with Gaussian noise (TD3's actor)."""

    target = "embodirl.policies.distributions.DeterministicTanh"
    noise_std: float = key(0.1, ge=0, doc="exploration noise std (a fraction of the half-range of the actions) until "
                           "the algorithm sets one per env (algo=fasttd3 draws them from [std_min, std_max])")


@dataclass(frozen=True, kw_only=True)
class StateDependentGaussianConfig(Schema):
    """A diagonal Gaussian whose log_std is an output of the actor (per state) instead of one learned vector."""

    target = "embodirl.policies.distributions.StateDependentGaussian"
    init_log_std: float = key(0.0, doc="initial log_std (the actor's output is added to it); the YAML option "
                              "takes policy.init_log_std")
    log_std_min: float = key(-5.0, doc="lower log_std clamp; the YAML option takes policy.log_std_min")
    log_std_max: float = key(2.0, doc="upper log_std clamp; the YAML option takes policy.log_std_max")

    def check(self) -> None:
        _check_log_std(self.log_std_min, self.log_std_max)

"""The feedforward actor-only policy, the base of the shipped policies: encoders per observation key, an actor MLP
and an action distribution fitted to the action space; no critic (its value is 0, for critic-free algorithms such
as GRPO).

A policy encodes each observation key it reads with one encoder (:mod:`embodirl.policies.encoders`), concatenates
the features of the keys the actor sees (``actor_keys``) and, for an actor-critic, of the keys the critic sees
(``critic_keys``, which may hold privileged keys the actor never sees), and maps them to action-distribution
parameters and a value.
"""

from __future__ import annotations

import typing
from collections.abc import Mapping, Sequence

import gymnasium as gym
import torch
from tensordict import TensorDict
from torch import Tensor, nn

from embodirl.config.instantiate import instantiate
from embodirl.config.policies import PolicyConfig
from embodirl.config.schema import Node
from embodirl.envs.observations import ObsKey, key_name, observation_spec
from embodirl.errors import ConfigError
from embodirl.policies.distributions import ActionDistribution, Chunked, make_distribution
from embodirl.policies.encoders import Encoder, default_encoder, is_image
from embodirl.policies.networks import build_mlp
from embodirl.policies.normalizer import RunningNormalizer

__all__ = ["ActorOnly"]


def _module_key(name: str) -> str:
    return name.replace(".", "__")  # nn.ModuleDict keys cannot hold dots


class ActorOnly(nn.Module):
    """Encoders, an actor MLP and an action distribution fitted to the action space; no critic (value 0).

    The keys (:class:`~embodirl.config.policies.PolicyConfig`): ``hidden_sizes`` and ``activation`` shape the
    actor; ``normalize_obs`` normalises float vector observations with running statistics (updated by the
    algorithm after each update, checkpointed with the policy; images are scaled by their encoder); ``encoders``
    maps observation keys to encoder nodes (keys not listed get
    :func:`~embodirl.policies.encoders.default_encoder`); ``actor_keys`` (None: every key) and, for a policy with a
    critic, ``critic_keys`` (may include privileged keys; None: ``actor_keys``) say what each part reads;
    ``distribution`` is an action-distribution node (e.g. :class:`~embodirl.policies.distributions.Beta`), None
    choosing by the action space (``Categorical`` for ``Discrete``, ``DiagGaussian`` with
    ``init_log_std``/``log_std_min``/``log_std_max`` for ``Box``). ``action_chunk`` (H > 1) makes one decision
    emit H actions (:class:`~embodirl.policies.distributions.Chunked`, the actor's output H times wider), of which
    the collector executes ``chunk_execute`` (k; None: H). ``init_from`` and ``freeze`` are applied by the
    build once the policy exists (:mod:`embodirl.policies.pretrained`).

    Args:
        cfg: The policy's keys.
        observation_space: Single-env observation space (Box or Dict of Boxes).
        action_space: Single-env action space (Discrete or 1-D Box).
    """

    has_critic = False
    is_recurrent = False

    def __init__(self, cfg: PolicyConfig, *, observation_space: gym.Space, action_space: gym.Space) -> None:
        super().__init__()
        spec = self.obs_spec = observation_spec(observation_space)
        self._keys = {key_name(k): k for k in spec}
        self.actor_keys = self._select("actor_keys", cfg.actor_keys, list(self._keys))
        critic_keys = getattr(cfg, "critic_keys", None)  # a key of policies with a critic (ActorCriticConfig)
        self.critic_keys = self._select("critic_keys", critic_keys, self.actor_keys) if self.has_critic else []
        used = list(dict.fromkeys([*self.actor_keys, *self.critic_keys]))
        unknown = sorted(set(cfg.encoders) - set(used))
        if unknown:
            raise ConfigError("encoders", unknown, f"observation keys the policy reads (one of: {', '.join(used)})",
                              "remove them or add them to actor_keys/critic_keys")
        self.encoders = nn.ModuleDict({_module_key(name): self._encoder(name, spec[self._keys[name]],
                                                                        cfg.encoders.get(name)) for name in used})
        self.normalizers = nn.ModuleDict({
            _module_key(name): RunningNormalizer(spec[self._keys[name]][0]) for name in used
            if cfg.normalize_obs and spec[self._keys[name]][1].is_floating_point
            and not is_image(*spec[self._keys[name]])})
        # Observation key name -> (TensorDict key, normaliser or None, encoder): looked up once, not per step.
        normalizers = {key: typing.cast(RunningNormalizer, module) for key, module in self.normalizers.items()}
        self._routes: dict[str, tuple[ObsKey, RunningNormalizer | None, Encoder]] = {
            name: (self._keys[name], normalizers.get(_module_key(name)),
                   typing.cast(Encoder, self.encoders[_module_key(name)])) for name in used}
        self.dist = self._distribution(action_space, cfg)
        self.actor = build_mlp(self.feature_dim(self.actor_keys), self.dist.num_params, list(cfg.hidden_sizes),
                               cfg.activation, 0.01)
        self._read = used if self.has_critic else self.actor_keys  # keys act() encodes

    @staticmethod
    def _distribution(action_space: gym.Space, cfg: PolicyConfig) -> ActionDistribution:
        if cfg.distribution is None:
            dist = make_distribution(action_space, cfg.init_log_std, cfg.log_std_min, cfg.log_std_max)
        else:
            dist = instantiate(cfg.distribution, "", action_space=action_space)
        if not isinstance(dist, ActionDistribution):
            raise ConfigError("distribution", type(dist).__name__, "an embodirl.policies.distributions."
                              "ActionDistribution", "name one with _target_, e.g. "
                              "+policy/distribution@policy.distribution=beta")
        if cfg.action_chunk == 1:
            return dist
        return Chunked(dist, cfg.action_chunk, cfg.chunk_execute or cfg.action_chunk)

    def _select(self, what: str, keys: Sequence[str] | None, default: list[str]) -> list[str]:
        if keys is None:
            return list(default)
        names = list(keys)
        unknown = [k for k in names if k not in self._keys]
        if not names or unknown:
            raise ConfigError(what, names, f"a non-empty list of observation keys (one of: {', '.join(self._keys)})",
                              f"pass {what}=[{', '.join(self._keys)}] or null")
        return names

    @staticmethod
    def _encoder(name: str, leaf: tuple[tuple[int, ...], torch.dtype], node: Node | None) -> Encoder:
        shape, dtype = leaf
        if node is None:
            return default_encoder(shape, dtype)
        try:
            encoder = instantiate(node, "", shape=shape, dtype=dtype)
        except ConfigError as exc:  # the encoder's own key (kernels) lives under encoders.<name>
            if exc.key != "shape":
                raise exc.with_prefix(f"encoders.{name}.") from None
            kind = node.target.rpartition(".")[2]
            raise ConfigError(f"encoders.{name}", kind, f"an encoder for the {name!r} observation, shape {list(shape)} "
                              f"({kind} needs {exc.expected})", f"drop that encoder (a vector is used as it is), "
                              f"or pick one for vectors: +policy/encoder@policy.encoders.{name}=mlp") from None
        if not isinstance(encoder, Encoder):
            raise ConfigError(f"encoders.{name}", type(encoder).__name__, "an embodirl.policies.encoders.Encoder",
                              "name an Encoder class with _target_")
        return encoder

    def actor_prefixes(self) -> tuple[str, ...]:
        """``state_dict`` name prefixes of what the actions are computed from: the actor network, the distribution's
        parameters, and the encoders and observation statistics of the actor's keys. The rest (a critic, encoders of
        keys only the critic reads) may start fresh when fine-tuning (:mod:`embodirl.policies.pretrained`)."""
        keys = [_module_key(name) for name in self.actor_keys]
        return ("actor.", "dist.", *(f"{part}.{key}." for part in ("encoders", "normalizers") for key in keys))

    def feature_dim(self, names: Sequence[str]) -> int:
        """Size of the concatenated features of ``names``."""
        return sum(typing.cast(Encoder, self.encoders[_module_key(n)]).out_dim for n in names)

    # --- encoding ------------------------------------------------------------------------------------
    def encode(self, obs: TensorDict, names: Sequence[str]) -> dict[str, Tensor]:
        """Features of each observation key in ``names``, each ``[B, out_dim]`` (normalised first if enabled)."""
        out = {}
        for name in names:
            key, normalizer, encoder = self._routes[name]
            x = obs.get(key)
            if normalizer is not None:
                x = normalizer(x)
            out[name] = x if encoder.passthrough else encoder(x)
        return out

    @staticmethod
    def join(features: Mapping[str, Tensor], names: Sequence[str]) -> Tensor:
        """The features of ``names`` concatenated, ``[B, sum of out_dim]``."""
        return features[names[0]] if len(names) == 1 else torch.cat([features[n] for n in names], dim=-1)

    def _value(self, features: Mapping[str, Tensor], batch: torch.Size) -> Tensor:
        """Value from encoded features; zeros without a critic."""
        return torch.zeros(batch, device=self.device)

    @property
    def device(self) -> torch.device:
        """The device of the policy's parameters."""
        return typing.cast(nn.Linear, self.actor[0]).weight.device

    # --- the interface ---------------------------------------------------------------------------------
    def initial_state(self, batch_size: int) -> TensorDict:
        return TensorDict({}, batch_size=[batch_size], device=self.device)

    def _state(self, state: TensorDict | None, obs: TensorDict) -> TensorDict:
        """``state``, or the episode's initial state where the caller passed none."""
        return state if state is not None else self.initial_state(obs.batch_size[0])

    @torch.no_grad()
    def act(self, obs: TensorDict, state: TensorDict | None = None,
            deterministic: bool = False) -> tuple[Tensor, Tensor, Tensor, TensorDict]:
        features = self.encode(obs, self._read)
        params = self.actor(self.join(features, self.actor_keys))
        if deterministic:
            action = self.dist.mode(params)
            log_prob = self.dist.log_prob(params, action)
        else:
            action, log_prob = self.dist.sample(params)
        return action, log_prob, self._value(features, obs.batch_size), self._state(state, obs)

    @torch.no_grad()
    def mode(self, obs: TensorDict, state: TensorDict | None = None) -> tuple[Tensor, TensorDict]:
        return self.dist.mode(self.action_params(obs)), self._state(state, obs)

    def action_params(self, obs: TensorDict) -> Tensor:
        """With gradients: the action distribution's parameters ``[B, num_params]`` (the Gaussian's mean) for
        ``obs`` (what distillation regresses on the teacher's actions)."""
        return self.actor(self.join(self.encode(obs, self.actor_keys), self.actor_keys))

    @torch.no_grad()
    def value(self, obs: TensorDict, state: TensorDict | None = None) -> Tensor:
        return self._value(self.encode(obs, self.critic_keys), obs.batch_size)

    def evaluate(self, obs: TensorDict, action: Tensor, state: TensorDict | None = None,
                 reset: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
        features = self.encode(obs, self._read)
        log_prob, entropy = self.dist.log_prob_entropy(self.actor(self.join(features, self.actor_keys)), action)
        return log_prob, entropy, self._value(features, obs.batch_size)

    # --- EmbodiChain's TensorDict interface, on top of the one above (feedforward policies) -------------
    def get_action(self, td: TensorDict, deterministic: bool = False) -> TensorDict:
        """Write ``action``, ``sample_log_prob`` and ``value`` for ``td["obs"]``; return ``td``."""
        action, log_prob, value, _ = self.act(td["obs"], None, deterministic)
        td.update({"action": action, "sample_log_prob": log_prob, "value": value})
        return td

    def forward(self, td: TensorDict, deterministic: bool = False) -> TensorDict:
        return self.get_action(td, deterministic)

    def get_value(self, td: TensorDict) -> TensorDict:
        """Write ``value`` for ``td["obs"]``; return ``td``."""
        td.set("value", self.value(td["obs"]))
        return td

    def evaluate_actions(self, td: TensorDict) -> TensorDict:
        """A new TensorDict with ``sample_log_prob``, ``entropy`` and ``value`` (with gradients)."""
        log_prob, entropy, value = self.evaluate(td["obs"], td["action"])
        return TensorDict({"sample_log_prob": log_prob, "entropy": entropy, "value": value}, batch_size=td.batch_size)

    @torch.no_grad()
    def update_normalizer(self, obs: TensorDict) -> None:
        for name in self._read:
            key, normalizer, _ = self._routes[name]
            if normalizer is not None:
                normalizer.update(obs.get(key))

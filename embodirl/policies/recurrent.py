"""Recurrent actor-critic: a GRU or LSTM core between the encoders and each head.

The actor and the critic each have a core (like rsl_rl's ``memory_a``/``memory_c``), so a privileged
critic key never leaks into the actor's memory. The state is a TensorDict ``{"actor": {...}, "critic":
{...}}`` with ``h`` (and ``c`` for an LSTM), each ``[B, core_size]``; zeros start an episode. The
collector carries it from step to step, stores it in the rollout and restarts it where an episode
ends; PPO trains on sequences of ``algo.seq_len`` steps that start from the stored state (truncated
backpropagation through time), restarting it inside a sequence where an episode ended.
"""

from __future__ import annotations

from collections.abc import Mapping

import gymnasium as gym
import torch
from tensordict import TensorDict
from torch import Tensor, nn

from embodirl.config.policies import ActorCriticRNNConfig
from embodirl.policies.actor_critic import ActorCritic, critic_mlp
from embodirl.policies.networks import build_mlp

__all__ = ["ActorCriticRNN"]

_CELLS = {"gru": nn.GRUCell, "lstm": nn.LSTMCell}


class ActorCriticRNN(ActorCritic):
    """An actor-critic whose actor and critic read their features through a GRU or LSTM core.

    ``core`` (``gru`` or ``lstm``) and ``core_size`` set the cores; ``hidden_sizes`` and ``critic_hidden_sizes``
    are the heads' hidden sizes (after the core).

    Args:
        cfg: The policy's keys (:class:`~embodirl.config.policies.ActorCriticRNNConfig`; the shared ones are
            described in :class:`~embodirl.policies.actor_only.ActorOnly`).
        observation_space: Single-env observation space (Box or Dict of Boxes).
        action_space: Single-env action space (Discrete or 1-D Box).
    """

    is_recurrent = True

    def __init__(self, cfg: ActorCriticRNNConfig, *, observation_space: gym.Space, action_space: gym.Space) -> None:
        super().__init__(cfg, observation_space=observation_space, action_space=action_space)
        self.core, self.core_size = cfg.core, cfg.core_size
        self.actor_core = _CELLS[cfg.core](self.feature_dim(self.actor_keys), cfg.core_size)
        self.critic_core = _CELLS[cfg.core](self.feature_dim(self.critic_keys), cfg.core_size)
        # The heads read the core's output instead of the features.
        self.actor = build_mlp(cfg.core_size, self.dist.num_params, list(cfg.hidden_sizes), cfg.activation, 0.01)
        self.critic = critic_mlp(cfg, cfg.core_size)
        self._fields = ("h", "c") if cfg.core == "lstm" else ("h",)

    def actor_prefixes(self) -> tuple[str, ...]:
        """The feedforward actor's prefixes and the actor's core (see :meth:`ActorOnly.actor_prefixes`)."""
        return (*super().actor_prefixes(), "actor_core.")

    # --- the state -----------------------------------------------------------------------------------
    def initial_state(self, batch_size: int) -> TensorDict:
        device = self.device
        zeros = {field: torch.zeros(batch_size, self.core_size, device=device) for field in self._fields}
        return TensorDict({"actor": dict(zeros), "critic": {k: v.clone() for k, v in zeros.items()}},
                          batch_size=[batch_size], device=device)

    def _step(self, cell: nn.Module, x: Tensor, state: Mapping[str, Tensor]) -> tuple[Tensor, dict[str, Tensor]]:
        if self.core == "lstm":
            h, c = cell(x, (state["h"], state["c"]))
            return h, {"h": h, "c": c}
        h = cell(x, state["h"])
        return h, {"h": h}

    # --- one step ------------------------------------------------------------------------------------
    @torch.no_grad()
    def act(self, obs: TensorDict, state: TensorDict | None = None,
            deterministic: bool = False) -> tuple[Tensor, Tensor, Tensor, TensorDict]:
        state = self._state(state, obs)
        features = self.encode(obs, self._read)
        h_actor, actor_state = self._step(self.actor_core, self.join(features, self.actor_keys), state["actor"])
        h_critic, critic_state = self._step(self.critic_core, self.join(features, self.critic_keys), state["critic"])
        params = self.actor(h_actor)
        if deterministic:
            action = self.dist.mode(params)
            log_prob = self.dist.log_prob(params, action)
        else:
            action, log_prob = self.dist.sample(params)
        next_state = TensorDict({"actor": actor_state, "critic": critic_state}, batch_size=state.batch_size)
        return action, log_prob, self.critic(h_critic).squeeze(-1), next_state

    @torch.no_grad()
    def mode(self, obs: TensorDict, state: TensorDict | None = None) -> tuple[Tensor, TensorDict]:
        state = self._state(state, obs)
        features = self.join(self.encode(obs, self.actor_keys), self.actor_keys)
        h_actor, actor_state = self._step(self.actor_core, features, state["actor"])
        next_state = TensorDict({"actor": actor_state, "critic": state["critic"]}, batch_size=state.batch_size)
        return self.dist.mode(self.actor(h_actor)), next_state

    @torch.no_grad()
    def value(self, obs: TensorDict, state: TensorDict | None = None) -> Tensor:
        features = self.join(self.encode(obs, self.critic_keys), self.critic_keys)
        h_critic, _ = self._step(self.critic_core, features, self._state(state, obs)["critic"])
        return self.critic(h_critic).squeeze(-1)

    # --- sequences (training) -----------------------------------------------------------------------
    def evaluate(self, obs: TensorDict, action: Tensor, state: TensorDict | None = None,
                 reset: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
        """``(log_prob, entropy, value)``, each ``[B, L]``, of the action sequences ``action`` ``[B, L, ...]``.

        Args:
            obs: Observation sequences ``[B, L]``.
            action: Actions ``[B, L, *action_shape]``.
            state: The state at each sequence's first step ``[B]`` (as stored by the collector); None: zeros.
            reset: ``[B, L]`` bool, the state restarts before step ``l`` (an episode ended at ``l - 1``); None: never.
        """
        batch, length = obs.batch_size
        state = state if state is not None else self.initial_state(batch)
        features = self.encode(obs.reshape(batch * length), self._read)
        actor_in = self.join(features, self.actor_keys).view(batch, length, -1)
        critic_in = self.join(features, self.critic_keys).view(batch, length, -1)
        actor_out, critic_out = [], []
        actor_state, critic_state = dict(state["actor"].items()), dict(state["critic"].items())
        for step in range(length):
            if reset is not None:
                keep = (~reset[:, step]).to(actor_in.dtype).unsqueeze(-1)
                actor_state = {k: v * keep for k, v in actor_state.items()}
                critic_state = {k: v * keep for k, v in critic_state.items()}
            h_actor, actor_state = self._step(self.actor_core, actor_in[:, step], actor_state)
            h_critic, critic_state = self._step(self.critic_core, critic_in[:, step], critic_state)
            actor_out.append(h_actor)
            critic_out.append(h_critic)
        params = self.actor(torch.stack(actor_out, dim=1).reshape(batch * length, -1))
        flat_action = action.reshape(batch * length, *action.shape[2:])
        log_prob, entropy = self.dist.log_prob_entropy(params, flat_action)
        value = self.critic(torch.stack(critic_out, dim=1)).squeeze(-1)
        return log_prob.view(batch, length), entropy.view(batch, length), value

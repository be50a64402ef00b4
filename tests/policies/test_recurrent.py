"""The recurrent actor-critic: sequences reproduce step-by-step acting; resets restart the state."""

import gymnasium as gym
import numpy as np
import pytest
import torch
from tensordict import TensorDict

from embodirl.config.policies import ActorCriticRNNConfig
from embodirl.config.schema import parse
from embodirl.errors import ConfigError
from embodirl.policies.recurrent import ActorCriticRNN

SPACE = gym.spaces.Box(-1, 1, (3,), np.float32)


@pytest.mark.parametrize("core", ["gru", "lstm"])
def test_evaluating_a_sequence_equals_acting_step_by_step(core):
    torch.manual_seed(0)
    policy = ActorCriticRNN(ActorCriticRNNConfig(core=core, core_size=8, hidden_sizes=[8]), observation_space=SPACE,
                            action_space=gym.spaces.Discrete(2))
    batch, length = 3, 5
    obs = torch.randn(batch, length, 3)
    reset = torch.zeros(batch, length, dtype=torch.bool)
    reset[1, 2] = True  # env 1's episode ended after step 1: its state restarts before step 2
    state0 = policy.initial_state(batch)
    state0.apply_(lambda x: x.normal_())  # a mid-episode state, as stored by the collector
    actions = torch.randint(0, 2, (batch, length))
    seq = TensorDict({"state": obs}, batch_size=[batch, length])
    log_prob, entropy, value = policy.evaluate(seq, actions, state0, reset)
    assert log_prob.shape == entropy.shape == value.shape == (batch, length)

    state = state0.clone()
    for t in range(length):
        keep = (~reset[:, t]).float().unsqueeze(-1)
        state = state.apply(lambda x, keep=keep: x * keep)
        step_obs = TensorDict({"state": obs[:, t]}, batch_size=[batch])
        step_value = policy.value(step_obs, state)
        params_state = state
        _, _, act_value, state = policy.act(step_obs, params_state)
        torch.testing.assert_close(act_value, value[:, t].detach())
        torch.testing.assert_close(step_value, value[:, t].detach())
        from embodirl.policies.base import Policy  # noqa: F401 - the protocol is structural

    # Gradients flow through the whole sequence (truncated BPTT from the stored state).
    log_prob.sum().backward()
    assert policy.actor_core.weight_hh.grad is not None and policy.actor_core.weight_hh.grad.abs().sum() > 0


def test_the_state_has_one_core_per_head_and_restarts_at_zero():
    policy = ActorCriticRNN(ActorCriticRNNConfig(core="lstm", core_size=4), observation_space=SPACE,
                            action_space=gym.spaces.Discrete(2))
    state = policy.initial_state(2)
    assert set(state.keys(include_nested=True, leaves_only=True)) == {
        ("actor", "h"), ("actor", "c"), ("critic", "h"), ("critic", "c")}
    assert not state.any()
    with pytest.raises(ConfigError, match="core='rnn'"):
        parse(ActorCriticRNNConfig, {"core": "rnn"})


@pytest.mark.parametrize("core", ["gru", "lstm"])
def test_without_a_state_every_call_starts_an_episode(core):
    """The Policy contract lets callers (EmbodiChain's get_action, a sequence of one episode) pass no state:
    the recurrent policy then starts from its initial state and never restarts inside a sequence."""
    torch.manual_seed(0)
    policy = ActorCriticRNN(ActorCriticRNNConfig(core=core, core_size=4, hidden_sizes=[8]), observation_space=SPACE,
                            action_space=gym.spaces.Discrete(2))
    obs = TensorDict({"state": torch.randn(3, 5, 3)}, batch_size=[3, 5])
    actions = torch.randint(0, 2, (3, 5))
    zeros, never = policy.initial_state(3), torch.zeros(3, 5, dtype=torch.bool)
    for got, expected in zip(policy.evaluate(obs, actions), policy.evaluate(obs, actions, zeros, never), strict=True):
        torch.testing.assert_close(got, expected)
    first = obs[:, 0]
    torch.testing.assert_close(policy.value(first), policy.value(first, zeros))
    action, _ = policy.mode(first)
    torch.testing.assert_close(action, policy.mode(first, zeros)[0])
    _, _, value, state = policy.act(first, deterministic=True)
    torch.testing.assert_close(value, policy.value(first, zeros))
    assert state.batch_size == torch.Size([3]) and state["actor", "h"].shape == (3, 4)

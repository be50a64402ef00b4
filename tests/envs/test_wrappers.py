"""The observation and action wrappers: what the env executes, the noise's statistics, repeated steps, snapshots,
and a compiled step equal to the eager one."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from embodirl.config.envs import CartPoleConfig, PushCubeConfig, WrapperConfig
from embodirl.envs.base import BatchedEnv, StepResult
from embodirl.envs.cartpole import CartPole
from embodirl.envs.push_cube.env import PushCube
from embodirl.envs.wrappers import ActionDelay, ActionNoise, ActionRepeat, ObservationNoise
from embodirl.envs.wrapping import wrap_env
from embodirl.errors import ConfigError


class Recorder(BatchedEnv):
    """Envs whose episodes last ``lengths[i]`` steps; they record every action they execute. Observation: the steps
    into the episode (2 columns); reward: 1 per step, split into the terms ``one`` (0.25) and ``rest`` (0.75)."""

    reward_terms = ("one", "rest")

    def __init__(self, lengths: list[int], act_dim: int = 1) -> None:
        self.num_envs, self.device = len(lengths), torch.device("cpu")
        self.lengths = torch.tensor(lengths)
        self.max_episode_steps = max(lengths)
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)
        self.action_space = gym.spaces.Box(-10.0, 10.0, (act_dim,), np.float32)
        self.steps = torch.zeros(self.num_envs, dtype=torch.int64)
        self.executed: list[torch.Tensor] = []

    def _obs(self) -> torch.Tensor:
        return self.steps.float().unsqueeze(1).repeat(1, 2)

    def reset(self, seed=None, group_size=1):
        self.steps.zero_()
        return self._obs()

    def step(self, action):
        self.executed.append(action.clone())
        self.steps += 1
        final = self._obs()
        done = self.steps >= self.lengths
        self.steps.masked_fill_(done, 0)
        quarter = torch.full((self.num_envs,), 0.25)
        info = {"reward/one": quarter, "reward/rest": 1 - quarter, "last": final[:, 0]}
        return StepResult(self._obs(), torch.ones(self.num_envs), done, torch.zeros_like(done), final, info)


def test_the_delayed_env_executes_the_action_of_k_steps_ago_and_each_episode_starts_with_its_first_action():
    k = 2
    env = ActionDelay(Recorder([3, 100]), k)  # env 0's episodes end every 3 steps, env 1's never here
    env.reset()
    actions = [torch.tensor([[10.0 * t], [10.0 * t + 1]]) for t in range(9)]
    for action in actions:
        env.step(action)
    executed = torch.stack(env.env.executed)[:, :, 0]
    # env 1: a_{t-2}, its first action before that
    assert executed[:, 1].tolist() == [1, 1, 1, 11, 21, 31, 41, 51, 61]
    # env 0: episodes start at t = 0, 3, 6; a_{t-2} within the episode, its first action before
    assert executed[:, 0].tolist() == [0, 0, 0, 30, 30, 30, 60, 60, 60]
    env.reset()  # an explicit reset starts every env's history afresh
    env.step(torch.tensor([[7.0], [8.0]]))
    assert env.env.executed[-1][:, 0].tolist() == [7.0, 8.0]


@pytest.mark.parametrize("keys", [{"action_delay": 2}, {"obs_noise": 0.05},
                                  {"action_repeat": 2}, {"obs_history": 2}])
def test_every_wrapper_restarts_the_masked_envs_as_the_env_inside_does(keys):
    # A restart is an episode start: the env inside goes back to its reset state, and a wrapper's own state per
    # episode (the action history of a delay) starts over, so the restarted envs' next steps are the reset's.
    def build():
        env = wrap_env(CartPole(CartPoleConfig(num_envs=4, max_episode_steps=200), device="cpu", seed=0),
                       WrapperConfig(**keys), seed=0)
        return env, env.reset(seed=1, group_size=2)

    env, _ = build()
    gen = torch.Generator().manual_seed(0)
    for _ in range(5):
        env.step(torch.randint(0, 2, (4,), generator=gen))
    mask = torch.tensor([True, False, True, False])
    restarted = env.restart(mask)
    fresh, again = build()
    assert torch.equal(env.unwrapped._state[mask], fresh.unwrapped._state[mask])
    if "obs_noise" not in keys:  # with noise: a new draw, of the same state
        assert torch.equal(restarted[mask], again[mask])
    action = torch.tensor([1, 0, 1, 0])
    env.step(action), fresh.step(action)
    assert torch.equal(env.unwrapped._state[mask], fresh.unwrapped._state[mask])


def test_the_delay_keeps_discrete_actions_as_integers():
    env = ActionDelay(CartPole(CartPoleConfig(num_envs=3), device="cpu", seed=0), 1)
    env.reset(seed=0)
    out = env.step(torch.tensor([0, 1, 1]))
    assert out.obs.shape == (3, 4) and env.history.dtype == torch.int64 and env.history[0].tolist() == [0, 1, 1]


def test_observation_noise_has_the_configured_std_per_dimension_and_keeps_final_obs_where_no_episode_ended():
    std = [0.1, 0.5]
    env = ObservationNoise(Recorder([1000] * 4096), {"state": std}, seed=0)
    first = env.reset()
    samples = [first] + [env.step(torch.zeros(4096, 1)).obs - (t + 1) for t in range(4)]
    noise = torch.cat(samples)  # the clean observation is the step count
    assert noise.mean(0).abs().max() < 0.01
    torch.testing.assert_close(noise.std(0), torch.tensor(std), rtol=0.02, atol=0)
    out = env.step(torch.zeros(4096, 1))
    assert torch.equal(out.final_obs, out.obs)  # no episode ended: the same noisy observation
    ends = ObservationNoise(Recorder([1, 1]), {"state": 0.1}, seed=0)
    ends.reset()
    out = ends.step(torch.zeros(2, 1))
    assert not torch.equal(out.final_obs, out.obs + 1)  # the last observation gets noise of its own


def test_noise_is_reproducible_per_seed_and_independent_of_the_number_of_envs():
    small, large = (ObservationNoise(Recorder([50] * n), {"state": 0.1}, seed=3) for n in (2, 64))
    assert torch.equal(small.reset(seed=5), large.reset(seed=5)[:2])
    again = small.reset(seed=5)
    assert torch.equal(again, large.reset(seed=5)[:2])
    assert not torch.equal(small.reset(seed=6), again)


def test_action_noise_has_the_configured_std_and_zero_mean():
    env = ActionNoise(Recorder([1000] * 4096, act_dim=2), [0.2, 0.05], seed=1)
    env.reset()
    for _ in range(4):
        env.step(torch.ones(4096, 2))
    noise = torch.cat(env.env.executed) - 1
    assert noise.mean(0).abs().max() < 0.01
    torch.testing.assert_close(noise.std(0), torch.tensor([0.2, 0.05]), rtol=0.02, atol=0)


def test_action_repeat_sums_rewards_and_terms_and_stops_at_the_end_of_an_episode():
    env = ActionRepeat(Recorder([2, 100, 3]), 3)
    env.reset()
    out = env.step(torch.zeros(3, 1))
    assert len(env.env.executed) == 3 and env.max_episode_steps == 34  # ceil(100 / 3)
    assert out.reward.tolist() == [2.0, 3.0, 3.0]  # env 0's episode ended at its second env step
    assert out.terminated.tolist() == [True, False, True]
    assert out.final_obs[:, 0].tolist() == [2.0, 3.0, 3.0] and out.info["last"].tolist() == [2.0, 3.0, 3.0]
    torch.testing.assert_close(out.info["reward/one"] + out.info["reward/rest"], out.reward)
    assert out.obs[:, 0].tolist() == [1.0, 3.0, 0.0]  # env 0 already took one step of its next episode


def test_every_key_at_its_default_wraps_nothing():
    env = Recorder([5])
    assert wrap_env(env, WrapperConfig(), seed=0) is env
    assert wrap_env(env, WrapperConfig(obs_noise={"state": 0.0}, action_noise=[0.0]), seed=0) is env


def test_wrap_env_refuses_what_the_env_cannot_take():
    cartpole = CartPole(CartPoleConfig(num_envs=2), device="cpu", seed=0)
    cases = [(WrapperConfig(obs_noise={"velocity": 0.1}), "obs_noise.velocity", "one of: state"),
             (WrapperConfig(action_noise=0.1), "action_noise", "Box actions only"),
             (WrapperConfig(obs_noise={"state": [0.1, 0.2]}), "obs_noise.state", "a list of 4")]
    for cfg, key, expected in cases:
        with pytest.raises(ConfigError) as info:
            wrap_env(cartpole, cfg, seed=0)
        assert info.value.key == key and expected in info.value.expected


def wrapped_push_cube(**keys) -> BatchedEnv:
    env = PushCube(PushCubeConfig(num_envs=8, max_episode_steps=5), device="cpu", seed=1)
    cfg = WrapperConfig(obs_noise=0.01, action_delay=2, action_noise=0.1, action_repeat=2, **keys)
    return wrap_env(env, cfg, seed=1)


def test_a_snapshot_continues_the_wrapped_env_exactly():
    env, actions = wrapped_push_cube(), torch.rand(6, 8, 2) * 2 - 1
    env.reset(seed=0)
    env.step(actions[0])
    snapshot = env.state_dict()
    first = [env.step(a) for a in actions[1:]]
    env.load_state_dict(snapshot)
    second = [env.step(a) for a in actions[1:]]
    for a, b in zip(first, second, strict=True):
        assert torch.equal(a.obs, b.obs) and torch.equal(a.reward, b.reward)


@pytest.mark.slow  # dynamo traces the wrapped step (seconds)
def test_the_wrapped_step_compiles_to_one_graph_and_equals_eager():
    import torch._dynamo

    torch._dynamo.reset()
    eager, compiled = wrapped_push_cube(), wrapped_push_cube()
    eager.reset(seed=0)
    compiled.reset(seed=0)
    step = torch.compile(compiled.step, fullgraph=True, dynamic=False, backend="eager")
    with torch._dynamo.config.patch(error_on_recompile=True):  # episodes end and restart: still one graph
        for action in torch.rand(12, 8, 2) * 2 - 1:
            a, b = eager.step(action), step(action)
            for name in ("obs", "reward", "terminated", "truncated", "final_obs"):
                assert torch.equal(getattr(a, name), getattr(b, name)), name
    torch._dynamo.reset()


def test_observation_noise_on_a_dict_observation_touches_the_float_keys_only():
    def make():
        return PushCube(PushCubeConfig(num_envs=4, obs_mode="state_rgb"), device="cpu", seed=0)

    clean, noisy = make(), wrap_env(make(), WrapperConfig(obs_noise=0.05), seed=0)
    a, b = clean.reset(seed=0), noisy.reset(seed=0)
    assert torch.equal(a["rgb"], b["rgb"]) and not torch.equal(a["state"], b["state"])
    with pytest.raises(ConfigError, match="an image or integer key"):
        wrap_env(make(), WrapperConfig(obs_noise={"rgb": 1.0}), seed=0)


def test_a_wrapped_env_reads_as_the_env_inside():
    from embodirl.app.build import env_label

    inner = PushCube(PushCubeConfig(num_envs=2), device="cpu", seed=0)
    env = wrap_env(inner, WrapperConfig(action_delay=1, obs_noise=0.1), seed=0)
    assert env.unwrapped is inner and env_label(env) == "PushCube" and env.seed == inner.seed
    assert env.info_metrics == inner.info_metrics and env.reward_terms == inner.reward_terms
    env.override_solved("eval/return_mean", 3.0)
    assert (inner.solved_metric, inner.solved_threshold) == ("eval/return_mean", 3.0)
    assert env.is_solved({"eval/return_mean": 3.5})


def test_a_wrapped_env_randomizes_and_its_curriculum_moves_the_inner_envs_ranges():
    from embodirl.config.randomize import RandomizeConfig

    inner = CartPole(CartPoleConfig(num_envs=4, randomize={"pole_length": RandomizeConfig(range=[0.5, 2.0])}),
                     seed=0)
    env = wrap_env(inner, WrapperConfig(action_delay=1), seed=0)
    assert env.randomization is inner.randomization is not None
    env.set_randomize_range("pole_length", 1.5, 1.5)  # what trainer.curriculum calls on the training env
    env.reset(seed=0)
    for _ in range(inner.max_episode_steps):
        env.step(torch.zeros(4, dtype=torch.int64))
    # every episode has ended since: each env now draws from [1.5, 1.5] x gymnasium's nominal (half) pole length 0.5
    assert torch.equal(inner.randomization.row("pole_length", 0.5), torch.full((4,), 0.75, dtype=torch.float64))

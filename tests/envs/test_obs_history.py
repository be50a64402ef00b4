"""Observation history (``env.obs_history``): per vector key the last k observations, ``[D]`` becoming ``[k D]``
oldest first, restarted per env at an episode's start with its first observation; off by default."""

import gymnasium as gym
import numpy as np
import pytest
import torch

from embodirl.app.build import build_env
from embodirl.config.envs import WrapperConfig
from embodirl.envs.base import BatchedEnv, StepResult
from embodirl.envs.frame_stack import FrameStack, ObservationHistory, history_lengths
from embodirl.envs.wrapping import wrap_env
from embodirl.errors import ConfigError
from tests.conftest import compose_config

CPU = torch.device("cpu")


class Counter(BatchedEnv):
    """Env ``i``'s observation is ``[10 e + t, i]`` (``e``: its episode number, ``t``: the step within it); its
    episodes last ``lengths[i]`` steps. With ``pixels`` the observation is a Dict: that vector as ``pos``, ``-t``
    as ``vel`` ``[1]`` and a ``uint8`` picture ``rgb`` ``[2, 2, 1]`` holding ``t``."""

    def __init__(self, lengths: list[int], pixels: bool = False) -> None:
        self.num_envs, self.device, self.max_episode_steps = len(lengths), CPU, 100
        vector = gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)
        self.observation_space = vector if not pixels else gym.spaces.Dict({
            "pos": vector, "vel": gym.spaces.Box(-np.inf, np.inf, (1,), np.float32),
            "rgb": gym.spaces.Box(0, 255, (2, 2, 1), np.uint8)})
        self.action_space = gym.spaces.Discrete(2)
        self.lengths = torch.tensor(lengths)
        self.t, self.e = torch.zeros(len(lengths), dtype=torch.int64), torch.zeros(len(lengths), dtype=torch.int64)

    def _obs(self):
        vector = torch.stack([10 * self.e + self.t, torch.arange(self.num_envs)], dim=-1).float()
        if not isinstance(self.observation_space, gym.spaces.Dict):
            return vector
        from tensordict import TensorDict

        rgb = self.t.to(torch.uint8).view(-1, 1, 1, 1).expand(-1, 2, 2, 1).clone()
        return TensorDict({"pos": vector, "vel": -self.t.float().view(-1, 1), "rgb": rgb}, batch_size=[self.num_envs])

    def reset(self, seed=None, group_size=1):
        self.t.zero_()
        self.e.zero_()
        return self._obs()

    def step(self, action):
        self.t += 1
        done = self.t >= self.lengths
        final = self._obs()
        self.e += done.long()
        self.t = torch.where(done, 0, self.t)
        return StepResult(self._obs(), torch.zeros(self.num_envs), done, torch.zeros_like(done), final, {})

    def state_dict(self):
        return {"t": self.t.clone(), "e": self.e.clone()}

    def load_state_dict(self, state):
        self.t.copy_(state["t"])
        self.e.copy_(state["e"])


ACT = torch.zeros(2, dtype=torch.int64)


def test_the_history_holds_the_last_k_observations_oldest_first_and_restarts_at_an_episode_start():
    env = ObservationHistory(Counter([2, 3]), 3)
    assert env.observation_space.shape == (6,)
    # The reset: the first observation three times. Env 0 is [0, 0] (e=0, t=0), env 1 is [0, 1].
    assert env.reset().tolist() == [[0, 0, 0, 0, 0, 0], [0, 1, 0, 1, 0, 1]]
    out = env.step(ACT)  # t=1: the newest observation last
    assert out.obs.tolist() == [[0, 0, 0, 0, 1, 0], [0, 1, 0, 1, 1, 1]]
    assert torch.equal(out.final_obs, out.obs)
    out = env.step(ACT)  # t=2 ends env 0's episode: its next episode (e=1) starts over, [10, 0] three times
    assert out.terminated.tolist() == [True, False]
    assert out.obs.tolist() == [[10, 0, 10, 0, 10, 0], [0, 1, 1, 1, 2, 1]]
    assert out.final_obs.tolist() == [[0, 0, 1, 0, 2, 0], [0, 1, 1, 1, 2, 1]]  # the finished episode's last three
    out = env.step(ACT)  # env 1's episode ends (t=3), env 0's new one goes on
    assert out.obs.tolist() == [[10, 0, 10, 0, 11, 0], [10, 1, 10, 1, 10, 1]]
    assert out.final_obs.tolist() == [[10, 0, 10, 0, 11, 0], [1, 1, 2, 1, 3, 1]]
    out = env.step(ACT)
    assert out.obs.tolist() == [[20, 0, 20, 0, 20, 0], [10, 1, 10, 1, 11, 1]]


def test_an_int_keeps_every_vector_key_a_mapping_one_key_and_images_are_left_to_the_frame_stack():
    env = ObservationHistory(Counter([2, 3], pixels=True), 2)
    assert env.lengths == {("pos",): 2, ("vel",): 2}
    assert env.observation_space["pos"].shape == (4,) and env.observation_space["vel"].shape == (2,)
    assert env.observation_space["rgb"].shape == (2, 2, 1)
    env.reset()
    obs = env.step(ACT).obs
    assert obs["vel"].tolist() == [[0, -1], [0, -1]] and obs["pos"].tolist() == [[0, 0, 1, 0], [0, 1, 1, 1]]
    assert obs["rgb"][:, 0, 0, 0].tolist() == [1, 1]  # the picture as the env drew it
    one = ObservationHistory(Counter([2, 3], pixels=True), {"vel": 3, "pos": 1})
    assert one.lengths == {("vel",): 3} and one.observation_space["pos"].shape == (2,)
    both = FrameStack(ObservationHistory(Counter([2, 3], pixels=True), {"vel": 3}), 2)
    assert history_lengths(both) == {("vel",): 3, ("rgb",): 2}
    both.reset()
    obs = both.step(ACT).obs
    assert obs["vel"].tolist() == [[0, 0, -1]] * 2 and obs["rgb"][0, 0, 0].tolist() == [0, 1]


def test_by_default_the_env_is_not_wrapped():
    env = Counter([2, 3])
    assert wrap_env(env, WrapperConfig(), seed=0) is env
    assert wrap_env(env, WrapperConfig(obs_history={"state": 1}), seed=0) is env
    assert isinstance(wrap_env(env, WrapperConfig(obs_history={"state": 2}), seed=0), ObservationHistory)


@pytest.mark.parametrize(("overrides", "message"), [
    (["env=cartpole", "env.obs_history={pos: 3}"],
     r"env.obs_history.pos=3 is invalid: expected a vector \(1-D\) observation key of this env \(this env has no "
     r"key pos; this env has: state \[4\]\)\. Fix: pass env.obs_history={state: 3}, or env.obs_history=1 for none"),
    (["env=push_cube", "env.obs_mode=state_rgb", "env.image_size=8", "env.obs_history={rgb: 4}"],
     r"env.obs_history.rgb=4 is invalid: expected a vector \(1-D\) observation key of this env \(rgb is an image: "
     r"env.frame_stack=4 stacks its frames; this env has: rgb \[8, 8, 3\], state \[17\]\)\. Fix: pass "
     r"env.obs_history={state: 4} and env.frame_stack=4 for rgb\."),
    (["env=push_cube", "env.obs_mode=rgb", "env.image_size=8", "env.obs_history=3"],
     r"env.obs_history=3 is invalid: expected an env with vector \(1-D\) observations \(this env has: rgb "
     r"\[8, 8, 3\]\)\. Fix: pass env.obs_history=1, and env.frame_stack=3 for its images\."),
    (["env=cartpole", "env.obs_history={state: 0}"],
     r"env.obs_history.state=0 is invalid: expected an int in \[1, 100\] .*Fix: pass env.obs_history.state=3\."),
], ids=["unknown-key", "pixel-key", "no-vector-key", "k-below-1"])
def test_a_key_the_history_cannot_take_is_refused_naming_it(overrides, message):
    with pytest.raises(ConfigError, match=message):
        build_env(compose_config([*overrides, "env.num_envs=2"]).env, CPU, seed=0)


@pytest.mark.parametrize("value", ["0", "101", "{state: 2.5}"])
def test_a_bad_length_is_one_line_and_exit_2_before_training(cli, tiny, value):
    result = cli("embodirl-train", [*tiny, f"env.obs_history={value}"])
    assert result.code == 2 and len(result.err.strip().splitlines()) == 1, result.err
    assert "env.obs_history" in result.err and "Fix:" in result.err


def test_snapshots_carry_the_history():
    env = ObservationHistory(Counter([2, 3]), 3)
    env.reset()
    env.step(ACT)
    state = env.state_dict()
    assert state["obs_history.state"].tolist() == [[0, 0, 0, 0, 1, 0], [0, 1, 0, 1, 1, 1]]  # as observed
    after = [env.step(ACT).obs for _ in range(3)]
    other = ObservationHistory(Counter([2, 3]), 3)
    other.reset()
    other.load_state_dict(state)
    assert all(torch.equal(other.step(ACT).obs, want) for want in after)


def test_a_gymnasium_env_keeps_its_history_as_a_native_one():
    cfg = compose_config(["env=gym", "env.id=CartPole-v1", "env.num_envs=2"])
    inner = build_env(cfg.env, CPU, seed=0)
    cfg = compose_config(["env=gym", "env.id=CartPole-v1", "env.num_envs=2", "env.obs_history=2"])
    wrapped = build_env(cfg.env, CPU, seed=0)
    previous = inner.reset(seed=3)
    assert torch.equal(wrapped.reset(seed=3), torch.cat([previous, previous], dim=-1))
    for _ in range(30):  # episodes end (random actions): the restarted rows hold the new episode's first obs twice
        action = torch.randint(0, 2, (2,))
        want, got = inner.step(action), wrapped.step(action)
        done = (want.terminated | want.truncated).view(-1, 1)
        assert torch.equal(got.obs, torch.cat([torch.where(done, want.obs, previous), want.obs], dim=-1))
        assert torch.equal(got.final_obs, torch.cat([previous, want.final_obs], dim=-1))
        previous = want.obs
    inner.close()
    wrapped.close()


@pytest.mark.slow  # dynamo traces the wrapped step (seconds)
def test_the_step_with_history_compiles_to_one_graph_and_equals_eager():
    import torch._dynamo

    torch._dynamo.reset()
    overrides = ["env=cartpole", "env.num_envs=4", "env.max_episode_steps=3", "env.obs_history=3"]
    eager, compiled = (build_env(compose_config(overrides).env, CPU, seed=0) for _ in range(2))
    eager.reset(seed=0)
    compiled.reset(seed=0)
    step = torch.compile(compiled.step, fullgraph=True, dynamic=False, backend="eager")
    with torch._dynamo.config.patch(error_on_recompile=True):  # episodes end and restart: still one graph
        for t in range(7):  # two episode ends (max_episode_steps=3)
            action = torch.tensor([0, 1, t % 2, 1 - t % 2])
            want, got = eager.step(action), step(action)
            assert torch.equal(got.obs, want.obs) and torch.equal(got.final_obs, want.final_obs)
    torch._dynamo.reset()

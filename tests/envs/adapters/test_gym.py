"""GymEnv: conversion at the boundary (Box and Dict observations), SAME_STEP auto-reset, seeding, success flags
and config errors."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from embodirl.config.envs import GymConfig
from embodirl.config.schema import parse
from embodirl.envs.adapters.gym import GymEnv
from embodirl.errors import ConfigError


class _SuccessEnv(gym.Env):
    """Three-step episodes that end terminated; ``is_success`` is the last action."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float64)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(2), {}

    def step(self, action):
        self.t += 1
        done = self.t == 3
        return np.full(2, self.t / 3), 1.0, done, False, {"is_success": bool(done and action == 1)}


class _MultiDiscreteActionEnv(_SuccessEnv):
    action_space = gym.spaces.MultiDiscrete([2, 2])


class _DictReachEnv(gym.Env):
    """A point moving towards a goal, observed through a nested Dict: float64 and int32 vectors, a uint8 camera.

    Success (and termination) within 0.15 of the goal; the camera draws the point red and the goal green.
    """

    SIZE = 36  # the smallest square image the default (NatureCNN) encoder takes
    observation_space = gym.spaces.Dict({
        "agent": gym.spaces.Dict({"pos": gym.spaces.Box(-1.0, 1.0, (2,), np.float64),
                                  "steps": gym.spaces.Box(0, 1000, (1,), np.int32)}),
        "goal": gym.spaces.Box(-1.0, 1.0, (2,), np.float32),
        "camera": gym.spaces.Box(0, 255, (SIZE, SIZE, 3), np.uint8)})
    action_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.pos, self.goal = self.np_random.uniform(-0.8, 0.8, 2), self.np_random.uniform(-0.8, 0.8, 2)
        self.steps = 0
        return self._obs(), {}

    def step(self, action):
        self.pos = np.clip(self.pos + 0.2 * np.clip(action, -1.0, 1.0), -1.0, 1.0)
        self.steps += 1
        distance = float(np.linalg.norm(self.pos - self.goal))
        return self._obs(), -distance, distance < 0.15, False, {"is_success": distance < 0.15}

    def _obs(self):
        camera = np.full((self.SIZE, self.SIZE, 3), 64, np.uint8)
        for channel, point in ((0, self.pos), (1, self.goal)):
            row, col = ((point + 1.0) / 2.0 * (self.SIZE - 1)).round().astype(int)
            camera[row, col, channel] = 255
        return {"agent": {"pos": self.pos.copy(), "steps": np.array([self.steps], np.int32)},
                "goal": self.goal.astype(np.float32), "camera": camera}


class _DictWithDiscreteEnv(_SuccessEnv):
    observation_space = gym.spaces.Dict({"x": gym.spaces.Box(-1.0, 1.0, (2,)), "flag": gym.spaces.Discrete(2)})


def _missing_box2d(**kwargs):
    """What gymnasium's Box2D envs raise when box2d (or pygame) is not installed."""
    raise gym.error.DependencyNotInstalled('Box2D is not installed, you can install it by run `pip install swig` '
                                           'followed by `pip install "gymnasium[box2d]"`')


_TEST_ENVS = {"EmbodirlTest/Success-v0": (_SuccessEnv, 10), "EmbodirlTest/NoTimeLimit-v0": (_SuccessEnv, None),
              "EmbodirlTest/MultiDiscreteAction-v0": (_MultiDiscreteActionEnv, 10),
              "EmbodirlTest/DictReach-v0": (_DictReachEnv, 12),
              "EmbodirlTest/DictWithDiscrete-v0": (_DictWithDiscreteEnv, 10),
              "EmbodirlTest/MissingBox2D-v0": (_missing_box2d, 10)}
for _id, (_cls, _limit) in _TEST_ENVS.items():
    if _id not in gym.registry:
        gym.register(_id, entry_point=_cls, max_episode_steps=_limit, disable_env_checker=True)


def spy(env: GymEnv, method: str) -> list:
    """Record the arguments GymEnv passes to its gymnasium vector env's ``method``."""
    calls, original = [], getattr(env._vec, method)

    def wrapped(*args, **kwargs):
        calls.append((args, kwargs))
        return original(*args, **kwargs)

    setattr(env._vec, method, wrapped)
    return calls


def reference_vec(env_id: str, num_envs: int) -> gym.vector.VectorEnv:
    return gym.make_vec(env_id, num_envs=num_envs, vectorization_mode="sync",
                        vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP})


def test_cartpole_conversions_and_metadata():
    env = GymEnv(GymConfig(id="CartPole-v1", num_envs=4), seed=1)
    ref = gym.make("CartPole-v1")
    assert env.observation_space == ref.observation_space and env.action_space == gym.spaces.Discrete(2)
    assert env.max_episode_steps == 500 and env.solved_threshold == 475.0
    obs = env.reset(seed=1)
    assert obs.shape == (4, 4) and obs.dtype == torch.float32 and obs.device.type == "cpu"
    for action in (torch.zeros(4, dtype=torch.int64), torch.ones(4, 1, dtype=torch.int64)):
        step = env.step(action)
        assert step.obs.dtype == step.final_obs.dtype == step.reward.dtype == torch.float32
        assert step.terminated.dtype == step.truncated.dtype == torch.bool and step.reward.shape == (4,)
        assert "success" not in step.info
    env.close()
    assert env._vec.closed


def test_pendulum_truncation_final_obs_and_action_clipping_match_gymnasium():
    env = GymEnv(GymConfig(id="Pendulum-v1", num_envs=3))
    resets = spy(env, "reset")
    env.reset(seed=7)
    seeds = resets[0][1]["seed"]
    assert len(set(seeds)) == 3
    ref = reference_vec("Pendulum-v1", 3)
    ref_obs, _ = ref.reset(seed=seeds)
    steps = spy(env, "step")
    actions = torch.from_numpy(np.random.default_rng(0).uniform(-4, 4, size=(205, 3, 1))).float()
    for t, action in enumerate(actions, start=1):
        step = env.step(action)
        sent = steps[-1][0][0]
        assert sent.dtype == np.float32 and np.abs(sent).max() <= 2.0, "Box actions are clipped to the bounds"
        assert np.array_equal(sent, np.clip(action.numpy(), -2.0, 2.0))
        ref_obs, reward, terminated, truncated, info = ref.step(sent)
        assert np.array_equal(step.obs.numpy(), ref_obs)
        assert np.array_equal(step.reward.numpy(), reward.astype(np.float32))
        assert not step.terminated.any() and not terminated.any()
        assert step.truncated.all().item() == truncated.all() == (t == 200)
        if t == 200:
            assert np.array_equal(step.final_obs.numpy(), np.stack(info["final_obs"]))
            assert not torch.equal(step.final_obs, step.obs)
        else:
            assert torch.equal(step.final_obs, step.obs)
    ref.close()
    env.close()


def test_success_flags_come_from_the_finished_step():
    env = GymEnv(GymConfig(id="EmbodirlTest/Success-v0", num_envs=4))
    assert env.max_episode_steps == 10 and env.observation_space.dtype == np.float32
    assert not hasattr(env, "episode_stats"), "episode statistics are the collector's"
    for _ in range(2):  # partial episodes
        env.step(torch.zeros(4, dtype=torch.int64))
    env.reset()
    last = torch.tensor([1, 0, 1, 1])
    for t in range(3):
        step = env.step(last if t == 2 else torch.zeros(4, dtype=torch.int64))
        assert step.info["success"].dtype == torch.bool
        assert step.reward.tolist() == [1.0] * 4
    assert step.terminated.all() and not step.truncated.any()
    assert step.info["success"].tolist() == [True, False, True, True]
    assert step.final_obs[:, 0].tolist() == [1.0] * 4 and step.obs.abs().max() == 0
    env.close()


def test_terminating_on_the_last_allowed_step_is_not_a_truncation():
    env = GymEnv(GymConfig(id="EmbodirlTest/Success-v0", num_envs=2, max_episode_steps=3))  # TimeLimit sets both flags
    steps = [env.step(torch.zeros(2, dtype=torch.int64)) for _ in range(3)]
    assert steps[-1].terminated.all() and not steps[-1].truncated.any()
    env.close()


def test_group_shared_reset_and_seeding():
    env = GymEnv(GymConfig(id="CartPole-v1", num_envs=8))
    grouped = env.reset(seed=3, group_size=4)
    assert torch.equal(grouped[:4], grouped[0].expand(4, 4)) and torch.equal(grouped[4:], grouped[4].expand(4, 4))
    assert not torch.equal(grouped[0], grouped[4])
    fresh = env.reset(group_size=4)
    assert not torch.equal(fresh, grouped), "seed=None draws new seeds"
    assert len({tuple(o.tolist()) for o in env.reset()}) == 8
    assert torch.equal(env.reset(seed=3, group_size=4), grouped)
    assert torch.equal(GymEnv(GymConfig(id="CartPole-v1", num_envs=8), seed=3).reset(seed=3, group_size=4), grouped)
    with pytest.raises(ConfigError, match=r"^group_size="):
        env.reset(group_size=3)
    env.close()


def test_async_matches_sync():
    sync = GymEnv(GymConfig(id="CartPole-v1", num_envs=2), seed=5)
    asynchronous = GymEnv(GymConfig(id="CartPole-v1", num_envs=2, vectorization_mode="async"), seed=5)
    assert torch.equal(sync.reset(seed=5), asynchronous.reset(seed=5))
    for action in torch.randint(0, 2, (40, 2), generator=torch.Generator().manual_seed(0)):
        s, a = sync.step(action), asynchronous.step(action)
        assert all(torch.equal(x, y) for x, y in zip(s[:5], a[:5], strict=True))
    sync.close()
    asynchronous.close()


def test_max_episode_steps_override():
    env = GymEnv(GymConfig(id="CartPole-v1", num_envs=2, max_episode_steps=4))
    assert env.max_episode_steps == 4
    flags = [env.step(torch.tensor([0, 1])).truncated.tolist() for _ in range(4)]
    assert flags == [[False, False]] * 3 + [[True, True]]
    env.close()


def test_unknown_id_suggests_close_matches():
    with pytest.raises(ConfigError) as info:
        GymEnv(GymConfig(id="CartPol-v1"))
    assert info.value.key == "id" and "CartPole-v1" in str(info.value)


@pytest.mark.parametrize(("env_id", "space"), [("Blackjack-v1", "Tuple("), ("FrozenLake-v1", "Discrete(16)"),
                                                ("EmbodirlTest/MultiDiscreteAction-v0", "MultiDiscrete("),
                                                ("EmbodirlTest/DictWithDiscrete-v0", "'flag': Discrete(2)")])
def test_unsupported_spaces_are_refused(env_id, space):
    with pytest.raises(ConfigError, match=r"^id=") as info:
        GymEnv(GymConfig(id=env_id, num_envs=1))
    assert space in str(info.value) and "Box" in str(info.value)


def test_missing_box2d_names_the_extra():
    with pytest.raises(ConfigError, match=r"^id='EmbodirlTest/MissingBox2D-v0' is invalid") as info:
        GymEnv(GymConfig(id="EmbodirlTest/MissingBox2D-v0", num_envs=1))
    assert "Box2D is not installed" in str(info.value) and 'pip install -e ".[box2d]"' in str(info.value)


def test_lunar_lander_runs_with_the_box2d_extra():
    env = GymEnv(GymConfig(id="LunarLander-v3", num_envs=2))  # the dev install includes the box2d extra
    step = env.step(torch.zeros(2, dtype=torch.int64))
    assert step.obs.shape == (2, 8) and env.solved_threshold == 200 and env.max_episode_steps == 1000
    env.close()


@pytest.mark.parametrize(
    ("kwargs", "key"),
    [({"num_envs": 0}, "num_envs"), ({"vectorization_mode": "threads"}, "vectorization_mode"),
     ({"max_episode_steps": -1}, "max_episode_steps"), ({"env_kwargs": [1]}, "env_kwargs"),
     ({"id": "EmbodirlTest/NoTimeLimit-v0"}, "max_episode_steps")],
)
def test_bad_config(kwargs, key):
    with pytest.raises(ConfigError, match=f"^{key}="):
        GymEnv(parse(GymConfig, {"id": "CartPole-v1", **kwargs}))


@pytest.mark.gpu
def test_cuda_device():
    env = GymEnv(GymConfig(id="Pendulum-v1", num_envs=2), device="cuda")
    step = env.step(torch.zeros(2, 1, device="cuda"))
    assert step.obs.device.type == step.reward.device.type == step.final_obs.device.type == "cuda"
    env.close()


def _numpy_leaf(tree, key):
    for part in key:
        tree = tree[part]
    return tree


DICT_KEYS = {("agent", "pos"): torch.float32, ("agent", "steps"): torch.int64, ("goal",): torch.float32,
             ("camera",): torch.uint8}


def test_dict_observations_are_tensordicts_matching_gymnasium_leaf_by_leaf():
    from embodirl.envs.observations import check_observation, observation_spec

    env = GymEnv(GymConfig(id="EmbodirlTest/DictReach-v0", num_envs=3))
    space = env.observation_space
    assert space["agent"]["pos"].dtype == np.float32 and space["agent"]["steps"].dtype == np.int64
    assert space["camera"] == gym.spaces.Box(0, 255, (36, 36, 3), np.uint8)
    spec = observation_spec(space)
    assert {key: dtype for key, (_, dtype) in spec.items()} == DICT_KEYS
    resets = spy(env, "reset")
    obs = env.reset(seed=4)
    check_observation("reset", obs, spec, 3, torch.device("cpu"))
    ref = reference_vec("EmbodirlTest/DictReach-v0", 3)
    ref_obs, _ = ref.reset(seed=resets[0][1]["seed"])
    for key, dtype in DICT_KEYS.items():
        assert torch.equal(obs.get(key), torch.from_numpy(_numpy_leaf(ref_obs, key)).to(dtype))
    actions = torch.from_numpy(np.random.default_rng(1).uniform(-1, 1, size=(14, 3, 2))).float()
    ended = 0
    for action in actions:
        step = env.step(action)
        ref_obs, _, terminated, truncated, info = ref.step(action.numpy())
        check_observation("step", step.final_obs, spec, 3, torch.device("cpu"))
        final = info.get("_final_obs", np.zeros(3, bool))
        for key, dtype in DICT_KEYS.items():
            assert torch.equal(step.obs.get(key), torch.from_numpy(_numpy_leaf(ref_obs, key)).to(dtype))
            for i in range(3):
                expected = _numpy_leaf(info["final_obs"][i], key) if final[i] else _numpy_leaf(ref_obs, key)[i]
                assert torch.equal(step.final_obs.get(key)[i], torch.from_numpy(np.asarray(expected)).to(dtype))
        assert np.array_equal(step.terminated.numpy() | step.truncated.numpy(), terminated | truncated)
        ended += int(final.sum())
    assert ended >= 3, "every env ended an episode (the 12-step limit at least)"
    grouped = env.reset(seed=5, group_size=3)
    assert all(torch.equal(leaf, leaf[:1].expand_as(leaf)) for leaf in grouped.values(True, True))
    ref.close()
    env.close()


def test_dict_env_trains_through_the_platform(tmp_path, tiny):
    from embodirl.app.run import run_training
    from tests.conftest import compose_config

    cfg = compose_config([*tiny, "env=gym", "env.id=EmbodirlTest/DictReach-v0", "env.num_envs=4",
                          "trainer.total_env_steps=192", "eval.every_env_steps=64"])
    summary = run_training(cfg, tmp_path)
    assert summary["status"] == "completed" and summary["iterations"] == 3
    assert summary["solved_metric"] == "eval/return_mean" and 0.0 <= summary["eval/success_rate"] <= 1.0
    assert 1 <= summary["eval/length_mean"] <= 12


def test_render_only_with_rgb_array_mode_and_frames_follow_the_state():
    with pytest.raises(NotImplementedError, match="render_mode='rgb_array'"):
        GymEnv(GymConfig(id="CartPole-v1", num_envs=2)).render([0], 32)
    env = GymEnv(GymConfig(id="CartPole-v1", num_envs=2), render_mode="rgb_array", seed=0)
    first = env.render([0, 1], 64)
    assert first.shape == (2, 64, 64, 3) and first.dtype == np.uint8
    # 600 x 400 pictures letterboxed into 64 x 64: black bands above and below, the picture between.
    assert (first[:, :10] == 0).all() and (first[:, -10:] == 0).all() and first[:, 32].mean() > 200
    for _ in range(8):
        env.step(torch.ones(2, dtype=torch.int64))
    assert not np.array_equal(env.render([0], 64)[0], first[0])  # pushed right: the picture moved
    env.close()


def test_square_frame_keeps_the_aspect_ratio():
    from embodirl.envs.adapters.gym import square_frame

    picture = np.full((20, 40, 3), 200, dtype=np.uint8)
    out = square_frame(picture, 10)
    assert out.shape == (10, 10, 3)
    assert (out[:2] == 0).all() and (out[-3:] == 0).all() and (out[3:7] == 200).all()


def test_named_info_keys_become_info_metrics_with_the_finished_steps_value():
    env = GymEnv(GymConfig(id="EmbodirlTest/Success-v0", num_envs=3, info_metrics=["is_success"]))
    assert env.info_metrics == ("is_success",)
    for t in range(3):
        step = env.step(torch.tensor([1, 0, 1]) if t == 2 else torch.zeros(3, dtype=torch.int64))
        assert step.info["is_success"].dtype == torch.float32
    assert step.terminated.all() and step.info["is_success"].tolist() == [1.0, 0.0, 1.0]
    env.close()


def test_an_info_key_the_env_never_returns_is_refused_at_the_first_step():
    env = GymEnv(GymConfig(id="EmbodirlTest/Success-v0", num_envs=2, info_metrics=["is_sucess"]))
    with pytest.raises(ConfigError, match=r"^env.info_metrics='is_sucess' is invalid.*has: is_success.*Fix: remove"):
        env.step(torch.zeros(2, dtype=torch.int64))
    env.close()

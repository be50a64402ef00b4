"""Evaluation videos: tiling, recording from a rendering env, files on disk, refusal without frames."""

import imageio.v2 as imageio
import numpy as np
import pytest
import torch

from embodirl.app.run import run_training
from embodirl.config.envs import CartPoleConfig, GymConfig, PushCubeConfig
from embodirl.config.policies import ActorCriticConfig
from embodirl.envs.adapters.gym import GymEnv
from embodirl.envs.push_cube.env import PushCube
from embodirl.errors import ConfigError
from embodirl.policies import ActorCritic
from embodirl.training.video import record_episode, save_video, tile
from tests.conftest import compose_config


def test_tile_places_frames_row_major_and_pads_with_black():
    frames = np.stack([np.full((2, 3, 3), v, dtype=np.uint8) for v in (10, 20, 30)])
    grid = tile(frames)  # 3 frames -> 2 x 2 grid of 2 x 3 tiles
    assert grid.shape == (4, 6, 3)
    assert (grid[:2, :3] == 10).all() and (grid[:2, 3:] == 20).all() and (grid[2:, :3] == 30).all()
    assert (grid[2:, 3:] == 0).all()


@pytest.mark.parametrize("suffix", [pytest.param("mp4", marks=pytest.mark.slow), "gif"])  # ffmpeg's process: slow tier
def test_recorded_episode_is_saved_and_readable(tmp_path, suffix):
    torch.manual_seed(0)
    env = PushCube(PushCubeConfig(num_envs=4), seed=0)
    policy = ActorCritic(ActorCriticConfig(hidden_sizes=[8]), observation_space=env.observation_space,
                         action_space=env.action_space)
    frames = record_episode(env, policy, num_envs=4, size=64, seed=3)
    assert frames.dtype == np.uint8 and frames.shape == (env.max_episode_steps + 1, 128, 128, 3)
    assert frames.std() > 0 and not np.array_equal(frames[0], frames[-1])  # the scene moves
    path = save_video(frames, tmp_path / f"eval.{suffix}", fps=20)
    read = imageio.mimread(path)
    assert read[0].shape[:2] == (128, 128)
    # MP4 keeps every frame; the GIF encoder merges identical consecutive frames (their durations add up).
    assert len(read) == len(frames) if suffix == "mp4" else 2 <= len(read) <= len(frames)
    assert not list(tmp_path.glob(".*"))  # no temp file left behind


@pytest.mark.parametrize("env", ["push_cube", pytest.param("push_cube_arm", marks=pytest.mark.slow)])
def test_training_with_eval_video_writes_files(tmp_path, tiny, env):
    cfg = compose_config([*tiny, f"env={env}", "env.num_envs=8", "trainer.total_env_steps=128",
                          "eval.video=true", "eval.video_num_envs=2", "eval.video_size=32", "logger.tensorboard=true"])
    run_training(cfg, tmp_path)
    assert len(list((tmp_path / "videos").glob("eval_*.mp4"))) == 1


def test_eval_video_for_an_env_without_frames_is_refused_before_training(tmp_path, tiny, monkeypatch):
    from embodirl.envs.base import BatchedEnv
    from embodirl.envs.cartpole import CartPole

    monkeypatch.setattr(CartPole, "render", BatchedEnv.render)  # as an env that draws nothing
    with pytest.raises(ConfigError, match=r"eval.video=True.*renders"):
        run_training(compose_config([*tiny, "eval.video=true"]), tmp_path)
    assert not (tmp_path / "metrics.jsonl").exists()
    env = GymEnv(GymConfig(id="CartPole-v1", num_envs=1))  # a gymnasium id draws only when built for videos
    with pytest.raises(ConfigError, match=r"eval.video=True.*render_mode"):
        record_episode(env, ActorCritic(ActorCriticConfig(hidden_sizes=[4]), observation_space=env.observation_space,
                                        action_space=env.action_space), 1, 16, 0)


def test_overlay_writes_step_return_and_success_onto_the_frames():
    from embodirl.training.video import annotate

    frames = np.full((3, 64, 64, 3), 255, dtype=np.uint8)
    steps, returns = np.array([3, 3, 40]), np.array([1.5, 1.5, 12.0])
    plain = annotate(frames, steps, returns, None)
    marked = annotate(frames, steps, returns, np.array([True, False, True]))
    assert plain.shape == frames.shape and plain.dtype == np.uint8 and (frames == 255).all()  # input untouched
    corner, rest = plain[:, :12, :40], plain[:, 24:]
    assert (corner != 255).any(axis=(1, 2, 3)).all() and (rest == 255).all()  # text band top-left only
    assert not np.array_equal(plain[0], plain[2])  # different numbers, different text
    assert np.array_equal(plain[0], plain[1])
    rgb = marked.astype(int)
    greenish = (rgb[..., 1] > rgb[..., 0] + 60) & (rgb[..., 1] > rgb[..., 2] + 60)  # "success"
    reddish = (rgb[..., 0] > rgb[..., 1] + 60) & (rgb[..., 0] > rgb[..., 2] + 60)  # "no success"
    assert greenish[0].sum() > 5 and reddish[0].sum() == 0 and reddish[1].sum() > 5 and greenish[1].sum() == 0


def test_cartpole_episode_video_has_the_overlay_and_moves(tmp_path):
    from embodirl.envs.cartpole import CartPole

    torch.manual_seed(0)
    env = CartPole(CartPoleConfig(num_envs=2), seed=0)
    policy = ActorCritic(ActorCriticConfig(hidden_sizes=[8]), observation_space=env.observation_space,
                         action_space=env.action_space)
    frames = record_episode(env, policy, num_envs=2, size=64, seed=1)
    assert frames.shape[1:] == (64, 128, 3) and 2 <= len(frames) <= env.max_episode_steps + 1
    assert not np.array_equal(frames[1, 16:], frames[-1, 16:])  # below the overlay: the scene moves
    assert not np.array_equal(frames[1, :10, :40], frames[2, :10, :40])  # the step counter advances


@pytest.mark.parametrize("env", [["env=cartpole"], pytest.param(["env=gym", "env.num_envs=2"], marks=pytest.mark.slow)])
def test_training_with_eval_video_for_cartpole_and_gym_ids(tmp_path, tiny, env):
    cfg = compose_config([*tiny, *env, "trainer.total_env_steps=128", "eval.num_envs=2",
                          "eval.num_episodes=2", "eval.video=true", "eval.video_num_envs=2",
                          "eval.video_size=32"])
    run_training(cfg, tmp_path)
    (video,) = (tmp_path / "videos").glob("eval_*.mp4")
    assert imageio.mimread(video)[0].shape[:2] == (32, 64)


def test_a_chunked_policy_is_filmed_acting_every_k_steps(monkeypatch):
    env = PushCube(PushCubeConfig(num_envs=2), seed=0)
    policy = ActorCritic(ActorCriticConfig(hidden_sizes=[8], action_chunk=4, chunk_execute=2),
                         observation_space=env.observation_space, action_space=env.action_space)
    calls, mode = [], policy.mode
    monkeypatch.setattr(policy, "mode", lambda obs, state: calls.append(1) or mode(obs, state))
    frames = record_episode(env, policy, num_envs=2, size=32, seed=1)
    assert frames.shape[0] == env.max_episode_steps + 1  # every env step filmed (the 50-step limit: no early end)
    assert len(calls) == env.max_episode_steps // 2

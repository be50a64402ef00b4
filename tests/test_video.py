"""Evaluation videos: tiling, recording from a rendering env, files on disk, refusal without frames."""

import imageio.v2 as imageio
import numpy as np
import pytest
import torch

from embodirl.envs.push_cube import PushCube
from embodirl.errors import ConfigError
from embodirl.runtime.run import run_training
from embodirl.policies import ActorCritic
from embodirl.video import record_episode, save_video, tile
from tests.conftest import compose_config


def test_tile_places_frames_row_major_and_pads_with_black():
    frames = np.stack([np.full((2, 3, 3), v, dtype=np.uint8) for v in (10, 20, 30)])
    grid = tile(frames)  # 3 frames -> 2 x 2 grid of 2 x 3 tiles
    assert grid.shape == (4, 6, 3)
    assert (grid[:2, :3] == 10).all() and (grid[:2, 3:] == 20).all() and (grid[2:, :3] == 30).all()
    assert (grid[2:, 3:] == 0).all()


@pytest.mark.parametrize("suffix", ["mp4", "gif"])
def test_recorded_episode_is_saved_and_readable(tmp_path, suffix):
    torch.manual_seed(0)
    env = PushCube(num_envs=4, seed=0)
    policy = ActorCritic(env.observation_space, env.action_space, hidden_sizes=[8])
    frames = record_episode(env, policy, num_envs=4, size=64, seed=3)
    assert frames.dtype == np.uint8 and frames.shape == (env.max_episode_steps + 1, 128, 128, 3)
    assert frames.std() > 0 and not np.array_equal(frames[0], frames[-1])  # the scene moves
    path = save_video(frames, tmp_path / f"eval.{suffix}", fps=20)
    read = imageio.mimread(path)
    assert read[0].shape[:2] == (128, 128)
    # MP4 keeps every frame; the GIF encoder merges identical consecutive frames (their durations add up).
    assert len(read) == len(frames) if suffix == "mp4" else 2 <= len(read) <= len(frames)
    assert not list(tmp_path.glob(".*"))  # no temp file left behind


@pytest.mark.parametrize("env", ["push_cube", "push_cube_arm"])
def test_training_with_eval_video_writes_files(tmp_path, tiny, env):
    cfg = compose_config([*tiny, f"env={env}", "env.num_envs=8", "trainer.total_env_steps=128",
                          "eval.video=true", "eval.video_num_envs=2", "eval.video_size=32", "logger.tensorboard=true"])
    run_training(cfg, tmp_path)
    assert len(list((tmp_path / "videos").glob("eval_*.mp4"))) == 1


def test_eval_video_for_an_env_without_frames_is_refused_before_training(tmp_path, tiny):
    with pytest.raises(ConfigError, match="eval.video=True.*renders"):
        run_training(compose_config([*tiny, "eval.video=true"]), tmp_path)
    assert not (tmp_path / "metrics.jsonl").exists()

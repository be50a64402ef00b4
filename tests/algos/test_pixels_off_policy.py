"""SAC and FastTD3 on dict observations with images (push_cube's ``state_rgb``): the encoders read them, the replay
buffer keeps the images as ``uint8`` (obs and next_obs), an oversized buffer is refused with one line, and a
pixel run checkpoints and resumes with its images in the buffer."""

import pytest
import torch

from embodirl.algos.augment import shift_batch
from embodirl.collect import replay
from tests.conftest import TINY, compose_config

# A 16x16 top view beside the state vector, read by a one-layer CNN: small enough for the fast tier.
PIXELS = ["env.obs_mode=state_rgb", "env.image_size=16", "+policy/encoder@policy.encoders.rgb=cnn",
          "policy.encoders.rgb.channels=[4]", "policy.encoders.rgb.kernels=[4]", "policy.encoders.rgb.strides=[2]",
          "policy.encoders.rgb.out_dim=8", "algo.buffer_size=512"]
SMALL = ["device=cpu", "env=push_cube", "env.num_envs=8", "algo.num_steps=4", "algo.minibatch_size=16",
         "algo.learning_starts=0", "algo.critic_hidden_sizes=[16]", "policy.hidden_sizes=[16]", "eval.num_envs=2",
         "trainer.total_env_steps=1024"]


def pixel_algo(algo, *overrides):
    from embodirl.app.build import build_components

    parts = build_components(compose_config([f"algo={algo}", *SMALL, *PIXELS, *overrides]))
    parts.collector.reset(seed=0)
    return parts.algo, parts.collector


@pytest.mark.parametrize("algo", ["sac", "fasttd3"])
def test_images_are_stored_as_uint8_and_the_critic_trains_the_encoder(algo):
    algo, collector = pixel_algo(algo)
    encoder = [p.detach().clone() for p in algo.encoder_params]
    assert encoder, "the CNN's weights are the critic optimizer's"
    metrics = algo.update(collector.collect())
    storage = algo.buffer.storage  # [num_envs, slots]
    for key in ("obs", "next_obs"):
        assert storage[key, "rgb"].dtype == torch.uint8 and storage[key, "rgb"].shape == (8, 64, 16, 16, 3)
        assert storage[key, "state"].dtype == torch.float32 and storage[key, "state"].shape[:2] == (8, 64)
    assert storage["obs", "rgb"][:, :4].float().std() > 0  # real frames were written
    assert torch.isfinite(torch.tensor(metrics["loss/critic"]))
    assert any(not torch.equal(a, b) for a, b in zip(encoder, algo.encoder_params, strict=True))


@pytest.mark.parametrize("algo", ["sac", "fasttd3"])
def test_several_vector_keys_are_stored_sampled_shifted_as_they_are_and_trained_on(algo):
    import types

    import gymnasium as gym
    import numpy as np
    from tensordict import TensorDict

    from embodirl.app.build import build_policy, instantiate
    from embodirl.collect.replay import ReplayBuffer

    space = gym.spaces.Dict({"arm": gym.spaces.Box(-1, 1, (4,), np.float32),
                             "goal": gym.spaces.Dict({"xy": gym.spaces.Box(-1, 1, (2,), np.float32)})})
    env = types.SimpleNamespace(observation_space=space, action_space=gym.spaces.Box(-1, 1, (2,), np.float32))
    cfg = compose_config([f"algo={algo}", *SMALL])
    policy = build_policy(cfg.policy, env, torch.device("cpu"))
    agent = instantiate(cfg.algo, "algo.", policy=policy, device=torch.device("cpu"), total_env_steps=1024)
    obs = TensorDict({"arm": torch.randn(2, 8, 4), "goal": {"xy": torch.randn(2, 8, 2)}}, [2, 8])
    steps = TensorDict({"obs": obs, "next_obs": obs.clone(), "action": torch.rand(2, 8, 2) * 2 - 1,
                        "reward": torch.randn(2, 8), "terminated": torch.zeros(2, 8, dtype=torch.bool),
                        "done": torch.zeros(2, 8, dtype=torch.bool)}, [2, 8])
    buffer = ReplayBuffer(capacity=16, num_envs=2, device="cpu")
    buffer.extend(steps)
    batch = buffer.sample(16)
    shifted = shift_batch(batch, 4)  # no image: every leaf is the sampled one
    assert all(shifted[k] is batch[k] for k in batch.keys(True, True))
    before = [p.detach().clone() for p in agent.critics.parameters()]
    terms = agent.train_step(shifted)
    assert torch.isfinite(terms["loss/critic"])
    assert any(not torch.equal(a, b) for a, b in zip(before, agent.critics.parameters(), strict=True))


def test_a_buffer_larger_than_the_memory_is_refused_with_one_line_and_a_size_that_fits(cli, monkeypatch, tmp_path):
    per_transition = 2 * (16 * 16 * 3 + 17 * 4) + 2 * 4 + 4 + 2  # obs and next_obs, action, reward, two flags
    monkeypatch.setattr(replay, "available_memory", lambda device: 1000 * per_transition)
    args = ["algo=sac", "env=push_cube", *PIXELS, *TINY, "algo.buffer_size=4096"]
    out = cli("embodirl-train", [*args, f"hydra.run.dir={tmp_path / 'big'}"])
    assert out.code == 2
    lines = [line for line in out.err.splitlines() if line.startswith("embodirl-train: error:")]
    assert lines == [f"embodirl-train: error: algo.buffer_size=4096 is invalid: expected a replay buffer that fits in "
                     f"80% of the 0.0 GiB available on cpu ({per_transition} bytes a transition, 0.0 GiB asked). "
                     f"Fix: pass algo.buffer_size=800 or less."]
    out = cli("embodirl-train", [*args, "algo.buffer_size=800", "eval.num_envs=2", "eval.num_episodes=2",
                                 f"hydra.run.dir={tmp_path / 'fits'}"])  # evaluations render: 2 episodes do
    assert out.code == 0, out.err


@pytest.mark.slow
def test_a_pixel_sac_run_resumes_with_its_images_in_the_buffer(tmp_path, caplog):
    import logging

    from embodirl.app.run import run_training

    run = ["algo=sac", *SMALL, *PIXELS, "algo.learning_starts=32", "eval.every_env_steps=4096",
           "trainer.checkpoint_every_env_steps=32", "logger.console=none", "logger.tensorboard=false"]
    full, resumed = tmp_path / "full", tmp_path / "resumed"
    run_training(compose_config([*run, "trainer.total_env_steps=96"]), full)
    run_training(compose_config([*run, "trainer.total_env_steps=64"]), resumed)
    saved = torch.load(resumed / "checkpoints" / "replay.pt", weights_only=True)
    images = next(v for k, v in _leaves(saved) if k.endswith("rgb"))
    assert images.dtype == torch.uint8  # the buffer file keeps the images as collected
    with caplog.at_level(logging.INFO):
        run_training(compose_config([*run, "trainer.total_env_steps=96"]), resumed)
    assert "refilled the replay buffer with 64 transitions" in caplog.text
    import json

    records = [[json.loads(line) for line in (d / "metrics.jsonl").read_text().splitlines()] for d in (full, resumed)]
    assert records[0][-1]["loss/critic"] == records[1][-1]["loss/critic"]  # resumed == uninterrupted, shifts included


def _leaves(tree, prefix=""):
    """``(path, tensor)`` of every tensor in nested dicts."""
    for key, value in tree.items():
        if isinstance(value, dict):
            yield from _leaves(value, f"{prefix}{key}/")
        elif isinstance(value, torch.Tensor):
            yield f"{prefix}{key}", value

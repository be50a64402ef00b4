"""GymVectorEnv against real gymnasium vector envs: both autoreset modes, numpy and NumpyToTorch, sync and async,
a user's constructor, the true final observation of a truncation, training through the platform, and bad input."""

from __future__ import annotations

import json

import gymnasium as gym
import numpy as np
import pytest
import torch

from embodirl.config.envs import GymVectorConfig
from embodirl.config.schema import parse
from embodirl.envs.adapters.gym_vector import GymVectorEnv
from embodirl.errors import ConfigError
from tests.envs.adapters.torch_gymnasium import finished_episodes

TO_TORCH = {"_target_": "gymnasium.wrappers.vector.NumpyToTorch"}
TORCH_CARTPOLE = "tests.envs.adapters.torch_gymnasium.make_torch_cartpole"


@pytest.mark.parametrize("keys", [
    {"make": TORCH_CARTPOLE},  # the user's NumpyToTorch env in gymnasium's default NextStep mode
    {"id": "CartPole-v1", "autoreset_mode": "NextStep"},
    {"id": "CartPole-v1", "autoreset_mode": "NextStep", "wrappers": [TO_TORCH]},
    {"id": "CartPole-v1", "autoreset_mode": "SameStep", "wrappers": [TO_TORCH]},
    {"id": "CartPole-v1", "autoreset_mode": "NextStep", "vectorization_mode": "async"},
], ids=["make-torch-next", "id-numpy-next", "id-torch-next", "id-torch-same", "id-async-next"])
def test_cartpole_episodes_are_as_long_as_their_return(keys):
    # CartPole pays 1 per step: a reset step stored as a transition would make every episode one step longer
    env = GymVectorEnv(parse(GymVectorConfig, {"num_envs": 4, **keys}))
    episodes = finished_episodes(env, 300)
    env.close()
    assert len(episodes) >= 10
    assert all(length == ret for length, ret in episodes), episodes[:5]


def _steps(env: GymVectorEnv, num_steps: int) -> list:
    """The step results of alternating actions (which keep CartPole's pole up: episodes end by truncation)."""
    env.reset(seed=3)
    return [env.step(torch.full((env.num_envs,), t % 2)) for t in range(num_steps)]


def test_next_step_and_same_step_give_the_same_transitions_and_truncation_keeps_the_true_last_observation():
    same, nxt = (GymVectorEnv(GymVectorConfig(id="CartPole-v1", num_envs=3, max_episode_steps=6, autoreset_mode=mode))
                 for mode in ("SameStep", "NextStep"))
    reference = gym.make("CartPole-v1", max_episode_steps=6)
    for a, b in zip(_steps(same, 13), _steps(nxt, 13), strict=True):
        for field in ("obs", "reward", "terminated", "truncated", "final_obs"):
            assert torch.equal(getattr(a, field), getattr(b, field)), field
    results = _steps(nxt, 6)
    last = results[5]
    assert last.truncated.all() and not last.terminated.any()
    assert not torch.equal(last.final_obs, last.obs)  # the next episode starts elsewhere
    # env 0's true last observation: its own first observation stepped 6 times by a plain gymnasium env
    first = nxt.reset(seed=3)[0].numpy()
    reference.reset()
    reference.unwrapped.state = first.astype(np.float64)
    for t in range(6):
        obs, *_ = reference.step(t % 2)
    assert np.allclose(last.final_obs[0].numpy(), obs, atol=1e-6)
    for env in (same, nxt, reference):
        env.close()


def test_trains_through_the_platform_with_honest_episode_statistics(tmp_path, tiny):
    from embodirl.app.run import run_training
    from tests.conftest import compose_config

    cfg = compose_config([*tiny, "env=gym_vector", "env.id=CartPole-v1", "env.autoreset_mode=NextStep",
                          "env.num_envs=8", "env.wrappers=[{_target_: gymnasium.wrappers.vector.NumpyToTorch}]"])
    summary = run_training(cfg, tmp_path)
    assert summary["status"] == "completed"
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    pairs = [(row["episode/length_mean"], row["episode/return_mean"]) for row in rows if "episode/length_mean" in row]
    assert pairs and all(length == pytest.approx(ret) for length, ret in pairs)


class _NoModeVectorEnv(gym.vector.SyncVectorEnv):
    """A vector env that states no autoreset mode (written before gymnasium 1.0, say)."""

    def __init__(self, num_envs: int) -> None:
        super().__init__([lambda: gym.make("CartPole-v1")] * num_envs)
        self.metadata = {key: value for key, value in self.metadata.items() if key != "autoreset_mode"}


@pytest.mark.parametrize(("keys", "message"), [
    ({}, "id=None is invalid: expected a gymnasium id, or null with make set"),
    ({"id": "CartPole-v1", "make": TORCH_CARTPOLE}, "id='CartPole-v1' is invalid"),
    ({"make": TORCH_CARTPOLE, "env_kwargs": {"render_mode": None}}, "env_kwargs={'render_mode': None} is invalid"),
    ({"make": "tests.envs.adapters.test_gym_vector._NoModeVectorEnv"},
     "metadata['autoreset_mode'] is one of NextStep, SameStep, Disabled; it states None"),
    ({"id": "CartPole-v1", "wrappers": ["gymnasium.wrappers.vector.NumpyToTorch"]},
     "wrappers[0]='gymnasium.wrappers.vector.NumpyToTorch' is invalid: expected a _target_ node"),
])
def test_bad_input_is_one_line_naming_the_key(keys, message):
    with pytest.raises(ConfigError, match=None) as err:
        GymVectorEnv(parse(GymVectorConfig, {"num_envs": 2, **keys}))
    text = str(err.value)
    assert message in text and "\n" not in text and "Fix: " in text


def test_cli_refuses_a_missing_id_in_one_line_with_exit_status_2(cli):
    outcome = cli("embodirl-train", ["env=gym_vector", "trainer.total_env_steps=64"])
    assert outcome.code == 2
    lines = [line for line in outcome.err.splitlines() if line.strip()]
    assert len(lines) == 1 and "env.id=None is invalid" in lines[0], outcome.err

"""An exported policy trained with ``env.obs_history`` acts as the torch policy when its driver keeps the history as
the manifest says (``history``, ``history_feed``): step by step, across episode ends."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from tensordict import TensorDict

from embodirl.app.build import build_env
from embodirl.envs.frame_stack import history_lengths
from embodirl.policies.export import DeterministicActor, export_onnx, export_torchscript, history_inputs
from tests.conftest import compose_config
from tests.policies.test_export import needs_onnx, trained_like


def onnx_file(path):
    import onnxruntime

    session = onnxruntime.InferenceSession(str(path))
    return lambda obs: torch.as_tensor(session.run(None, {"obs.state": obs})[0])


def torchscript_file(path):
    module = torch.jit.load(str(path))
    return lambda obs: module(torch.as_tensor(obs))[0]


RUNNERS = [pytest.param((export_onnx, onnx_file, "policy.onnx"), marks=[needs_onnx, pytest.mark.slow], id="onnx"),
           pytest.param((export_torchscript, torchscript_file, "policy.pt"), id="torchscript")]


class Driver:
    """A robot driver's history of one observation key, numpy only, kept as ``history_feed`` describes."""

    def __init__(self, length: int) -> None:
        self.length, self.steps = length, np.zeros(0)

    def start(self, obs: np.ndarray) -> None:  # an episode starts with its first observation `length` times
        self.steps = np.stack([obs] * self.length)

    def append(self, obs: np.ndarray) -> None:  # drop the oldest, append the newest
        self.steps = np.concatenate([self.steps[1:], obs[None]])

    def input(self) -> np.ndarray:  # [N, k D]: the steps side by side, oldest first
        return np.concatenate(list(self.steps), axis=-1)


@pytest.mark.parametrize("runner", RUNNERS)
def test_the_export_with_a_driver_kept_history_acts_as_the_torch_policy_in_the_wrapped_env(tmp_path, runner):
    export, load, name = runner
    overrides = ["env=cartpole", "env.obs_history=3", "env.max_episode_steps=6"]
    policy, _ = trained_like(overrides)
    wrapped = build_env(compose_config(overrides).env, torch.device("cpu"), seed=0, num_envs=16)
    inner = build_env(compose_config(overrides[:1] + overrides[2:]).env, torch.device("cpu"), seed=0, num_envs=16)
    actor = DeterministicActor(policy, wrapped.observation_space, wrapped.action_space)
    (feed,) = history_inputs(actor, history_lengths(wrapped))
    assert feed == {"name": "obs.state", "length": 3, "step_shape": [4]}
    assert [s.shape for s in actor.inputs] == [(12,)]
    export(actor, tmp_path / name)
    run = load(tmp_path / name)
    driver = Driver(feed["length"])
    obs, first = wrapped.reset(seed=5), inner.reset(seed=5)
    driver.start(first.numpy())
    ends = 0
    for _ in range(20):
        assert np.array_equal(driver.input(), obs.numpy())  # the driver's history is the wrapper's
        got = run(driver.input())
        want, _ = policy.mode(TensorDict({"state": obs}, batch_size=[16]), policy.initial_state(16))
        assert torch.equal(got, want)
        out, raw = wrapped.step(got), inner.step(got)
        done = (raw.terminated | raw.truncated).numpy()
        driver.append(raw.obs.numpy())
        driver.steps[:, done] = raw.obs.numpy()[done]  # a new episode: its first observation in every step
        obs, ends = out.obs, ends + int(done.sum())
    assert ends > 16  # every env ended episodes (the time limit is 6 steps) and acted on restarted histories
    wrapped.close()
    inner.close()

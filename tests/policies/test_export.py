"""An exported actor computes what the torch policy computes: the deterministic action, through the observation
normaliser, clipped to the action bounds, and a recurrent policy's memory step by step; read back by onnxruntime
and by ``torch.jit.load``."""

from __future__ import annotations

import importlib.util

import pytest
import torch
from tensordict import TensorDict

from embodirl.app.build import build_env, build_policy
from embodirl.policies.export import DeterministicActor, export_onnx, export_torchscript
from tests.conftest import compose_config

ONNX_MISSING = [name for name in ("onnx", "onnxscript", "onnxruntime") if importlib.util.find_spec(name) is None]
needs_onnx = pytest.mark.skipif(bool(ONNX_MISSING), reason=f"the export extra is not installed (missing: "
                                f"{', '.join(ONNX_MISSING)}): pip install -e '.[export]'")
CPU = torch.device("cpu")


def trained_like(overrides: list[str], obs_scale: float = 3.0, action_gain: float = 1.0):
    """A policy with the spread of a trained one: normaliser statistics away from (0, 1), larger actor weights
    (``action_gain`` scales them further, pushing Box means past the bounds); returns it and its one-env env."""
    cfg = compose_config(["device=cpu", "policy.hidden_sizes=[32,32]", "policy.normalize_obs=true", *overrides])
    env = build_env(cfg.env, CPU, 0, num_envs=1)
    policy = build_policy(cfg.policy, env, CPU)
    assert len(policy.normalizers) == 1
    torch.manual_seed(0)
    with torch.no_grad():
        for module in policy.normalizers.values():
            shape = module.mean.shape
            module.update(torch.randn(512, *shape) * obs_scale + torch.linspace(-2, 2, shape.numel()).view(shape))
        for parameter in policy.actor.parameters():
            parameter.mul_(action_gain * 4.0)
    policy.eval()
    return policy, env


def observations(actor: DeterministicActor, num: int, scale: float = 3.0) -> list[torch.Tensor]:
    """``num`` random observations of each input: floats spread by ``scale``, images uniform over 0..255."""
    generator = torch.Generator().manual_seed(1)
    return [torch.randint(0, 256, (num, *s.shape), generator=generator, dtype=torch.uint8) if s.dtype == torch.uint8
            else (torch.randn(num, *s.shape, generator=generator) * scale).to(s.dtype) for s in actor.inputs]


def torch_actions(policy, actor: DeterministicActor, obs: list[torch.Tensor], space) -> torch.Tensor:
    """The env's action from the torch policy: ``mode`` clipped to the Box (what every embodirl env does)."""
    td = TensorDict(dict(zip(actor.obs_keys, obs, strict=True)), batch_size=[obs[0].shape[0]])
    action, _ = policy.mode(td, policy.initial_state(obs[0].shape[0]))
    if hasattr(space, "low"):
        action = action.clamp(torch.as_tensor(space.low), torch.as_tensor(space.high))
    return action


def run_onnx(path, actor: DeterministicActor, tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    import onnxruntime

    session = onnxruntime.InferenceSession(str(path))
    names = [s.name for s in (*actor.inputs, *actor.state)]
    return [torch.as_tensor(out) for out in session.run(None, {n: t.numpy() for n, t in zip(names, tensors,
                                                                                             strict=True)})]


def run_torchscript(path, actor: DeterministicActor, tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    return list(torch.jit.load(str(path))(*tensors))


SLOW = pytest.mark.slow  # the fast tier keeps one Discrete and one Box case of each test
ONNX = (export_onnx, run_onnx, "policy.onnx")
TORCHSCRIPT = (export_torchscript, run_torchscript, "policy.pt")
# An ONNX export traces through torch.export, which loads dynamo (seconds per process): the fast tier exports to
# TorchScript only; CI runs every case in both formats.
RUNNERS = {"onnx": pytest.param(ONNX, marks=[needs_onnx, SLOW], id="onnx"),
           "torchscript": pytest.param(TORCHSCRIPT, id="torchscript")}
FEEDFORWARD = {
    "cartpole": ["env=cartpole"],
    "push_cube": ["env=push_cube"],
    "push_cube-beta": ["env=push_cube", "policy=actor_only", "+policy/distribution@policy.distribution=beta"],
    "push_cube-pixels": ["experiment=ppo_push_cube_rgb", "env.image_size=32"],  # uint8 through a CNN
    "push_cube-chunks": ["env=push_cube", "policy.action_chunk=4", "policy.chunk_execute=2"],  # [batch, 4, 2]
    "cartpole-chunks": ["env=cartpole", "policy.action_chunk=3"],  # [batch, 3]
}
FAST_FEEDFORWARD = {("cartpole", "torchscript"), ("push_cube", "torchscript"),
                    ("push_cube-chunks", "torchscript")}


def feedforward_cases() -> list:
    """Every FEEDFORWARD case in both formats (ids ``case-format``), slow unless in FAST_FEEDFORWARD."""
    cases = []
    for case, overrides in FEEDFORWARD.items():
        for fmt, runner in (("onnx", ONNX), ("torchscript", TORCHSCRIPT)):
            marks = [needs_onnx] if fmt == "onnx" else []
            if (case, fmt) not in FAST_FEEDFORWARD:
                marks.append(SLOW)
            cases.append(pytest.param(overrides, runner, marks=marks, id=f"{case}-{fmt}"))
    return cases


@pytest.mark.parametrize(("overrides", "runner"), feedforward_cases())
def test_an_exported_mlp_acts_as_the_torch_policy_on_1000_observations(tmp_path, runner, overrides):
    export, run, name = runner
    policy, env = trained_like(overrides)
    actor = DeterministicActor(policy, env.observation_space, env.action_space)
    if "experiment=ppo_push_cube_rgb" in overrides:  # the critic's privileged state is no input of the actor
        assert [(s.name, s.dtype) for s in actor.inputs] == [("obs.rgb", torch.uint8)]
    export(actor, tmp_path / name)
    obs = observations(actor, 1000)
    expected = torch_actions(policy, actor, obs, env.action_space)
    chunk = next((int(o.split("=")[1]) for o in overrides if o.startswith("policy.action_chunk=")), 1)
    assert actor.action_chunk == chunk and (chunk == 1 or expected.shape[1] == chunk)  # the export emits the chunk
    (got,) = run(tmp_path / name, actor, obs)
    assert got.shape == expected.shape and got.dtype == expected.dtype
    if expected.dtype == torch.int64:
        assert torch.equal(got, expected)
        assert 0 < expected.sum() < expected.numel()  # both actions occur: the comparison can tell them apart
    else:
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("runner", RUNNERS.values())
def test_the_normalizer_and_the_clip_are_inside_the_export(tmp_path, runner):
    export, run, name = runner
    policy, env = trained_like(["env=push_cube"], action_gain=4.0)
    actor = DeterministicActor(policy, env.observation_space, env.action_space)
    export(actor, tmp_path / name)
    obs = observations(actor, 1000)
    (got,) = run(tmp_path / name, actor, obs)
    assert got.min() == -1.0 and got.max() == 1.0  # means beyond the bounds arrive clipped, as the env clips them
    assert ((got > -1) & (got < 1)).any()
    with torch.no_grad():  # the same network without the normaliser's statistics acts differently
        for module in policy.normalizers.values():
            module.mean.zero_()
            module.var.fill_(1.0)
    assert not torch.allclose(torch_actions(policy, actor, obs, env.action_space), got, atol=1e-3)


RECURRENT = {"gru-cartpole": ["policy=actor_critic_rnn", "env=cartpole"],
             "lstm-push_cube": pytest.param(["policy=actor_critic_rnn", "policy.core=lstm", "env=push_cube"],
                                            marks=SLOW)}


@pytest.mark.parametrize("runner", RUNNERS.values())
@pytest.mark.parametrize("overrides", RECURRENT.values(), ids=RECURRENT.keys())
def test_an_exported_recurrent_policy_carries_its_state_as_the_torch_policy_does(tmp_path, runner, overrides):
    export, run, name = runner
    policy, env = trained_like(overrides)
    actor = DeterministicActor(policy, env.observation_space, env.action_space)
    fields = ["h", "c"] if "policy.core=lstm" in overrides else ["h"]
    assert [s.name for s in actor.state] == [f"state.actor.{f}" for f in fields]  # the critic's memory is no input
    assert [s.name for s in actor.outputs] == ["action", *(f"next_state.actor.{f}" for f in fields)]
    export(actor, tmp_path / name)
    batch, steps = 20, 50  # 1,000 observations, 50 steps of 20 episodes
    sequence = observations(actor, batch * steps)[0].view(steps, batch, *actor.inputs[0].shape)
    state_td = policy.initial_state(batch)
    state = [torch.zeros(batch, *s.shape) for s in actor.state]
    for t in range(steps):
        td = TensorDict({actor.obs_keys[0]: sequence[t]}, batch_size=[batch])
        expected, state_td = policy.mode(td, state_td)
        if expected.is_floating_point():
            expected = expected.clamp(-1.0, 1.0)
        got, *state = run(tmp_path / name, actor, [sequence[t], *state])
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)
        for field, value in zip(fields, state, strict=True):
            torch.testing.assert_close(value, state_td["actor", field], rtol=1e-4, atol=1e-4)
    assert state[0].abs().max() > 0.1  # the memory moved: the test compared a state, not zeros


def test_a_dict_observation_is_one_input_per_key():
    from gymnasium import spaces

    cfg = compose_config(["device=cpu", "policy=actor_only", "policy.hidden_sizes=[8]"])
    obs_space = spaces.Dict({"agent": spaces.Dict({"qpos": spaces.Box(-1, 1, (3,))}), "goal": spaces.Box(-1, 1, (2,))})
    from embodirl.config.instantiate import instantiate, to_node
    from embodirl.config.policies import PolicyNode

    policy = instantiate(to_node(cfg.policy, "policy.", PolicyNode), "policy.", observation_space=obs_space,
                         action_space=spaces.Box(-0.5, 0.5, (2,))).eval()
    actor = DeterministicActor(policy, obs_space, spaces.Box(-0.5, 0.5, (2,)))
    assert [(s.name, s.shape) for s in actor.inputs] == [("obs.agent.qpos", (3,)), ("obs.goal", (2,))]
    qpos, goal = torch.randn(5, 3), torch.randn(5, 2)
    td = TensorDict({"agent": {"qpos": qpos}, "goal": goal}, batch_size=[5])
    (action,) = actor(qpos, goal)
    torch.testing.assert_close(action, policy.mode(td)[0].clamp(-0.5, 0.5))

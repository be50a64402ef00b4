"""CartPole's fast paths (:mod:`embodirl.envs.fast_paths`): the plain env's numbers, bit for bit, wherever they run."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from embodirl.app.build import build_env
from embodirl.config.envs import CartPoleConfig, PushCubeConfig
from embodirl.config.randomize import RandomizeConfig
from embodirl.envs import fast_paths
from embodirl.envs.cartpole import CartPole
from embodirl.envs.fast_paths import HostStep, add_fast_paths
from embodirl.envs.push_cube.env import PushCube
from embodirl.envs.rng import StartCache, StartDraws
from tests.conftest import compose_config, representatives

RANDOMIZED = {name: RandomizeConfig(range=(0.5, 2.0), dist="log_uniform") for name in CartPoleConfig.randomizable}
CASES = {  # config, whether the fast env steps in numpy
    "float64": ({}, True),
    "float32": ({"physics_dtype": "float32"}, True),
    "hidden_velocities": ({"hide_velocities": True}, True),
    "above_host_max_envs": ({}, False),  # HOST_MAX_ENVS lowered below num_envs: the memo with the torch step
    "randomized": ({"randomize": RANDOMIZED}, False),
}


def controller(state: torch.Tensor) -> np.ndarray:
    """A linear controller that balances most starts: episodes reach the time limit as well as falling."""
    x, x_dot, theta, theta_dot = state.numpy().T
    return (theta + 0.3 * theta_dot + 0.01 * x + 0.1 * x_dot > 0).astype(np.int64)


def assert_same_step(fast, plain, what: str) -> None:
    for name, x, y in zip(("obs", "reward", "terminated", "truncated", "final_obs"), fast[:5], plain[:5], strict=True):
        assert x.dtype == y.dtype and torch.equal(x, y), f"{name} differs {what}"
    assert fast.info.keys() == plain.info.keys() and all(torch.equal(fast.info[k], plain.info[k]) for k in fast.info)


@pytest.mark.parametrize("case", representatives(["float64", "above_host_max_envs"], {key: key for key in CASES}))
def test_the_fast_env_steps_like_the_plain_one_bit_for_bit(monkeypatch, case):
    """Terminations, time limits and auto-resets (memoised starts), and everything that moves the reset stream
    outside a step while the memo is mid-period: a reset to a new seed, a group reset, the plain env's snapshot and
    an earlier one restored, a restart, a moved randomization range. The memo must notice each by itself."""
    keys, on_host = CASES[case]
    if case == "above_host_max_envs":
        monkeypatch.setattr(fast_paths, "HOST_MAX_ENVS", 32)
    cfg = CartPoleConfig(num_envs=64, max_episode_steps=60, **keys)
    fast, plain = add_fast_paths(CartPole(cfg, seed=4)), CartPole(cfg, seed=4)
    assert isinstance(fast.starts, StartCache) and type(plain.starts) is StartDraws
    assert isinstance(vars(fast).get("step"), HostStep) == on_host and "step" not in vars(plain)
    rng = np.random.default_rng(1)
    ends = {"terminated": 0, "truncated": 0}
    for t in range(400):
        actions = torch.from_numpy(np.where(rng.random(64) < 0.5, controller(plain.state_dict()["state"]),
                                            rng.integers(0, 2, size=64)))
        a, b = fast.step(actions), plain.step(actions)
        assert_same_step(a, b, f"at step {t}")
        ends["terminated"] += int(a.terminated.sum())
        ends["truncated"] += int(a.truncated.sum())
        if t == 40:
            early = plain.state_dict()
        if t in (71, 93):  # a reset to a new seed mid-way through the memo's period, then a group reset
            seed, group_size = (9, 1) if t == 71 else (None, 4)
            assert torch.equal(fast.reset(seed, group_size), plain.reset(seed, group_size))
        if t == 150 and plain.randomization is not None:
            for env in (fast, plain):
                env.set_randomize_range("pole_length", 0.9, 1.1)
        if t == 203:  # the plain env's snapshot into the fast one, taken after a few steps of its own
            for act in (actions, 1 - actions, actions):
                plain.step(act)
            fast.load_state_dict(plain.state_dict())
        if t == 250:  # back to an earlier snapshot: the first seed, fewer episodes
            for env in (fast, plain):
                env.load_state_dict(early)
        if t == 301:
            mask = torch.arange(64) % 3 == 0
            assert torch.equal(fast.restart(mask), plain.restart(mask))
    assert ends["terminated"] >= 50 and ends["truncated"] >= 5, ends
    for key, value in plain.state_dict().items():
        assert torch.equal(fast.state_dict()[key], value), key


def test_the_build_adds_the_fast_paths_once_and_passes_other_envs_through():
    cpu = torch.device("cpu")
    built = build_env(compose_config(["env.num_envs=16"]).env, cpu, seed=0)
    assert isinstance(built, CartPole) and isinstance(built.starts, StartCache)
    assert isinstance(vars(built)["step"], HostStep)
    step, starts = built.step, built.starts
    assert add_fast_paths(built) is built and built.step is step and built.starts is starts  # no second layer
    noisy = build_env(compose_config(["env.num_envs=16", "env.obs_noise=0.1"]).env, cpu, seed=0)
    assert isinstance(noisy.unwrapped.starts, StartCache)  # fast inside the wrappers too
    push_cube = PushCube(PushCubeConfig(num_envs=2))
    assert add_fast_paths(push_cube) is push_cube and "step" not in vars(push_cube)


def test_a_bad_action_is_named_on_the_numpy_path_too():
    env = add_fast_paths(CartPole(CartPoleConfig(num_envs=8)))
    with pytest.raises(ValueError, match=r"action has shape \(4,\), expected \(8,\) or \(8, 1\)"):
        env.step(torch.zeros(4, dtype=torch.int64))


@pytest.mark.slow
def test_the_fast_env_compiles_into_one_graph_and_equals_the_eager_fast_env():
    """Compiled, the numpy step hands over to the torch step and the memo draws inline: one graph, no recompile
    when eager and compiled steps alternate, the eager env's numbers (cos/sin: 1 ulp, see tests/envs/test_compile)."""
    import torch._dynamo  # here, not at the top: collecting the fast tier must not import dynamo (the slowest import)
    torch._dynamo.reset()
    cfg = CartPoleConfig(num_envs=16, max_episode_steps=20)
    compiled_env, eager_env = add_fast_paths(CartPole(cfg, seed=3)), add_fast_paths(CartPole(cfg, seed=3))
    actions = iter(torch.randint(0, 2, (200, 16), generator=torch.Generator().manual_seed(0)))
    explanation = torch._dynamo.explain(compiled_env.step)(torch.zeros(16, dtype=torch.int64))
    assert explanation.graph_count == 1 and explanation.graph_break_count == 0
    compiled_env.load_state_dict(eager_env.state_dict())
    step = torch.compile(compiled_env.step, fullgraph=True, backend="eager")
    with torch._dynamo.config.patch(error_on_recompile=True):
        for run_compiled in (False, True, False, True):  # eager steps between compiled ones refill the memo
            for _ in range(45):
                action = next(actions)
                got, want = (step if run_compiled else compiled_env.step)(action), eager_env.step(action)
                torch.testing.assert_close(got.final_obs, want.final_obs, rtol=1e-6, atol=1e-6)
                assert torch.equal(got.terminated, want.terminated) and torch.equal(got.truncated, want.truncated)
    torch._dynamo.reset()

"""CartPole: bit-exact agreement with gymnasium's CartPole-v1, reset streams, auto-reset, stats, snapshots."""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest
import torch

from embodirl.config.envs import CartPoleConfig
from embodirl.config.schema import parse
from embodirl.envs.cartpole import CartPole, episode_ends, euler_step
from embodirl.envs.fast_paths import add_fast_paths
from embodirl.envs.rng import hash_uniform
from embodirl.errors import ConfigError

THETA_LIMIT = 12 * 2 * math.pi / 360


def controller(state: np.ndarray | torch.Tensor) -> np.ndarray:
    """A linear controller that keeps the pole up for the full 500 steps (checked by the tests)."""
    x, x_dot, theta, theta_dot = (np.asarray(state, dtype=np.float64).reshape(-1, 4).T)
    return (theta + 0.3 * theta_dot + 0.01 * x + 0.1 * x_dot > 0).astype(np.int64)


def set_states(env: CartPole, states: dict[int, np.ndarray]) -> None:
    """Put env ``i`` into physics state ``states[i]`` (float64 [4]) through the public snapshot API."""
    snapshot = env.state_dict()
    for i, s in states.items():
        snapshot["state"][i] = torch.from_numpy(np.asarray(s, dtype=np.float64))
        snapshot["obs"][i] = torch.from_numpy(np.asarray(s, dtype=np.float32))
    env.load_state_dict(snapshot)


def random_actions(num_envs: int, num_steps: int, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, 2, (num_steps, num_envs), generator=torch.Generator().manual_seed(seed))


def test_float64_trajectories_equal_gymnasium_bit_for_bit():
    """Envs 0-1 balance (episodes run into the 500-step limit), envs 2-3 act randomly (they fall)."""
    num_envs, num_steps = 4, 1100
    env = CartPole(CartPoleConfig(num_envs=num_envs))
    refs = [gym.make("CartPole-v1") for _ in range(num_envs)]
    for i, ref in enumerate(refs):
        ref.reset(seed=100 + i)
    set_states(env, {i: ref.unwrapped.state for i, ref in enumerate(refs)})
    rng = np.random.default_rng(0)
    lengths, ends = np.zeros(num_envs, dtype=int), {"terminated": [], "truncated": []}
    for _ in range(num_steps):
        states = np.stack([ref.unwrapped.state for ref in refs])
        actions = np.concatenate([controller(states[:2]), rng.integers(0, 2, size=2)])
        step = env.step(torch.from_numpy(actions))
        resync = {}
        for i, ref in enumerate(refs):
            obs, reward, terminated, truncated, _ = ref.step(int(actions[i]))
            lengths[i] += 1
            assert np.array_equal(step.final_obs[i].numpy(), obs), f"env {i} diverged after {lengths[i]} steps"
            if not (terminated or truncated):  # the float64 physics state itself, not just its float32 view
                assert np.array_equal(env.state_dict()["state"][i].numpy(), ref.unwrapped.state)
            assert step.reward[i].item() == reward
            assert step.terminated[i].item() == terminated
            assert step.truncated[i].item() == (truncated and not terminated)
            if terminated or truncated:
                ends["terminated" if terminated else "truncated"].append((i, int(lengths[i])))
                lengths[i] = 0
                ref.reset()
                resync[i] = ref.unwrapped.state
            else:
                assert np.array_equal(step.obs[i].numpy(), obs)
        set_states(env, resync)
    assert {i for i, _ in ends["truncated"]} == {0, 1}, "the controller should reach the time limit"
    assert all(length == 500 for _, length in ends["truncated"])
    assert len(ends["terminated"]) >= 20 and {i for i, _ in ends["terminated"]} == {2, 3}


def test_terminating_on_the_last_allowed_step_is_not_a_truncation():
    """gymnasium's TimeLimit reports terminated and truncated; the contract keeps truncated for cuts only."""
    limit = 5
    ref = gym.make("CartPole-v1", max_episode_steps=limit)
    env = CartPole(CartPoleConfig(num_envs=1, max_episode_steps=limit))
    for x0 in np.linspace(2.0, 2.4, 401):  # find a start from which pushing right ends exactly at step 5
        ref.reset(seed=0)
        ref.unwrapped.state = start = np.array([x0, 1.0, 0.0, 0.0])
        results = [ref.step(1) for _ in range(limit)]
        if not any(r[2] for r in results[:-1]) and results[-1][2]:
            break
    else:
        pytest.fail("no start state terminates exactly on the last step")
    assert results[-1][2] and results[-1][3], "gymnasium sets both flags here"
    set_states(env, {0: start})
    for t in range(limit):
        step = env.step(torch.ones(1, dtype=torch.int64))
        assert np.array_equal(step.final_obs[0].numpy(), results[t][0])
    assert step.terminated.tolist() == [True] and step.truncated.tolist() == [False]


@pytest.mark.parametrize("xp", [torch, np], ids=["torch", "numpy"])
def test_euler_step_by_hand(xp):
    """Upright and at rest, pushed right with 10 N: temp = 10 / 1.1 = 100/11, the denominator is
    0.5 (4/3 - 0.1/1.1) = 41/66, so thetaacc = -(100/11) / (41/66) = -600/41 and
    xacc = 100/11 + 0.05 (600/41) / 1.1 = 400/41; the velocities gain 0.02 x that. A pole leaning by
    0.1 rad at rest, pushed left: the same formulas with cos/sin of 0.1 (computed here in Python floats)."""
    state = xp.asarray([[0.0, 0.0, 0.0, 0.0], [0.5, 0.0, 0.1, 0.0]], dtype=xp.float64)
    force = xp.asarray([10.0, -10.0], dtype=xp.float64)
    theta = 0.1
    temp = -10.0 / 1.1
    thetaacc = (9.8 * math.sin(theta) - math.cos(theta) * temp) / (0.5 * (4 / 3 - 0.1 * math.cos(theta) ** 2 / 1.1))
    xacc = temp - 0.05 * thetaacc * math.cos(theta) / 1.1
    cos = xp.asarray([1.0, math.cos(theta)], dtype=xp.float64)
    sin = xp.asarray([0.0, math.sin(theta)], dtype=xp.float64)
    new = euler_step(state, force, cos, sin, xp.stack)
    expected = [[0.0, 0.02 * 400 / 41, 0.0, -0.02 * 600 / 41], [0.5, 0.02 * xacc, 0.1, 0.02 * thetaacc]]
    np.testing.assert_allclose(np.asarray(new), expected, rtol=1e-12, atol=1e-15)
    assert thetaacc > 0 and xacc < 0, "the leaning pole falls further; the left push accelerates the cart left"


@pytest.mark.parametrize("xp", [torch, np], ids=["torch", "numpy"])
def test_episode_ends_by_hand(xp):
    """Inside the bounds; cart beyond 2.4 m; pole beyond 12 degrees (negative side); inside at the time limit;
    beyond a bound at the time limit (terminated, not truncated). Velocities are unbounded."""
    limit = 12 * 2 * math.pi / 360
    state = xp.asarray([[2.3, 50.0, 0.1, -50.0], [2.41, 0.0, 0.0, 0.0], [0.0, 0.0, -limit - 1e-9, 0.0],
                        [0.0, 0.0, 0.0, 0.0], [-2.5, 0.0, 0.0, 0.0]], dtype=xp.float64)
    steps = xp.asarray([3, 3, 3, 500, 500])
    limits = xp.asarray([2.4, math.inf, limit, math.inf], dtype=xp.float64)
    terminated, truncated, done = (np.asarray(x).tolist() for x in episode_ends(state, steps, limits, 500))
    assert terminated == [False, True, True, False, True]
    assert truncated == [False, False, False, True, False]
    assert done == [False, True, True, True, True]


def test_float32_physics_tracks_float64_for_short_horizons():
    env64, env32 = CartPole(CartPoleConfig(num_envs=64),
                            seed=3), CartPole(CartPoleConfig(num_envs=64, physics_dtype="float32"), seed=3)
    assert torch.equal(env64.reset(seed=3), env32.reset(seed=3))
    actions = random_actions(64, 8)
    for a in actions:  # random actions end no episode within 8 steps
        s64, s32 = env64.step(a), env32.step(a)
        torch.testing.assert_close(s32.obs, s64.obs, rtol=0, atol=1e-5)
        assert torch.equal(s32.terminated, s64.terminated)


def test_same_seed_same_trajectories_and_seed_none_continues_the_stream():
    a, b = CartPole(CartPoleConfig(num_envs=16), seed=7), CartPole(CartPoleConfig(num_envs=16), seed=7)
    first = a.reset(seed=7)
    assert torch.equal(first, b.reset(seed=7))
    for act in random_actions(16, 200):
        sa, sb = a.step(act), b.step(act)
        assert all(torch.equal(x, y) for x, y in zip(sa[:5], sb[:5], strict=True))
    assert not torch.equal(a.reset(), first), "reset(seed=None) must draw fresh states"
    assert torch.equal(a.reset(seed=7), first), "reset(seed=s) restarts the stream"
    assert not torch.equal(CartPole(CartPoleConfig(num_envs=16), seed=8).reset(seed=8), first)
    assert first.abs().max() < 0.05


def test_env_draws_do_not_depend_on_num_envs():
    small, large = CartPole(CartPoleConfig(num_envs=4),
                            seed=5), CartPole(CartPoleConfig(num_envs=2048), seed=5)  # different reset caches
    assert torch.equal(small.reset(seed=5), large.reset(seed=5)[:4])
    actions = random_actions(2048, 150, seed=1)
    resets = 0
    for act in actions:
        s_small, s_large = small.step(act[:4]), large.step(act)
        assert torch.equal(s_small.obs, s_large.obs[:4]) and torch.equal(s_small.final_obs, s_large.final_obs[:4])
        resets += int(s_small.terminated.sum())
    assert resets >= 10, "random actions should end several episodes (auto-reset draws compared)"


@pytest.mark.parametrize("fast", [False, True], ids=["plain", "fast_paths"])
def test_reset_states_follow_the_documented_hash_streams(fast):
    """Explicit reset: key i // g, counter 2**31 + r; auto-reset: key i, counter = episode number."""
    env = CartPole(CartPoleConfig(num_envs=6, max_episode_steps=1), seed=0)  # every step auto-resets every env
    if fast:
        add_fast_paths(env)
        assert env.starts.period == 64
    ids = torch.arange(6)
    for r, g in enumerate([1, 3, 2]):
        expected = hash_uniform(21, ids // g, torch.full((6,), 2**31 + r), 4, -0.05, 0.05).float()
        assert torch.equal(env.reset(seed=21 if r == 0 else None, group_size=g), expected)
    for k in range(1, 3 * 64 + 2):  # with the fast paths, several refills of their memo of 64 episodes per env
        step = env.step(torch.zeros(6, dtype=torch.int64))
        assert step.truncated.all()
        expected = hash_uniform(21, ids, torch.full((6,), 2 + k), 4, -0.05, 0.05).float()  # 2 resets with seed None
        assert torch.equal(step.obs, expected), f"auto-reset {k}"


def test_group_shared_reset():
    env = CartPole(CartPoleConfig(num_envs=16), seed=2)
    obs = env.reset(seed=2, group_size=4).view(4, 4, 4)
    assert torch.equal(obs, obs[:, :1].expand_as(obs)), "members of a group share the initial state"
    distinct = {tuple(g[0].tolist()) for g in obs}
    assert len(distinct) == 4, "groups start from different states"
    again = env.reset(seed=None, group_size=4).view(4, 4, 4)
    assert torch.equal(again, again[:, :1].expand_as(again)) and not torch.equal(again, obs)
    independent = env.reset(group_size=1)
    assert len({tuple(o.tolist()) for o in independent}) == 16
    big = CartPole(CartPoleConfig(num_envs=64), seed=2)
    assert torch.equal(big.reset(seed=2, group_size=4)[:16], obs.view(16, 4))


def test_auto_reset_reports_the_true_final_observation():
    env = CartPole(CartPoleConfig(num_envs=32), seed=4)
    seen_done = False
    for act in random_actions(32, 60):
        step = env.step(act)
        done = step.terminated | step.truncated
        assert torch.equal(step.final_obs[~done], step.obs[~done])
        if done.any():
            seen_done = True
            final = step.final_obs[done]
            assert ((final[:, 0].abs() > 2.4) | (final[:, 2].abs() > THETA_LIMIT)).all()
            assert (step.obs[done] != final).any(dim=1).all()
            assert step.obs[done].abs().max() < 0.05, "done envs restart from the reset distribution"
        assert torch.equal(step.reward, torch.ones(32))
    assert seen_done


def test_time_limit_truncates_and_restarts_the_count():
    env = CartPole(CartPoleConfig(num_envs=8, max_episode_steps=10), seed=0)
    for t in range(1, 31):
        step = env.step(torch.from_numpy(controller(env.state_dict()["state"])))
        assert not step.terminated.any()
        assert step.truncated.all().item() == (t % 10 == 0) and step.truncated.any().item() == (t % 10 == 0)
        assert torch.equal(env.state_dict()["steps"], torch.full((8,), t % 10))


def test_state_dict_round_trip_continues_bit_identically():
    env = CartPole(CartPoleConfig(num_envs=8), seed=11)
    actions = random_actions(8, 337, seed=5)
    for act in actions[:37]:
        env.step(act)
    snapshot = env.state_dict()
    restored = CartPole(CartPoleConfig(num_envs=8), seed=999)
    restored.load_state_dict(snapshot)
    for act in actions[37:]:
        s1, s2 = env.step(act), restored.step(act)
        assert all(torch.equal(x, y) for x, y in zip(s1[:5], s2[:5], strict=True))
    assert torch.equal(env.reset(), restored.reset()), "the reset stream continues identically too"
    snapshot["state"].fill_(1.0)  # a snapshot holds copies
    assert not torch.equal(restored.state_dict()["state"], snapshot["state"])
    with pytest.raises(ValueError, match="num_envs"):
        CartPole(CartPoleConfig(num_envs=4)).load_state_dict(env.state_dict())


@pytest.mark.parametrize("physics_dtype", ["float64", "float32"])
def test_returned_tensors_are_never_changed_by_later_steps(physics_dtype):
    """Callers keep what reset and step return (the collector stores an observation after the next step);
    float32 physics once returned its state buffer itself as obs and final_obs."""
    env = CartPole(CartPoleConfig(num_envs=8, max_episode_steps=5, physics_dtype=physics_dtype), seed=0)
    first = env.reset(seed=0)
    kept = [(first, first.clone())]
    for act in random_actions(8, 12):
        step = env.step(act)
        kept += [(x, x.clone()) for x in step[:5]]
    snapshot = env.state_dict()
    kept += [(x, x.clone()) for x in snapshot.values()]
    env.step(random_actions(8, 1)[0])
    assert all(torch.equal(x, copy) for x, copy in kept)


def test_action_formats_agree():
    actions = random_actions(8, 40, seed=6)
    formats = [lambda a: a, lambda a: a.float().unsqueeze(1), lambda a: a.bool(), lambda a: a.to(torch.bfloat16),
               lambda a: a.float().requires_grad_()]
    runs = []
    for fmt in formats:
        env = CartPole(CartPoleConfig(num_envs=8), seed=1)
        runs.append([env.step(fmt(a)).final_obs for a in actions])
    assert all(torch.equal(x, y) for run in runs[1:] for x, y in zip(runs[0], run, strict=True))
    with pytest.raises(ValueError, match="shape"):
        CartPole(CartPoleConfig(num_envs=8)).step(torch.zeros(4, dtype=torch.int64))


def test_spaces_and_threshold_match_gymnasium():
    env, ref = CartPole(CartPoleConfig(num_envs=2)), gym.make("CartPole-v1")
    assert env.observation_space == ref.observation_space
    assert env.action_space == ref.action_space
    assert env.solved_threshold == ref.spec.reward_threshold == 475.0
    assert env.max_episode_steps == ref.spec.max_episode_steps == 500
    step = env.step(torch.zeros(2, dtype=torch.int64))
    assert step.obs.dtype == step.final_obs.dtype == step.reward.dtype == torch.float32
    assert step.terminated.dtype == step.truncated.dtype == torch.bool


@pytest.mark.parametrize(
    ("kwargs", "key"),
    [({"num_envs": 0}, "num_envs"), ({"num_envs": True}, "num_envs"), ({"num_envs": 2.5}, "num_envs"),
     ({"max_episode_steps": 0}, "max_episode_steps"), ({"physics_dtype": "float16"}, "physics_dtype"),
     ({"hide_velocities": "yes"}, "hide_velocities"), ({"solved_metric": "return"}, "solved_metric")],
)
def test_bad_config_raises_config_error_naming_the_key(kwargs, key):
    with pytest.raises(ConfigError, match=f"^{key}=") as info:
        parse(CartPoleConfig, kwargs)
    assert info.value.key == key


@pytest.mark.parametrize("group_size", [0, 3, 16, 2.0])
def test_bad_group_size(group_size):
    env = CartPole(CartPoleConfig(num_envs=8))
    with pytest.raises(ConfigError, match=r"^group_size="):
        env.reset(group_size=group_size)


@pytest.mark.gpu
def test_cuda_matches_cpu_without_host_syncs():
    cpu, gpu = CartPole(CartPoleConfig(num_envs=256),
                        seed=3), CartPole(CartPoleConfig(num_envs=256), seed=3, device="cuda")
    assert torch.equal(cpu.reset(seed=3), gpu.reset(seed=3).cpu())
    actions = random_actions(256, 40, seed=8)
    gpu_actions = actions.cuda()  # host-to-device copies synchronise; do them before checking
    torch.cuda.set_sync_debug_mode("error")
    try:
        steps = [gpu.step(a) for a in gpu_actions]
    finally:
        torch.cuda.set_sync_debug_mode("default")
    for a, s_gpu in zip(actions, steps, strict=True):
        s_cpu = cpu.step(a)
        assert s_gpu.obs.device.type == "cuda"
        torch.testing.assert_close(s_gpu.final_obs.cpu(), s_cpu.final_obs, rtol=0, atol=1e-5)
        assert torch.equal(s_gpu.terminated.cpu(), s_cpu.terminated)


def test_hidden_velocities_observe_position_and_angle_of_the_same_trajectory():
    full, hidden = CartPole(CartPoleConfig(num_envs=8),
                            seed=4), CartPole(CartPoleConfig(num_envs=8, hide_velocities=True), seed=4)
    assert hidden.observation_space.shape == (2,)
    obs_full, obs_hidden = full.reset(seed=4), hidden.reset(seed=4)
    assert torch.equal(obs_hidden, obs_full[:, [0, 2]])
    for act in random_actions(8, 60, seed=6):  # random play: episodes end and auto-reset
        a, b = full.step(act), hidden.step(act)
        assert torch.equal(b.obs, a.obs[:, [0, 2]]) and torch.equal(b.final_obs, a.final_obs[:, [0, 2]])
        assert torch.equal(a.terminated, b.terminated) and torch.equal(a.truncated, b.truncated)


def _pixels(frame, rgb):
    return np.argwhere((frame == np.array(rgb, dtype=np.uint8)).all(axis=-1))


def test_render_draws_the_cart_where_it_is_and_the_pole_as_it_leans():
    env = CartPole(CartPoleConfig(num_envs=3))
    env._state.copy_(torch.tensor([[0.0, 0, 0.0, 0], [1.2, 0, 0.0, 0], [0.0, 0, 0.3, 0]], dtype=torch.float64))
    frames = env.render(size=96)
    assert frames.shape == (3, 96, 96, 3) and frames.dtype == np.uint8
    assert env.render([2], 96).shape == (1, 96, 96, 3) and np.array_equal(env.render([2], 96)[0], frames[2])
    pole = (202, 152, 101)
    cart_columns = [_pixels(f[: int(96 * 0.7) - 1], (0, 0, 0))[:, 1].mean() for f in frames[:2]]
    # 96 px span 4.8 m: x = 1.2 m moves the cart 24 px right of the centre (48).
    assert cart_columns[0] == pytest.approx(48, abs=1) and cart_columns[1] == pytest.approx(72, abs=1)
    upright, leaning = _pixels(frames[0], pole), _pixels(frames[2], pole)
    assert np.ptp(upright[:, 1]) <= 2  # a vertical bar
    top = leaning[leaning[:, 0].argmin()]  # the tip is up and right of the axle: 1 m * sin(0.3) = 5.9 px
    assert top[1] - 48 == pytest.approx(20 * math.sin(0.3), abs=1.5)
    assert not np.array_equal(frames[0], frames[1]) and not np.array_equal(frames[0], frames[2])

"""Frame stacking: the last k frames of each image key, oldest first, restarted per env at an episode's start."""

import gymnasium as gym
import pytest
import torch

from embodirl.app.build import build_env
from embodirl.config.envs import PushCubeConfig
from embodirl.envs.frame_stack import FrameStack
from embodirl.envs.push_cube.env import PushCube
from embodirl.errors import ConfigError
from tests.conftest import compose_config


def _push_cube(**keys) -> PushCube:
    cfg = PushCubeConfig(num_envs=3, obs_mode="state_rgb", image_size=16, max_episode_steps=3, **keys)
    return PushCube(cfg, device="cpu", seed=0)


def test_stacks_hold_the_last_frames_oldest_first_and_restart_per_env():
    inner, stacked = _push_cube(), FrameStack(_push_cube(), 3)
    assert stacked.observation_space["rgb"].shape == (16, 16, 9)
    assert stacked.observation_space["state"] == inner.observation_space["state"]  # vectors are not stacked
    frames = [inner.reset(seed=0)["rgb"]]
    obs = stacked.reset(seed=0)
    # the first observation: its first frame three times
    assert torch.equal(obs["rgb"], torch.cat([frames[0]] * 3, dim=-1))
    action = torch.tensor([[1.0, 0.0], [0.0, 1.0], [-1.0, -1.0]])
    for t in range(1, 3):
        out, expected = inner.step(action), stacked.step(action)
        frames.append(out.obs["rgb"])
        oldest = [frames[max(0, t - 2)], frames[max(0, t - 1)], frames[t]]  # [f0, f0, f1] then [f0, f1, f2]
        assert torch.equal(expected.obs["rgb"], torch.cat(oldest, dim=-1))
        assert torch.equal(expected.obs["state"], out.obs["state"])
    # step 3 ends every episode (max_episode_steps=3): the new stack is the next episode's first frame only, the
    # final one the finished episode's last three frames
    out, expected = inner.step(action), stacked.step(action)
    assert bool(out.truncated.all())
    assert torch.equal(expected.obs["rgb"], torch.cat([out.obs["rgb"]] * 3, dim=-1))
    assert torch.equal(expected.final_obs["rgb"], torch.cat([frames[1], frames[2], out.final_obs["rgb"]], dim=-1))
    assert not torch.equal(out.obs["rgb"], out.final_obs["rgb"])  # a new episode indeed started


def test_a_reset_in_one_env_leaves_the_others_stacks():
    inner = _push_cube(fail_on_leaving_workspace=True)
    stacked = FrameStack(_push_cube(fail_on_leaving_workspace=True), 2)
    inner.reset(seed=0)
    stacked.reset(seed=0)
    for env in (inner, stacked.unwrapped):  # env 1's cube leaves the table: its episode ends after the next step
        env._state[4, 1] = 0.59
        env._state[7, 1] = 5.0
    before = stacked.state_dict()["frame_stack.rgb"]
    out, expected = inner.step(torch.zeros(3, 2)), stacked.step(torch.zeros(3, 2))
    assert out.terminated.tolist() == [False, True, False]
    new = out.obs["rgb"]
    assert torch.equal(expected.obs["rgb"][1], torch.cat([new[1]] * 2, dim=-1))  # restarted
    for i in (0, 2):  # continued: the frame before, then this one
        assert torch.equal(expected.obs["rgb"][i], torch.cat([before[i][..., 3:], new[i]], dim=-1))


def test_env_frame_stack_wraps_the_built_env_and_refuses_envs_without_images():
    cfg = compose_config(["env=push_cube", "env.obs_mode=state_rgb", "env.frame_stack=4", "env.num_envs=2"])
    env = build_env(cfg.env, torch.device("cpu"), seed=0)
    assert isinstance(env, FrameStack) and env.observation_space["rgb"].shape == (64, 64, 12)
    assert env.solved_metric == "eval/success_rate" and env.seed == 0  # the wrapped env's own attributes
    state_only = compose_config(["env=push_cube", "env.frame_stack=4", "env.num_envs=2"])
    with pytest.raises(ConfigError, match=r"env.frame_stack=4 is invalid: expected an env with image observations, "
                                          r"uint8 \[H, W, C\] keys \(this env has: state \[17\]\)\. Fix: pass "
                                          r"env.frame_stack=1, or an env with pixels"):
        build_env(state_only.env, torch.device("cpu"), seed=0)


def test_snapshots_carry_the_stacks():
    env = FrameStack(_push_cube(), 2)
    env.reset(seed=0)
    env.step(torch.ones(3, 2))
    state = env.state_dict()
    after = env.step(torch.ones(3, 2)).obs["rgb"]
    other = FrameStack(_push_cube(), 2)
    other.reset(seed=9)
    other.load_state_dict(state)
    assert torch.equal(other.step(torch.ones(3, 2)).obs["rgb"], after)
    assert isinstance(env.observation_space, gym.spaces.Dict)


def test_the_stacks_stay_at_one_address_for_compiled_and_captured_steps():
    env = FrameStack(_push_cube(), 2)
    env.reset(seed=0)
    address = env._frames[("rgb",)].data_ptr()
    obs = env.step(torch.ones(3, 2)).obs["rgb"]
    env.reset(seed=1)
    env.load_state_dict(env.state_dict())
    assert env._frames[("rgb",)].data_ptr() == address
    assert obs.data_ptr() != address  # what a step returns is its own tensor, not the buffer


@pytest.mark.slow  # dynamo traces the wrapped step (seconds)
def test_the_stacked_step_compiles_to_one_graph_and_equals_eager():
    import torch._dynamo

    torch._dynamo.reset()
    eager, compiled = FrameStack(_push_cube(), 3), FrameStack(_push_cube(), 3)
    eager.reset(seed=0)
    compiled.reset(seed=0)
    step = torch.compile(compiled.step, fullgraph=True, dynamic=False, backend="eager")
    action = torch.tensor([[1.0, 0.0], [0.0, 1.0], [-1.0, -1.0]])
    with torch._dynamo.config.patch(error_on_recompile=True):  # episodes end and restart: still one graph
        for _ in range(7):  # two episode ends (max_episode_steps=3)
            want, got = eager.step(action), step(action)
            assert torch.equal(got.obs["rgb"], want.obs["rgb"])
            assert torch.equal(got.final_obs["rgb"], want.final_obs["rgb"])
    torch._dynamo.reset()


def test_a_stack_steps_right_after_it_is_built_as_the_env_inside_does():
    """Built envs are reset already (``embodirl-bench`` steps them at once); the stacks start from zeros."""
    inner, stacked = _push_cube(), FrameStack(_push_cube(), 2)
    action = torch.ones(3, 2)
    out, got = inner.step(action), stacked.step(action)
    assert torch.equal(got.obs["rgb"], torch.cat([torch.zeros_like(out.obs["rgb"]), out.obs["rgb"]], dim=-1))


def test_restart_starts_the_masked_envs_stacks_over_from_their_reset_frame_and_keeps_the_others():
    inner, stacked = _push_cube(), FrameStack(_push_cube(), 3)
    first, obs = inner.reset(seed=0, group_size=3)["rgb"], stacked.reset(seed=0, group_size=3)
    action = torch.tensor([[1.0, 0.0], [0.0, 1.0], [-1.0, -1.0]])
    for _ in range(4):  # past the 3-step limit: every env auto-reset once, then stepped on
        out, obs = inner.step(action), stacked.step(action).obs
    mask = torch.tensor([True, False, True])
    restarted, new = inner.restart(mask)["rgb"], stacked.restart(mask)
    assert torch.equal(restarted[mask], first[mask])  # the unwrapped env's semantics: back to the reset's scene
    assert torch.equal(new["rgb"][mask], torch.cat([first[mask]] * 3, dim=-1))  # and nothing of before in the stack
    assert torch.equal(new["rgb"][~mask], obs["rgb"][~mask]) and torch.equal(new["state"], inner.restart(mask)["state"])
    out, after = inner.step(action), stacked.step(action).obs
    assert torch.equal(after["rgb"][0], torch.cat([first[0], first[0], out.obs["rgb"][0]], dim=-1))
    assert torch.equal(after["rgb"][1], torch.cat([obs["rgb"][1][..., 3:], out.obs["rgb"][1]], dim=-1))


def test_grpo_restart_finished_with_an_observation_history_collects_fresh_histories_from_the_groups_start():
    from tests.conftest import algo_on_cartpole

    _, collector = algo_on_cartpole("grpo", "env.num_envs=8", "env.obs_history=3", num_steps=None, group_size=4,
                                    restart_finished=True)
    rollout = collector.collect()
    steps = rollout.get_non_tensor("num_steps_collected")
    stacks, done = rollout["obs", "state"][:, :steps], rollout["done"][:, :steps - 1]  # obs t+1 follows done t
    starts = stacks[:, 0, 8:]
    assert torch.equal(stacks[:, 0], starts.repeat(1, 3))  # the rollout's reset: its first frame three times
    ended = done.nonzero().tolist()
    assert len(ended) > 8  # envs ran further episodes while the others finished their first
    for i, t in ended:  # each next episode starts at the group's start again, its history holding nothing older
        assert torch.equal(stacks[i, t + 1], starts[i].repeat(3))
    going = ~done  # elsewhere the history shifts by one frame
    assert torch.equal(stacks[:, 1:, :8][going], stacks[:, :-1, 4:][going])

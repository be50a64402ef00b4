"""The collector: inference mode with normal tensors, episode statistics and info metrics by hand, the first-episode
stop, the warm-up's restart, checkpoints of the layout written before the step loop."""

import copy

import gymnasium as gym
import numpy as np
import pytest
import torch
from tensordict import TensorDict

from embodirl.collect.collector import Collector, CollectPlan, complete_fraction
from embodirl.config.envs import CartPoleConfig
from embodirl.config.policies import ActorCriticConfig
from embodirl.envs.base import BatchedEnv, StepResult
from embodirl.envs.cartpole import CartPole
from embodirl.policies.actor_critic import ActorCritic


class ModeSpy(CartPole):
    """CartPole that records whether each reset and step ran in inference mode."""

    def __init__(self, cfg: CartPoleConfig, **kwargs) -> None:
        self.modes: list[tuple[str, bool]] = []
        super().__init__(cfg, **kwargs)

    def reset(self, seed=None, group_size=1):
        self.modes.append(("reset", torch.is_inference_mode_enabled()))
        return super().reset(seed, group_size)

    def step(self, action):
        self.modes.append(("step", torch.is_inference_mode_enabled()))
        return super().step(action)


def test_the_env_is_reset_and_stepped_in_inference_mode_and_the_rollout_stays_normal():
    env = ModeSpy(CartPoleConfig(num_envs=4), seed=0)
    policy = ActorCritic(ActorCriticConfig(hidden_sizes=[8]), observation_space=env.observation_space,
                         action_space=env.action_space)
    collector = Collector(env, policy, CollectPlan(num_steps=5, reset_every_rollout=True))
    env.modes.clear()
    collector.reset(seed=0)
    rollout = collector.collect()
    assert [name for name, _ in env.modes] == ["reset", "reset", *["step"] * 5]
    assert all(inference for _, inference in env.modes)
    # The update differentiates through what it reads from the rollout: no inference tensors there.
    assert not any(leaf.is_inference() for leaf in rollout.values(include_nested=True, leaves_only=True))
    stats = collector.episode_stats
    carried = collector.loop.carry["obs"].values()
    assert not any(t.is_inference() for t in (*carried, stats.running_return, stats.running_length))


class AutogradStep(CartPole):
    """CartPole whose step takes a gradient, as a differentiable solver would, the way BatchedEnv.step says."""

    def step(self, action):
        with torch.inference_mode(False), torch.enable_grad():
            x = action.clone().float().requires_grad_()
            (x.square().sum()).backward()
        assert torch.equal(x.grad, 2 * action.float())
        return super().step(action)


def test_an_env_step_that_needs_autograd_opens_it_as_the_contract_says():
    env = AutogradStep(CartPoleConfig(num_envs=4), seed=0)
    policy = ActorCritic(ActorCriticConfig(hidden_sizes=[8]), observation_space=env.observation_space,
                         action_space=env.action_space)
    rollout = Collector(env, policy, CollectPlan(num_steps=3)).collect()
    assert rollout["reward"][:, :3].eq(1.0).all()


class ScriptedEpisodes(BatchedEnv):
    """Two envs whose episodes ignore the actions: env 0 lasts 3, 2, 4, 4, ... steps with reward 0.5, env 1
    20, 3, ... steps with reward 1.0; ``success`` at env 0's steps 1 of episode 0 and 1 of episode 1 (its
    last), env 1's step 5 of episode 0 (long before its end); info ``dist`` = the step's index in its episode."""

    info_metrics = ("dist",)

    def __init__(self) -> None:
        self.num_envs, self.device, self.max_episode_steps = 2, torch.device("cpu"), 25
        self.observation_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self.reset()

    def reset(self, seed=None, group_size=1):
        self.index, self.episode = [0, 0], [0, 0]
        return torch.zeros(2, 1)

    def step(self, action):
        lengths = ([3, 2], [20, 3])
        success_at = ({(0, 1), (1, 1)}, {(0, 5)})
        dist, success, done = [], [], []
        for i in range(2):
            k, e = self.index[i], self.episode[i]
            dist.append(float(k))
            success.append((e, k) in success_at[i])
            done.append(k + 1 == (lengths[i][e] if e < len(lengths[i]) else 4))
            self.index[i], self.episode[i] = (0, e + 1) if done[-1] else (k + 1, e)
        obs = torch.zeros(2, 1)
        return StepResult(obs, torch.tensor([0.5, 1.0]), torch.tensor(done), torch.zeros(2, dtype=torch.bool), obs,
                          {"success": torch.tensor(success), "dist": torch.tensor(dist)})


def scripted_collector(**plan) -> Collector:
    env = ScriptedEpisodes()
    policy = ActorCritic(ActorCriticConfig(hidden_sizes=[4]), observation_space=env.observation_space,
                         action_space=env.action_space)
    return Collector(env, policy, CollectPlan(**plan))


# 24 steps: env 0 ends episodes after steps 3, 5, 9, 13, 17, 21 (lengths 3, 2, 4, 4, 4, 4; returns 1.5, 1, 2, 2, 2, 2;
# a success on the last step of the second only; dist on the last step = length - 1), env 1 after steps 20 and 23
# (lengths 20 and 3, returns 20 and 3, no success on a last step).
EPISODES_IN_24_STEPS = {
    "episode/count": 8.0, "episode/return_mean": (1.5 + 1 + 4 * 2 + 20 + 3) / 8, "episode/length_mean": 44 / 8,
    "episode/success_rate": 1 / 8, "episode/metrics/dist": (2 + 1 + 4 * 3 + 19 + 2) / 8}


def test_episode_statistics_and_info_metrics_by_hand_across_rollouts():
    collector = scripted_collector(num_steps=12)
    collector.collect()
    collector.collect()  # env 1's first episode runs across both rollouts
    assert collector.pop_metrics() == pytest.approx(EPISODES_IN_24_STEPS, rel=1e-12)
    assert collector.pop_metrics() == {"episode/count": 0.0}


class ScriptedTerms(ScriptedEpisodes):
    """:class:`ScriptedEpisodes` whose reward is the sum of two terms: ``index`` (the step's index in its episode)
    and ``base`` (the reward minus that)."""

    reward_terms = ("index", "base")

    def step(self, action):
        out = super().step(action)
        index = out.info["dist"]
        return out._replace(info={**out.info, "reward/index": index, "reward/base": out.reward - index})


def test_reward_terms_are_logged_as_their_mean_episode_sums_by_hand():
    env = ScriptedTerms()
    policy = ActorCritic(ActorCriticConfig(hidden_sizes=[4]), observation_space=env.observation_space,
                         action_space=env.action_space)
    collector = Collector(env, policy, CollectPlan(num_steps=12))
    collector.collect()
    collector.collect()  # env 1's first episode (20 steps) runs across both rollouts
    metrics = collector.pop_metrics()
    # index sums: env 0's episodes of lengths 3, 2, 4, 4, 4, 4 -> 3, 1, 6, 6, 6, 6; env 1's of 20 and 3 -> 190, 3
    assert metrics["episode/rewards/index"] == pytest.approx((3 + 1 + 4 * 6 + 190 + 3) / 8, rel=1e-12)
    assert metrics["episode/rewards/base"] == pytest.approx(EPISODES_IN_24_STEPS["episode/return_mean"]
                                                            - metrics["episode/rewards/index"], rel=1e-12)


def test_first_episode_only_stops_at_the_first_check_after_every_env_ended_one():
    collector = scripted_collector(num_steps=32, first_episode_only=True)
    rollout = collector.collect()
    # Checked every 8 steps: at 8 and 16 env 1 is still in its 20-step episode; at 24 it has ended it.
    assert rollout.get_non_tensor("num_steps_collected") == 24
    assert rollout["done"][:, 24:32].all() and rollout["terminated"][:, 24:32].all()
    assert rollout["reward"][:, 24:32].eq(0).all() and not rollout["truncated"][:, 24:32].any()
    assert torch.equal(rollout["reward"][:, :24], torch.tensor([[0.5], [1.0]]).expand(2, 24))
    assert collector.pop_metrics() == pytest.approx(EPISODES_IN_24_STEPS, rel=1e-12)


def test_restart_forgets_the_warm_up_and_the_next_rollout_starts_fresh_episodes():
    collector = scripted_collector(num_steps=12)
    collector.collect()  # as the compile warm-up does: episodes ended, env 1 mid-episode
    collector.restart()
    collector.collect()  # the env is reset: env 0 ends 3 episodes (after steps 3, 5, 9), env 1 none
    assert collector.pop_metrics() == pytest.approx({
        "episode/count": 3.0, "episode/return_mean": 4.5 / 3, "episode/length_mean": 3.0,
        "episode/success_rate": 1 / 3, "episode/metrics/dist": (2 + 1 + 3) / 3}, rel=1e-12)


def test_a_restored_collector_continues_its_episodes_exactly():
    collector = scripted_collector(num_steps=12)
    collector.collect()  # env 1 is 12 steps into its 20-step episode; 3 episodes are counted but not popped
    restored = Collector(copy.deepcopy(collector.env), collector.policy, collector.plan)
    restored.load_state_dict(collector.state_dict())
    for c in (collector, restored):
        c.collect()
    assert restored.pop_metrics() == collector.pop_metrics() == pytest.approx(EPISODES_IN_24_STEPS, rel=1e-12)


def test_a_collector_state_written_before_the_step_loop_resumes():
    collector = scripted_collector(num_steps=12)
    collector.collect()
    collector.pop_metrics()  # as every training iteration does before a checkpoint
    state = collector.state_dict()
    # The layout checkpoints had before: integer running lengths, sums of count, return, length and success on the
    # last step only, neither a running success-once nor info metric sums.
    old = {k: v for k, v in state.items() if k not in ("episode_stats.success_once", "episode_stats.info_sums")}
    old["episode_stats.running_length"] = state["episode_stats.running_length"].long()
    old["episode_stats.sums"] = state["episode_stats.sums"][[0, 1, 3, 4]]
    restored = Collector(copy.deepcopy(collector.env), collector.policy, collector.plan)
    restored.load_state_dict(old)
    restored.collect()
    # Steps 13-24: env 0 ends 3 episodes of 4 steps (return 2, dist 3), env 1 its 20-step one and a 3-step one.
    assert restored.pop_metrics() == pytest.approx({
        "episode/count": 5.0, "episode/return_mean": (3 * 2 + 20 + 3) / 5, "episode/length_mean": (3 * 4 + 23) / 5,
        "episode/success_rate": 0.0, "episode/metrics/dist": (3 * 3 + 19 + 2) / 5}, rel=1e-12)


def test_next_obs_is_the_true_next_observation_and_the_final_one_where_an_episode_ended():
    env = CartPole(CartPoleConfig(num_envs=4, max_episode_steps=3), seed=0)
    policy = ActorCritic(ActorCriticConfig(hidden_sizes=[8]), observation_space=env.observation_space,
                         action_space=env.action_space)
    assert "next_obs" not in Collector(env, policy, CollectPlan(num_steps=5)).rollout  # only when asked for
    collector = Collector(env, policy, CollectPlan(num_steps=5, next_obs=True))
    collector.reset(seed=0)
    rollout = collector.collect()
    obs, next_obs, done = rollout["obs", "state"], rollout["next_obs", "state"], rollout["done"][:, :5]
    assert bool(done[:, 2].all())  # every episode is cut at its third step
    # Within an episode the next observation is the one acted on next ...
    torch.testing.assert_close(next_obs[:, :5][~done], obs[:, 1:6][~done])
    # ... where one ended it is the episode's last, one Euler step on from the observation acted on (x and theta
    # move by 0.02 s of their velocities), not the next episode's first
    for t in (0, 1, 2):
        moved = obs[:, t] + 0.02 * obs[:, t][:, [1, 1, 3, 3]] * torch.tensor([1.0, 0.0, 1.0, 0.0])
        torch.testing.assert_close(next_obs[:, t][:, [0, 2]], moved[:, [0, 2]])
    assert not torch.allclose(next_obs[:, 2], obs[:, 3])


@pytest.mark.parametrize("env_name", ["cartpole", "push_cube"])
def test_restart_returns_the_masked_envs_to_their_reset_state_and_leaves_the_others(env_name):
    from embodirl.config.envs import PushCubeConfig
    from embodirl.envs.push_cube.env import PushCube

    env = (CartPole(CartPoleConfig(num_envs=8, max_episode_steps=5), seed=0) if env_name == "cartpole" else
           PushCube(PushCubeConfig(num_envs=8, max_episode_steps=5), device="cpu", seed=0))
    first = env.reset(seed=3, group_size=4)
    gen = torch.Generator().manual_seed(0)
    for _ in range(7):  # past the 5-step limit: every env auto-reset once, to a start of its own
        action = (torch.randint(0, 2, (8,), generator=gen) if env_name == "cartpole" else
                  torch.rand(8, 2, generator=gen) * 2 - 1)
        out = env.step(action)
    mask = torch.tensor([True, False] * 4)
    obs = env.restart(mask)
    assert torch.equal(obs[mask], first[mask]) and torch.equal(obs[~mask], out.obs[~mask])
    assert not torch.equal(out.obs[mask], first[mask])
    for _ in range(4):  # a restarted episode gets its full time limit again
        out = env.step(action)
    assert not (out.truncated & mask).any()


def test_restart_finished_runs_further_episodes_and_stops_as_without_restarts():
    def collect(restart_finished: bool):
        env = CartPole(CartPoleConfig(num_envs=8, max_episode_steps=500), seed=0)
        torch.manual_seed(0)
        policy = ActorCritic(ActorCriticConfig(hidden_sizes=[8]), observation_space=env.observation_space,
                             action_space=env.action_space)
        plan = CollectPlan(num_steps=500, reset_every_rollout=True, group_size=4, first_episode_only=True,
                           restart_finished=restart_finished)
        return Collector(env, policy, plan).collect()

    plain, rollout = collect(False), collect(True)
    steps = rollout.get_non_tensor("num_steps_collected")
    done = rollout["done"][:, :steps]
    first_end = done.float().argmax(1)
    # every env's first episode is the same as without restarts, and so is the stop: the first check (every 8
    # steps) after the slowest first episode ended
    assert steps == plain.get_non_tensor("num_steps_collected") == int(first_end.max()) // 8 * 8 + 8
    assert done.sum() > 8  # the faster envs ran further episodes meanwhile
    assert not rollout["done"][:, steps:-1].any()  # padding is not ended: no complete episode is made of it


def test_complete_fraction_by_hand():
    # env 0 ends after steps 2 and 5 (all 6 of its steps complete), env 1 after step 1 (2 of 6), env 2 never (0)
    done = torch.zeros(3, 6, dtype=torch.bool)
    done[0, [1, 4]] = True
    done[1, 1] = True
    assert complete_fraction(done).item() == pytest.approx((5 + 2 + 0) / 18)


def test_min_valid_fraction_goes_on_until_that_share_of_steps_is_complete():
    def collect(min_valid_fraction):
        env = CartPole(CartPoleConfig(num_envs=8, max_episode_steps=500), seed=0)
        torch.manual_seed(0)
        policy = ActorCritic(ActorCriticConfig(hidden_sizes=[8]), observation_space=env.observation_space,
                             action_space=env.action_space)
        plan = CollectPlan(num_steps=500, reset_every_rollout=True, group_size=4, first_episode_only=True,
                           restart_finished=True, min_valid_fraction=min_valid_fraction)
        rollout = Collector(env, policy, plan).collect()
        steps = rollout.get_non_tensor("num_steps_collected")
        return steps, complete_fraction(rollout["done"][:, :steps]).item()

    (early, share), (later, kept) = collect(None), collect(0.95)
    assert share < 0.95 and later > early and kept >= 0.95  # it stopped at the first check that had enough


# --- action chunks ----------------------------------------------------------------------------------------------
def chunked_collector(env: BatchedEnv, num_steps: int, chunk: int = 3, execute: int = 2) -> Collector:
    policy = ActorCritic(ActorCriticConfig(hidden_sizes=[4], action_chunk=chunk, chunk_execute=execute),
                         observation_space=env.observation_space, action_space=env.action_space)
    return Collector(env, policy, CollectPlan(num_steps=num_steps))


def test_a_chunk_decision_sums_its_rewards_and_ends_where_its_episode_ends_by_hand():
    # Chunks of 3 actions, the first 2 executed: decision d runs env steps 2d+1 and 2d+2 (1-based). Env 0 (reward
    # 0.5) ends episodes after steps 3, 5, 9, 13, 17, 21; env 1 (reward 1.0) after 20 and 23. A decision whose
    # episode ends at its first step gets that step's reward only and ends there; its second step is the next
    # episode's first (counted in that episode's statistics, in no decision).
    collector = chunked_collector(ScriptedEpisodes(), num_steps=6)
    rollout = collector.collect()
    assert rollout["action"].shape == (2, 7, 3) and rollout.get_non_tensor("num_env_steps") == 12
    torch.testing.assert_close(rollout["reward"][:, :6], torch.tensor([[1.0, 0.5, 0.5, 1.0, 0.5, 1.0], [2.0] * 6]))
    assert rollout["terminated"][:, :6].tolist() == [[False, True, True, False, True, False], [False] * 6]
    assert torch.equal(rollout["done"], rollout["terminated"]) and not rollout["truncated"].any()
    rollout = collector.collect()  # steps 13-24: env 0 ends after 13 (first step), 17 (first), 21 (first)
    torch.testing.assert_close(rollout["reward"][:, :6], torch.tensor([[0.5, 1.0, 0.5, 1.0, 0.5, 1.0],
                                                                       [2.0, 2.0, 2.0, 2.0, 2.0, 1.0]]))
    assert rollout["terminated"][:, :6].tolist() == [[True, False, True, False, True, False],
                                                     [False, False, False, True, False, True]]
    # The episode statistics count env steps: the same as without chunks (the 24-step table above).
    assert collector.pop_metrics() == pytest.approx(EPISODES_IN_24_STEPS, rel=1e-12)


class CountingTruncation(ScriptedEpisodes):
    """:class:`ScriptedEpisodes` whose episodes are cut by a time limit, with the global step number (1-based) as
    every observation, so a final observation says which step it came from."""

    def reset(self, seed=None, group_size=1):
        self.count = 0
        return super().reset(seed, group_size)

    def step(self, action):
        out = super().step(action)
        self.count += 1
        obs = torch.full((2, 1), float(self.count))
        return out._replace(obs=obs, final_obs=obs, terminated=torch.zeros(2, dtype=torch.bool),
                            truncated=out.terminated)


def test_a_time_limit_mid_chunk_bootstraps_from_the_final_observation_of_the_step_that_cut_it():
    env = CountingTruncation()
    collector = chunked_collector(env, num_steps=3)
    rollout = collector.collect()
    # Env 0's first episode is cut at step 3, the first step of decision 1 (steps 3 and 4): V(obs = 3), not 4.
    assert rollout["truncated"][0, :3].tolist() == [False, True, True] and not rollout["terminated"].any()
    values = collector.policy.value(TensorDict({"state": torch.tensor([[3.0], [5.0]])}, batch_size=[2]))
    torch.testing.assert_close(rollout["final_value"][0, 1:3], values)
    assert rollout["final_value"][1].eq(0).all()
    torch.testing.assert_close(rollout["obs", "state"][:, 3], torch.full((2, 1), 6.0))  # the bootstrap obs


def test_a_chunk_of_one_collects_what_single_steps_collect_bit_for_bit():
    """The chunk machinery with H = k = 1 (forced: policy.action_chunk=1 does not wrap the distribution) gives the
    single-step rollout and statistics: chunks change nothing but the number of actions per decision."""
    from embodirl.policies.distributions import Chunked

    env = CartPole(CartPoleConfig(num_envs=8), seed=0)
    single = ActorCritic(ActorCriticConfig(hidden_sizes=[8]), observation_space=env.observation_space,
                         action_space=env.action_space)
    chunked = copy.deepcopy(single)
    chunked.dist = Chunked(chunked.dist, 1, 1)
    rollouts, metrics = [], []
    for policy in (single, chunked):
        collector = Collector(CartPole(CartPoleConfig(num_envs=8), seed=0), policy, CollectPlan(num_steps=40))
        assert collector.chunked == (policy is chunked)
        torch.manual_seed(3)
        rollouts.append([collector.collect().clone() for _ in range(3)])
        metrics.append(collector.pop_metrics())
    assert metrics[0]["episode/count"] > 0 and metrics[0] == metrics[1]
    for want, got in zip(*rollouts, strict=True):
        assert torch.equal(want["action"], got["action"].squeeze(-1))
        for key in ("obs", "sample_log_prob", "value", "reward", "done", "terminated", "truncated", "final_value"):
            assert (want[key] == got[key]).all(), key

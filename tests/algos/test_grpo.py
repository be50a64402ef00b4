"""GRPO: the group maths by hand and against loops, the KL term, shared starts, refusals."""

import math

import pytest
import torch

from embodirl.algos import functional as F
from embodirl.app.build import build_components
from embodirl.config.algos import GRPOConfig
from embodirl.config.schema import parse
from embodirl.errors import ConfigError
from tests.conftest import algo_on_cartpole, compose_config


def test_step_returns_reset_at_done_and_mask_keeps_the_done_step():
    rewards = torch.ones(1, 4)
    dones = torch.tensor([[False, True, False, False]])
    returns, mask = F.compute_step_returns_and_mask(rewards, dones, gamma=0.5, first_episode_only=True)
    # G3 = 1 ; G2 = 1 + .5*1 = 1.5 ; G1 = 1 (done: no future) ; G0 = 1 + .5*1 = 1.5
    torch.testing.assert_close(returns, torch.tensor([[1.5, 1.0, 1.5, 1.0]]))
    # alive before step t: m0 = 1, m1 = 1 (the done step counts), then 0
    torch.testing.assert_close(mask, torch.tensor([[1.0, 1.0, 0.0, 0.0]]))
    _, mask = F.compute_step_returns_and_mask(rewards, dones, 0.5, first_episode_only=False)
    torch.testing.assert_close(mask, torch.ones(1, 4))


def test_group_advantages_by_hand_with_dead_members_lone_survivor_and_ties():
    returns = torch.tensor([[3.0, 1.0], [1.0, 2.0], [5.0, 5.0], [2.0, 7.0], [4.0, 4.0], [4.0, 4.0]])
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0], [1.0, 1.0], [1.0, 1.0], [1.0, 1.0], [1.0, 1.0]])
    adv = F.compute_step_group_advantages(returns, mask, group_size=2, eps=1e-8)
    # group 0, t0: G = 3, 1 -> mu 2, sigma 1 -> +1, -1 ; t1: env 1 is dead -> env 0 is a lone survivor -> 0, 0
    # group 1, t0: G = 5, 2 -> mu 3.5, sigma 1.5 -> +1, -1 ; t1: 5, 7 -> mu 6, sigma 1 -> -1, +1
    # group 2: everyone ties -> 0
    expected = torch.tensor([[1.0, 0.0], [-1.0, 0.0], [1.0, -1.0], [-1.0, 1.0], [0.0, 0.0], [0.0, 0.0]])
    torch.testing.assert_close(adv, expected, atol=1e-6, rtol=0)


def _loop_reference(rewards, dones, gamma, group_size, eps):
    n, t_len = rewards.shape
    g_ret = torch.zeros(n, t_len)
    mask = torch.zeros(n, t_len)
    for i in range(n):
        running = 0.0
        for t in reversed(range(t_len)):
            running = float(rewards[i, t]) + gamma * running * (0.0 if dones[i, t] else 1.0)
            g_ret[i, t] = running
        alive = 1.0
        for t in range(t_len):
            mask[i, t] = alive
            if dones[i, t]:
                alive = 0.0
    adv = torch.zeros(n, t_len)
    for start in range(0, n, group_size):
        for t in range(t_len):
            members = [i for i in range(start, start + group_size) if mask[i, t] > 0]
            if not members:
                continue
            values = [float(g_ret[i, t]) for i in members]
            mu = sum(values) / len(values)
            sigma = math.sqrt(sum((v - mu) ** 2 for v in values) / len(values))
            for i in members:
                adv[i, t] = (float(g_ret[i, t]) - mu) / (sigma + eps)
    return g_ret, mask, adv


def test_vectorised_functions_match_a_plain_loop_on_random_data():
    gen = torch.Generator().manual_seed(1)
    rewards = torch.randn(12, 17, generator=gen)
    dones = torch.rand(12, 17, generator=gen) < 0.15
    returns, mask = F.compute_step_returns_and_mask(rewards, dones, 0.9, True)
    adv = F.compute_step_group_advantages(returns, mask, group_size=4, eps=1e-6)
    ref_returns, ref_mask, ref_adv = _loop_reference(rewards, dones, 0.9, 4, 1e-6)
    torch.testing.assert_close(returns, ref_returns)
    torch.testing.assert_close(mask, ref_mask)
    torch.testing.assert_close(adv, ref_adv, atol=1e-4, rtol=1e-4)


def test_k3_kl_has_the_closed_form_expectation():
    p = torch.tensor([0.2, 0.3, 0.5])  # current policy
    q = torch.tensor([0.5, 0.25, 0.25])  # reference
    # E_{a~p}[k3] summed exactly over the actions equals KL(p || q) = sum p log(p / q)
    expectation = (p * F.k3_kl(p.log(), q.log())).sum()
    torch.testing.assert_close(expectation, (p * (p / q).log()).sum())
    assert (F.k3_kl(p.log(), q.log()) >= 0).all()


def test_group_members_share_their_start_and_groups_differ():
    _, collector = algo_on_cartpole("grpo", "env.num_envs=12", group_size=4)
    for _ in range(2):
        first = collector.collect()["obs", "state"][:, 0].view(3, 4, -1)
        assert torch.equal(first, first[:, :1].expand_as(first))  # identical within each group
        assert not torch.equal(first[0, 0], first[1, 0]) and not torch.equal(first[1, 0], first[2, 0])
    _, collector = algo_on_cartpole("grpo", "env.num_envs=12", group_size=4, group_shared_reset=False,
                                    restart_finished=False)
    first = collector.collect()["obs", "state"][:, 0]
    assert not torch.equal(first[0], first[1])


def test_forced_resets_do_not_merge_partial_episodes():
    # 5-step rollouts with a reset before each: no CartPole episode can end within 5 steps, so no
    # episode may ever be counted (merging partial episodes would report 10-, 15-, ... step episodes).
    _, collector = algo_on_cartpole("grpo", num_steps=5, first_episode_only=False, restart_finished=False)
    for _ in range(10):
        collector.collect()
    assert collector.episode_stats.pop() == {"episode/count": 0.0}


def test_update_reports_valid_fraction_and_ref_kl():
    algo, collector = algo_on_cartpole("grpo", "env.num_envs=16", num_steps=None, kl_coef=0.1, num_epochs=2,
                                       minibatch_size=256, learning_rate=1e-2, restart_finished=False)
    rollout = collector.collect()
    metrics = algo.update(rollout)
    steps = rollout.get_non_tensor("num_steps_collected")
    assert steps < 500  # the collector stopped once every env had finished its first episode
    valid = rollout["done"][:, :steps].float().argmax(dim=1) + 1  # first episode lengths
    assert metrics["diag/valid_fraction"] == pytest.approx(valid.sum().item() / (16 * steps))
    assert metrics["diag/num_valid"] == valid.sum().item()
    assert metrics["diag/approx_ref_kl"] > 0  # the policy moved away from its frozen reference
    assert {k for k in metrics if k.startswith(("loss/", "diag/"))} == set(algo.metric_names)


def test_only_valid_transitions_reach_the_loss():
    # first_episode_only: the steps after an env's first episode are never in a minibatch with weight > 0
    algo, collector = algo_on_cartpole("grpo", "env.num_envs=16", num_steps=None)
    samples = algo.prepare(collector.collect().filter_non_tensor_data())
    indices, count = algo.sample_indices(samples)
    assert count == indices.numel() == int(samples["valid"].sum()) < samples.batch_size[0]
    idx, weight = algo.minibatches(samples, indices, count)
    assert samples["valid"][idx[weight > 0]].all()
    assert sorted(idx[weight > 0].tolist()) == indices.tolist()  # each valid transition once per epoch


def test_grpo_selects_actor_only_and_refuses_bad_settings(tmp_path):
    assert compose_config(["algo=grpo"]).policy._target_ == "embodirl.policies.actor_only.ActorOnly"
    with pytest.raises(ConfigError, match=r"algo.group_size=1.*>= 2"):
        build_components(compose_config(["algo=grpo", "algo.group_size=1", "device=cpu"]))
    with pytest.raises(ConfigError, match=r"env.num_envs=6.*multiple of algo.group_size=4"):
        build_components(compose_config(["algo=grpo", "env.num_envs=6", "device=cpu"]))
    with pytest.raises(ConfigError, match=r"policy='ActorCritic'.*actor_only"):
        build_components(compose_config(["algo=grpo", "policy=actor_critic", "device=cpu"]))
    with pytest.raises(ConfigError, match=r"algo.truncate_at_first_done=False is invalid: expected no key of this "
                                          r"name: it was renamed to algo.first_episode_only"):
        parse(GRPOConfig, {"truncate_at_first_done": False}, "algo.")


def test_group_spread_by_hand_drops_ties_and_lone_survivors_only():
    returns = torch.tensor([[3.0, 1.0], [1.0, 2.0], [5.0, 5.0], [5.0, 7.0], [4.0, 4.0], [4.0, 4.0],
                            [2.0, 9.0], [2.0, 1.0]])
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0], [1.0, 1.0], [1.0, 1.0], [1.0, 1.0], [1.0, 1.0],
                         [1.0, 1.0], [1.0, 0.0]])
    kept = F.group_has_spread(returns, mask, group_size=2)
    # group 0 differs at t0 (3 vs 1); group 1 ties at t0 (5, 5) but differs at t1 (5 vs 7); group 2 ties
    # everywhere; group 3 ties at t0 (2, 2) and has a lone survivor at t1 (the 1 is dead): no two alive differ
    assert kept.tolist() == [True, True, True, True, False, False, False, False]
    adv = F.compute_step_group_advantages(returns, mask, group_size=2, eps=1e-8)
    assert (adv[~kept] == 0).all()  # what is dropped carried no signal


def _ends(spread: bool = True):
    """``[8, 8]`` episode ends: group 0 (envs 0-3) ties, every member ends at step 2; group 1 (envs 4-7) ends at
    steps 1, 2, 3, 4 when ``spread``, else at step 2 as well."""
    dones = torch.zeros(8, 8, dtype=torch.bool)
    dones[:4, 2] = True
    for i, end in enumerate([1, 2, 3, 4] if spread else [2, 2, 2, 2]):
        dones[4 + i, end] = True
    return dones


def _rewritten_rollout(collector, spread: bool):
    """A collected 8-env rollout with reward 1 every step and the episode ends of :func:`_ends`."""
    rollout = collector.collect().filter_non_tensor_data()
    rollout["reward"].fill_(1.0)
    rollout["done"].zero_()
    rollout["done"][:, :-1] = _ends(spread)
    return rollout


@pytest.mark.parametrize("filter_groups", [False, True])
def test_filter_groups_drops_the_tied_group_and_keeps_the_others_advantages(filter_groups):
    algo, collector = algo_on_cartpole("grpo", "env.num_envs=8", num_steps=8, group_size=4,
                                       filter_groups=filter_groups)
    samples = algo.prepare(_rewritten_rollout(collector, spread=True))
    returns, mask = F.compute_step_returns_and_mask(torch.ones(8, 8), _ends(), algo.cfg.gamma, True)
    # the advantages are GRPO's, filter or not: the filter only changes which samples are trained on
    torch.testing.assert_close(samples["advantage"].view(8, 8),
                               F.compute_step_group_advantages(returns, mask, 4, algo.cfg.eps))
    valid = samples["valid"].view(8, 8)
    assert valid[4:].sum() == 2 + 3 + 4 + 5  # group 1's first episodes
    assert valid[:4].sum() == (0 if filter_groups else 4 * 3)
    metrics = algo.rollout_metrics(samples)
    assert metrics["diag/groups_informative"] == 0.5
    assert metrics["diag/groups_kept"] == (0.5 if filter_groups else 1.0)


def test_filter_groups_keeps_every_group_when_none_differs():
    algo, collector = algo_on_cartpole("grpo", "env.num_envs=8", num_steps=8, group_size=4, filter_groups=True)
    samples = algo.prepare(_rewritten_rollout(collector, spread=False))
    assert samples["valid"].sum() == 8 * 3  # an update never goes empty: all groups, zero advantages
    assert (samples["advantage"] == 0).all()
    metrics = algo.rollout_metrics(samples)
    assert metrics["diag/groups_informative"] == 0.0 and metrics["diag/groups_kept"] == 1.0


def test_episode_steps_and_complete_episodes_by_hand():
    dones = torch.tensor([[False, True, False, False, True], [False, False, True, False, False]])
    assert F.episode_steps(dones).tolist() == [[0, 1, 0, 1, 2], [0, 1, 2, 0, 1]]
    assert F.complete_episode_mask(dones).tolist() == [[True] * 5, [True, True, True, False, False]]


def test_restarted_episodes_are_compared_at_equal_steps_since_their_start_by_hand():
    # one group of 2, reward 1 per step, gamma 1. Member 0 runs episodes t0-1 (G 2, 1) and t2-4 (G 3, 2, 1);
    # member 1 runs t0-2 (G 3, 2, 1), then an unfinished one (masked out).
    dones = torch.tensor([[False, True, False, False, True], [False, False, True, False, False]])
    returns, _ = F.compute_step_returns_and_mask(torch.ones(2, 5), dones, 1.0, first_episode_only=False)
    mask = F.complete_episode_mask(dones).float()
    adv = F.compute_step_group_advantages(returns, mask, group_size=2, eps=1e-8, steps=F.episode_steps(dones))
    # step 0 of the 3 episodes: G = 2, 3, 3 -> mu 8/3, sigma sqrt(2)/3 -> -sqrt(2), +sqrt(2)/2, +sqrt(2)/2;
    # step 1: G = 1, 2, 2 -> the same; step 2: G = 1, 1 -> a tie -> 0; the unfinished episode -> 0
    r2, h = math.sqrt(2), math.sqrt(2) / 2
    torch.testing.assert_close(adv, torch.tensor([[-r2, -r2, h, h, 0.0], [h, h, 0.0, 0.0, 0.0]]))
    assert F.group_has_spread(returns, mask, 2, F.episode_steps(dones)).tolist() == [True, True]


def test_aligned_advantages_match_a_plain_loop_and_equal_the_step_wise_ones_for_first_episodes():
    gen = torch.Generator().manual_seed(2)
    rewards = torch.randn(12, 17, generator=gen)
    dones = torch.rand(12, 17, generator=gen) < 0.2
    returns, first = F.compute_step_returns_and_mask(rewards, dones, 0.9, True)
    # first episodes only: steps since the start are t, so the binned statistics are the step-wise ones
    torch.testing.assert_close(F.compute_step_group_advantages(returns, first, 4, 1e-6, F.episode_steps(dones)),
                               F.compute_step_group_advantages(returns, first, 4, 1e-6), atol=1e-5, rtol=1e-5)
    mask, steps = F.complete_episode_mask(dones).float(), F.episode_steps(dones)
    adv = F.compute_step_group_advantages(returns, mask, 4, 1e-6, steps)
    expected = torch.zeros(12, 17)
    for start in range(0, 12, 4):
        for tau in range(17):
            cells = [(i, t) for i in range(start, start + 4) for t in range(17) if mask[i, t] and steps[i, t] == tau]
            if not cells:
                continue
            values = [float(returns[i, t]) for i, t in cells]
            mu = sum(values) / len(values)
            sigma = math.sqrt(sum((v - mu) ** 2 for v in values) / len(values))
            for i, t in cells:
                expected[i, t] = (float(returns[i, t]) - mu) / (sigma + 1e-6)
    torch.testing.assert_close(adv, expected, atol=1e-4, rtol=1e-4)


def test_restart_finished_starts_ended_envs_over_from_their_groups_start():
    _, collector = algo_on_cartpole("grpo", "env.num_envs=8", num_steps=None, group_size=4, restart_finished=True)
    rollout = collector.collect()
    steps = rollout.get_non_tensor("num_steps_collected")
    obs, done = rollout["obs", "state"][:, :steps], rollout["done"][:, :steps]
    starts = obs[:, 0]
    assert torch.equal(starts[:4], starts[:1].expand(4, -1))  # a group shares its start
    i, t = done[:, :-1].nonzero()[0].tolist()
    assert torch.equal(obs[i, t + 1], starts[i])  # the next episode starts there again
    assert done.sum() > 8  # envs ran further episodes while the others finished their first
    assert not rollout["done"][:, steps:-1].any()  # padding continues the unfinished episodes: never complete


@pytest.mark.slow  # three updates of the default command's 256 envs, as below
@pytest.mark.parametrize("restart_finished", [False, True])
def test_restart_finished_trains_on_most_simulated_steps_on_cartpole(restart_finished):
    # the default command's 256 envs, its first 3 updates: with first episodes only about 70 % of the simulated
    # steps are discarded; with restarts the same rollouts keep more than 80 % on average (72-87 % per update over
    # a run: the episodes unfinished at the stop are lost)
    algo, collector = algo_on_cartpole("grpo", "env.num_envs=256", "policy.hidden_sizes=[64,64]", num_steps=None,
                                       minibatch_size=4096, learning_rate=4e-3, restart_finished=restart_finished)
    fractions = [algo.update(collector.collect())["diag/valid_fraction"] for _ in range(3)]
    assert (sum(fractions) / 3 > 0.8 and min(fractions) > 0.75) if restart_finished else max(fractions) < 0.4, \
        fractions


@pytest.mark.slow  # three updates of the default command's 256 envs
def test_min_valid_fraction_keeps_more_than_80_percent_of_the_simulated_steps_on_cartpole():
    # restarts alone keep 72-87 % per update (the episodes unfinished at the stop are lost); going on until 90 % of
    # the steps lie in complete episodes keeps at least that in every update
    algo, collector = algo_on_cartpole("grpo", "env.num_envs=256", "policy.hidden_sizes=[64,64]", num_steps=None,
                                       minibatch_size=4096, learning_rate=4e-3, restart_finished=True,
                                       min_valid_fraction=0.9)
    fractions = [algo.update(collector.collect())["diag/valid_fraction"] for _ in range(3)]
    assert min(fractions) >= 0.9, fractions


def test_restart_finished_refuses_what_it_cannot_do():
    with pytest.raises(ConfigError, match=r"algo.restart_finished=True.*first_episode_only"):
        build_components(compose_config(["algo=grpo", "algo.restart_finished=true", "algo.first_episode_only=false",
                                         "device=cpu"]))
    with pytest.raises(ConfigError, match=r"algo.restart_finished=True.*false with GymEnv, which cannot restart"):
        build_components(compose_config(["algo=grpo", "algo.restart_finished=true", "env=gym", "env.obs_noise=0.1",
                                         "device=cpu"]))
    build_components(compose_config(["algo=grpo", "algo.restart_finished=true", "env.obs_noise=0.1", "device=cpu"]))
    with pytest.raises(ConfigError, match=r"algo.min_valid_fraction=0.9.*restart_finished"):
        build_components(compose_config(["algo=grpo", "algo.restart_finished=false", "algo.min_valid_fraction=0.9",
                                         "device=cpu"]))


def test_grpo_is_sized_to_cartpole_and_nowhere_else():
    from embodirl.cli.help import help_page

    sized = compose_config(["algo=grpo"]).algo  # env=cartpole: algo/grpo_sizing/cartpole.yaml after grpo.yaml
    assert sized.restart_finished and sized.learning_rate == 6e-3
    push_cube = compose_config(["algo=grpo", "env=push_cube"]).algo  # algo=grpo's own values
    assert not push_cube.restart_finished and push_cube.learning_rate == 4e-3
    pinned = compose_config(["experiment=grpo_cartpole"]).algo  # the recipe keeps its own
    assert not pinned.restart_finished and pinned.learning_rate == 3e-3
    assert not compose_config(["algo=grpo", "algo.restart_finished=false"]).algo.restart_finished  # command line wins
    lines = help_page(["algo=grpo"]).splitlines()  # a note on the key; GRPO's description stays
    assert any(line.startswith("  algo=grpo (embodirl.algos.grpo.GRPO): GRPO: critic-free") for line in lines)
    restart = next(line for line in lines if line.strip().startswith("algo.restart_finished="))
    assert "[cartpole: " in restart, restart

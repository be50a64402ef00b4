"""FastTD3: the C51 projection and the TD3 targets by hand, target policy smoothing, the per-env exploration noise and
its redraw at episode ends, the update's schedule, the policies it refuses, a resumed run equal to an uninterrupted
one, and it learns Pendulum."""

import json

import pytest
import torch
from tensordict import TensorDict
from torch import nn

from embodirl.algos.base import Algorithm
from embodirl.algos.functional import categorical_projection
from embodirl.errors import ConfigError
from tests.conftest import compose_config, train_summary

SMALL = ["device=cpu", "algo=fasttd3", "env=push_cube", "env.num_envs=8", "algo.num_steps=4",
         "algo.minibatch_size=16", "algo.learning_starts=64", "algo.critic_hidden_sizes=[16]", "algo.num_atoms=11",
         "policy.hidden_sizes=[16]", "eval.num_envs=2", "trainer.total_env_steps=1024"]


def fasttd3_on_push_cube(*overrides: str):
    from embodirl.app.build import build_components

    parts = build_components(compose_config([*SMALL, *overrides]))
    parts.collector.reset(seed=0)
    return parts.algo, parts.collector


class Recording(nn.Module):
    """A "critic" that returns fixed outputs whatever it reads, and records the actions it was given."""

    def __init__(self, values):
        super().__init__()
        self.values, self.actions = torch.as_tensor(values), []

    def forward(self, features, action):
        self.actions.append(action)
        return self.values


def _batch(reward, discount, terminated):
    obs = TensorDict({"state": torch.zeros(len(reward), 17)}, [len(reward)])
    return TensorDict({"obs": obs, "next_obs": obs, "action": torch.zeros(len(reward), 2),
                       "reward": torch.tensor(reward), "discount": torch.tensor(discount),
                       "terminated": torch.tensor(terminated)}, [len(reward)])


def test_the_categorical_projection_by_hand():
    # support [0, 1, 2, 3, 4]
    probs = torch.tensor([[0.1, 0.2, 0.3, 0.2, 0.2], [0.2] * 5, [0.1, 0.2, 0.3, 0.2, 0.2], [0.2] * 5])
    reward = torch.tensor([0.5, 2.25, 1.0, -10.0])
    discount = torch.tensor([1.0, 0.0, 0.5, 1.0])
    out = categorical_projection(probs, reward, discount, 0.0, 4.0)
    expected = torch.tensor([
        # atoms move to 0.5, 1.5, 2.5, 3.5, 4.5 -> 4 (clamped): each halves between its neighbours, the last stays
        [0.05, 0.05 + 0.1, 0.1 + 0.15, 0.15 + 0.1, 0.1 + 0.2],
        # terminated: every atom moves to 2.25, three quarters to atom 2, a quarter to atom 3
        [0.0, 0.0, 0.75, 0.25, 0.0],
        # atoms move to 1, 1.5, 2, 2.5, 3: the whole numbers land on an atom and keep all their probability
        [0.0, 0.1 + 0.1, 0.1 + 0.3 + 0.1, 0.1 + 0.2, 0.0],
        # below v_min: everything clamps to atom 0
        [1.0, 0.0, 0.0, 0.0, 0.0]])
    torch.testing.assert_close(out, expected)


def test_the_td3_target_takes_the_smaller_target_critic_on_a_smoothed_next_action():
    algo, _ = fasttd3_on_push_cube("algo.critic=twin", "algo.policy_noise=100", "algo.noise_clip=0.3")
    assert isinstance(algo, Algorithm)
    with torch.no_grad():
        algo.policy.actor[-1].weight.zero_()  # the actor's deterministic action is the Box's center
        algo.policy.actor[-1].bias.zero_()
    algo.target_critics = Recording([[1.0, 4.0], [3.0, 2.0]])  # min over the two: [1, 2]
    algo.critics = Recording([[0.0, 1.0], [2.0, 3.0]])
    loss, q_mean = algo.critic_loss(_batch([1.0, 1.0], [0.5, 0.25], [False, True]))
    # targets: [1 + 0.5 * 1, 1 + 0 (terminated)] = [1.5, 1]
    # critic 1: ((0 - 1.5)^2 + (1 - 1)^2) / 2 = 1.125 ; critic 2: ((2 - 1.5)^2 + (3 - 1)^2) / 2 = 2.125
    assert loss.item() == pytest.approx(3.25) and q_mean.item() == pytest.approx(1.5)
    # smoothing: noise of std 100 clipped to +-0.3 of the half-range around the center
    moved = (algo.target_critics.actions[0] - algo.dist.center) / algo.dist.half_range
    torch.testing.assert_close(moved.abs(), torch.full_like(moved, 0.3))


def test_the_c51_target_projects_the_target_critic_whose_mean_is_smaller():
    algo, _ = fasttd3_on_push_cube("algo.critic=c51", "algo.num_atoms=5", "algo.v_min=0", "algo.v_max=4")
    low, high = torch.tensor([0.6, 0.1, 0.1, 0.1, 0.1]), torch.tensor([0.1, 0.1, 0.1, 0.1, 0.6])  # means 1.0, 3.0
    # sample 0: critic 1 is lower; sample 1: critic 2 is lower
    algo.target_critics = Recording(torch.stack([torch.stack([low, high]), torch.stack([high, low])]).log())
    online = torch.zeros(2, 2, 5)  # uniform: log-prob log(1/5) on every atom, mean 2
    algo.critics = Recording(online)
    batch = _batch([0.5, 1.0], [1.0, 0.0], [False, False])
    expected = torch.stack([categorical_projection(low[None], torch.tensor([0.5]), torch.tensor([1.0]), 0.0, 4.0)[0],
                            torch.tensor([0.0, 1.0, 0.0, 0.0, 0.0])])  # discount 0: all on reward 1
    torch.testing.assert_close(algo.td_target(batch), expected)
    loss, q_mean = algo.critic_loss(batch)
    # cross-entropy of each target with the uniform online distribution: log 5 per sample, per critic
    assert loss.item() == pytest.approx(2 * torch.log(torch.tensor(5.0)).item()) and q_mean.item() == pytest.approx(2)


def test_each_env_explores_with_its_own_std_drawn_from_the_range_and_redrawn_at_its_episode_end():
    algo, collector = fasttd3_on_push_cube("algo.std_min=0.1", "algo.std_max=0.2", "algo.learning_starts=100000")
    std = algo.dist.noise_std.clone()
    assert std.shape == (8,) and bool(((std >= 0.1) & (std <= 0.2)).all()) and std.unique().numel() == 8
    rollout = collector.collect()
    rollout["done"][:] = False
    rollout["done"][3, 1] = True
    algo.update(rollout)
    new = algo.dist.noise_std
    assert new[3] != std[3] and 0.1 <= new[3] <= 0.2
    assert torch.equal(new[torch.arange(8) != 3], std[torch.arange(8) != 3])
    assert torch.equal(algo.state_dict()["noise_std"], new)
    # the collector's rows take their env's std; the deterministic action is the center of the noise
    algo.dist.set_noise_std(torch.tensor([0.0, 0.5]))
    action, _ = algo.dist.sample(torch.zeros(2, 2))
    mode = algo.dist.mode(torch.zeros(2, 2))
    assert torch.equal(action[0], mode[0]) and not torch.equal(action[1], mode[1])
    wide, _ = algo.dist.sample(torch.full((2, 2), 3.0))  # near the bound: the noise is clipped into the Box
    assert bool((wide <= algo.dist.center + algo.dist.half_range).all())


def test_gradient_steps_start_at_learning_starts_and_the_actor_is_delayed():
    algo, collector = fasttd3_on_push_cube("algo.updates_per_step=1.5")
    metrics = algo.update(collector.collect())  # 8 envs x 4 steps = 32 < learning_starts = 64
    assert algo.num_updates == 0 and "loss/critic" not in metrics
    metrics = algo.update(collector.collect())  # 64: round(4 x 1.5) = 6 steps
    assert algo.num_updates == 6 and len(algo.buffer) == 64 and set(metrics) == set(algo.metric_names)
    assert next(iter(algo.actor_optimizer.state.values()))["step"].item() == 3  # policy_frequency=2
    assert next(iter(algo.critic_optimizer.state.values()))["step"].item() == 6


def test_fasttd3_refuses_a_stochastic_policy_and_an_empty_c51_support():
    from embodirl.app.build import build_components

    with pytest.raises(ConfigError, match=r"policy='ActorCritic' is invalid: expected a feedforward actor with a "
                                          r"DeterministicTanh.*Fix: drop the policy override"):
        build_components(compose_config([*SMALL, "policy=actor_critic"]))
    with pytest.raises(ConfigError, match=r"algo.v_min=5 is invalid: expected a float below v_max=5 \(the C51 "
                                          r"support\)\. Fix: pass algo.v_min=-15.0"):
        build_components(compose_config([*SMALL, "algo.v_min=5", "algo.v_max=5"]))


def _records(run_dir):
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.slow  # the fast tier resumes SAC (the same buffer and checkpointer) and round-trips FastTD3's state
def test_a_resumed_fasttd3_run_equals_an_uninterrupted_one(tmp_path):
    from embodirl.app.run import run_training

    # Episodes of 6 steps: the per-env stds are redrawn during the run, so the resumed run must restore them.
    run = [*SMALL, "env.max_episode_steps=6", "eval.every_env_steps=128", "trainer.checkpoint_every_env_steps=64",
           "logger.console=none", "logger.tensorboard=false"]
    full, resumed = tmp_path / "full", tmp_path / "resumed"
    run_training(compose_config([*run, "trainer.total_env_steps=160"]), full)
    run_training(compose_config([*run, "trainer.total_env_steps=128"]), resumed)
    run_training(compose_config([*run, "trainer.total_env_steps=160"]), resumed)  # continues from last.pt
    x, y = _records(full)[-1], _records(resumed)[-1]
    assert x["env_steps"] == y["env_steps"] == 160
    for name in ("loss/critic", "loss/actor", "diag/exploration_std"):
        assert x[name] == y[name], name


@pytest.mark.slow
def test_embodirl_train_algo_fasttd3_learns_pendulum(tmp_path, monkeypatch):
    summary = train_summary(monkeypatch, tmp_path / "run", [
        "algo=fasttd3", "env=gym", "env.id=Pendulum-v1", "env.num_envs=4",
        "algo.learning_starts=500", "algo.updates_per_step=4", "policy.hidden_sizes=[64,64]",
        "algo.critic_hidden_sizes=[64,64]", "algo.v_min=-1600", "algo.v_max=0", "algo.num_atoms=51",
        "trainer.total_env_steps=4000", "eval.every_env_steps=4000", "seed=0",
        "device=cpu", "logger.console=none", "logger.tensorboard=false"])
    # an untrained policy scores about -1,200 to -1,500
    assert summary["eval/return_mean"] >= -400, summary

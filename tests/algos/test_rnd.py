"""Curiosity (RND): hand values of the error, the normalisers and the bonus; PPO's hook; off at weight 0; state.
The off-policy family's (ReplayRND): the raw-bonus normaliser by hand, the bonus added to sampled rewards, the
predictor's step per gradient step, weight 0 = the algorithm without it bit for bit, state and resume."""

import copy
import json

import pytest
import torch
from tensordict import TensorDict

from embodirl.algos.rnd import BONUS_WINDOW, RND, ReplayRND, prediction_error
from embodirl.app.run import run_training
from embodirl.config.algos import PPOConfig, RNDConfig
from embodirl.config.schema import parse
from embodirl.errors import ConfigError
from embodirl.policies.normalizer import RunningNormalizer
from embodirl.runtime.checkpoint import load_checkpoint
from tests.conftest import algo_on_cartpole, compose_config

STATE = {("state",): ((1,), torch.float32)}


def _rnd(**keys) -> RND:
    return RND(parse(RNDConfig, {"weight": 1.0, **keys}), STATE, gamma=0.5, device=torch.device("cpu"))


def _set_nets(rnd: RND) -> None:
    """hidden_sizes=[1], embedding_size=1, relu: target(x) = relu(x), predictor(x) = 0."""
    with torch.no_grad():
        for layer in rnd.target:
            if isinstance(layer, torch.nn.Linear):
                layer.weight.fill_(1.0)
                layer.bias.zero_()
        for p in rnd.predictor.parameters():
            p.zero_()


def _obs(values) -> TensorDict:
    state = torch.tensor(values, dtype=torch.float32).unsqueeze(-1)
    return TensorDict({"state": state}, batch_size=state.shape[:-1])


def test_prediction_error_hand_values():
    # mean over the embedding of the squared differences: (1 + 4) / 2 and 0.
    assert prediction_error(torch.tensor([[1.0, 2.0], [0.5, 0.5]]),
                            torch.tensor([[0.0, 0.0], [0.5, 0.5]])).tolist() == [2.5, 0.0]


def test_bonus_hand_values_with_both_normalisers():
    rnd = _rnd(hidden_sizes=[1], embedding_size=1, activation="relu")
    _set_nets(rnd)
    # Two envs, one step, observations 0 and 2: the normaliser's statistics become mean 1, var 1 (its prior count
    # is 0), so the inputs are -1 and 1; the target gives relu(-1) = 0 and relu(1) = 1, the predictor 0: errors
    # 0 and 1. The discounted returns (gamma 0.5, none carried in) are the errors themselves: population variance
    # 0.25, std 0.5, so the bonuses are 0 / 0.5 = 0 and 1 / 0.5 = 2.
    bonus = rnd.bonus(_obs([[0.0], [2.0]]), torch.zeros(2, 1, dtype=torch.bool))
    assert float(rnd.obs_normalizer.mean) == pytest.approx(1.0) and float(rnd.obs_normalizer.var) == pytest.approx(1.0)
    torch.testing.assert_close(bonus, torch.tensor([[0.0], [2.0]]), atol=1e-6, rtol=1e-6)
    # Without the normalisers the error is the target's output itself: relu(0) = 0 and relu(2)^2 = 4.
    raw = _rnd(hidden_sizes=[1], embedding_size=1, activation="relu", normalize_obs=False, normalize_bonus=False)
    _set_nets(raw)
    assert raw.bonus(_obs([[0.0], [2.0]]), torch.zeros(2, 1, dtype=torch.bool)).tolist() == [[0.0], [4.0]]


def test_input_clip_and_the_bonus_return_reset_at_episode_ends():
    rnd = _rnd(hidden_sizes=[1], embedding_size=1, activation="relu", normalize_bonus=False)
    _set_nets(rnd)
    rnd.obs_normalizer.update(torch.tensor([[0.0], [2.0]]))  # mean 1, var 1
    # An observation of 101 normalises to 100 and is clipped to 5 (Burda et al.'s clip): error 25.
    assert rnd.error(torch.tensor([[101.0]])).tolist() == pytest.approx([25.0])
    scaled = _rnd(normalize_obs=False)
    scaled.bonus(_obs([[1.0, 1.0]]), torch.tensor([[False, True]]))
    assert scaled.bonus_scaler.running_return.tolist() == [0.0]  # the episode ended at the last step


def test_fit_lowers_the_error_and_leaves_the_target_alone():
    torch.manual_seed(0)
    rnd = _rnd(hidden_sizes=[32], embedding_size=8, learning_rate=1e-2)
    obs = _obs(torch.randn(64, 4).tolist())
    rnd.obs_normalizer.update(rnd.features(obs))
    target = copy.deepcopy(rnd.target.state_dict())
    before = float(rnd.error(rnd.features(obs).flatten(0, 1)).mean().detach())
    losses = [float(rnd.fit(obs, num_epochs=4, minibatch_size=64)) for _ in range(10)]
    assert losses[-1] < 0.5 * before and losses[-1] < losses[0]
    assert all(torch.equal(target[k], v) for k, v in rnd.target.state_dict().items())


def test_weight_schedules_and_bad_ones():
    assert _rnd(weight=0.5, weight_schedule="linear").weight(250, 1000) == pytest.approx(0.375)
    points = _rnd(weight_schedule=[[0, 1.0], [100, 0.0]], weight_schedule_kind="interp")
    assert points.weight(25, 1000) == pytest.approx(0.75) and points.weight(500, 1000) == 0.0
    assert not parse(RNDConfig, {"weight": 0.0}).enabled
    assert parse(RNDConfig, {"weight": 0.0, "weight_schedule": [[0, 0.0], [10, 0.1]]}).enabled
    assert not parse(RNDConfig, {"weight": 1.0, "weight_schedule": [[0, 0.0]]}).enabled
    with pytest.raises(ConfigError, match=r"algo.rnd.weight_schedule='exp' is invalid: .*constant, linear, cosine"):
        parse(PPOConfig, {"rnd": {"weight": 0.1, "weight_schedule": "exp"}}, "algo.")
    with pytest.raises(ConfigError, match=r"algo.rnd.weight=-1 is invalid"):
        parse(PPOConfig, {"rnd": {"weight": -1}}, "algo.")


def test_weight_zero_is_plain_ppo_bit_for_bit():
    # weight 0 builds no network and draws no random number: the same updates as the config without algo.rnd keys.
    plain, plain_collector = algo_on_cartpole("ppo")
    off, off_collector = algo_on_cartpole("ppo", "algo.rnd.weight=0", "algo.rnd.hidden_sizes=[8]",
                                          "algo.rnd.learning_rate=0.5")
    assert off.rnd is None and off.networks() == {} and set(off.optimizers()) == {"optimizer"}
    for _ in range(2):
        torch.manual_seed(1)
        a = plain.update(plain_collector.collect())
        torch.manual_seed(1)
        b = off.update(off_collector.collect())
        assert a == b and not any(k.startswith(("diag/rnd", "train/rnd")) for k in b)


def test_ppo_adds_the_weighted_bonus_to_the_rewards_and_logs_it():
    algo, collector = algo_on_cartpole("ppo", "algo.rnd.weight=0.5")
    rollout = collector.collect()
    reference = copy.deepcopy(algo.rnd)  # what the bonus is computed with, before the hook trains the predictor
    env_reward = rollout["reward"].clone()
    changed, metrics = algo.add_curiosity(rollout, algo.rnd)
    bonus = 0.5 * reference.bonus(rollout["obs"][:, 1:], rollout["done"][:, :-1])
    torch.testing.assert_close(changed["reward"][:, :-1], env_reward[:, :-1] + bonus)
    assert torch.equal(rollout["reward"], env_reward)  # the collector's rollout keeps the env's rewards
    assert metrics["diag/rnd_bonus"] == pytest.approx(float(bonus.mean()), rel=1e-5)
    assert metrics["train/rnd_weight"] == 0.5 and metrics["diag/rnd_loss"] > 0
    logged = algo.update(collector.collect())
    assert {k for k in logged if k.startswith(("loss/", "diag/"))} == set(algo.metric_names)
    assert {"diag/rnd_bonus", "diag/rnd_loss", "train/rnd_weight"} <= set(logged)


def assert_next_update_alike(algo, restored, rollout):
    """The same seeded update of ``rollout`` logs the same metrics and leaves the same curiosity networks."""
    torch.manual_seed(7)
    a = algo.update(rollout.clone())
    torch.manual_seed(7)
    b = restored.update(rollout.clone())
    assert a == b
    for (name, x), (_, y) in zip(algo.rnd.networks.state_dict().items(), restored.rnd.networks.state_dict().items(),
                                 strict=True):
        assert torch.equal(x, y), name


def test_state_round_trip_continues_exactly():
    algo, collector = algo_on_cartpole("ppo", "algo.rnd.weight=0.5", "algo.rnd.weight_schedule=linear")
    for _ in range(2):
        algo.update(collector.collect())
    restored, _ = algo_on_cartpole("ppo", "algo.rnd.weight=0.5", "algo.rnd.weight_schedule=linear")
    restored.policy.load_state_dict(algo.policy.state_dict())
    restored.load_state_dict(copy.deepcopy(algo.state_dict()))
    assert_next_update_alike(algo, restored, collector.collect())


def test_image_only_observations_are_refused_with_the_key():
    image = {("rgb",): ((8, 8, 3), torch.uint8)}
    with pytest.raises(ConfigError, match=r"rnd.weight=1.0 is invalid: .*images only \(rgb\).*algo.rnd.weight=0"):
        RND(parse(RNDConfig, {"weight": 1.0}), image, gamma=0.9, device=torch.device("cpu"))


@pytest.mark.slow
def test_resumed_run_with_curiosity_equals_an_uninterrupted_one(tmp_path, tiny):
    common = [*tiny, "trainer.total_env_steps=512", "trainer.checkpoint_every_env_steps=128",
              "trainer.keep_checkpoints=10", "algo.rnd.weight=0.5", "algo.rnd.hidden_sizes=[16]", "seed=3"]
    full, resumed = tmp_path / "full", tmp_path / "resumed"
    run_training(compose_config(common), full)
    run_training(compose_config([*common, f"trainer.resume={full / 'checkpoints' / 'step_000000000256.pt'}"]),
                 resumed)
    a, b = (load_checkpoint(d / "checkpoints" / "last.pt")["algo"]["rnd"]["networks"] for d in (full, resumed))
    assert all(torch.equal(a[k], b[k]) for k in a)
    records = [[json.loads(line) for line in (d / "metrics.jsonl").read_text().splitlines()] for d in (full, resumed)]
    for x, y in zip(records[0][2:], records[1], strict=True):
        assert (x["diag/rnd_bonus"], x["diag/rnd_loss"], x["loss/value"]) == (
            y["diag/rnd_bonus"], y["diag/rnd_loss"], y["loss/value"])


# --- the off-policy family --------------------------------------------------------------------------------------
OFF_POLICY = ["device=cpu", "env=push_cube", "env.num_envs=8", "algo.num_steps=4", "algo.minibatch_size=16",
              "algo.learning_starts=64", "algo.critic_hidden_sizes=[16]", "policy.hidden_sizes=[16]",
              "eval.num_envs=2", "trainer.total_env_steps=1024", "algo.rnd.hidden_sizes=[16]"]


def _off_policy(algo: str, *overrides: str):
    from embodirl.app.build import build_components

    parts = build_components(compose_config([*OFF_POLICY, f"algo={algo}", *overrides]))
    parts.collector.reset(seed=0)
    return parts.algo, parts.collector


def _replay_rnd(**keys) -> ReplayRND:
    return ReplayRND(parse(RNDConfig, {"weight": 1.0, **keys}), STATE, device=torch.device("cpu"))


def test_replay_bonus_is_divided_by_the_running_std_of_the_raw_bonus_by_hand():
    rnd = _replay_rnd(hidden_sizes=[1], embedding_size=1, activation="relu", normalize_obs=False)
    _set_nets(rnd)
    # Errors relu(x)^2 of next observations [[0, 3], [2, 1]]: [[0, 9], [4, 1]]. Only column 0 (the sampled
    # transitions' own, uniform over the buffer) enters the statistics: 0 and 4, mean 2, population variance 4
    # (prior count 0), std 2. Every column is divided by it, not centred: [[0, 4.5], [2, 0.5]].
    bonus = rnd.batch_bonus(_obs([[0.0, 3.0], [2.0, 1.0]]))
    torch.testing.assert_close(bonus, torch.tensor([[0.0, 4.5], [2.0, 0.5]]), atol=1e-6, rtol=1e-6)
    assert float(rnd.bonus_normalizer.mean) == pytest.approx(2.0) and float(rnd.bonus_normalizer.var) == 4.0
    # A next error of 100 (x = 10) merges into them first: {0, 4, 100} has mean 104/3 and population variance
    # 10016/3 - (104/3)^2 = 2136.89 (std 46.23), so its bonus is 100 / 46.23 = 2.163.
    bonus = rnd.batch_bonus(_obs([[10.0]]))
    assert float(rnd.bonus_normalizer.var) == pytest.approx(10016 / 3 - (104 / 3) ** 2, rel=1e-6)
    assert bonus.item() == pytest.approx(2.1632, rel=1e-4)
    raw = _replay_rnd(hidden_sizes=[1], embedding_size=1, activation="relu", normalize_obs=False,
                      normalize_bonus=False)
    _set_nets(raw)
    assert raw.bonus_normalizer is None and raw.batch_bonus(_obs([[0.0, 3.0]])).tolist() == [[0.0, 9.0]]


def test_replay_bonus_statistics_forget_batches_older_than_the_window():
    rnd = _replay_rnd(hidden_sizes=[1], embedding_size=1, activation="relu", normalize_obs=False)
    assert rnd.bonus_normalizer.min_weight == 1 / BONUS_WINDOW
    stats = RunningNormalizer((), min_weight=0.5)  # a window of 2 batches, by hand
    stats.update(torch.tensor([0.0, 4.0]))  # the first batch: mean 2, var 4
    # The next batch {10} would weigh 1/3 by its count; it weighs 0.5: mean 2 + 0.5 (10 - 2) = 6,
    # var 0.5 * 4 + 0.5 * 0 + 0.5 * 0.5 * 8^2 = 18.
    stats.update(torch.tensor([10.0]))
    assert float(stats.mean) == 6.0 and float(stats.var) == 18.0


def test_replay_input_statistics_merge_the_stored_transitions_not_the_samples():
    rnd = _replay_rnd()
    rnd.observe(_obs([[0.0], [2.0]]))  # the collected block [N=2, T=1]: mean 1, var 1
    rnd.batch_bonus(_obs([[5.0], [7.0]]))  # sampling reads the statistics and leaves them alone
    assert float(rnd.obs_normalizer.mean) == pytest.approx(1.0) and float(rnd.obs_normalizer.var) == pytest.approx(1.0)
    assert "bonus_normalizer" in rnd.networks and rnd.bonus_scaler is None


def test_replay_fit_step_lowers_the_error_and_leaves_the_target_alone():
    torch.manual_seed(0)
    rnd = _replay_rnd(hidden_sizes=[32], embedding_size=8, learning_rate=1e-2)
    obs = _obs(torch.randn(64, 1).tolist()).squeeze(1)
    rnd.observe(obs)
    target = copy.deepcopy(rnd.target.state_dict())
    losses = [float(rnd.fit_step(obs)) for _ in range(40)]
    assert losses[-1] < 0.5 * losses[0]
    assert all(torch.equal(target[k], v) for k, v in rnd.target.state_dict().items())


@pytest.mark.parametrize("algo", ["sac", pytest.param("fasttd3", marks=pytest.mark.slow)])
def test_weight_zero_is_the_off_policy_algorithm_bit_for_bit(algo):
    plain, plain_collector = _off_policy(algo)
    off, off_collector = _off_policy(algo, "algo.rnd.weight=0", "algo.rnd.learning_rate=0.5")
    assert off.rnd is None and "rnd" not in off.networks() and "rnd_optimizer" not in off.optimizers()
    for _ in range(3):  # the second and third update take gradient steps
        torch.manual_seed(1)
        a = plain.update(plain_collector.collect())
        torch.manual_seed(1)
        b = off.update(off_collector.collect())
        assert a == b and not any("rnd" in k for k in b)
    assert all(torch.equal(x, y) for x, y in zip(plain.critics.parameters(), off.critics.parameters(), strict=True))


@pytest.mark.parametrize("n_step", [1, 3])
def test_sampled_rewards_carry_the_weighted_bonus_of_their_next_observations(n_step):
    algo, collector = _off_policy("sac", "algo.rnd.weight=0.5", "algo.rnd.weight_schedule=linear",
                                  f"algo.n_step={n_step}")
    rollout = collector.collect()
    algo.update(rollout)  # 32 env steps stored, no gradient step yet
    assert torch.equal(algo.buffer.storage["reward"][:, :4], rollout["reward"][:, :4])  # the env's rewards stored
    reference = copy.deepcopy(algo.rnd)  # the bonus is computed before the predictor's step on the batch
    torch.manual_seed(5)
    batch, terms = algo.sample(0.5)
    torch.manual_seed(5)
    expected = algo.buffer.sample(16, lambda next_obs: 0.5 * reference.batch_bonus(next_obs))
    torch.testing.assert_close(batch["reward"], expected["reward"])
    torch.manual_seed(5)
    assert not torch.allclose(algo.buffer.sample(16)["reward"], batch["reward"])  # the bonus is there
    assert terms["diag/rnd_loss"] > 0 and terms["diag/rnd_bonus"] > 0
    moved = [not torch.equal(a, b) for a, b in zip(algo.rnd.predictor.parameters(),
                                                    reference.predictor.parameters(), strict=True)]
    assert any(moved)  # one predictor step per gradient step
    logged = algo.update(collector.collect())  # 64 env steps: 4 gradient steps
    assert {k for k in logged if k.startswith(("loss/", "diag/"))} == set(algo.metric_names)
    assert logged["train/rnd_weight"] == pytest.approx(0.5 * (1 - 32 / 1024))  # linear over the env steps before


@pytest.mark.parametrize("algo", ["sac", "fasttd3"])  # fasttd3's state round trip in the fast tier
def test_off_policy_state_round_trip_with_curiosity_continues_exactly(algo):
    overrides = ("algo.rnd.weight=0.5", "algo.learning_starts=0")
    first, collector = _off_policy(algo, *overrides)
    for _ in range(2):
        first.update(collector.collect())
    assert {"rnd", "rnd_optimizer"} <= set(first.state_dict())
    assert {"predictor.0.weight", "bonus_normalizer.var"} <= set(first.state_dict()["rnd"])
    restored, _ = _off_policy(algo, *overrides)
    restored.policy.load_state_dict(first.policy.state_dict())
    restored.load_state_dict(copy.deepcopy(first.state_dict()))
    restored.buffer.load_state_dict(first.buffer.state_dict())
    assert_next_update_alike(first, restored, collector.collect())


@pytest.mark.slow
def test_a_resumed_sac_run_with_curiosity_equals_an_uninterrupted_one(tmp_path):
    run = [*OFF_POLICY, "algo=sac", "algo.rnd.weight_schedule=[[0,0.5],[192,0.1]]", "algo.rnd.weight_schedule_kind="
           "interp", "eval.every_env_steps=128", "eval.num_episodes=2", "trainer.checkpoint_every_env_steps=64",
           "logger.console=none", "logger.tensorboard=false"]  # a schedule over env steps, whatever the budget
    full, resumed = tmp_path / "full", tmp_path / "resumed"
    run_training(compose_config([*run, "trainer.total_env_steps=192"]), full)
    run_training(compose_config([*run, "trainer.total_env_steps=128"]), resumed)
    run_training(compose_config([*run, "trainer.total_env_steps=192"]), resumed)  # continues from last.pt
    records = [[json.loads(line) for line in (d / "metrics.jsonl").read_text().splitlines()] for d in (full, resumed)]
    assert [r["env_steps"] for r in records[0]] == [32, 64, 96, 128, 160, 192]
    for x, y in zip(records[0][4:], records[1][4:], strict=True):
        assert (x["loss/critic"], x["diag/rnd_bonus"], x["diag/rnd_loss"], x["train/rnd_weight"]) == (
            y["loss/critic"], y["diag/rnd_bonus"], y["diag/rnd_loss"], y["train/rnd_weight"])
    a, b = (load_checkpoint(d / "checkpoints" / "last.pt")["algo"]["rnd"] for d in (full, resumed))
    assert set(a) >= {"predictor.0.weight", "obs_normalizer.mean", "bonus_normalizer.var"}
    assert all(torch.equal(a[k], b[k]) for k in a)

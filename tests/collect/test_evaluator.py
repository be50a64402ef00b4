"""Evaluation: its metrics by hand, the env stepped in inference mode, an env that replaces its state tensors
evaluated again and again."""

import numpy as np
import pytest
import torch

from embodirl.collect.evaluator import Evaluator
from embodirl.config.envs import CartPoleConfig, PushCubeArmConfig
from embodirl.config.policies import ActorCriticConfig
from embodirl.envs.push_cube.arm import PushCubeArm
from embodirl.policies.actor_critic import ActorCritic
from embodirl.training.video import record_episode
from tests.collect.test_collector import ModeSpy, ScriptedEpisodes


def test_evaluation_steps_the_env_in_inference_mode():
    env = ModeSpy(CartPoleConfig(num_envs=2, max_episode_steps=20), seed=0)
    policy = ActorCritic(ActorCriticConfig(hidden_sizes=[8]), observation_space=env.observation_space,
                         action_space=env.action_space)
    env.modes.clear()
    metrics = Evaluator(env, policy).evaluate(2, seed=0)
    assert env.modes and all(inference for _, inference in env.modes)
    assert 0 < metrics["eval/length_mean"] <= 20


def test_an_env_that_replaces_its_state_tensors_evaluates_records_and_evaluates_again():
    # PushCubeArm assigns new step counters every step (inference tensors under evaluation) and zeroes them in
    # place on reset: every call into the eval env must be in the same mode, or that reset raises.
    env = PushCubeArm(PushCubeArmConfig(num_envs=2, max_episode_steps=4), seed=0)
    policy = ActorCritic(ActorCriticConfig(hidden_sizes=[8]), observation_space=env.observation_space,
                         action_space=env.action_space)
    evaluator = Evaluator(env, policy)
    first = evaluator.evaluate(2, seed=3)
    frames = record_episode(env, policy, num_envs=1, size=16, seed=3)
    assert frames.shape == (5, 16, 16, 3) and evaluator.evaluate(2, seed=3) == first
    assert torch.is_grad_enabled()


def test_metrics_of_the_first_episodes_of_each_env_by_hand():
    # 3 episodes over 2 envs: env 0 records its first 2 (3 steps, return 1.5, success once; 2 steps, return 1.0,
    # success at its end), env 1 its first (20 steps over two 16-step blocks, return 20, success once at step 5).
    env = ScriptedEpisodes()
    policy = ActorCritic(ActorCriticConfig(hidden_sizes=[4]), observation_space=env.observation_space,
                         action_space=env.action_space)
    metrics = Evaluator(env, policy).evaluate(3, seed=0)
    returns = [1.5, 1.0, 20.0]
    assert metrics == pytest.approx({
        "eval/return_mean": 7.5, "eval/return_std": float(np.std(returns)), "eval/length_mean": 25 / 3,
        "eval/num_episodes": 3.0, "eval/deterministic": 1.0, "eval/success_rate": 1 / 3, "eval/success_at_end": 1 / 3,
        "eval/success_once": 1.0, "eval/metrics/dist": (2 + 1 + 19) / 3}, rel=1e-12)


@pytest.mark.parametrize("repeat", [1, 3])
def test_push_cube_logs_its_reward_terms_and_they_add_up_to_the_return(repeat):
    from embodirl.collect.collector import Collector, CollectPlan
    from embodirl.config.envs import PushCubeConfig, WrapperConfig
    from embodirl.envs.push_cube.env import PushCube
    from embodirl.envs.wrapping import wrap_env

    env = wrap_env(PushCube(PushCubeConfig(num_envs=16, max_episode_steps=12), device="cpu", seed=0),
                   WrapperConfig(action_repeat=repeat), seed=0)
    policy = ActorCritic(ActorCriticConfig(hidden_sizes=[8]), observation_space=env.observation_space,
                         action_space=env.action_space)
    collector = Collector(env, policy, CollectPlan(num_steps=12))
    collector.collect()
    train = collector.pop_metrics()
    evaluation = Evaluator(env, policy).evaluate(16, seed=1)
    for metrics, family in ((train, "episode"), (evaluation, "eval")):
        terms = [metrics[f"{family}/rewards/{name}"] for name in ("reach", "place", "success")]
        assert sum(terms) == pytest.approx(metrics[f"{family}/return_mean"], rel=1e-6)
        assert terms[0] > 0


def _wide_policy_on_push_cube():
    from embodirl.config.envs import PushCubeConfig
    from embodirl.envs.push_cube.env import PushCube

    torch.manual_seed(0)
    env = PushCube(PushCubeConfig(num_envs=4, max_episode_steps=10), device="cpu", seed=0)
    policy = ActorCritic(ActorCriticConfig(hidden_sizes=[8], init_log_std=1.0), observation_space=env.observation_space,
                         action_space=env.action_space)
    return env, policy


def test_sampled_evaluation_differs_from_the_mode_is_seeded_and_leaves_the_rng_alone():
    env, policy = _wide_policy_on_push_cube()
    mode = Evaluator(env, policy).evaluate(8, seed=1)
    assert mode == Evaluator(env, policy, deterministic=True).evaluate(8, seed=1)  # the default is the mode
    assert mode["eval/deterministic"] == 1.0
    sampled = Evaluator(env, policy, deterministic=False)
    before = torch.get_rng_state()
    first = sampled.evaluate(8, seed=1)
    assert torch.equal(torch.get_rng_state(), before)  # training's random stream is untouched
    assert first["eval/deterministic"] == 0.0
    # std e (log_std 1) around a near-zero mean: the sampled episodes' returns differ from the mode's
    assert first["eval/return_mean"] != pytest.approx(mode["eval/return_mean"], rel=1e-3)
    assert sampled.evaluate(8, seed=1) == first  # the same seed samples the same actions
    assert sampled.evaluate(8, seed=2)["eval/return_mean"] != first["eval/return_mean"]


def test_eval_deterministic_false_reaches_training_and_embodirl_eval(cli, tmp_path):
    import json

    from embodirl.app.run import run_training
    from tests.conftest import TINY, compose_config

    assert compose_config(list(TINY)).eval.deterministic is True  # the default: today's mode
    run_dir = tmp_path / "run"
    run_training(compose_config([*TINY, "eval.deterministic=false"]), run_dir)
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert {r["eval/deterministic"] for r in records if "eval/deterministic" in r} == {0.0}
    results = {}
    for mode in ("true", "false"):
        out = tmp_path / f"eval-{mode}"
        result = cli("embodirl-eval", [f"run={run_dir}", "num_episodes=8", "device=cpu", f"eval.deterministic={mode}",
                                       f"hydra.run.dir={out}"])
        assert result.code == 0, result.err
        results[mode] = json.loads((out / "eval.json").read_text())
    assert results["true"]["eval/deterministic"] == 1.0 and results["false"]["eval/deterministic"] == 0.0
    assert "8 sampled episodes" in result.err + result.out


@pytest.mark.slow
def test_compiled_evaluation_equals_eager_for_the_mode_and_samples_reproducibly():
    from embodirl.accel.compile import Acceleration
    from embodirl.envs.cartpole import CartPole

    env = CartPole(CartPoleConfig(num_envs=4, max_episode_steps=50), seed=0)
    torch.manual_seed(0)
    policy = ActorCritic(ActorCriticConfig(hidden_sizes=[8]), observation_space=env.observation_space,
                         action_space=env.action_space)
    compiled = Acceleration(compile=True)
    mode = Evaluator(env, policy).evaluate(8, seed=1)
    assert Evaluator(env, policy, compiled).evaluate(8, seed=1) == pytest.approx(mode, rel=1e-6)
    sampled = Evaluator(env, policy, compiled, deterministic=False)
    first = sampled.evaluate(8, seed=1)
    assert first["eval/deterministic"] == 0.0 and sampled.evaluate(8, seed=1) == first


@pytest.mark.parametrize("execute", [1, 2, 3])
def test_a_chunked_policy_is_evaluated_in_env_steps_by_hand(execute):
    # The episodes of test_metrics_of_the_first_episodes_of_each_env_by_hand, whatever the chunk: the statistics
    # count env steps, and an episode that ends mid-chunk is recorded at its own last step.
    env = ScriptedEpisodes()
    policy = ActorCritic(ActorCriticConfig(hidden_sizes=[4], action_chunk=3, chunk_execute=execute),
                         observation_space=env.observation_space, action_space=env.action_space)
    evaluator = Evaluator(env, policy)
    assert evaluator.block["reward"].shape == (16, execute, 2)
    metrics = evaluator.evaluate(3, seed=0)
    assert metrics["eval/return_mean"] == pytest.approx(7.5, rel=1e-12)
    assert metrics["eval/length_mean"] == pytest.approx(25 / 3, rel=1e-12)
    assert metrics["eval/success_rate"] == pytest.approx(1 / 3, rel=1e-12)
    assert metrics["eval/metrics/dist"] == pytest.approx((2 + 1 + 19) / 3, rel=1e-12)

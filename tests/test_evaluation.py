"""Evaluation steps its env in inference mode; an env that replaces its state tensors evaluates again and again."""

import torch

from embodirl.evaluation import Evaluator
from embodirl.envs.push_cube_arm import PushCubeArm
from embodirl.policies.actor_critic import ActorCritic
from embodirl.video import record_episode
from tests.test_collector import ModeSpy


def test_evaluation_steps_the_env_in_inference_mode():
    env = ModeSpy(num_envs=2, seed=0, max_episode_steps=20)
    policy = ActorCritic(env.observation_space, env.action_space, hidden_sizes=[8])
    env.modes.clear()
    metrics = Evaluator(env, policy).evaluate(2, seed=0)
    assert env.modes and all(inference for _, inference in env.modes)
    assert 0 < metrics["eval/length_mean"] <= 20


def test_an_env_that_replaces_its_state_tensors_evaluates_records_and_evaluates_again():
    # PushCubeArm assigns new step counters every step (inference tensors under evaluation) and zeroes them in
    # place on reset: every call into the eval env must be in the same mode, or that reset raises.
    env = PushCubeArm(num_envs=2, max_episode_steps=4, seed=0)
    policy = ActorCritic(env.observation_space, env.action_space, hidden_sizes=[8])
    evaluator = Evaluator(env, policy)
    first = evaluator.evaluate(2, seed=3)
    frames = record_episode(env, policy, num_envs=1, size=16, seed=3)
    assert frames.shape == (5, 16, 16, 3) and evaluator.evaluate(2, seed=3) == first
    assert torch.is_grad_enabled()

"""The collector steps the env in inference mode and leaves every buffer it writes a normal tensor."""

import torch

from embodirl.config.envs import CartPoleConfig
from embodirl.config.policies import ActorCriticConfig
from embodirl.collect.collector import CollectPlan
from embodirl.collect.collector import Collector, StepSlot
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
    assert not any(t.is_inference() for t in (*collector.obs.values(), stats.running_return, stats.running_length))


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


def test_a_step_slot_writes_the_same_rows_eager_and_as_a_tensor():
    buffers = {eager: torch.zeros(2, 3, 4) for eager in (True, False)}
    for eager, buffer in buffers.items():
        slot = StepSlot(eager, torch.device("cpu"))
        for k in range(3):  # along dim 1 of [2, 3, 4]: rows [2, 4]
            slot.write(buffer, torch.full((2, 4), float(k + 1)), 1)
            slot.advance()
        slot.reset()
        slot.write(buffer, torch.full((2, 4), 9.0), 1)  # back at slot 0
    expected = torch.tensor([9.0, 2.0, 3.0]).view(1, 3, 1).expand(2, 3, 4)
    assert torch.equal(buffers[True], expected) and torch.equal(buffers[False], expected)

"""The optimizer node, gradient accumulation (k minibatches of B/k = one of B), mixed precision against float32."""

import copy
import functools

import pytest
import torch

from embodirl.config.envs import CartPoleConfig
from embodirl.config.policies import ActorCriticConfig, ActorOnlyConfig
from embodirl.algos.grpo import GRPO
from embodirl.algos.optim import autocast_loss, build_optimizer
from embodirl.algos.ppo import PPO
from embodirl.collect.collector import Collector
from embodirl.envs.cartpole import CartPole
from embodirl.errors import ConfigError
from embodirl.policies import ActorCritic, ActorOnly

CPU = torch.device("cpu")


def test_the_optimizer_node_builds_any_torch_optimizer():
    params = [torch.nn.Parameter(torch.zeros(3))]
    adam, capturable = build_optimizer(None, params, 1e-3, False, CPU)
    assert type(adam) is torch.optim.Adam and adam.defaults["eps"] == 1e-5 and capturable
    adamw, _ = build_optimizer(functools.partial(torch.optim.AdamW, weight_decay=0.1), params, 2e-3, False, CPU)
    assert type(adamw) is torch.optim.AdamW and adamw.defaults["weight_decay"] == 0.1 and adamw.defaults["lr"] == 2e-3
    sgd, _ = build_optimizer(functools.partial(torch.optim.SGD, momentum=0.9), params, 0.1, False, CPU)
    assert type(sgd) is torch.optim.SGD and sgd.defaults["momentum"] == 0.9


def test_optimizers_with_a_fused_step_use_it_unless_the_node_chooses():
    params = [torch.nn.Parameter(torch.zeros(3))]
    assert build_optimizer(None, params, 1e-3, False, CPU)[0].defaults["fused"] is True
    assert build_optimizer(functools.partial(torch.optim.SGD), params, 0.1, False, CPU)[0].defaults["fused"] is True
    chosen = build_optimizer(functools.partial(torch.optim.Adam, foreach=True), params, 1e-3, False, CPU)[0]
    assert chosen.defaults["foreach"] is True and not chosen.defaults["fused"]
    assert build_optimizer(functools.partial(torch.optim.Adam, fused=False), params, 1e-3, False, CPU)[0].defaults[
        "fused"] is False
    assert "fused" not in build_optimizer(functools.partial(torch.optim.RMSprop), params, 1e-3, False, CPU)[0].defaults


@pytest.mark.parametrize("factory,message", [
    (functools.partial(torch.optim.SGD, eps=1e-5), r"optimizer.eps=1e-05 is invalid: expected an option of "
                                                   r"torch.optim.sgd.SGD \(one of: momentum.*~optimizer.eps"),
    (functools.partial(torch.optim.Adam, lr=0.1), r"optimizer.lr=0.1 is invalid.*learning_rate"),
    (functools.partial(dict, a=1), r"optimizer._target_='builtins.dict' is invalid: expected a torch.optim.Optimizer"),
])
def test_bad_optimizer_nodes_name_the_key(factory, message):
    with pytest.raises(ConfigError, match=message):
        build_optimizer(factory, [torch.nn.Parameter(torch.zeros(1))], 1e-3, False, CPU)


def test_adam_eps_moved_to_the_optimizer_node():
    policy = ActorCritic(ActorCriticConfig(), observation_space=CartPole(CartPoleConfig(num_envs=1)).observation_space,
                         action_space=CartPole(CartPoleConfig(num_envs=1)).action_space)
    with pytest.raises(ConfigError, match=r"adam_eps=1e-08 is invalid.*Fix: pass algo.optimizer.eps=1e-08"):
        PPO(policy, device=CPU, total_env_steps=10, adam_eps=1e-8)


def _ppo_pair(batch_size, accumulate, **kwargs):
    """A PPO with a fresh policy of seed 0 and one rollout of 8 envs x 16 steps = 128 transitions."""
    torch.manual_seed(0)
    env = CartPole(CartPoleConfig(num_envs=8), seed=0)
    policy = ActorCritic(ActorCriticConfig(hidden_sizes=[16]), observation_space=env.observation_space,
                         action_space=env.action_space)
    algo = PPO(policy, device=CPU, total_env_steps=10_000, num_steps=16, batch_size=batch_size, n_epochs=1,
               accumulate_grad_batches=accumulate, **kwargs)
    collector = Collector(env, policy, algo.collect_plan(env))
    collector.reset(seed=0)
    return algo, collector.collect()


@pytest.mark.parametrize("batch_size,accumulate", [(32, 4), (48, 3), (64, 2)])
def test_k_accumulated_minibatches_equal_one_big_batch(batch_size, accumulate):
    # 128 transitions: one minibatch of 128 vs k minibatches of 128/k (48 x 3: 43 + 43 + 42 real samples and
    # padding, weighted by their share) -> the same single optimizer step
    big, rollout = _ppo_pair(128, 1)
    small, _ = _ppo_pair(batch_size, accumulate)
    big_metrics = big.update(rollout.clone())
    small_metrics = small.update(rollout.clone())
    for (name, a), b in zip(big.policy.named_parameters(), small.policy.parameters()):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6, msg=name)
    for key in ("loss/policy", "loss/value", "loss/entropy", "diag/approx_kl", "diag/clip_fraction"):
        assert small_metrics[key] == pytest.approx(big_metrics[key], rel=1e-4, abs=1e-6), key
    # and it is not what k separate steps do
    separate, _ = _ppo_pair(batch_size, 1)
    separate.update(rollout.clone())
    assert any(not torch.allclose(a, b, atol=1e-6) for a, b in zip(big.policy.parameters(),
                                                                      separate.policy.parameters()))


def test_grpo_accumulates_too():
    def grpo(batch_size, accumulate):
        torch.manual_seed(0)
        env = CartPole(CartPoleConfig(num_envs=8), seed=0)
        policy = ActorOnly(ActorOnlyConfig(hidden_sizes=[16]), observation_space=env.observation_space,
                           action_space=env.action_space)
        algo = GRPO(policy, device=CPU, total_env_steps=10_000, num_steps=16, batch_size=batch_size, n_epochs=1,
                    group_size=4, accumulate_grad_batches=accumulate)
        collector = Collector(env, policy, algo.collect_plan(env))
        collector.reset(seed=0)
        return algo, collector

    big, collector = grpo(10_000, 1)  # every valid transition in one minibatch
    rollout = collector.collect()
    small, _ = grpo(16, 64)  # 64 x 16 >= 128 slots: one step, whatever the valid count
    big.update(rollout.clone())
    small.update(rollout.clone())
    for a, b in zip(big.policy.parameters(), small.policy.parameters()):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6)


def _update_delta(amp, scaler_state=None):
    algo, rollout = _ppo_pair(128, 1, amp=amp)
    if scaler_state is not None:
        algo.grad_scaler.load_state_dict(scaler_state)
    before = copy.deepcopy(algo.policy.state_dict())
    torch.manual_seed(1)
    metrics = algo.update(rollout)
    return torch.cat([(algo.policy.state_dict()[k] - v).flatten() for k, v in before.items()]), metrics, algo


def _settled_fp16_scaler():
    """fp16's gradient scaler starts at 2**16: the first steps overflow and are skipped (the scale halves each
    time, torch's GradScaler behaviour) until the scaled gradients fit in float16."""
    algo, rollout = _ppo_pair(128, 1, amp="fp16")
    skipped = 0
    while True:
        before = [p.clone() for p in algo.policy.parameters()]
        algo.update(rollout.clone())
        if any(not torch.equal(b, p) for b, p in zip(before, algo.policy.parameters())):
            return skipped, algo.grad_scaler.state_dict()
        skipped += 1


@pytest.mark.parametrize("amp", ["bf16", "fp16"])
def test_mixed_precision_agrees_with_float32(amp):
    # One Adam step of the same minibatch (128 transitions) from the same parameters: the update under autocast
    # points the same way as in float32 (cosine > 0.999) and has the same size within 1 % (bf16 keeps 8 bits of
    # mantissa, fp16 11; measured: cosine 0.999999, sizes within 1e-4); the losses agree within 1 %.
    scaler_state = None
    if amp == "fp16":
        skipped, scaler_state = _settled_fp16_scaler()
        assert 1 <= skipped <= 16  # overflowing steps are skipped, never applied
    reference, ref_metrics, _ = _update_delta("off")
    delta, metrics, _ = _update_delta(amp, scaler_state)
    cosine = torch.nn.functional.cosine_similarity(reference, delta, dim=0).item()
    assert cosine > 0.999, cosine
    assert (delta.norm() / reference.norm()).item() == pytest.approx(1.0, abs=0.01)
    assert metrics["loss/value"] == pytest.approx(ref_metrics["loss/value"], rel=0.01)
    assert metrics["loss/entropy"] == pytest.approx(ref_metrics["loss/entropy"], rel=0.01)


def test_fp16_checkpoints_its_gradient_scaler():
    algo, rollout = _ppo_pair(128, 1, amp="fp16")
    algo.update(rollout)
    state = algo.state_dict()
    assert state["grad_scaler"]["scale"] > 0
    fresh, _ = _ppo_pair(128, 1, amp="fp16")
    fresh.load_state_dict(state)
    assert fresh.grad_scaler.get_scale() == algo.grad_scaler.get_scale()


def test_autocast_runs_the_loss_in_the_low_precision_dtype():
    layer = torch.nn.Linear(4, 1)
    seen = []

    def loss_fn(idx, weight):
        out = layer(torch.randn(3, 4))
        seen.append(out.dtype)
        return out.mean(), out.detach().flatten()

    loss, metrics = autocast_loss(loss_fn, "bf16", CPU)(None, None)
    assert seen == [torch.bfloat16]  # computed in bfloat16 ...
    assert loss.dtype == metrics.dtype == torch.float32  # ... returned in float32
    assert autocast_loss(loss_fn, "off", CPU) is loss_fn

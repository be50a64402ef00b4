"""The optimizer node, gradient accumulation (k minibatches of B/k = one of B), mixed precision against float32."""

import copy

import pytest
import torch

from embodirl.algos.optim import build_optimizer
from embodirl.config.algos import PPOConfig
from embodirl.config.schema import parse
from embodirl.errors import ConfigError
from tests.conftest import algo_on_cartpole

SLOW = pytest.mark.slow  # the rest of a case table: its representative stays in the fast tier


CPU = torch.device("cpu")


def _params():
    return [torch.nn.Parameter(torch.zeros(3))]


def test_the_optimizer_node_builds_any_torch_optimizer():
    adam, capturable = build_optimizer(None, _params(), 1e-3, False, CPU)
    assert type(adam) is torch.optim.Adam and adam.defaults["eps"] == 1e-5 and capturable
    adamw, _ = build_optimizer({"_target_": "torch.optim.AdamW", "weight_decay": 0.1}, _params(), 2e-3, False, CPU)
    assert type(adamw) is torch.optim.AdamW and adamw.defaults["weight_decay"] == 0.1 and adamw.defaults["lr"] == 2e-3
    sgd, capturable = build_optimizer({"_target_": "torch.optim.SGD", "momentum": 0.9}, _params(), 0.1, False, CPU)
    assert type(sgd) is torch.optim.SGD and sgd.defaults["momentum"] == 0.9 and not capturable
    rmsprop, _ = build_optimizer({"_target_": "torch.optim.RMSprop", "alpha": 0.9}, _params(), 0.1, False, CPU)
    assert type(rmsprop) is torch.optim.RMSprop and rmsprop.defaults["alpha"] == 0.9  # a class without a schema


def test_optimizers_with_a_fused_step_use_it_unless_the_node_chooses():
    assert build_optimizer(None, _params(), 1e-3, False, CPU)[0].defaults["fused"] is True
    assert build_optimizer({"_target_": "torch.optim.SGD"}, _params(), 0.1, False, CPU)[0].defaults["fused"] is True
    chosen = build_optimizer({"_target_": "torch.optim.Adam", "foreach": True}, _params(), 1e-3, False, CPU)[0]
    assert chosen.defaults["foreach"] is True and not chosen.defaults["fused"]
    unfused = build_optimizer({"_target_": "torch.optim.Adam", "fused": False}, _params(), 1e-3, False, CPU)[0]
    assert unfused.defaults["fused"] is False
    assert "fused" not in build_optimizer({"_target_": "torch.optim.RMSprop"}, _params(), 1e-3, False, CPU)[0].defaults


def test_a_captured_step_gets_a_capturable_optimizer_with_a_tensor_learning_rate():
    adam, capturable = build_optimizer(None, _params(), 1e-3, True, CPU)
    assert capturable and adam.defaults["capturable"] is True and adam.defaults["foreach"] is True
    lr = adam.param_groups[0]["lr"]
    assert isinstance(lr, torch.Tensor) and lr.item() == pytest.approx(1e-3)  # schedules change it in place
    with pytest.raises(ConfigError, match=r"algo.optimizer.fused=True is invalid: expected null or false with CUDA "
                                          r"graphs.*Fix: pass algo.optimizer.fused=null, or cuda_graphs=false"):
        build_optimizer({"_target_": "torch.optim.Adam", "fused": True}, _params(), 1e-3, True, CPU)


@pytest.mark.parametrize("node,message", [
    ({"_target_": "torch.optim.SGD", "eps": 1e-5}, r"algo.optimizer.eps=1e-05 is invalid: expected a key of "
                                                    r"algo.optimizer \(one of: .*momentum"),
    ({"_target_": "torch.optim.Adam", "lr": 0.1}, r"algo.optimizer.lr=0.1 is invalid.*algo.learning_rate"),
    ({"_target_": "torch.optim.RMSprop", "lr": 0.1}, r"algo.optimizer.lr=0.1 is invalid.*learning rate.*"
                                                      r"~algo.optimizer.lr"),
    ({"_target_": "torch.optim.RMSprop", "alpha": -1.0}, r"algo.optimizer.alpha=-1.0 is invalid: expected a value "
                                                          r"torch.optim.RMSprop accepts \(torch says: Invalid alpha"),
    ({"_target_": "torch.optim.RMSprop", "betas": 0.9}, r"algo.optimizer.betas=0.9 is invalid: expected a key of "
                                                         r"torch.optim.RMSprop"),
    ({"_target_": "builtins.dict"}, r"algo.optimizer._target_='builtins.dict' is invalid: expected a "
                                    r"torch.optim.Optimizer class"),
])
def test_bad_optimizer_nodes_name_the_key(node, message):
    with pytest.raises(ConfigError, match=message):
        build_optimizer(node, _params(), 1e-3, False, CPU)


def test_adam_eps_moved_to_the_optimizer_node():
    with pytest.raises(ConfigError, match=r"algo.adam_eps=1e-08 is invalid.*Fix: pass algo.optimizer.eps=1e-08"):
        parse(PPOConfig, {"adam_eps": 1e-8}, "algo.")


def _ppo_pair(minibatch_size, accumulate, **keys):
    """A PPO with a fresh policy of seed 0 and one rollout of 8 envs x 16 steps = 128 transitions."""
    algo, collector = algo_on_cartpole("ppo", minibatch_size=minibatch_size, num_epochs=1,
                                       accumulate_minibatches=accumulate, **keys)
    return algo, collector.collect()


@pytest.mark.parametrize("minibatch_size,accumulate", [pytest.param(32, 4, marks=SLOW), (48, 3),  # uneven: the fast one
                                                         pytest.param(64, 2, marks=SLOW)])
def test_k_accumulated_minibatches_equal_one_big_batch(minibatch_size, accumulate):
    # 128 transitions: one minibatch of 128 vs k minibatches of 128/k (48 x 3: 43 + 43 + 42 real samples and
    # padding, weighted by their share) -> the same single optimizer step
    big, rollout = _ppo_pair(128, 1)
    small, _ = _ppo_pair(minibatch_size, accumulate)
    big_metrics = big.update(rollout.clone())
    small_metrics = small.update(rollout.clone())
    for (name, a), b in zip(big.policy.named_parameters(), small.policy.parameters(), strict=True):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6, msg=name)
    for key in ("loss/policy", "loss/value", "loss/entropy", "diag/approx_kl", "diag/clip_fraction"):
        assert small_metrics[key] == pytest.approx(big_metrics[key], rel=1e-4, abs=1e-6), key
    # and it is not what k separate steps do
    separate, _ = _ppo_pair(minibatch_size, 1)
    separate.update(rollout.clone())
    assert any(not torch.allclose(a, b, atol=1e-6) for a, b in zip(big.policy.parameters(),
                                                                      separate.policy.parameters(), strict=True))


def test_grpo_accumulates_too():
    def grpo(minibatch_size, accumulate):
        return algo_on_cartpole("grpo", minibatch_size=minibatch_size, num_epochs=1, accumulate_minibatches=accumulate)

    big, collector = grpo(10_000, 1)  # every valid transition in one minibatch
    rollout = collector.collect()
    small, _ = grpo(16, 64)  # 64 x 16 >= 128 slots: one step, whatever the valid count
    big.update(rollout.clone())
    small.update(rollout.clone())
    for a, b in zip(big.policy.parameters(), small.policy.parameters(), strict=True):
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
        if any(not torch.equal(b, p) for b, p in zip(before, algo.policy.parameters(), strict=True)):
            return skipped, algo.grad_scaler.state_dict()
        skipped += 1


@pytest.mark.parametrize("amp", ["bf16", "fp16"])
def test_mixed_precision_agrees_with_float32(amp):
    # One Adam step of the same minibatch (128 transitions) from the same parameters: the update under autocast
    # points the same way as in float32 (cosine > 0.999) and has the same size within 1 % (bf16 keeps 8 bits of
    # mantissa, fp16 11); the losses agree within 1 %.
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

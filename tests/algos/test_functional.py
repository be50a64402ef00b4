"""The algorithm maths against hand-computed values and plain loops."""

import math

import pytest
import torch
from tensordict import TensorDict

from embodirl.algos import functional as F


def test_gae_bootstraps_truncation_but_not_termination():
    # N=1, T=3, gamma=lambda=0.5. t1 terminates; t2 is cut by the time limit with V(final obs)=4.
    reward = torch.tensor([[1.0, 2.0, 3.0]])
    value = torch.tensor([[0.5, 1.0, 1.5, 2.0]])
    done = torch.tensor([[False, True, True]])
    final_value = torch.tensor([[0.0, 0.0, 4.0]])
    adv, ret = F.gae(reward, value, done, final_value, gamma=0.5, gae_lambda=0.5)
    # delta0 = 1 + .5*1.0 - .5 = 1.0 ; delta1 = 2 + 0 - 1.0 = 1.0 (terminal: no future)
    # delta2 = 3 + .5*4.0 - 1.5 = 3.5 (truncated: bootstrapped from the true final obs, not from value[:, 3])
    # A2 = 3.5 ; A1 = 1.0 (done cuts the trace) ; A0 = 1.0 + .25 * 1.0 = 1.25
    torch.testing.assert_close(adv, torch.tensor([[1.25, 1.0, 3.5]]))
    torch.testing.assert_close(ret, torch.tensor([[1.75, 2.0, 5.0]]))


def test_gae_without_dones_uses_the_bootstrap_value():
    # gamma = lambda = 1: delta = [1 + 0 - 0, 1 + 1 - 0] = [1, 2]; A1 = 2; A0 = 1 + 2 = 3.
    adv, ret = F.gae(torch.tensor([[1.0, 1.0]]), torch.tensor([[0.0, 0.0, 1.0]]),
                     torch.tensor([[False, False]]), torch.zeros(1, 2), 1.0, 1.0)
    torch.testing.assert_close(adv, torch.tensor([[3.0, 2.0]]))
    torch.testing.assert_close(ret, torch.tensor([[3.0, 2.0]]))


def _gae_loop(reward, value, terminated, truncated, final_value, gamma, lam):
    n, t_len = reward.shape
    adv = torch.zeros(n, t_len)
    for i in range(n):
        last = 0.0
        for t in reversed(range(t_len)):
            if terminated[i, t]:
                next_v, cont = 0.0, 0.0
            elif truncated[i, t]:
                next_v, cont = float(final_value[i, t]), 0.0
            else:
                next_v, cont = float(value[i, t + 1]), 1.0
            delta = float(reward[i, t]) + gamma * next_v - float(value[i, t])
            last = delta + gamma * lam * cont * last
            adv[i, t] = last
    return adv, adv + value[:, :-1]


def test_gae_matches_a_plain_loop_on_random_data():
    g = torch.Generator().manual_seed(0)
    n, t_len = 7, 23
    reward = torch.randn(n, t_len, generator=g)
    value = torch.randn(n, t_len + 1, generator=g)
    terminated = torch.rand(n, t_len, generator=g) < 0.1
    truncated = (torch.rand(n, t_len, generator=g) < 0.1) & ~terminated
    final_value = torch.where(truncated, torch.randn(n, t_len, generator=g), torch.zeros(n, t_len))
    adv, ret = F.gae(reward, value, terminated | truncated, final_value, 0.97, 0.9)
    ref_adv, ref_ret = _gae_loop(reward, value, terminated, truncated, final_value, 0.97, 0.9)
    torch.testing.assert_close(adv, ref_adv)
    torch.testing.assert_close(ret, ref_ret)


def test_compute_gae_reads_the_rollout_layout_and_ignores_slot_t():
    n, t_len = 2, 3
    rollout = TensorDict({
        "reward": torch.tensor([[1.0, 2.0, 3.0, 99.0]] * n),
        "value": torch.tensor([[0.5, 1.0, 1.5, 2.0]] * n),
        "done": torch.tensor([[False, True, True, True]] * n),
        "final_value": torch.tensor([[0.0, 0.0, 4.0, 99.0]] * n),
    }, batch_size=[n, t_len + 1])
    adv, _ = F.compute_gae(rollout, 0.5, 0.5)
    assert adv.shape == (n, t_len)
    torch.testing.assert_close(adv[0], torch.tensor([1.25, 1.0, 3.5]))


def test_clipped_surrogate_takes_the_pessimistic_side():
    log_ratio = torch.log(torch.tensor([1.5, 1.5, 0.5, 0.5]))
    adv = torch.tensor([2.0, -2.0, 2.0, -2.0])
    loss, ratio = F.clipped_surrogate_loss(log_ratio, torch.zeros(4), adv, clip_coef=0.2)
    # ratio 1.5, A=2: min(3.0, 1.2*2=2.4) = 2.4 ; A=-2: min(-3.0, -2.4) = -3.0
    # ratio 0.5, A=2: min(1.0, 0.8*2=1.6) = 1.0 ; A=-2: min(-1.0, -1.6) = -1.6   (loss = -objective)
    torch.testing.assert_close(loss, torch.tensor([-2.4, 3.0, -1.0, 1.6]))
    torch.testing.assert_close(ratio, torch.tensor([1.5, 1.5, 0.5, 0.5]))


def test_policy_gradient_loss_by_hand_and_its_gradient():
    log_prob = torch.log(torch.tensor([0.5, 0.25, 0.8])).requires_grad_()
    adv = torch.tensor([2.0, -1.0, 0.0])
    loss = F.policy_gradient_loss(log_prob, adv)
    # -A log p: -2 ln .5 = 2 ln 2 ; +1 ln .25 = -2 ln 2 ; 0 (no advantage, no push)
    torch.testing.assert_close(loss.detach(), torch.tensor([2 * math.log(2), -2 * math.log(2), 0.0]))
    loss.sum().backward()
    # descending the loss raises log p where A > 0 and lowers it where A < 0: d/dlogp = -A
    torch.testing.assert_close(log_prob.grad, torch.tensor([-2.0, 1.0, 0.0]))


def test_value_loss_plain_and_clipped():
    value, old, ret = torch.tensor([3.0, 1.2, 2.0]), torch.tensor([1.0, 1.0, 1.0]), torch.tensor([2.0, 3.0, 3.0])
    # plain: mean((1)^2, (-1.8)^2, (-1)^2) = (1 + 3.24 + 1) / 3
    torch.testing.assert_close(F.value_loss(value, old, ret, None), torch.tensor((1 + 3.24 + 1) / 3))
    # clipped at 0.5: V_clip = [1.5, 1.2, 1.5]; max((1, .25), (3.24, 3.24), (1, 2.25)) = [1, 3.24, 2.25]
    torch.testing.assert_close(F.value_loss(value, old, ret, 0.5), torch.tensor((1 + 3.24 + 2.25) / 3))


def test_approx_kl_k3_and_clip_fraction():
    lp = torch.log(torch.tensor([2.0, 1.0]))
    # k3 = (r - 1) - log r: r=2 -> 1 - ln 2 ; r=1 -> 0
    torch.testing.assert_close(F.approx_kl(lp, torch.zeros(2)), torch.tensor((1 - math.log(2)) / 2))
    assert F.clip_fraction(torch.tensor([1.0, 1.3, 0.7, 1.1]), 0.2).item() == pytest.approx(0.5)


def test_explained_variance_extremes():
    target = torch.tensor([1.0, 2.0, 3.0, 4.0])
    assert F.explained_variance(target, target).item() == pytest.approx(1.0)
    assert F.explained_variance(torch.zeros(4), target).item() == pytest.approx(0.0)
    assert math.isnan(F.explained_variance(torch.zeros(3), torch.ones(3)).item())


def test_normalize():
    x = torch.tensor([1.0, 2.0, 3.0])
    torch.testing.assert_close(F.normalize(x, eps=0.0), torch.tensor([-1.0, 0.0, 1.0]))


def test_weighted_mean_ignores_padding_and_never_divides_by_zero():
    x = torch.tensor([1.0, 2.0, 3.0, 100.0])
    assert F.weighted_mean(x, torch.tensor([1.0, 1.0, 1.0, 0.0])).item() == pytest.approx(2.0)  # (1+2+3)/3
    assert F.weighted_mean(x, torch.zeros(4)).item() == 0.0
    assert F.weighted_mean(x).item() == pytest.approx(26.5)
    # value loss with weights: ((1-0)^2 + (2-0)^2) / 2 = 2.5, the padded sample (error 100) does not count
    torch.testing.assert_close(F.value_loss(torch.tensor([1.0, 2.0, 10.0]), torch.zeros(3), torch.zeros(3), None,
                                            torch.tensor([1.0, 1.0, 0.0])), torch.tensor(2.5))


@pytest.mark.parametrize("count,batch", [(5, 2), (8, 4), (1, 3), (0, 4), (10, 3)])
def test_minibatch_indices_partition_with_static_shapes(count, batch):
    indices = torch.arange(100, 100 + count)
    idx, weight = F.minibatch_indices(indices, batch, torch.Generator().manual_seed(0))
    rows = max(1, math.ceil(count / batch))  # e.g. 5 samples, batch 2 -> 3 minibatches of exactly 2
    assert idx.shape == weight.shape == (rows, batch)
    real = idx[weight > 0]
    assert sorted(real.tolist()) == indices.tolist()  # every sample exactly once
    per_row = weight.sum(dim=1)
    assert per_row.max() - per_row.min() <= 1  # padding spread like tensor_split: sizes differ by at most one
    if count:
        assert set(idx[weight == 0].tolist()) <= {100}  # padding repeats the first index, with weight 0


def test_dual_clip_bounds_negative_advantages_by_hand():
    # clip 0.2, dual clip c = 3; ratios by construction: log_prob - old = log(ratio)
    ratio = torch.tensor([5.0, 0.5, 5.0, 1.1])
    advantage = torch.tensor([-1.0, -1.0, 2.0, -1.0])
    log_prob = torch.log(ratio).requires_grad_()
    loss, _ = F.clipped_surrogate_loss(log_prob, torch.zeros(4), advantage, 0.2, dual_clip_coef=3.0)
    # A=-1, r=5: min(-5, 1.2 * -1) = -5, bounded by 3 * -1 = -3 -> loss 3 (plain PPO: 5)
    # A=-1, r=0.5: min(-0.5, 0.8 * -1) = -0.8 > -3 -> loss 0.8 (unchanged)
    # A=+2, r=5: min(10, 1.2 * 2) = 2.4, positive advantages are never dual-clipped -> loss -2.4
    # A=-1, r=1.1: inside the clip range, min(-1.1, -1.1) -> loss 1.1
    torch.testing.assert_close(loss, torch.tensor([3.0, 0.8, -2.4, 1.1]))
    plain, _ = F.clipped_surrogate_loss(log_prob, torch.zeros(4), advantage, 0.2)
    torch.testing.assert_close(plain, torch.tensor([5.0, 0.8, -2.4, 1.1]))
    # the dual-clipped sample gets no gradient (its objective is the constant c * A); r=1.1 gets -A r = 1.1
    (grad,) = torch.autograd.grad(loss.sum(), log_prob)
    torch.testing.assert_close(grad, torch.tensor([0.0, 0.0, 0.0, 1.1]))


def test_unshuffled_minibatches_are_contiguous_in_order():
    idx, weight = F.minibatch_indices(torch.arange(100, 105), 2, shuffle=False)
    assert idx.tolist() == [[100, 101], [102, 103], [104, 100]]  # padding at the end, weight 0
    assert weight.tolist() == [[1.0, 1.0], [1.0, 1.0], [1.0, 0.0]]


def test_pad_minibatches_appends_zero_weight_rows():
    idx, weight = F.pad_minibatches(torch.tensor([[3, 4]]), torch.tensor([[1.0, 1.0]]), 3)
    assert idx.tolist() == [[3, 4], [3, 4], [3, 4]] and weight.tolist() == [[1.0, 1.0], [0.0, 0.0], [0.0, 0.0]]
    same = F.pad_minibatches(idx, weight, 2)
    assert same[0] is idx and same[1] is weight

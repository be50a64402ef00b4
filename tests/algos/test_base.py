"""The shared on-policy update loop (algos/base.py), on a toy algorithm whose numbers can be checked by hand.

The toy's samples are the rollout's rewards ``x`` (plus the observation, for the NaN tests); its loss is the
weighted mean of ``(theta - x)^2`` over a minibatch, with ``theta`` the policy's one parameter, so its gradient
is ``2 (theta - mean x)`` and one SGD step of rate 1 moves ``theta`` by exactly the (clipped) gradient.
"""

import math
import types

import pytest
import torch
from tensordict import TensorDict

from embodirl.algos.base import OnPolicyAlgorithm
from embodirl.collect.collector import CollectPlan
from embodirl.config.algos import OnPolicyConfig
from embodirl.errors import NonFiniteLossError

SGD = {"_target_": "torch.optim.SGD"}  # plain SGD: a step of rate 1 moves theta by minus the gradient


class Scalar(torch.nn.Module):
    """The smallest policy the loop needs: one parameter, an action shape, and a normalizer that records."""

    def __init__(self) -> None:
        super().__init__()
        self.theta = torch.nn.Parameter(torch.zeros(()))
        self.dist = types.SimpleNamespace(action_shape=())
        self.normalized: list[torch.Tensor] = []

    def update_normalizer(self, obs: TensorDict) -> None:
        self.normalized.append(obs["state"].clone())


class Toy(OnPolicyAlgorithm):
    """Samples ``x`` = reward + the observation's sum; loss = weighted mean of ``(theta - x)^2``; every minibatch
    it sees is recorded in ``batches``. ``kl`` is the ``diag/approx_kl`` it reports (None: it reports none);
    ``valid`` marks the samples to train on (None: all)."""

    def __init__(self, kl: float | None = None, valid: torch.Tensor | None = None, **keys) -> None:
        self.kl, self.valid, self.batches = kl, valid, []
        super().__init__(OnPolicyConfig(**keys), policy=Scalar(), device=torch.device("cpu"), total_env_steps=1000)
        self.env_name = "toy"

    def collect_plan(self, env):
        return CollectPlan(num_steps=4)

    def prepare(self, rollout):
        x = rollout["reward"][:, :-1] + rollout["obs", "state"][:, :-1].sum(-1)
        samples = TensorDict({"x": x.reshape(-1)}, batch_size=[x.numel()])
        if self.valid is not None:
            samples["valid"] = self.valid
        return samples

    def rollout_metrics(self, samples):
        return {"diag/rollout_sum": samples["x"].sum()}

    def loss(self, batch):
        self.batches.append(batch.clone())
        w = batch["weight"]
        theta = self.policy.theta
        terms = {"loss": ((theta - batch["x"]) ** 2 * w).sum() / w.sum().clamp_min(1.0),
                 "diag/x": (batch["x"] * w).sum() / w.sum().clamp_min(1.0)}
        terms["loss/squared"] = terms["loss"].detach()
        if self.kl is not None:
            terms["diag/approx_kl"] = torch.tensor(self.kl)
        return terms


def rollout(rewards) -> TensorDict:
    """A ``[N, T+1]`` rollout with these ``[N, T]`` rewards (slot T: the bootstrap slot, reward 0) and zero obs."""
    reward = torch.as_tensor(rewards, dtype=torch.float32)
    n, t1 = reward.shape[0], reward.shape[1] + 1
    data = TensorDict({"obs": TensorDict({"state": torch.zeros(n, t1, 2)}, [n, t1]),
                       "action": torch.zeros(n, t1), "reward": torch.cat([reward, torch.zeros(n, 1)], 1)},
                      batch_size=[n, t1])
    for key in ("sample_log_prob", "value", "final_value"):
        data[key] = torch.zeros(n, t1)
    for key in ("done", "terminated", "truncated"):
        data[key] = torch.zeros(n, t1, dtype=torch.bool)
    return data


TWELVE = [[0.0, 1, 2, 3, 4, 5], [6, 7, 8, 9, 10, 11]]  # 2 envs x 6 steps: samples x = 0 .. 11 in order


def test_epochs_times_minibatches_optimizer_steps_each_sample_once_per_epoch():
    algo = Toy(num_epochs=3, minibatch_size=4)  # 12 samples / 4 = 3 minibatches, x 3 epochs
    metrics = algo.update(rollout(TWELVE))
    assert len(algo.batches) == 9 and metrics["diag/epochs"] == 3.0
    assert [s["step"].item() for s in algo.optimizer.state.values()] == [9.0]  # Adam counted 9 steps
    for epoch in range(3):
        seen = torch.cat([b["x"] for b in algo.batches[3 * epoch:3 * epoch + 3]])
        assert sorted(seen.tolist()) == [float(i) for i in range(12)]  # shuffled, every sample once
    assert algo.env_steps_seen == 12
    assert torch.equal(algo.policy.normalized[0], torch.zeros(2, 6, 2))  # the T steps, not the bootstrap slot


def test_an_uneven_split_is_padded_with_zero_weight_to_one_static_shape():
    algo = Toy(num_epochs=1, minibatch_size=5, shuffle_minibatches=False)  # 12 samples: 5 + 5 + 2 real
    algo.update(rollout(TWELVE))
    assert [b.batch_size[0] for b in algo.batches] == [5, 5, 5]
    assert [b["weight"].tolist() for b in algo.batches] == [[1.0] * 5, [1.0] * 5, [1.0, 1.0, 0.0, 0.0, 0.0]]
    assert algo.batches[2]["x"].tolist()[:2] == [10.0, 11.0]  # in order, unshuffled


def test_a_minibatch_larger_than_the_rollout_is_the_rollout_not_padding():
    """``minibatch_size`` beyond the samples is one minibatch of them (as the warning says), not 100,000 rows of
    which 12 are real: each gradient step ran on all of the padding."""
    algo = Toy(num_epochs=2, minibatch_size=100_000)
    algo.update(rollout(TWELVE))
    assert [b.batch_size[0] for b in algo.batches] == [12, 12]
    assert all(b["weight"].tolist() == [1.0] * 12 for b in algo.batches)


def test_accumulation_groups_minibatches_into_steps_and_pads_a_whole_minibatch():
    algo = Toy(num_epochs=1, minibatch_size=4, accumulate_minibatches=2)  # 3 minibatches -> 2 steps of 2
    algo.update(rollout(TWELVE))
    assert len(algo.batches) == 4 and [s["step"].item() for s in algo.optimizer.state.values()] == [2.0]
    assert sorted(b["weight"].sum().item() for b in algo.batches) == [0.0, 4.0, 4.0, 4.0]  # one all padding


def test_metrics_are_the_mean_over_steps_of_each_steps_weighted_mean():
    # unshuffled minibatches of 5: x = 0..4, 5..9, 10..11 (+3 padding) have means 2, 7 and 10.5
    algo = Toy(num_epochs=1, minibatch_size=5, shuffle_minibatches=False)
    metrics = algo.update(rollout(TWELVE))
    assert metrics["diag/x"] == pytest.approx((2 + 7 + 10.5) / 3)  # per optimizer step, padding left out
    assert metrics["diag/rollout_sum"] == 66.0  # the rollout's diagnostics come along
    assert metrics["train/learning_rate"] == pytest.approx(3e-4) and metrics["train/ent_coef"] == 0.0
    # one step of the three minibatches weighs each by its real samples: (5 * 2 + 5 * 7 + 2 * 10.5) / 12
    one_step = Toy(num_epochs=1, minibatch_size=5, shuffle_minibatches=False, accumulate_minibatches=3)
    assert one_step.update(rollout(TWELVE))["diag/x"] == pytest.approx(66 / 12)


def test_accumulated_minibatches_make_the_step_of_one_big_batch():
    # minibatches of 5, 5 and 2 real samples, one step: the gradient of the mean over all 12, 2 (0 - 5.5) = -11
    algo = Toy(num_epochs=1, minibatch_size=5, shuffle_minibatches=False, accumulate_minibatches=3,
               learning_rate=1.0, optimizer=SGD, max_grad_norm=100.0)
    algo.update(rollout(TWELVE))
    assert algo.policy.theta.item() == pytest.approx(11.0)


@pytest.mark.parametrize("max_grad_norm,theta", [(0.5, 0.5), (100.0, 20.0)])
def test_the_gradient_is_clipped_to_max_grad_norm(max_grad_norm, theta):
    # x = 10 everywhere, theta = 0: gradient 2 (0 - 10) = -20; SGD at rate 1 adds the clipped 20
    algo = Toy(num_epochs=1, minibatch_size=None, learning_rate=1.0, optimizer=SGD, max_grad_norm=max_grad_norm)
    algo.update(rollout([[10.0] * 4]))
    assert algo.policy.theta.item() == pytest.approx(theta)


def test_only_the_valid_samples_are_trained_on():
    valid = torch.tensor([True, False] * 6)  # x = 0, 2, 4, 6, 8, 10
    algo = Toy(valid=valid, num_epochs=1, minibatch_size=4)  # 6 valid samples: 2 minibatches of 4, 2 padding
    metrics = algo.update(rollout(TWELVE))
    real = torch.cat([b["x"][b["weight"] > 0] for b in algo.batches])
    assert sorted(real.tolist()) == [0.0, 2.0, 4.0, 6.0, 8.0, 10.0]
    assert metrics["diag/num_valid"] == 6.0 and metrics["diag/valid_fraction"] == 0.5


def test_target_kl_stops_after_the_first_epoch_beyond_it():
    algo = Toy(kl=0.5, num_epochs=4, minibatch_size=6, target_kl=0.1)
    assert algo.update(rollout(TWELVE))["diag/epochs"] == 1.0 and len(algo.batches) == 2
    assert Toy(kl=0.05, num_epochs=4, minibatch_size=6, target_kl=0.1).update(rollout(TWELVE))["diag/epochs"] == 4


def test_target_kl_without_an_approx_kl_names_what_the_loss_must_return():
    with pytest.raises(TypeError, match=r"Toy\.loss must return 'diag/approx_kl'"):
        Toy(num_epochs=1, target_kl=0.1).update(rollout(TWELVE))


def test_adaptive_kl_divides_the_rate_by_1_5_after_each_step_beyond_twice_desired_kl():
    algo = Toy(kl=1.0, num_epochs=1, minibatch_size=4, lr_schedule="adaptive_kl", learning_rate=1e-3)
    metrics = algo.update(rollout(TWELVE))  # 3 steps, each with kl 1.0 > 2 x 0.01
    assert metrics["train/learning_rate"] == pytest.approx(1e-3 / 1.5 ** 3)


def test_a_linear_schedule_sets_the_rate_from_the_env_steps_seen():
    algo = Toy(num_epochs=1, minibatch_size=None, lr_schedule="linear", learning_rate=1e-3)
    algo.env_steps_seen = 250  # of 1000
    assert algo.update(rollout(TWELVE))["train/learning_rate"] == pytest.approx(0.75e-3)


@pytest.mark.parametrize("where,blamed", [("reward", "reward"), ("obs", "observation 'state'")])
def test_a_nan_from_the_env_is_blamed_on_the_env(where, blamed):
    data = rollout(TWELVE)
    if where == "reward":
        data["reward"][1, 2] = math.nan
    else:
        data["obs", "state"][0, 3, 1] = math.inf
    with pytest.raises(NonFiniteLossError, match=f"the env toy produced a NaN or infinite {blamed}, and the loss"):
        Toy(num_epochs=1).update(data)


def test_a_nan_the_env_did_not_produce_points_at_the_learning_rate():
    algo = Toy(num_epochs=1)
    with torch.no_grad():
        algo.policy.theta.fill_(math.nan)  # the policy diverged; the env's output is finite
    with pytest.raises(NonFiniteLossError, match=r"non-finite loss .*Fix: lower algo.learning_rate"):
        algo.update(rollout(TWELVE))


def test_state_dict_round_trip_keeps_the_counters_and_the_rate():
    algo = Toy(kl=1.0, num_epochs=1, minibatch_size=4, lr_schedule="adaptive_kl", learning_rate=1e-3)
    algo.update(rollout(TWELVE))
    fresh = Toy(kl=1.0, num_epochs=1, minibatch_size=4, lr_schedule="adaptive_kl", learning_rate=1e-3)
    fresh.load_state_dict(algo.state_dict())
    assert fresh.env_steps_seen == 12 and fresh.learning_rate == pytest.approx(algo.learning_rate)
    assert [s["step"].item() for s in fresh.optimizer.state.values()] == [3.0]

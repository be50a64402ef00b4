"""The update's acceleration layer: eager it calls the algorithm's functions; accelerated, prepare's output lives in
buffers allocated once that the minibatch loss gathers from; autocast runs the loss in the low precision dtype."""

import torch
from tensordict import TensorDict

from embodirl.accel.compile import Acceleration
from embodirl.accel.update import UpdateSteps

CPU = torch.device("cpu")


def _steps(accel, amp="off", seen=None):
    """UpdateSteps over a toy algorithm: samples x = 2 * rollout x ([4] or [2, 2] sequences), loss = mean(w x)."""
    layer = torch.nn.Linear(1, 1)

    def prepare(rollout):
        return TensorDict({"x": rollout["x"] * 2}, batch_size=rollout["x"].shape[:-1])

    def loss(batch):
        out = layer(batch["x"]).squeeze(-1)
        if seen is not None:
            seen.append((out.dtype, batch["weight"].shape))
        total = (out * batch["weight"]).sum() / batch["weight"].sum()
        return {"loss": total, "diag/x": batch["x"].mean()}

    def gradient_step(loss_and_metrics, idx, weight):
        return loss_and_metrics(idx[0], weight[0])[1]

    return UpdateSteps(prepare, lambda samples: {"diag/sum": samples["x"].sum()}, loss, gradient_step, accel=accel,
                       device=CPU, amp=amp)


def _rollout(value):
    return TensorDict({"x": torch.full((4, 1), float(value))}, batch_size=[4])


def test_eager_it_just_calls_the_functions():
    steps = _steps(Acceleration())
    samples, metrics = steps.prepare(_rollout(1))
    assert torch.equal(samples["x"], torch.full((4, 1), 2.0)) and metrics["diag/sum"].item() == 8.0
    again, _ = steps.prepare(_rollout(3))
    assert again is not samples  # every update's own output: nothing is kept between updates
    assert steps.step(torch.tensor([[0, 1]]), torch.ones(1, 2)).tolist() == [6.0]
    assert steps.metric_names == ["diag/x"]


def test_accelerated_the_samples_live_in_buffers_allocated_once():
    steps = _steps(Acceleration(cuda_graphs=True))  # captured steps need static memory (no capture on a CPU)
    first, _ = steps.prepare(_rollout(1))
    second, metrics = steps.prepare(_rollout(5))
    assert second is first and torch.equal(first["x"], torch.full((4, 1), 10.0))  # the same memory, new values
    assert metrics["diag/sum"].item() == 40.0
    assert steps.step(torch.tensor([[2, 3]]), torch.tensor([[1.0, 0.0]])).tolist() == [10.0]
    steps.prepare(TensorDict({"x": torch.ones(6, 1)}, batch_size=[6]))  # another rollout size: new buffers
    assert steps.samples.batch_size == (6,)


def test_the_weight_spans_a_sequence_and_autocast_runs_the_loss_in_bf16():
    seen = []
    steps = _steps(Acceleration(), amp="bf16", seen=seen)
    steps.prepare(TensorDict({"x": torch.ones(2, 2, 1)}, batch_size=[2, 2]))  # 2 sequences of 2 steps
    terms = steps.minibatch_loss(torch.tensor([1]), torch.ones(1))
    assert seen == [(torch.bfloat16, (1, 2))]  # computed in bfloat16, each step of the sequence weighted ...
    assert terms["loss"].dtype == terms["diag/x"].dtype == torch.float32  # ... returned in float32
    assert terms["loss"].requires_grad and not terms["diag/x"].requires_grad


def test_with_cuda_graphs_the_steps_are_wrapped_for_capture_and_give_the_same_numbers():
    plain, captured = _steps(Acceleration(cuda_graphs=True)), _steps(Acceleration(cuda_graphs=True))
    captured.capture(allowed=True)  # recorded at their next calls on a GPU; on a CPU the wrappers pass calls through
    for steps in (plain, captured):
        steps.prepare(_rollout(2))
    idx, weight = torch.tensor([[0, 3]]), torch.tensor([[1.0, 1.0]])
    assert captured.step(idx, weight).tolist() == plain.step(idx, weight).tolist() == [4.0]
    refused = _steps(Acceleration(cuda_graphs=True))
    refused.capture(allowed=False)  # fp16 scaler or an optimizer that cannot be captured: compiled only
    assert refused._step == refused._plain_step

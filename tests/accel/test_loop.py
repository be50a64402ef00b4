"""StepLoop: a plain per-step function's records land in slot t, its carry in the carry buffers, eager and
compiled alike (one graph, no recompiles)."""

import pytest
import torch
from tensordict import TensorDict

from embodirl.accel.compile import Acceleration
from embodirl.accel.loop import EAGER, StepLoop, StepSlot


def write(slot: StepSlot, i: int, data: torch.Tensor) -> None:
    views = slot.views()
    if views is None:
        slot.index_copy(i, data)
    else:
        views[i].copy_(data)


def test_a_step_slot_writes_the_same_rows_eager_and_as_a_tensor():
    buffers = {eager: (torch.zeros(2, 3, 4), torch.zeros(2, 4, 1)) for eager in (True, False)}
    for eager, (rows, column) in buffers.items():
        slot = StepSlot([rows, column], 1, eager, torch.device("cpu"))
        for k in range(3):  # along dim 1 of [2, 3, 4] and [2, 4, 1]: three slots both have
            for i, data in enumerate((torch.full((2, 4), float(k + 1)), torch.full((2, 1), float(k + 1)))):
                write(slot, i, data)
            slot.advance()
        slot.reset()
        write(slot, 0, torch.full((2, 4), 9.0))  # back at slot 0
    expected = torch.tensor([9.0, 2.0, 3.0]).view(1, 3, 1).expand(2, 3, 4)
    assert torch.equal(buffers[True][0], expected) and torch.equal(buffers[False][0], expected)
    assert torch.equal(buffers[True][1], buffers[False][1])
    assert torch.equal(buffers[True][1][0, :, 0], torch.tensor([1.0, 2.0, 3.0, 0.0]))


class Counter:
    """A step that counts: it records the carried observation (a one-leaf TensorDict, returned as a plain tensor
    next time, as a Box env does), the carried nested state, and ``obs * 10`` only on even counts' envs' rows."""

    def __init__(self, accel: Acceleration, num_envs: int = 2, num_steps: int = 4) -> None:
        n, t = num_envs, num_steps
        self.carry = {"obs": TensorDict({"state": torch.zeros(n, 1)}, batch_size=[n]),
                      "state": TensorDict({"core": {"h": torch.zeros(n, 3)}}, batch_size=[n])}
        self.records = {"obs": TensorDict({"state": torch.zeros(n, t, 1)}, batch_size=[n, t]),
                        "state": TensorDict({"core": {"h": torch.zeros(n, t, 3)}}, batch_size=[n, t]),
                        "tenfold": torch.zeros(n, t, 1), "never": torch.full((n, t), -1.0)}
        self.loop = StepLoop(self.step, self.carry, self.records, dim=1, accel=accel, device=torch.device("cpu"))

    def step(self, carry):
        obs, state = carry["obs"], carry["state"]
        record = {"obs": obs, "state": state, "tenfold": obs.get("state") * 10}
        next_state = TensorDict({"core": {"h": state.get(("core", "h")) + obs.get("state")}}, batch_size=[2])
        return record, {"obs": obs.get("state") + 1, "state": next_state}


def test_records_land_in_slot_t_and_the_carry_moves_on():
    counter = Counter(EAGER)
    for _ in range(4):
        counter.loop()
    obs = counter.records["obs"].get("state")[..., 0]
    assert torch.equal(obs, torch.tensor([[0.0, 1.0, 2.0, 3.0]] * 2))  # the observation each step acted on
    assert torch.equal(counter.records["tenfold"][..., 0], 10 * obs)
    h = counter.records["state"].get(("core", "h"))
    assert torch.equal(h[0, :, 0], torch.tensor([0.0, 0.0, 1.0, 3.0]))  # the state each step acted with
    assert torch.equal(counter.carry["obs"].get("state"), torch.full((2, 1), 4.0))
    assert torch.equal(counter.carry["state"].get(("core", "h")), torch.full((2, 3), 6.0))
    assert counter.records["never"].eq(-1).all()  # a buffer the step does not return stays as it was
    counter.loop.rewind()
    counter.loop()
    assert torch.equal(counter.records["obs"].get("state")[:, 0, 0], torch.tensor([4.0, 4.0]))


@pytest.mark.slow
def test_the_compiled_loop_is_one_graph_equals_eager_and_never_recompiles():
    import torch._dynamo  # here, not at the top: collecting the fast tier must not import dynamo (the slowest import)
    torch._dynamo.reset()
    eager, compiled = Counter(EAGER), Counter(Acceleration(compile=True))
    explain = torch._dynamo.explain(Counter(EAGER).loop.run)()
    assert (explain.graph_count, explain.graph_break_count) == (1, 0), explain.break_reasons
    with torch._dynamo.config.patch(error_on_recompile=True):
        for loop in (eager.loop, compiled.loop):
            for _ in range(2):  # two rollouts: the tensor slot is rewound, never a new graph
                loop.rewind()
                for _ in range(4):
                    loop()
    torch._dynamo.reset()
    for key, value in eager.records.items():
        assert (value == compiled.records[key]).all(), key
    assert compiled.loop.slot.tensor.item() == 4 and compiled.loop.slot.index == 0


@pytest.mark.parametrize("dim", [0, 1])
def test_a_block_along_either_dimension(dim):
    carry = {"x": TensorDict({"v": torch.arange(3.0)}, batch_size=[3])}
    rows = torch.zeros(2, 3) if dim == 0 else torch.zeros(3, 2)
    loop = StepLoop(lambda c: ({"rows": c["x"].get("v")}, {"x": c["x"].get("v") * 2}), carry, {"rows": rows},
                    dim=dim, accel=EAGER, device=torch.device("cpu"))
    loop()
    loop()
    expected = torch.stack([torch.arange(3.0), 2 * torch.arange(3.0)], dim=dim)
    assert torch.equal(rows, expected)


@pytest.mark.slow
def test_two_compiled_loops_never_count_as_recompiles_of_each_other():
    """The collection and the evaluation loop run one function each (StepLoop.run): each compiles once."""
    import torch._dynamo  # here, not at the top: collecting the fast tier must not import dynamo (the slowest import)
    torch._dynamo.reset()
    one, two = Counter(Acceleration(compile=True)), Counter(Acceleration(compile=True), num_envs=2, num_steps=2)
    with torch._dynamo.config.patch(error_on_recompile=True):
        for counter in (one, two, one, two):
            counter.loop.rewind()
            counter.loop()
    torch._dynamo.reset()
    assert torch.equal(one.records["obs"].get("state")[:, :2, 0], torch.tensor([[1.0, 0.0]] * 2))


def test_steps_are_that_many_calls_when_eager():
    one, many = Counter(EAGER), Counter(EAGER)
    for _ in range(3):
        one.loop()
    many.loop.steps(3)
    for key, value in one.records.items():
        assert (value == many.records[key]).all(), key
    assert many.loop.slot.index == 3


@pytest.mark.slow
def test_compiled_blocks_are_one_graph_equal_eager_and_never_recompile(monkeypatch):
    """steps(n) compiled: blocks of FUSED_STEPS steps as one program (the rest one compiled step each)."""
    from embodirl.accel import loop as loop_module

    FUSED_STEPS = loop_module.FUSED_STEPS
    torch._dynamo.reset()
    num_steps = 1 + FUSED_STEPS + 1  # the first step alone (sizing the blocks), one block and one single step
    eager, compiled = Counter(EAGER, num_steps=num_steps), Counter(Acceleration(compile=True), num_steps=num_steps)
    explain = torch._dynamo.explain(Counter(EAGER, num_steps=num_steps).loop.run_block)(FUSED_STEPS)  # it runs them
    assert (explain.graph_count, explain.graph_break_count) == (1, 0), explain.break_reasons
    with torch._dynamo.config.patch(error_on_recompile=True):
        for loop in (eager.loop, compiled.loop):
            for _ in range(2):  # two rollouts: the tensor slot is rewound, never a new graph
                loop.rewind()
                loop.steps(num_steps)
    torch._dynamo.reset()
    for key, value in eager.records.items():
        assert (value == compiled.records[key]).all(), key
    assert compiled.loop.slot.tensor.item() == num_steps and compiled.loop.block_size == FUSED_STEPS


def test_blocks_follow_the_size_of_the_steps_graph():
    from embodirl.accel.loop import FUSED_NODES, FUSED_STEPS, fused_steps

    assert fused_steps(153) == FUSED_STEPS  # CartPole's collection step
    assert fused_steps(1419) == 1  # push_cube's: its compile would outgrow what blocks save
    assert fused_steps(FUSED_NODES // 2) == 2 and fused_steps(0) == FUSED_STEPS


@pytest.mark.slow
def test_a_large_step_runs_without_blocks(monkeypatch):
    from embodirl.accel import loop as loop_module

    monkeypatch.setattr(loop_module, "FUSED_NODES", 1)  # every step is "large"
    torch._dynamo.reset()
    eager, compiled = Counter(EAGER, num_steps=6), Counter(Acceleration(compile=True), num_steps=6)
    blocks = []
    monkeypatch.setattr(compiled.loop, "_block", blocks.append)
    eager.loop.steps(6)
    compiled.loop.steps(6)
    torch._dynamo.reset()
    assert compiled.loop.graph_nodes is not None and compiled.loop.graph_nodes > 1
    assert compiled.loop.block_size == 1 and blocks == []
    for key, value in eager.records.items():
        assert (value == compiled.records[key]).all(), key

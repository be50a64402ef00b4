"""A per-step function made into the unit that is compiled and captured: :class:`StepLoop`.

The collector and the evaluator each write one env step as a plain function, ``step(carry) -> (record,
next_carry)``: act on the carried observation and policy state, step the env, and return what the step records
and what the next step acts on. :class:`StepLoop` owns what makes that function fast, so they need not:

* the buffers, allocated once by the caller and never rebound: ``record``'s entries are written into slot ``t`` of
  buffers laid out along a time dimension (the rollout ``[N, T+1]`` along dim 1, the evaluator's block ``[S, N]``
  along dim 0), ``next_carry``'s entries copied into the carry buffers the next step reads;
* the slot ``t`` (:class:`StepSlot`);
* ``torch.compile(fullgraph=True, dynamic=False)`` of one whole step and its capture as a CUDA graph
  (:mod:`embodirl.accel.compile`);
* the fused block (:meth:`StepLoop.steps`): compiled without CUDA graphs, ``k`` consecutive steps are one program
  that unrolls them, as PureJaxRL's ``lax.scan`` makes a rollout one XLA program. A compiled call checks its
  guards (every parameter and buffer the step reads) and crosses Python once per block instead of once per step.
  ``k`` follows the size of the step's traced graph (:func:`fused_steps`): a small step (CartPole's) gets blocks,
  a large one (push_cube's), whose compile would grow past what blocks save, runs one step per call.

One step then reads and writes only those buffers and the env's and policy's own tensors: it takes no
arguments, never syncs with the host, traces into one graph and replays as one CUDA graph.
"""

from __future__ import annotations

import types
from collections.abc import Callable, Mapping, Sequence
from typing import cast

import torch
from tensordict import TensorCollection, TensorDict
from tensordict.utils import NestedKey
from torch import Tensor

from embodirl.accel.compile import Acceleration, capture, compile_step

__all__ = ["EAGER", "FUSED_NODES", "FUSED_STEPS", "Buffers", "Carry", "StepLoop", "StepSlot", "Values", "fused_steps"]

EAGER = Acceleration()  #: neither compiled nor captured
Carry = dict[str, TensorDict]  #: the carry buffers a step reads: ``{"obs": ..., "state": ...}``
Buffers = Mapping[str, Tensor | TensorCollection]  #: record buffers by name, laid out along the time dimension
Values = Mapping[str, Tensor | TensorCollection]  #: a step's values for some buffers (a one-leaf one takes a Tensor)
# The most steps in a compiled block, and the most traced graph nodes a block may hold: a block unrolls its steps
# into one graph, and a large step's compile multiplied by the block outgrew what the block saves (push_cube GRPO's
# cold compile went 80 -> 503 CPU-s with blocks of 4), while CartPole's small step ran faster in blocks.
FUSED_STEPS = 4
FUSED_NODES = 1000  # CartPole's collection step traces to 153 nodes (blocks of 4), push_cube's to ~1,420 (none)


def fused_steps(nodes: int) -> int:
    """Steps per compiled block for a step whose traced graph has ``nodes`` nodes (1: no blocks)."""
    return max(1, min(FUSED_STEPS, FUSED_NODES // max(nodes, 1)))


class StepSlot:
    """The slot ``t`` that steps write along the time dimension of buffers allocated once, advanced after each step.

    Eager, ``t`` is a Python int and a write copies into a view of slot ``t`` made once (no indexing op per write);
    in a compiled or captured step it is a one-element device tensor, updated in place and written with
    ``index_copy_``, so the step never recompiles and its CUDA graph reads the current slot.

    Args:
        buffers: The buffers, each with the time dimension at ``dim``; the slots are those all of them have.
        dim: The time dimension.
        eager: Whether the steps run eagerly (neither compiled nor captured).
        device: Device of the tensor slot.
    """

    def __init__(self, buffers: Sequence[Tensor], dim: int, eager: bool, device: torch.device) -> None:
        self.buffers, self.dim, self.eager = list(buffers), dim, eager
        self.index = 0
        self.tensor = torch.zeros(1, dtype=torch.int64, device=device)
        num_slots = min((buffer.shape[dim] for buffer in buffers), default=0)
        self._views = [[buffer.select(dim, t) for buffer in buffers] for t in range(num_slots)] if eager else []

    def views(self) -> list[Tensor] | None:
        """Eager: each buffer's view of the current slot, to copy into; else None (write with :meth:`index_copy`)."""
        return self._views[self.index] if self.eager else None

    def index_copy(self, i: int, data: Tensor) -> None:
        """Write ``data`` (without the time dimension) into buffer ``i`` at the tensor slot."""
        self.buffers[i].index_copy_(self.dim, self.tensor, data.unsqueeze(self.dim))

    def advance(self) -> None:
        if self.eager:
            self.index += 1
        else:
            self.tensor.add_(1)

    def reset(self) -> None:
        self.index = 0
        self.tensor.zero_()


def _leaves(buffer: Tensor | TensorCollection) -> list[tuple[NestedKey | None, Tensor]]:
    """The leaf buffers of a buffer, with the key that picks each one from a value of the same structure (None: the
    buffer is a plain tensor)."""
    if isinstance(buffer, Tensor):
        return [(None, buffer)]
    return [(key, buffer.get(key)) for key in buffer.keys(include_nested=True, leaves_only=True)]


def _own_code(method: Callable[..., None], name: str) -> Callable[..., None]:
    """``method`` with a code object of its own, named ``name``. Dynamo caches compiled graphs per code object: the
    collection and the evaluation loops (or two collectors) sharing :meth:`StepLoop.run`'s would each count as
    a recompile of the other, and exhaust its cache."""
    assert isinstance(method, types.MethodType)
    fn = method.__func__
    code = fn.__code__.replace(co_name=name)
    return types.MethodType(types.FunctionType(code, fn.__globals__, name), method.__self__)


class StepLoop:
    """Runs ``step(carry) -> (record, next_carry)`` over buffers allocated once, one slot per call.

    A call runs one step, writes each entry of ``record`` into the current slot of the buffer of the same name
    (entries the step does not return leave theirs alone), then copies ``next_carry`` into the carry buffers and
    advances the slot. The record is written first, so it may hold the carry itself (the observation acted on).
    Values are Tensors or TensorDicts shaped like their buffers without the time dimension; a TensorDict buffer
    with one leaf (a Box env's observation) also takes a plain Tensor.

    Args:
        step: The plain per-step function; it receives :attr:`carry` (the same dict every call).
        carry: The carry buffers ``[N]``, e.g. ``{"obs": TensorDict, "state": TensorDict}``.
        records: The record buffers, each with the time dimension at ``dim``.
        dim: The time dimension of the record buffers.
        accel: Compile the step (and capture it as a CUDA graph after :meth:`use_cuda_graphs`).
        device: Device of the buffers.
        name: Name of the compiled step (in dynamo's logs and profiles), e.g. ``"collection_step"``.
    """

    def __init__(self, step: Callable[[Carry], tuple[Values, Values]], carry: Carry, records: Buffers, *, dim: int,
                 accel: Acceleration, device: torch.device, name: str = "step") -> None:
        self.step, self.carry, self.records = step, carry, records
        self.accel, self.device = accel, device
        buffers: list[Tensor] = []  # every leaf buffer of the records, in the slot's order
        self._records: dict[str, list[tuple[NestedKey | None, int]]] = {}  # name -> (leaf key, its buffer's index)
        for key, buffer in records.items():
            self._records[key] = []
            for leaf, leaf_buffer in _leaves(buffer):
                self._records[key].append((leaf, len(buffers)))
                buffers.append(leaf_buffer)
        self.slot = StepSlot(buffers, dim, not accel.enabled, device)
        self._carry = {key: _leaves(buffer) for key, buffer in carry.items()}
        # Blocks where steps are compiled and not captured (a captured step is one launch already); their size is
        # known once the single step is traced (the size of its graph).
        self._fuse = accel.compile and not accel.cuda_graphs and FUSED_STEPS > 1
        self.graph_nodes: int | None = None  #: nodes of the single step's traced graph (once compiled)
        self.block_size: int | None = None if self._fuse else 1  #: steps per compiled block
        self._accelerated = compile_step(_own_code(self.run, name), accel.compile,
                                         self._traced if self._fuse else None)
        self._block = compile_step(_own_code(self.run_block, f"{name}_block"), self._fuse)

    def _traced(self, graph: torch.fx.GraphModule) -> None:
        self.graph_nodes = len(graph.graph.nodes)

    def __call__(self) -> None:
        """One step as configured: compiled, captured, or plain."""
        self._accelerated()

    def steps(self, num: int) -> None:
        """``num`` consecutive steps (slots ``t .. t + num - 1``), the same records and carry as ``num`` calls.

        Compiled without CUDA graphs, they run in blocks of :attr:`block_size` steps, each one compiled program (one
        graph for the loop, its own code object), and the rest one compiled step each; the first call's first step
        runs alone, to trace the step and size the blocks on its graph (:func:`fused_steps`). Otherwise as ``num``
        calls (a captured step replays its CUDA graph once per step).
        """
        if self.block_size is None and num > 0:
            self()
            num -= 1
            self.block_size = fused_steps(self.graph_nodes or FUSED_NODES)
        if self.block_size is not None and self.block_size > 1:
            for _ in range(num // self.block_size):
                self._block(self.block_size)
            num %= self.block_size
        for _ in range(num):
            self()

    def run_block(self, num: int) -> None:
        """``num`` steps in plain Python: the function compiled as a block (dynamo unrolls the loop)."""
        for _ in range(num):
            self.run()

    def run(self) -> None:
        """One step in plain Python: the function that is compiled and captured."""
        record, next_carry = self.step(self.carry)
        slot = self.slot
        views = slot.views()
        for key, value in record.items():
            for leaf, i in self._records[key]:
                data = value if isinstance(value, Tensor) else cast(Tensor, value[leaf])
                if views is None:
                    slot.index_copy(i, data)
                else:
                    views[i].copy_(data)
        self.load_carry(next_carry)
        slot.advance()

    def load_carry(self, values: Values) -> None:
        """Copy ``values`` into the carry buffers of the same names (after a reset, a restore, or a step)."""
        for key, value in values.items():
            for leaf, buffer in self._carry[key]:
                buffer.copy_(value if isinstance(value, Tensor) else cast(Tensor, value[leaf]))

    def rewind(self) -> None:
        """The next step writes slot 0."""
        self.slot.reset()

    def use_cuda_graphs(self) -> None:
        """Record the step as a CUDA graph at its next calls (after the compile warm-up, before training)."""
        self._accelerated = capture(self._accelerated, self.accel.cuda_graphs, self.device)

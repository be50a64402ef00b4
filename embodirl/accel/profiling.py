"""Counting the work one call launches: dispatched ops (eager), kernels (profiler) and generated kernels (inductor).

On a GPU, small and medium batches are launch-bound: the number of kernels per env step decides the speed.
These functions give that number, and CPU-checkable proxies for it:

* :func:`count_ops`: the aten ops one eager call dispatches (views, which launch nothing, counted apart);
* :func:`count_kernels`: what ``torch.profiler`` sees one call launch: CUDA kernels where it runs on a GPU,
  otherwise top-level CPU ops plus the inductor kernels compiled under :func:`inductor_kernel_events`;
* :func:`compile_stats`: inductor's generated kernels for one call and the compile time. On the CPU, inductor
  copies the inputs of a concatenation in separate loops that its GPU backend fuses; ``cuda_like=True`` makes
  the CPU backend fuse them too, a closer proxy for the kernels the same code gets on a GPU.

Example::

    env = PushCube(PushCubeConfig(num_envs=4096))
    action = torch.zeros(4096, 2)
    count_ops(env.step, action).compute         # eager ops per step
    compile_stats(env.step, action).kernels      # kernels per compiled step (compiles env.step once)
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

__all__ = ["CompileStats", "OpCount", "compile_stats", "count_kernels", "count_ops", "inductor_kernel_events"]

_NO_KERNEL = ("aten.empty", "aten.empty_strided", "aten.lift_fresh", "aten.resolve_conj", "aten.resolve_neg")


@dataclass(frozen=True)
class OpCount:
    """Aten ops dispatched by one call.

    Attributes:
        ops: Count per op overload name, e.g. ``{"aten.mul.Tensor": 10, ...}``.
        views: How many of them only make views or allocate (no kernel).
    """

    ops: Counter[str]
    views: int

    @property
    def total(self) -> int:
        return sum(self.ops.values())

    @property
    def compute(self) -> int:
        """Ops that run a kernel: the eager kernel count on a GPU (fills and copies included)."""
        return self.total - self.views


@dataclass(frozen=True)
class CompileStats:
    """What inductor made of one function.

    Attributes:
        kernels: Kernels generated (and launched once per call: nothing loops at run time).
        compile_s: Wall time of the first call, compilation included.
    """

    kernels: int
    compile_s: float


class _OpCounter(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.ops: Counter[str] = Counter()
        self.views = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple[Any, ...] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        name = str(func)
        self.ops[name] += 1
        self.views += bool(func.is_view or name.startswith(_NO_KERNEL))
        return func(*args, **(kwargs or {}))


def count_ops(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> OpCount:
    """Run ``fn(*args, **kwargs)`` once and count the aten ops it dispatches (eager code only: compiled code
    calls its kernels without dispatching)."""
    with _OpCounter() as counter:
        fn(*args, **kwargs)
    return OpCount(counter.ops, counter.views)


@contextmanager
def inductor_kernel_events() -> Iterator[None]:
    """Compile inside this block to make each inductor CPU kernel a ``torch.profiler`` event (a little slower)."""
    import torch._inductor.config as inductor_config

    with inductor_config.patch({"cpp.enable_kernel_profile": True}):
        yield


def count_kernels(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> int:
    """Kernels one call of ``fn`` launches, as ``torch.profiler`` records them.

    Returns:
        The CUDA kernels launched when the call runs any on a GPU. Otherwise the CPU work items: top-level
        aten ops that compute (views and allocations left out) and inductor CPU kernels (visible when compiled
        under :func:`inductor_kernel_events`).
    """
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
    with profile(activities=activities) as prof:
        fn(*args, **kwargs)
        if torch.cuda.is_available():
            torch.cuda.synchronize()
    events = prof.events()
    gpu = sum(event.device_type == DeviceType.CUDA for event in events)
    if gpu:
        return gpu
    return sum(_is_cpu_work(event) for event in events)


def _is_cpu_work(event: Any) -> bool:
    name = event.name
    if "cpp_fused" in name:  # an inductor kernel (graph_<i>_cpp_fused_...)
        return True
    if not name.startswith("aten::") or _is_view(name):
        return False
    parent = event.cpu_parent
    while parent is not None:  # nested ops belong to the op that called them
        if parent.name.startswith("aten::"):
            return False
        parent = parent.cpu_parent
    return True


def _is_view(profiler_name: str) -> bool:
    """Whether an ``aten::name`` op only makes a view or allocates (judged by its default overload)."""
    name = profiler_name.removeprefix("aten::")
    if f"aten.{name}".startswith(_NO_KERNEL):
        return True
    packet = getattr(torch.ops.aten, name, None)
    overload = getattr(packet, "default", None) if packet is not None else None
    return bool(getattr(overload, "is_view", False))


def compile_stats(fn: Callable[..., Any], *args: Any, cuda_like: bool = False, **kwargs: Any) -> CompileStats:
    """Compile ``fn`` with inductor (``fullgraph=True``), call it once and count the kernels it generated.

    Args:
        fn: The function (e.g. a bound ``env.step``).
        *args: Its arguments.
        cuda_like: On the CPU, fuse concatenations as inductor does on GPUs (``force_pointwise_cat``).
        **kwargs: Its keyword arguments.

    Returns:
        :class:`CompileStats`. Inductor's on-disk caches make ``compile_s`` shorter; code that dynamo compiled
        before in this process is reused and counts 0 kernels (call ``torch._dynamo.reset()`` first).
    """
    import torch._inductor.config as inductor_config
    from torch._inductor import metrics

    with inductor_config.patch({"force_pointwise_cat": cuda_like}):
        metrics.reset()
        start = time.perf_counter()
        torch.compile(fn, fullgraph=True)(*args, **kwargs)
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        return CompileStats(metrics.generated_kernel_count, time.perf_counter() - start)

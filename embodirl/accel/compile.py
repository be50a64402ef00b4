"""torch.compile and CUDA graphs for the three hot steps: collection, evaluation and the update's minibatch.

Each hot step is a method that takes no Python data that changes between calls and keeps every piece
of state in tensors allocated once (the env's state, the rollout, a step counter), so it can be

* compiled with ``torch.compile(fullgraph=True, dynamic=False)``: one graph, never recompiled from one
  call to the next (``compile`` key: ``true``, ``false`` or ``auto`` = on for CUDA devices, off on the
  CPU where a cold compile costs tens of seconds against runs of a few seconds); and
* captured as a CUDA graph (``cuda_graphs`` key: ``auto`` = on for single-process CUDA runs), replayed
  with one launch, with :class:`tensordict.nn.CudaGraphModule` (which passes calls through on a CPU).

Compiled code is cached across runs by inductor's FX-graph and AOTAutograd caches in
``$TORCHINDUCTOR_CACHE_DIR`` (default here: ``~/.cache/embodirl/inductor``). Compilation happens in a
warm-up before training (:func:`compile_seconds` measures it), so time-to-solve excludes it and
``perf/compile_s`` reports it separately.
"""

from __future__ import annotations

import os
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import torch

from embodirl.errors import check

__all__ = ["CACHE_ENV", "Acceleration", "capture", "compile_step", "configure_cache", "resolve_acceleration"]

CACHE_ENV = "TORCHINDUCTOR_CACHE_DIR"
DEFAULT_CACHE = Path("~/.cache/embodirl/inductor").expanduser()
_CHOICES = (True, False, "auto")


@dataclass(frozen=True)
class Acceleration:
    """Whether the hot steps are compiled and whether they are captured as CUDA graphs."""

    compile: bool = False
    cuda_graphs: bool = False

    @property
    def enabled(self) -> bool:
        return self.compile or self.cuda_graphs


def resolve_acceleration(compile: Any, cuda_graphs: Any, device: torch.device, world_size: int = 1) -> Acceleration:
    """Resolve the ``compile`` and ``cuda_graphs`` keys (``true``, ``false`` or ``auto``) for ``device``.

    ``auto`` compiles on CUDA only, and captures CUDA graphs on CUDA with one process (gradient all-reduces
    are not captured). ``cuda_graphs=true`` needs a CUDA device.
    """
    check(compile in _CHOICES, "compile", compile, "true, false or auto", "pass compile=auto", absolute=True)
    check(cuda_graphs in _CHOICES, "cuda_graphs", cuda_graphs, "true, false or auto", "pass cuda_graphs=auto",
          absolute=True)
    cuda = device.type == "cuda"
    check(not (cuda_graphs is True and not cuda), "cuda_graphs", cuda_graphs, "false or auto on a CPU device",
          "pass cuda_graphs=auto (graphs are captured only on CUDA)", absolute=True)
    check(not (cuda_graphs is True and world_size > 1), "cuda_graphs", cuda_graphs,
          "false or auto with several processes (gradient all-reduces are not captured)", "pass cuda_graphs=auto",
          absolute=True)
    return Acceleration(compile=cuda if compile == "auto" else bool(compile),
                        cuda_graphs=(cuda and world_size == 1) if cuda_graphs == "auto" else bool(cuda_graphs))


def configure_cache() -> Path:
    """Point inductor's caches at ``$TORCHINDUCTOR_CACHE_DIR`` (default ``~/.cache/embodirl/inductor``)."""
    os.environ.setdefault(CACHE_ENV, str(DEFAULT_CACHE))
    return Path(os.environ[CACHE_ENV])


def compile_step(fn: Callable, enabled: bool, on_graph: Callable[[torch.fx.GraphModule], None] | None = None
                 ) -> Callable:
    """``torch.compile(fn, fullgraph=True, dynamic=False)`` when enabled, else ``fn``.

    ``on_graph`` is shown each graph dynamo traces, before inductor compiles it (e.g. to size what is built on it).
    """
    if not enabled:
        return fn
    configure_cache()
    if on_graph is None:
        return torch.compile(fn, fullgraph=True, dynamic=False)
    from torch._inductor.compile_fx import compile_fx

    def backend(graph: torch.fx.GraphModule, example_inputs: list[torch.Tensor]) -> Callable:
        on_graph(graph)
        return cast(Callable, compile_fx(graph, example_inputs))

    return torch.compile(fn, backend=backend, fullgraph=True, dynamic=False)


def capture(fn: Callable, enabled: bool, device: torch.device) -> Callable:
    """``fn`` recorded as a CUDA graph at its third call and replayed afterwards, when enabled.

    ``fn`` must read and write only tensors allocated once (its tensor arguments are copied into the
    graph's own buffers at every call; its outputs are returned as clones).
    """
    if not enabled:
        return fn
    from tensordict.nn import CudaGraphModule

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return CudaGraphModule(fn, warmup=3, device=device)


class Stopwatch:
    """Seconds spent in a block (synchronising CUDA first, so queued kernels are counted)."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.seconds = 0.0

    def __enter__(self) -> Stopwatch:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        self._start = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        self.seconds += time.perf_counter() - self._start

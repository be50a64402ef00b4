"""Multi-process plumbing in one place; every function is a no-op for a single process.

One process per GPU (or CPU worker). The process group comes from, in order: an already initialised
group, ``torchrun``'s variables (``RANK``/``WORLD_SIZE``/...), a submitit job with several tasks
(``submitit.helpers.TorchDistributedEnvironment``, which derives ``MASTER_PORT`` from the job id so it is
stable across requeues), or nothing (plain single process). NCCL on CUDA, gloo on CPU.

Correctness contract (tested): ranks start from rank 0's parameters, gradients are averaged with one
all-reduce per optimizer step, so every rank holds identical parameters after every update.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from embodirl.runtime.rank import submitit_env

__all__ = ["DistInfo", "allreduce_grads", "allreduce_max", "allreduce_mean", "allreduce_sum", "broadcast_module",
           "broadcast_object", "get_info", "init_distributed", "shutdown", "sync_report"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DistInfo:
    """Rank layout of this process."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    backend: str | None = None

    @property
    def is_main(self) -> bool:
        return self.rank == 0


_INFO = DistInfo()


def init_distributed(use_cuda: bool | None) -> DistInfo:
    """Join (or create) the process group if this process is one of several; return the layout.

    Args:
        use_cuda: NCCL (True), gloo (False), or None before the device is known: gloo for CPU tensors
            and, where CUDA is available, NCCL for CUDA tensors (``"cpu:gloo,cuda:nccl"``).
    """
    global _INFO
    if dist.is_available() and dist.is_initialized():
        _INFO = DistInfo(dist.get_rank(), dist.get_world_size(), int(os.environ.get("LOCAL_RANK", 0)),
                         dist.get_backend())
        return _INFO
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        source = "torchrun/env"
    elif submitit_env() is not None:
        from submitit.helpers import TorchDistributedEnvironment

        TorchDistributedEnvironment().export(set_cuda_visible_devices=False, overwrite=True)
        source = "submitit"
    else:
        _INFO = DistInfo()
        return _INFO
    world_size = int(os.environ["WORLD_SIZE"])
    if world_size == 1:
        _INFO = DistInfo()
        return _INFO
    cuda = torch.cuda.is_available() and dist.is_nccl_available()
    backend = {True: "nccl", False: "gloo", None: "cpu:gloo,cuda:nccl" if cuda else "gloo"}[use_cuda]
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    if use_cuda or (use_cuda is None and cuda):
        torch.cuda.set_device(local_rank)
    dist.init_process_group(backend=backend, init_method="env://")
    _INFO = DistInfo(dist.get_rank(), world_size, local_rank, backend)
    log.info("process group via %s: rank %d of %d (local %d, %s)", source, _INFO.rank, world_size, local_rank,
             backend)
    return _INFO


def get_info() -> DistInfo:
    return _INFO


def shutdown() -> None:
    """Leave the process group (if one was joined)."""
    global _INFO
    if _INFO.world_size > 1 and dist.is_initialized():
        dist.destroy_process_group()
    _INFO = DistInfo()


def allreduce_grads(params: list[torch.nn.Parameter]) -> None:
    """Average gradients over ranks with one flat all-reduce (missing grads count as zeros)."""
    if _INFO.world_size == 1:
        return
    grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat)
    flat /= _INFO.world_size
    offset = 0
    for p, g in zip(params, grads, strict=True):
        n = g.numel()
        p.grad = flat[offset:offset + n].view_as(g)
        offset += n


def allreduce_sum(tensor: torch.Tensor) -> torch.Tensor:
    """Sum ``tensor`` over ranks (in place) and return it."""
    if _INFO.world_size > 1:
        dist.all_reduce(tensor)
    return tensor


def allreduce_mean(tensor: torch.Tensor) -> torch.Tensor:
    """Average ``tensor`` over ranks (in place) and return it."""
    if _INFO.world_size > 1:
        dist.all_reduce(tensor)
        tensor /= _INFO.world_size
    return tensor


def allreduce_max(tensor: torch.Tensor) -> torch.Tensor:
    """Element-wise maximum of ``tensor`` over ranks (in place) and return it."""
    if _INFO.world_size > 1:
        dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
    return tensor


def broadcast_module(module: torch.nn.Module) -> None:
    """Copy rank 0's parameters and buffers to every rank."""
    if _INFO.world_size == 1:
        return
    for tensor in [*module.parameters(), *module.buffers()]:
        dist.broadcast(tensor.data, src=0)


def broadcast_object(obj: Any) -> Any:
    """Rank 0's ``obj`` on every rank (small picklable values: stop decisions, flags)."""
    if _INFO.world_size == 1:
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def sync_report(module: torch.nn.Module, data: Any) -> dict[str, Any]:
    """Check that every rank holds bit-identical parameters while their data differ.

    Gathers a SHA-1 of each rank's parameters and of ``data`` (a tensor or TensorDict, e.g. the last
    rollout's observations).

    Returns:
        ``{"world_size", "params_identical", "data_distinct"}`` (trivially true for one process).
    """
    import hashlib

    def digest(tensors: list[torch.Tensor]) -> str:
        h = hashlib.sha1()
        for t in tensors:
            h.update(t.detach().cpu().contiguous().numpy().tobytes())
        return h.hexdigest()

    tensors = [data] if isinstance(data, torch.Tensor) else list(data.values(include_nested=True, leaves_only=True))
    mine = (digest(list(module.parameters())), digest(tensors))
    if _INFO.world_size == 1:
        return {"world_size": 1, "params_identical": True, "data_distinct": True}
    everyone: list[Any] = [None] * _INFO.world_size
    dist.all_gather_object(everyone, mine)
    return {"world_size": _INFO.world_size,
            "params_identical": len({p for p, _ in everyone}) == 1,
            "data_distinct": len({d for _, d in everyone}) == _INFO.world_size}

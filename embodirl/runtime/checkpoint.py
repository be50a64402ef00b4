"""Checkpoints: one dict of tensors and plain values, written atomically, loaded with weights_only.

Contents (``version`` 2): ``config`` (the resolved run config), ``policy`` (state_dict, including the
observation normaliser), ``algo`` (optimizer and schedule state), ``trainer`` (counters, timings,
solved markers), ``env`` and ``collector`` (to continue episodes exactly; ``env`` is None for envs
that cannot snapshot), ``rng`` (torch CPU and CUDA generator states).

Loading checks what a file could hold beyond what embodirl writes, before anything uses it (each refusal
is one :class:`~embodirl.errors.CheckpointError` naming the file, the entry, the value and the fix):
every tensor is a real (not complex), dense CPU tensor whose elements are its own (a stride-0 or
overlapping view could claim terabytes over a few stored numbers, and checking it would allocate them);
the policy's and the optimizer's floating tensors are finite; the trainer counters are ints >= 0 in
their order (iterations <= env steps, solved and best steps within them); the RNG states have torch's
dtype and shape; the algorithm's schedule counters are in range. :func:`check_optimizer_state` checks,
after loading, that the optimizer's per-parameter tensors have their parameters' shapes.
"""

from __future__ import annotations

import io
import math
import pickle
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TypeGuard

import torch

from embodirl.errors import CheckpointError

__all__ = ["check_finite", "check_optimizer_state", "load_checkpoint",
           "rng_state", "serialize_checkpoint", "set_rng_state"]

FORMAT = "embodirl-checkpoint"
VERSION = 2  # 2: observations as TensorDicts, episode statistics with the collector
REQUIRED = ("config", "policy", "algo", "trainer", "rng")


def serialize_checkpoint(state: dict[str, Any]) -> bytes:
    """A checkpoint dict as bytes, with the format marker and version added."""
    buffer = io.BytesIO()
    torch.save({"format": FORMAT, "version": VERSION, **state}, buffer)
    return buffer.getvalue()


def load_checkpoint(path: str | Path, key: str = "checkpoint") -> dict[str, Any]:
    """Load and check a checkpoint on the CPU with ``torch.load(weights_only=True)``.

    Args:
        path: The ``.pt`` file.
        key: The config key the path came from, for error messages.

    Raises:
        CheckpointError: Missing, unreadable, not an embodirl checkpoint, or an unknown version.
    """
    path = Path(path)
    hint = "pass the path of a .pt file written by embodirl-train, e.g. outputs/<date>/<time>/checkpoints/last.pt"
    if not path.is_file():
        raise CheckpointError(f"{key}={str(path)!r} does not exist (or is not a file). Fix: {hint}.")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        if "GLOBAL" not in str(exc) and "global" not in str(exc):
            raise CheckpointError(
                f"{key}={str(path)!r} cannot be read: the file is corrupt, truncated or not a torch checkpoint. "
                f"Fix: use another checkpoint from the same checkpoints/ folder (periodic ones are kept), or {hint}."
            ) from None
        # A safe load met a Python object; torch's advice to retry unsafely is deliberately not repeated.
        raise CheckpointError(
            f"{key}={str(path)!r} holds Python objects beyond tensors and plain values, which embodirl never "
            f"loads (they can run code): it was not written by embodirl-train or was tampered with. Fix: {hint}."
        ) from None
    except Exception as exc:  # torch raises many types for corrupt files
        raise CheckpointError(
            f"{key}={str(path)!r} cannot be read: the file is corrupt, truncated or not a torch checkpoint "
            f"({type(exc).__name__}). Fix: use another checkpoint from the same checkpoints/ folder (periodic "
            f"ones are kept), or {hint}."
        ) from None
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise CheckpointError(f"{key}={str(path)!r} is a torch file but not an embodirl checkpoint. Fix: {hint}.")
    if state.get("version") != VERSION:
        raise CheckpointError(
            f"{key}={str(path)!r} has checkpoint version {state.get('version')!r}; this embodirl reads version "
            f"{VERSION}. Fix: evaluate it with the embodirl version that wrote it."
        )
    missing = [k for k in REQUIRED if k not in state]
    if missing:
        raise CheckpointError(f"{key}={str(path)!r} lacks {missing}: it is incomplete. Fix: {hint}.")
    if not isinstance(state["policy"], dict):
        raise CheckpointError(f"{key}={str(path)!r} has no policy state_dict. Fix: {hint}.")
    where = f"{key}={str(path)!r}"
    check_finite(state["policy"], where)
    for entry in ("algo", "env", "collector", "rng"):
        for name, value in _tensors(state.get(entry), entry):
            _check_tensor(value, name, where, finite=entry == "algo")
    _check_trainer(state["trainer"], where)
    _check_rng(state["rng"], where)
    _check_algo(state["algo"], where)
    return state


_ALTERED = ("embodirl-train never writes such a value (the file was altered, or written by other code): use another "
            "checkpoint, e.g. a step_*.pt from the same checkpoints/ folder")


def _refuse(where: str, entry: str, value: Any, expected: str, fix: str = _ALTERED) -> CheckpointError:
    shown = _describe(value)
    return CheckpointError(f"{where}: {entry}={shown} is invalid: expected {expected}. Fix: {fix}.")


def _describe(value: Any) -> str:
    """``value`` for a message: a tensor by its type, shape and layout (never its elements), others by a short repr."""
    if isinstance(value, torch.Tensor):
        layout = "" if value.layout is torch.strided else f" {str(value.layout).removeprefix('torch.')}"
        device = "" if value.device.type == "cpu" else f" on {value.device.type}"
        return f"<{str(value.dtype).removeprefix('torch.')}{layout} tensor of shape {list(value.shape)}{device}>"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _tensors(node: Any, name: str) -> Iterator[tuple[str, torch.Tensor]]:
    """``(dotted name, tensor)`` for every tensor in nested dicts, lists and tuples (iterative: no recursion limit)."""
    stack = [(name, node)]
    while stack:
        name, node = stack.pop()
        if isinstance(node, torch.Tensor):
            yield name, node
        elif isinstance(node, dict):
            stack.extend((f"{name}.{k}", v) for k, v in node.items())
        elif isinstance(node, list | tuple):
            stack.extend((f"{name}.{i}", v) for i, v in enumerate(node))


def _owns_its_elements(value: torch.Tensor) -> bool:
    """Whether no two elements of the view share storage: sorted by stride, each dimension steps past the
    span of the ones below it (a stride-0 or overlapping view fails; a transposed one passes)."""
    span = 1
    for stride, size in sorted((st, sz) for sz, st in zip(value.shape, value.stride(), strict=True) if sz > 1):
        if stride < span:
            return False
        span = stride * size
    return True


def _check_tensor(value: torch.Tensor, name: str, where: str, finite: bool) -> None:
    """Refuse a tensor embodirl never writes; with ``finite``, also NaN or infinite floating values."""
    if value.layout is not torch.strided or value.device.type != "cpu" or not _owns_its_elements(value):
        raise _refuse(where, name, value, "a dense CPU tensor whose elements are its own (not sparse, and not a "
                      f"view with strides {list(value.stride()) if value.layout is torch.strided else '-'} that "
                      "repeats stored numbers)")
    if value.is_complex() or value.is_quantized:
        raise _refuse(where, name, value, "a real tensor (embodirl's weights and states are never complex)")
    if finite and value.is_floating_point() and not bool(torch.isfinite(value).all()):
        raise _refuse(where, name, value, "finite values (it holds NaN or infinite ones: the run had diverged when "
                      "it was saved)", "use an earlier checkpoint from the same checkpoints/ folder (step_*.pt)")


def check_finite(state_dict: dict[str, Any], what: str) -> None:
    """Check a policy ``state_dict`` read from a file: every value a real, dense tensor of its own elements, with
    finite floating values; raise :class:`CheckpointError` naming the first that is not."""
    for name, value in state_dict.items():
        if not isinstance(value, torch.Tensor):
            raise _refuse(what, f"policy[{name!r}]", value, "a tensor")
        try:
            _check_tensor(value, f"policy[{name!r}]", what, finite=True)
        except CheckpointError as exc:
            if "finite values" not in str(exc):
                raise
            raise CheckpointError(
                f"{what}: policy parameter {name!r} contains NaN or infinite values (the run had diverged "
                "when it was saved). Fix: use an earlier checkpoint from the same checkpoints/ folder (step_*.pt)."
            ) from None


def _is_count(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _is_seconds(value: Any) -> TypeGuard[int | float]:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) and value >= 0


def _check_trainer(trainer: Any, where: str) -> None:
    """The trainer counters: ints >= 0 (iterations at most the env steps; solved and best steps within them),
    finite times; entries a newer embodirl added may be absent."""
    if not isinstance(trainer, dict):
        raise _refuse(where, "trainer", trainer, "a mapping of trainer counters")
    for key in ("iteration", "env_steps", "next_eval", "next_checkpoint"):
        if key in trainer and not _is_count(trainer[key]):
            raise _refuse(where, f"trainer.{key}", trainer[key], "an int >= 0")
    steps = trainer.get("env_steps", 0)
    if trainer.get("iteration", 0) > steps:
        raise _refuse(where, "trainer.iteration", trainer["iteration"],
                      f"at most trainer.env_steps={steps} (each iteration collects env steps)")
    for key in ("solved_env_steps", "best_env_steps"):
        value = trainer.get(key)
        if value is not None and not (_is_count(value) and value <= steps):
            raise _refuse(where, f"trainer.{key}", value, f"null or an int in [0, trainer.env_steps={steps}]")
    for key, optional in (("wall_time_s", False), ("solved_wall_time_s", True)):
        value = trainer.get(key)
        if key in trainer and not (_is_seconds(value) or (optional and value is None)):
            raise _refuse(where, f"trainer.{key}", value, ("null or " if optional else "") + "a finite float >= 0")
    for key in ("best_value", "best_return"):
        value = trainer.get(key)
        if value is not None and not (isinstance(value, int | float) and math.isfinite(value)):
            raise _refuse(where, f"trainer.{key}", value, "null or a finite float")


def _check_rng(rng: Any, where: str) -> None:
    """The generator states :func:`set_rng_state` restores: torch's CPU state and a list of CUDA states."""
    if not isinstance(rng, dict):
        raise _refuse(where, "rng", rng, "a mapping of generator states")
    size = torch.get_rng_state().numel()
    cpu = rng.get("torch")
    if not (isinstance(cpu, torch.Tensor) and cpu.dtype == torch.uint8 and list(cpu.shape) == [size]):
        raise _refuse(where, "rng.torch", cpu, f"a uint8 tensor of shape [{size}] (torch's CPU generator state)")
    cuda = rng.get("cuda", [])
    if not (isinstance(cuda, list) and all(isinstance(t, torch.Tensor) and t.dtype == torch.uint8 and t.dim() == 1
                                           for t in cuda)):
        raise _refuse(where, "rng.cuda", cuda, "a list of uint8 tensors (one CUDA generator state per device)")
    if torch.cuda.is_available() and cuda:
        size = torch.cuda.get_rng_state().numel()
        for i, state in enumerate(cuda):
            if state.numel() != size:
                raise _refuse(where, f"rng.cuda.{i}", state, f"a uint8 tensor of shape [{size}]")


def _check_algo(algo: Any, where: str) -> None:
    """The counters every algorithm's state may hold (``Algorithm.state_dict``): env steps seen and the learning
    rate (the on-policy schedules'); an off-policy algorithm's networks and optimizers are checked as tensors."""
    if not isinstance(algo, dict):
        raise _refuse(where, "algo", algo, "a mapping of optimizer and schedule state")
    if "env_steps_seen" in algo and not _is_count(algo["env_steps_seen"]):
        raise _refuse(where, "algo.env_steps_seen", algo["env_steps_seen"], "an int >= 0")
    lr = algo.get("learning_rate")
    if "learning_rate" in algo and not (_is_seconds(lr) and lr > 0):
        raise _refuse(where, "algo.learning_rate", lr, "a finite float > 0")


def check_optimizer_state(optimizer: torch.optim.Optimizer, where: str, name: str = "optimizer") -> None:
    """After ``optimizer.load_state_dict``: every per-parameter tensor (moments, momentum) that is not a scalar
    has its parameter's shape (torch does not check; a mismatch would fail in the first step).

    Raises:
        CheckpointError: Naming the entry as ``algo.<name>.state.<index>.<entry>`` (``name``: the optimizer's key in
            the algorithm's state, ``optimizer`` for the on-policy algorithms, e.g. ``critic_optimizer`` for SAC).
    """
    index = {id(p): i for i, p in enumerate(p for group in optimizer.param_groups for p in group["params"])}
    for param, state in optimizer.state.items():
        for entry, value in state.items():
            if isinstance(value, torch.Tensor) and value.dim() > 0 and value.shape != param.shape:
                raise _refuse(where, f"algo.{name}.state.{index.get(id(param), '?')}.{entry}", value,
                              f"the shape of its parameter, {list(param.shape)}",
                              "resume with the same policy the checkpoint was trained with, or use another checkpoint")


def rng_state() -> dict[str, Any]:
    """The torch CPU (and CUDA, when present) generator states."""
    state: dict[str, Any] = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore :func:`rng_state`'s states; CUDA states beyond this machine's devices are left out."""
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"][: torch.cuda.device_count()])

"""Checkpoints: one dict of tensors and plain values, written atomically, loaded with weights_only.

Contents (``version`` 2): ``config`` (the resolved run config), ``policy`` (state_dict, including the
observation normaliser), ``algo`` (optimizer and schedule state), ``trainer`` (counters, timings,
solved markers), ``env`` and ``collector`` (to continue episodes exactly; ``env`` is None for envs
that cannot snapshot), ``rng`` (torch CPU and CUDA generator states).
"""

from __future__ import annotations

import io
import json
import os
import pickle
import tempfile
from pathlib import Path
from typing import Any

import torch

from embodirl.errors import CheckpointError

__all__ = ["atomic_write_bytes", "atomic_write_json", "check_finite", "load_checkpoint", "rng_state",
           "serialize_checkpoint", "set_rng_state"]

FORMAT = "embodirl-checkpoint"
VERSION = 2  # 2: observations as TensorDicts, episode statistics with the collector
REQUIRED = ("config", "policy", "algo", "trainer", "rng")


def _umask() -> int:
    """The process's umask, read without changing it where /proc allows (os.umask is set-and-return)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _atomic_replace(path: Path, write) -> None:
    """Write through a hidden temp file (``.<name>.<random>.tmp``) renamed over ``path``.

    The file gets the mode an ordinary write would (0666 minus the umask), not mkstemp's 0600, so
    colleagues sharing a cluster file system can read results. OS errors name ``path``.
    """
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as exc:
        raise exc if exc.filename else type(exc)(exc.errno, exc.strerror, str(path)) from None
    try:
        os.fchmod(fd, 0o666 & ~_umask())
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(exc, OSError) and exc.filename != str(path):
            raise type(exc)(exc.errno, exc.strerror, str(path)) from None
        raise


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so readers see the old file or the new one, never a partial one."""
    _atomic_replace(Path(path), lambda f: f.write(data))


def atomic_write_json(path: str | Path, obj: Any) -> None:
    """Atomically write ``obj`` as indented JSON (NaN written as null)."""
    atomic_write_bytes(path, (json.dumps(_nan_to_none(obj), indent=2) + "\n").encode())


def _nan_to_none(obj: Any) -> Any:
    if isinstance(obj, float) and obj != obj:
        return None
    if isinstance(obj, dict):
        return {k: _nan_to_none(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_nan_to_none(v) for v in obj]
    return obj


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
    check_finite(state["policy"], f"{key}={str(path)!r}")
    return state


def check_finite(state_dict: dict[str, Any], what: str) -> None:
    """Raise :class:`CheckpointError` naming the first floating tensor with NaN or infinite values."""
    for name, value in state_dict.items():
        if isinstance(value, torch.Tensor) and value.is_floating_point() and not bool(torch.isfinite(value).all()):
            raise CheckpointError(
                f"{what}: policy parameter {name!r} contains NaN or infinite values (the run had diverged "
                "when it was saved). Fix: use an earlier checkpoint from the same checkpoints/ folder (step_*.pt)."
            )


def rng_state() -> dict[str, Any]:
    """The torch CPU (and CUDA, when present) generator states."""
    state: dict[str, Any] = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])

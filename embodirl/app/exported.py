"""An export of ``embodirl-export`` run as a policy: the file itself (ONNX through onnxruntime, TorchScript through
``torch.jit.load``), not the checkpoint it came from, for the sim-to-sim check of ``embodirl-eval export=DIR``.

:func:`load_export` reads ``manifest.json`` as data (fields it does not know, such as those a later embodirl
adds, are ignored), refuses a manifest or policy file that is not what ``embodirl-export`` writes in one line, and
returns an :class:`ExportedPolicy`: the two calls the evaluator makes on a policy (``initial_state`` and ``mode``),
answered by the exported function, the way a robot's driver calls it (raw observations in, the env's action out,
a recurrent state carried from step to step). :func:`check_layout` refuses an env whose observations or actions
are not the ones the manifest names (key, shape, dtype), before any episode runs.

An ONNX file is data to onnxruntime. A TorchScript file is a program that ``torch.jit.load`` runs: load only
exports you trust, as you would a script.
"""

from __future__ import annotations

import importlib.util
import json
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from tensordict import TensorDict
from torch import Tensor

from embodirl.envs.base import BatchedEnv
from embodirl.envs.observations import key_name, observation_spec
from embodirl.errors import CheckpointError, ConfigError

__all__ = ["MANIFEST", "POLICY_FILES", "ExportedPolicy", "TensorEntry", "check_layout", "load_export"]

MANIFEST = "manifest.json"
POLICY_FILES = {"onnx": "policy.onnx", "torchscript": "policy.pt"}  # what embodirl-export writes, by format
DTYPES = ("float32", "float64", "float16", "uint8", "int64", "int32", "bool")  # tensors an export may take
_FIX = "export it again with embodirl-export run=<run dir> out=<a new directory>"


@dataclass(frozen=True)
class TensorEntry:
    """One input, state or output tensor of the manifest: its name, per-sample shape and numpy dtype name."""

    name: str
    shape: tuple[int, ...]
    dtype: str

    def describe(self) -> str:
        return f"{self.name} {list(self.shape)} {self.dtype}"


def _entry(raw: Any, where: str, prefix: str) -> TensorEntry:
    """A manifest tensor entry checked: ``{"name": "<prefix>...", "shape": [ints >= 0], "dtype": a dtype}``."""
    ok = (isinstance(raw, dict) and isinstance(raw.get("name"), str) and raw["name"].startswith(prefix)
          and isinstance(raw.get("shape"), list)
          and all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in raw["shape"])
          and raw.get("dtype") in DTYPES)
    if not ok:
        raise CheckpointError(f"{where} is not a tensor entry of embodirl-export (expected {{\"name\": "
                              f"\"{prefix}...\", \"shape\": [...], \"dtype\": one of {', '.join(DTYPES)}}}, "
                              f"found {str(raw)[:80]!r}). Fix: {_FIX}")
    return TensorEntry(raw["name"], tuple(raw["shape"]), raw["dtype"])


def _entries(manifest: dict[str, Any], field: str, prefix: str, where: str) -> list[TensorEntry]:
    raw = manifest.get(field)
    if not isinstance(raw, list):
        raise CheckpointError(f"{where}: its {field!r} is no list of tensors. Fix: {_FIX}")
    return [_entry(item, f"{where}: {field}[{i}]", prefix) for i, item in enumerate(raw)]


def _read_manifest(directory: Path) -> dict[str, Any]:
    """``manifest.json`` of ``directory`` as a dict; one line for a missing directory or a file that is no JSON
    object."""
    path = directory / MANIFEST
    if not path.is_file():
        raise ConfigError("export", str(directory), f"a directory written by embodirl-export (holding {MANIFEST})",
                          "pass export=<run dir>/export/onnx (or /torchscript), written by embodirl-export run=<run>")
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"{path} is not JSON ({exc}). Fix: {_FIX}") from None
    if not isinstance(manifest, dict):
        raise CheckpointError(f"{path} is not a manifest of embodirl-export (a JSON object). Fix: {_FIX}")
    return manifest


class ExportedPolicy:
    """The exported function as the evaluator's policy: ``mode`` feeds it the observations the manifest names (and
    the state) and returns its action, ``initial_state`` the state at an episode's start.

    Args:
        directory: The export's directory (``manifest.json`` and the policy file).
        device: Where the env's tensors live (onnxruntime runs on the CPU; the action is moved back).
    """

    # No torch distribution: the evaluator runs it one action per step (a chunked export's [H, *A] action does not
    # fit the env's action layout and is refused before any episode).
    dist = None

    def __init__(self, directory: Path, device: torch.device) -> None:
        self.directory, self.device = Path(directory), device
        where = str(self.directory / MANIFEST)
        manifest = _read_manifest(self.directory)
        self.manifest = manifest
        self.format = manifest.get("format")
        if self.format not in POLICY_FILES or manifest.get("file") != POLICY_FILES[self.format]:
            raise CheckpointError(f"{where}: format={manifest.get('format')!r} file={manifest.get('file')!r} is not "
                                  f"what embodirl-export writes (onnx with policy.onnx, torchscript with policy.pt). "
                                  f"Fix: {_FIX}")
        self.inputs = _entries(manifest, "inputs", "obs.", where)
        self.state = _entries(manifest, "state", "state.", where)
        action = manifest.get("action")
        self.action = _entry(action, f"{where}: action", "action")
        assert isinstance(action, dict)  # _entry checked it
        self.action_info: dict[str, Any] = action
        self.is_recurrent = bool(self.state)
        self.initial = [_initial(raw, entry, where) for raw, entry in zip(manifest["state"], self.state, strict=True)]
        self._run = self._load(self.directory / POLICY_FILES[self.format])

    def _load(self, path: Path) -> Any:
        """The exported function as ``inputs (numpy or torch) -> outputs``; one line for a file that is none."""
        if not path.is_file():
            raise CheckpointError(f"export={str(self.directory)!r}: {path.name} is missing (its manifest names it). "
                                  f"Fix: {_FIX}")
        names = [e.name for e in (*self.inputs, *self.state)]
        if self.format == "torchscript":
            try:
                with warnings.catch_warnings():  # torch's deprecation of TorchScript, said in docs/guides/export.md
                    warnings.simplefilter("ignore", DeprecationWarning)
                    module = torch.jit.load(str(path), map_location="cpu")
            except Exception as exc:  # any failure to read the file is the file's: one line, exit 2
                raise CheckpointError(f"{path} is not a TorchScript file torch.jit.load reads "
                                      f"({_first_line(exc)}). Fix: {_FIX}") from None
            return lambda tensors: module(*tensors)
        if importlib.util.find_spec("onnxruntime") is None:
            raise ConfigError("export", str(self.directory), "a TorchScript export, or onnxruntime installed for "
                              "this ONNX one", "pip install 'embodirl[export]', or pass export=<run>/export/"
                              "torchscript")
        import onnxruntime as ort  # type: ignore[import-untyped]

        try:
            session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        except Exception as exc:  # onnxruntime's own exception types (InvalidProtobuf, Fail, ...)
            raise CheckpointError(f"{path} is not an ONNX model onnxruntime reads ({_first_line(exc)}). "
                                  f"Fix: {_FIX}") from None
        found = [i.name for i in session.get_inputs()]
        if found != names:
            raise CheckpointError(f"{path} takes the inputs {found}, its manifest names {names}: the file and the "
                                  f"manifest are of different exports. Fix: {_FIX}")
        return lambda arrays: session.run(None, dict(zip(names, arrays, strict=True)))

    def initial_state(self, batch_size: int) -> TensorDict:
        """The state at an episode's start, batch ``[batch_size]`` (empty for a feedforward export)."""
        state = TensorDict({}, batch_size=[batch_size], device=self.device)
        for entry, value in zip(self.state, self.initial, strict=True):
            state.set(_key(entry.name, "state."), value.to(self.device).expand(batch_size, *entry.shape).clone())
        return state

    def mode(self, obs: TensorDict, state: TensorDict) -> tuple[Tensor, TensorDict]:
        """The export's action for ``obs`` ``[B]`` (the env's own action: a ``Discrete`` one less its ``start``, as
        embodirl's envs take it) and the next state."""
        tensors = [obs.get(_key(e.name, "obs.")) for e in self.inputs]
        tensors += [state.get(_key(e.name, "state.")) for e in self.state]
        if self.format == "onnx":
            outputs = [torch.from_numpy(np.asarray(o)) for o in self._run([t.cpu().numpy() for t in tensors])]
        else:
            outputs = list(self._run([t.cpu() for t in tensors]))
        action = outputs[0].to(self.device)
        if "num_actions" in self.action_info:
            action = action - int(self.action_info.get("start") or 0)
        next_state = state.clone()
        for entry, value in zip(self.state, outputs[1:], strict=True):
            next_state.set(_key(entry.name, "state."), value.to(self.device))
        return action, next_state


def _key(name: str, prefix: str) -> tuple[str, ...]:
    """``"obs.agent.qpos"`` -> ``("agent", "qpos")``: a manifest name as the TensorDict key it was exported from."""
    return tuple(name.removeprefix(prefix).split("."))


def _initial(raw: dict[str, Any], entry: TensorEntry, where: str) -> Tensor:
    """A state entry's value at an episode's start: ``"zeros"`` (or no ``initial``), or its values."""
    value = raw.get("initial", "zeros")
    dtype = getattr(torch, entry.dtype)
    if value == "zeros":
        return torch.zeros(1, *entry.shape, dtype=dtype)
    try:
        return torch.as_tensor(value, dtype=dtype).reshape(1, *entry.shape)
    except (TypeError, ValueError, RuntimeError):
        raise CheckpointError(f"{where}: the initial value of {entry.name} is neither \"zeros\" nor "
                              f"{list(entry.shape)} numbers. Fix: {_FIX}") from None


def _first_line(exc: BaseException) -> str:
    """The reason an exception gives, on one line: its first sentence (torch's run on with advice that fits no
    export)."""
    text = " ".join(str(exc).split())
    return text.split(". ", 1)[0][:200] if text else type(exc).__name__


def load_export(directory: str | Path, device: torch.device) -> ExportedPolicy:
    """The export in ``directory`` as a policy (see :class:`ExportedPolicy`).

    Raises:
        ConfigError: ``directory`` holds no ``manifest.json``, or onnxruntime is missing for an ONNX export.
        CheckpointError: The manifest or the policy file is not what embodirl-export writes.
    """
    return ExportedPolicy(Path(directory), device)


def env_layout(env: BatchedEnv) -> tuple[list[str], str]:
    """An env's observation tensors (``obs.state [17] float32``) and its action, in the manifest's words."""
    inputs = [f"obs.{key_name(k)} {list(shape)} {str(dtype).removeprefix('torch.')}"
              for k, (shape, dtype) in observation_spec(env.observation_space).items()]
    space = env.action_space
    if isinstance(space, gym.spaces.Discrete):
        return inputs, f"action [] int64, {int(space.n)} actions from {getattr(env, 'action_start', 0)}"
    return inputs, f"action {list(space.shape or ())} float32"


def _export_layout(policy: ExportedPolicy) -> tuple[list[str], str]:
    info = policy.action_info
    action = policy.action.describe()
    if "num_actions" in info:
        action += f", {info['num_actions']} actions from {info.get('start') or 0}"
    return [e.describe() for e in policy.inputs], action


def check_layout(policy: ExportedPolicy, env: BatchedEnv, key: str, label: str) -> None:
    """Refuse ``env`` unless it gives every observation the export reads (same key, shape and dtype; keys only a
    critic read may differ) and takes the action it returns (same shape, or as many discrete actions).

    Args:
        policy: The export.
        env: The env it is to run in.
        key: The config key that chose the env (for the message): ``env`` or ``checkpoint``.
        label: The env in words (``push_cube_arm``).

    Raises:
        ConfigError: One line naming the export's layout and the env's.
    """
    env_inputs, env_action = env_layout(env)
    export_inputs, export_action = _export_layout(policy)
    missing = [item for item in export_inputs if item not in env_inputs]
    if not missing and env_action == export_action:
        return
    raise ConfigError(key, label, f"an env with the export's observations and action (the manifest's: "
                      f"{', '.join(export_inputs)} -> {export_action}; this env's: {', '.join(env_inputs)} -> "
                      f"{env_action})", "pass env=<an env with this layout> (docs/guides/export.md, sim-to-sim), "
                      "or train and export a policy on this env", absolute=True)

"""``embodirl-export run=RUN_DIR checkpoint=last|best format=onnx|torchscript``: a trained policy for a robot.

Writes the checkpoint's deterministic actor (:class:`~embodirl.policies.export.DeterministicActor`: observation
normaliser, deterministic action and the clip to the action bounds inside) as ``policy.onnx`` (onnxruntime) or
``policy.pt`` (``torch.jit.load``), and ``manifest.json`` describing its inputs and outputs, into
``RUN_DIR/export/<format>/`` or ``out=DIR``. An earlier export there is replaced only with ``overwrite=true``.
The checkpoint is data, read as :mod:`embodirl.cli.evaluate` reads it (``weights_only=True``, only trusted classes).
"""

from __future__ import annotations

import importlib.util
import logging
import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import hydra
from omegaconf import DictConfig

import embodirl
from embodirl.errors import ConfigError

if TYPE_CHECKING:
    from embodirl.policies.export import DeterministicActor

log = logging.getLogger("embodirl.export")

PROG = "embodirl-export"
FILE_NAMES = {"onnx": "policy.onnx", "torchscript": "policy.pt"}
MANIFEST = "manifest.json"
ONNX_PACKAGES = ("onnx", "onnxscript")  # what torch.onnx.export(dynamo=True) imports


def export_dir(out: str | None, run: Any, checkpoint: Any, path: Path, fmt: str) -> Path:
    """Where an export goes: ``out``, else ``<run>/export/<fmt>`` for a run's checkpoint, else ``export/<fmt>`` next
    to a checkpoint file outside any run."""
    from embodirl.cli.evaluate import owning_run

    if out is not None:
        if not str(out).strip():  # Path("") is the current directory: the export would land wherever one stands
            raise ConfigError("out", out, "a directory (an empty one would be the current directory)",
                              "pass out=<a directory>, or leave out= off for <run>/export/<format>")
        return Path(out)
    owner = owning_run(run, checkpoint)
    return (owner if owner is not None else path.parent) / "export" / fmt


def check_free(directory: Path, fmt: str, overwrite: bool, given: bool) -> None:
    """Refuse to replace an earlier export in ``directory`` unless ``overwrite``.

    Raises:
        ConfigError: ``directory`` holds the policy file or a manifest, or is a file.
    """
    if directory.exists() and not directory.is_dir():
        raise ConfigError("out", str(directory), "a directory (this is a file)", "pass out=<a directory>")
    found = [name for name in (FILE_NAMES[fmt], MANIFEST) if (directory / name).exists()]
    if found and not overwrite:
        fix = "pass overwrite=true to replace it, or out=<another directory>"
        raise ConfigError("out", str(directory), f"a directory without an earlier export (it holds "
                          f"{', '.join(found)}{'' if given else '; out defaults to <run>/export/<format>'})", fix)


def check_format_packages(fmt: str) -> None:
    """Refuse ``format=onnx`` where the exporter's packages are missing, before anything is loaded."""
    missing = [name for name in ONNX_PACKAGES if importlib.util.find_spec(name) is None] if fmt == "onnx" else []
    if missing:
        raise ConfigError("format", fmt, f"onnx with the packages {', '.join(ONNX_PACKAGES)} installed (missing: "
                          f"{', '.join(missing)}), or torchscript",
                          "pip install 'embodirl[export]' (onnx, onnxscript, onnxruntime), or pass format=torchscript")


def manifest(actor: DeterministicActor, *, fmt: str, file: str, checkpoint: Path, run: Path | None,
             env: Any, train_cfg: DictConfig) -> dict[str, Any]:
    """What a driver needs to call the exported file: input, state and output tensors, the inputs that hold a
    history (``env.obs_history``, ``env.frame_stack``) and how to feed them, action bounds, the control period where
    the env declares one (``control_dt``, seconds), and where the weights came from."""
    import gymnasium as gym

    from embodirl.envs.frame_stack import history_lengths
    from embodirl.policies.export import HISTORY_FEED, history_inputs

    space = env.action_space
    action: dict[str, Any] = actor.action.as_json()
    if isinstance(space, gym.spaces.Box):
        action.update(low=space.low.tolist(), high=space.high.tolist())
    else:
        action.update(num_actions=int(space.n), start=actor.action_start)
    control_dt = getattr(env, "control_dt", None)
    state = [{**s.as_json(), "initial": _initial(actor, k)} for s, k in zip(actor.state, actor.state_keys, strict=True)]
    history = history_inputs(actor, history_lengths(env))
    return {"format": fmt, "file": file, "embodirl_version": embodirl.__version__,
            "run": str(run.resolve()) if run is not None else None, "checkpoint": str(checkpoint.resolve()),
            "env": train_cfg.env._target_, "policy": train_cfg.policy._target_,
            "batch_axis": "every input and output has a leading batch dimension of any size; shapes are per sample",
            "inputs": [s.as_json() for s in actor.inputs],
            "history": history,
            "history_feed": HISTORY_FEED if history else None,
            "state": state,
            "outputs": [action, *(s.as_json() for s in actor.outputs[1:])],
            "action": action, "control_dt": float(control_dt) if control_dt else None,
            "action_chunk": actor.action_chunk, "chunk_execute": actor.chunk_execute,
            "normalizer": "inside: feed raw observations", "recurrent": bool(actor.state)}


def _initial(actor: DeterministicActor, key: tuple[str, ...]) -> Any:
    """A state entry's value at an episode's start: ``"zeros"`` (the shipped recurrent policies), else its values."""
    value = actor.initial.get(key)[0]
    return "zeros" if not bool(value.any()) else value.tolist()


def _write(actor: DeterministicActor, fmt: str, target: Path) -> None:
    """Write the policy file through a temporary name, so an interrupted export leaves no half file."""
    from embodirl.policies.export import export_onnx, export_torchscript
    from embodirl.runtime.files import file_mode

    # A new file of our own (O_EXCL): a fixed name could be a link planted to make the export overwrite its target.
    fd, name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".partial", dir=target.parent)
    os.fchmod(fd, file_mode())  # shared like any file the user writes, not mkstemp's 0600
    os.close(fd)
    partial = Path(name)
    try:
        (export_onnx if fmt == "onnx" else export_torchscript)(actor, partial)
        os.replace(partial, target)
    finally:
        partial.unlink(missing_ok=True)  # a failed export leaves nothing behind


def export_checkpoint(cfg: DictConfig) -> dict[str, Any]:
    """Load the checkpoint ``cfg`` names, rebuild its policy, write the export; return the manifest."""
    import torch

    from embodirl.app.build import build_env
    from embodirl.cli.evaluate import owning_run, read_checkpoint, restored_policy
    from embodirl.policies.export import DeterministicActor
    from embodirl.runtime.files import atomic_write_json, check_run_dir_links

    check_format_packages(cfg.format)
    path, state, train_cfg = read_checkpoint(cfg.run, cfg.checkpoint, cfg.trusted_targets)
    directory = export_dir(cfg.out, cfg.run, cfg.checkpoint, path, cfg.format)
    if cfg.out is None:  # <run>/export/<format>: the run's own folders, never a link out of the run
        check_run_dir_links(directory.parent.parent)
    check_free(directory, cfg.format, cfg.overwrite, cfg.out is not None)
    cpu = torch.device("cpu")
    env = build_env(train_cfg.env, cpu, seed=0, num_envs=1)  # for its spaces and control period only
    try:
        policy = restored_policy(train_cfg.policy, env, cpu, state["policy"], path)
        actor = DeterministicActor(policy, env.observation_space, env.action_space,
                                   action_start=getattr(env, "action_start", 0))
        record = manifest(actor, fmt=cfg.format, file=FILE_NAMES[cfg.format], checkpoint=path,
                          run=owning_run(cfg.run, cfg.checkpoint), env=env, train_cfg=train_cfg)
    finally:
        env.close()
    directory.mkdir(parents=True, exist_ok=True)
    _write(actor, cfg.format, directory / FILE_NAMES[cfg.format])
    atomic_write_json(directory / MANIFEST, record)
    record["directory"] = str(directory)
    return record


def _summary(record: dict[str, Any]) -> str:
    tensors = ", ".join(f"{t['name']} {t['shape']} {t['dtype']}" for t in (*record["inputs"], *record["state"]))
    outputs = ", ".join(f"{t['name']} {t['shape']} {t['dtype']}" for t in record["outputs"])
    where = Path(record["directory"])
    return f"wrote {where / record['file']} and {where / MANIFEST}: ({tensors}) -> ({outputs})"


@hydra.main(version_base="1.3", config_path="pkg://embodirl.conf", config_name="export")
def _export(cfg: DictConfig) -> None:
    from embodirl.cli.errors import fail
    from embodirl.cli.process import interrupted
    from embodirl.config.run import check_export_config

    try:
        check_export_config(cfg)  # every key against the schema, before torch is imported
        record = export_checkpoint(cfg)
    except KeyboardInterrupt:
        interrupted(PROG, f"the export did not finish (an export is complete once its {MANIFEST} is written); run "
                    "the same command again to export")
    except Exception as exc:  # one line and an exit status for every failure
        fail(PROG, exc)
    print(_summary(record))


def main() -> None:
    """The ``embodirl-export`` console script (``--help``: :func:`embodirl.cli.help.export_help_page`)."""
    import sys

    from embodirl.cli.errors import hydra_entry
    from embodirl.cli.flags import refuse_rerun
    from embodirl.cli.help import export_help_page, help_request

    # Hydra's --experimental-rerun unpickles a file (code runs): refused before Hydra reads it.
    refuse_rerun(PROG, sys.argv[1:], "run the export again with its key=value arguments "
                 "(e.g. embodirl-export run=<run dir> checkpoint=best)")
    overrides = help_request(sys.argv[1:])
    if overrides is not None:
        hydra_entry(PROG, lambda: print(export_help_page(overrides, PROG)), config_name="export")
        return
    hydra_entry(PROG, _command, config_name="export")


def _command() -> None:
    """:func:`_export`, with a Ctrl-C before it began (while Hydra composed the config) reported as such."""
    from embodirl.cli.process import interrupted

    try:
        _export()
    except KeyboardInterrupt:
        interrupted(PROG, "before the export began; nothing was written")


def console() -> None:
    """The console script: :func:`main`, then a quick end of the process (:mod:`embodirl.cli.process`)."""
    from embodirl.cli.process import run_console_script

    run_console_script(main)


if __name__ == "__main__":
    console()

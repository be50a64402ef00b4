"""Which code a config read from a file may name: a checkpoint is data, never a program.

A checkpoint stores its run's resolved config, and ``embodirl-eval`` rebuilds the env and policy from it.
Hydra's ``instantiate`` calls whatever a ``_target_`` names, anywhere in the tree: ``_target_:
pathlib.Path.write_text`` nested in an env option would write a file (a ``.pth`` file in site-packages
runs at the next Python start). So before anything read from a file is instantiated, every ``_target_``
in it must be one that the installed package's own config groups name (the YAML files of
``embodirl.conf``, launcher profiles excepted), or one the user lists on the command line
(``trusted_targets``), or a ``torch.optim`` optimizer class (``algo.optimizer``: building an optimizer
runs no code of the file's choosing); and no interpolation (``${...}``, which could read the environment or call a
resolver) may remain in it. Resuming training never instantiates anything from a checkpoint.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator
from importlib import resources
from typing import Any

import yaml

from embodirl.errors import CheckpointError

__all__ = ["MOVED_TARGETS", "check_config_from_file", "is_optimizer_class", "packaged_targets", "with_moved_targets"]

_EXCLUDED = ("hydra",)  # launcher profiles are Hydra's own business, never part of a run config
# Keys whose value can make a shipped class import a module: gymnasium imports ``module`` for an id
# ``"module:Env-v0"``; TorchVectorEnv and GymVectorEnv import and call a ``make`` given as an import path (a ``make``
# mapping's ``_target_`` is checked like any other), GenesisEnv its task's functions. From a file, such a value must
# be trusted like a target, or be the value the installed package's own option file gives that key.
_IMPORTING_KEYS = {"embodirl.envs.adapters.gym.GymEnv": "id", "embodirl.envs.adapters.gym_vector.GymVectorEnv": "id"}
_CALLED_PATH_KEYS = {"embodirl.envs.adapters.torch_vector.TorchVectorEnv": ("make",),
                     "embodirl.envs.adapters.gym_vector.GymVectorEnv": ("make",),
                     "embodirl.envs.adapters.genesis.GenesisEnv": ("observation", "reward", "termination")}
# Classes embodirl ships under another path than the one checkpoints written by earlier versions name
# (the package was laid out as the pipeline): old path -> new path. A checkpoint's config is read through this
# table (:func:`with_moved_targets`) before it is checked, so those checkpoints still evaluate.
MOVED_TARGETS = {
    "embodirl.envs.gym.GymEnv": "embodirl.envs.adapters.gym.GymEnv",
    "embodirl.envs.torch_vector.TorchVectorEnv": "embodirl.envs.adapters.torch_vector.TorchVectorEnv",
    "embodirl.envs.push_cube.PushCube": "embodirl.envs.push_cube.env.PushCube",
    "embodirl.envs.push_cube_arm.PushCubeArm": "embodirl.envs.push_cube.arm.PushCubeArm",
    "embodirl.trainer.Trainer": "embodirl.training.trainer.Trainer",
    # The logger and eval nodes named settings classes; their keys are schemas' now, and the nodes build these.
    "embodirl.loggers.LoggerSettings": "embodirl.training.loggers.Loggers",
    "embodirl.training.loggers.LoggerSettings": "embodirl.training.loggers.Loggers",
    "embodirl.video.VideoSettings": "embodirl.training.evaluation.PeriodicEvaluation",
    "embodirl.training.video.VideoSettings": "embodirl.training.evaluation.PeriodicEvaluation",
}


def _yaml_files(folder: Any) -> Iterator[Any]:
    for entry in folder.iterdir():
        if entry.is_dir() and entry.name not in _EXCLUDED:
            yield from _yaml_files(entry)
        elif entry.name.endswith(".yaml"):
            yield entry


def _target_nodes(node: Any) -> Iterator[tuple[str, dict]]:
    """``(path, mapping)`` of every mapping with a ``_target_`` key in nested dicts and lists."""
    stack: list[tuple[str, Any]] = [("", node)]
    while stack:
        path, item = stack.pop()
        if isinstance(item, dict):
            if "_target_" in item:
                yield path, item
            stack.extend((f"{path}.{key}" if path else str(key), value) for key, value in item.items())
        elif isinstance(item, list | tuple):
            stack.extend((f"{path}[{i}]", value) for i, value in enumerate(item))


def _strings(node: Any, path: str = "") -> Iterator[tuple[str, str]]:
    """``(path, text)`` of every string (keys included) in nested dicts and lists."""
    if isinstance(node, str):
        yield path, node
    elif isinstance(node, dict):
        for key, value in node.items():
            if isinstance(key, str):
                yield path, key
            yield from _strings(value, f"{path}.{key}" if path else str(key))
    elif isinstance(node, list | tuple):
        for i, value in enumerate(node):
            yield from _strings(value, f"{path}[{i}]")


@functools.cache
def packaged_targets() -> frozenset[str]:
    """Every ``_target_`` named by the installed ``embodirl.conf`` option files, and the import paths they give the
    keys that name code (e.g. env=genesis's example task functions)."""
    found = set()
    for file in _yaml_files(resources.files("embodirl.conf")):
        for _, node in _target_nodes(yaml.safe_load(file.read_text(encoding="utf-8"))):
            if isinstance(node["_target_"], str):
                found.add(node["_target_"])
                paths = (node.get(key) for key in _CALLED_PATH_KEYS.get(node["_target_"], ()))
                found.update(path for path in paths if isinstance(path, str))
    return frozenset(found)


def is_optimizer_class(target: str) -> bool:
    """Whether ``target`` is ``torch.optim.<Name>`` naming an optimizer class (looked up, never imported)."""
    module, _, name = target.rpartition(".")
    if module != "torch.optim" or not name.isidentifier():
        return False
    import torch

    found = getattr(torch.optim, name, None)
    return isinstance(found, type) and issubclass(found, torch.optim.Optimizer)


def with_moved_targets(config: Any) -> Any:
    """A copy of a config read from a file with every ``_target_`` that :data:`MOVED_TARGETS` lists replaced by the
    class's present path (nested dicts and lists; anything else is returned as it is)."""
    if isinstance(config, dict):
        moved = {key: with_moved_targets(value) for key, value in config.items()}
        target = moved.get("_target_")
        if isinstance(target, str) and target in MOVED_TARGETS:
            moved["_target_"] = MOVED_TARGETS[target]
        return moved
    if isinstance(config, list | tuple):
        return [with_moved_targets(item) for item in config]
    return config


def check_config_from_file(config: Any, where: str, trusted: Iterable[str] = ()) -> None:
    """Refuse a config read from a file unless it only names code embodirl ships or the user trusts.

    Args:
        config: The config as plain dicts and lists (e.g. a checkpoint's ``config``).
        where: What the config came from, for messages (e.g. ``checkpoint='run/last.pt'``).
        trusted: Extra ``_target_`` values the user allows (from the command line, never from a file).

    Raises:
        CheckpointError: A ``_target_`` that is not allowed, an importing value, or an interpolation.
    """
    if not isinstance(config, dict):
        raise CheckpointError(f"{where}: its stored config is not a mapping; it was not written by embodirl-train. "
                              "Fix: pass a checkpoint written by embodirl-train")
    allowed = packaged_targets() | set(trusted)
    for path, node in _target_nodes(config):
        target = node["_target_"]
        if not isinstance(target, str) or (target not in allowed and not is_optimizer_class(target)):
            raise CheckpointError(
                f"{where}: its config names code this installation does not ship, {path or 'the root'}._target_="
                f"{target!r}; a checkpoint is data and embodirl never runs code named in one. Fix: if the class is "
                f"yours and you trust this file, pass 'trusted_targets=[{target}]'; otherwise do not use it")
        key = _IMPORTING_KEYS.get(target)
        value = node.get(key) if key else None
        if isinstance(value, str) and ":" in value and value not in allowed:
            raise CheckpointError(
                f"{where}: {path}.{key}={value!r} would make gymnasium import the module before the colon; embodirl "
                f"never runs code named in a checkpoint. Fix: if you trust it, pass 'trusted_targets=[\"{value}\"]'")
        for key in _CALLED_PATH_KEYS.get(target, ()):
            value = node.get(key)
            if isinstance(value, str) and value not in allowed:
                raise CheckpointError(
                    f"{where}: {path}.{key}={value!r} names code that embodirl would import and call; a checkpoint "
                    "is data and embodirl never runs code named in one. "
                    f"Fix: if you trust it, pass 'trusted_targets=[{value}]'")
    for path, text in _strings(config):
        if "${" in text:
            raise CheckpointError(
                f"{where}: its config holds an interpolation at {path or 'the root'} ({text[:80]!r}); embodirl "
                "writes resolved configs, so the file was altered. Fix: use a checkpoint written by embodirl-train")

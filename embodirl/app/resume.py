"""Continuing a run directory under a changed config is refused, except for the budget, stop and output keys in
:data:`CHANGEABLE_ON_RESUME`: :func:`config_changes` lists what differs, :func:`check_resume_config` refuses it in
one line with the command that continues the run as it was started. A stored config's keys are read under their
names today (:data:`embodirl.config.run.MOVED_KEYS`), so a run from before a rename still continues.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from embodirl.config.run import MOVED_KEYS
from embodirl.errors import CheckpointError
from embodirl.runtime.files import printable
from embodirl.runtime.rundir import resume_overrides

__all__ = ["CHANGEABLE_ON_RESUME", "check_resume_config", "config_changes"]

#: Keys (or key prefixes ending in ".") that may differ when a run directory is continued: the budget,
#: the stop conditions and where output goes. Anything else changes what is being trained.
CHANGEABLE_ON_RESUME = (
    "trainer.total_env_steps", "trainer.max_wall_time_s", "trainer.stop_on_solved", "trainer.stop_on",
    "env.solved_metric", "env.solved_threshold", "trainer.resume", "trainer.callbacks", "trainer.best_metric",
    "trainer.best_mode", "trainer.allow_config_change",
    "trainer.checkpoint_every_env_steps", "trainer.log_every_env_steps", "trainer.keep_checkpoints",
    "trainer.divergence", "trainer.divergence.",
    "eval._target_", "eval._partial_", "eval.every_env_steps", "eval.num_episodes", "eval.env_overrides",
    "eval.env_overrides.", "eval.video", "eval.video_num_envs", "eval.video_size", "eval.video_fps",
    "eval.video_format", "logger.", "objective",
    "num_threads", "num_update_threads",
    "algo.teacher.allow_change",
)


def _flatten(node: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    if isinstance(node, Mapping):
        for key, value in node.items():
            yield from _flatten(value, f"{prefix}{key}.")
    else:
        yield prefix[:-1], node


_ABSENT = "<absent>"


def _renamed(key: str) -> str:
    """A stored config's key under its name today (:data:`embodirl.config.run.MOVED_KEYS`)."""
    for old, new in MOVED_KEYS.items():
        if key == old or key.startswith(old + "."):
            return new + key[len(old):]
    return key


def config_changes(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[tuple[str, Any, Any]]:
    """``(key, old, new)`` for every leaf that differs (missing leaves are ``<absent>``), sorted by key; the old
    config's keys are read under their names today (``trainer.num_eval_envs`` is ``eval.num_envs``), except a key
    the new config still has (a class of the user's own may name a key ``algo.batch_size``)."""
    b = dict(_flatten(new))
    a = {k if k in b else _renamed(k): v for k, v in _flatten(old)}
    return sorted((k, a.get(k, _ABSENT), b.get(k, _ABSENT)) for k in a.keys() | b.keys()
                  if a.get(k, _ABSENT) != b.get(k, _ABSENT))


def _changeable(key: str) -> bool:
    return any(key == allowed or (allowed.endswith(".") and key.startswith(allowed))
               for allowed in CHANGEABLE_ON_RESUME)


def _short(value: Any) -> str:
    text = repr(value)  # a repr escapes newlines and control characters: a value read from a file stays one line
    return text if len(text) <= 40 else text[:37] + "..."


#: Prefixes whose keys are the user's own (free-form mappings): absent from the new config is a change, not unknown.
_FREE_FORM = ("eval.env_overrides.",)


def _override(key: str, value: Any) -> str | None:
    """``key=value`` as a command-line override, or None when ``value`` is not a plain scalar."""
    if value is None or isinstance(value, bool):
        return f"{key}={str(value).lower() if value is not None else 'null'}"
    if isinstance(value, int | float) or (isinstance(value, str) and value.replace("_", "").replace("-", "")
                                          .replace(".", "").replace("/", "").isalnum()):
        return f"{key}={value}"
    return None


def _refusal(source: str | None, run_dir: str | Path, listed: str, refused: list[tuple[str, Any, Any]]) -> str:
    """The one-line refusal of a changed config: continuing ``run_dir``, or starting from ``source``."""
    if source is None:
        words = resume_overrides(run_dir)
        resume = (f"continue it as it was started: embodirl-train resume={Path(run_dir).resolve()} (that is: "
                  f"{shlex.join(['embodirl-train', *words])}); or " if words is not None else "")
        return (f"{run_dir} holds a run trained with a different config ({listed}); continuing it would silently mix "
                f"the two. Fix: {resume}pass hydra.run.dir=<a new directory> for a new run, or "
                "trainer.allow_config_change=true to continue it with the new values (a network of the same shapes "
                "only)")
    restore = [_override(k, a) for k, a, _ in refused]
    values = (" ".join(o for o in restore if o) if all(restore) and not any(k.endswith("_target_") for k, _, _ in
                                                                           refused)
              else "the overrides it was trained with (in its run's .hydra/overrides.yaml)")
    return (f"{source} holds a run trained with a different config ({listed}); starting from it would silently mix "
            f"the two. Fix: pass {values} to start from it as it was trained, or trainer.allow_config_change=true to "
            "start from it with the new values")


def check_resume_config(run_dir: str | Path, checkpoint_config: Any, config: Mapping[str, Any],
                        allow: bool, source: str | None = None) -> list[str]:
    """Refuse to continue ``run_dir`` (or to start it from the checkpoint ``source``) under a config that changes
    what is trained.

    Args:
        run_dir: The run directory being continued.
        checkpoint_config: The config stored in its ``checkpoints/last.pt`` (or in ``source``).
        config: The new resolved config.
        allow: ``trainer.allow_config_change``: continue anyway.
        source: ``trainer.resume=<file>`` when the run starts from that file, else None (a resume in place).

    Returns:
        The changes, as ``"key old -> new"`` lines (empty when nothing changed), keys and values escaped (one line
        each, whatever the file held).

    Raises:
        CheckpointError: A change outside :data:`CHANGEABLE_ON_RESUME`, or a key this config does not know (the
            checkpoint's config holds a key the new one lacks), and ``allow`` is false. Keys the checkpoint's
            config lacks, added by a newer embodirl, are listed but never refused.
    """
    where = source or f"{run_dir}/checkpoints/last.pt"
    if not isinstance(checkpoint_config, Mapping):
        raise CheckpointError(f"{printable(where)} has no config mapping. Fix: pass "
                              "hydra.run.dir=<a new directory> to start a new run")
    changes = [(printable(k, 200), a, b) for k, a, b in config_changes(checkpoint_config, config)]
    # A key the checkpoint's config lacks was added by a newer embodirl: the run was trained without it, so its
    # (default) value is reported, not refused; otherwise every upgrade would lock every existing run directory.
    # A key only the checkpoint's config holds is unknown here: it would otherwise be carried along unchecked.
    refused = [(k, a, b) for k, a, b in changes if a != _ABSENT and (
        not _changeable(k) or (b == _ABSENT and not k.startswith(_FREE_FORM)))]
    if refused and not allow:
        listed = ", ".join(f"{k} {_short(a)} -> {_short(b)}" for k, a, b in refused)
        raise CheckpointError(_refusal(source, run_dir, listed, refused))
    return [f"{k} {_short(a)} -> {_short(b)}" for k, a, b in changes]

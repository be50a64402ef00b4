"""What TensorBoard compares runs by: their hyperparameters (HParams dashboard) and, in a sweep, their names.

A run's hyperparameters are a few headline config values (:data:`HEADLINE`) and its command-line overrides, each
with its resolved value where it names a config key. In a sweep only the overrides that vary across the sweep count
(a key of the sweeper's ``params``, or a sweep on the command line such as ``seed=0,1``), and they also name the
job's TensorBoard run: ``<job>/tb/algo.learning_rate=0.001,seed=0`` instead of ``<job>/tb``. Hydra's own files
tell which is which: the run's ``.hydra/`` and the sweep directory's ``multirun.yaml``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

__all__ = ["HEADLINE", "HParam", "RunOverrides", "hparams", "read_overrides", "tb_run_name"]

HParam = bool | float | str
# Config values every run's hyperparameters include, whatever its overrides.
HEADLINE = ("algo._target_", "env._target_", "env.id", "seed", "algo.learning_rate", "env.num_envs",
            "algo.num_steps", "algo.minibatch_size", "trainer.total_env_steps")
_MAX_NAME = 200  # bytes of a run's folder name (file systems allow 255)


class RunOverrides:
    """A run's command-line overrides, and those that vary across its sweep (None outside a sweep).

    Args:
        given: The run's overrides as typed (``.hydra/overrides.yaml``), e.g. ``["seed=0", "algo=grpo"]``.
        varying: The overrides among ``given`` that vary across the sweep; None for a run outside a sweep.
    """

    def __init__(self, given: Sequence[str] = (), varying: Sequence[str] | None = None) -> None:
        self.given, self.varying = list(given), None if varying is None else list(varying)


def _load(path: Path) -> Any:
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError, UnicodeDecodeError):
        return None


def _parse(overrides: Sequence[str]) -> list[Any]:
    """Hydra's parsed overrides (key, value, whether a sweep); unparsable ones are left out."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parser, out = OverridesParser.create(), []
    for text in overrides:
        try:
            out.extend(parser.parse_overrides([text]))
        except Exception:  # an override Hydra accepted once parses again; anything else names no hyperparameter
            continue
    return out


def read_overrides(run_dir: Path) -> RunOverrides:
    """The run's overrides from ``<run_dir>/.hydra`` (none when the run was not started by the command line)."""
    hydra_dir = Path(run_dir) / ".hydra"
    given = _load(hydra_dir / "overrides.yaml")
    given = [str(o) for o in given] if isinstance(given, list) else []
    hydra = (_load(hydra_dir / "hydra.yaml") or {}).get("hydra") or {}
    if not isinstance(hydra, dict) or hydra.get("mode") != "MULTIRUN":
        return RunOverrides(given)
    params = (hydra.get("sweeper") or {}).get("params") or {}
    swept = {str(key) for key in params} if isinstance(params, dict) else set()
    sweep = _load(Path(run_dir).parent / "multirun.yaml") or {}  # the sweep's command line (subdir: the job number)
    command = (((sweep.get("hydra") or {}).get("overrides") or {}).get("task") or []) if isinstance(sweep, dict) else []
    swept |= {o.key_or_group for o in _parse([str(c) for c in command]) if o.is_sweep_override()}
    return RunOverrides(given, [text for text, o in zip(given, _parse(given), strict=False) if o.key_or_group in swept])


def _select(config: Mapping[str, Any], dotted: str) -> Any:
    node: Any = config
    for part in dotted.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node


def _hparam(value: Any) -> HParam | None:
    """A value TensorBoard can hold: bools, numbers (as floats), strings; a class path by its class name."""
    if isinstance(value, bool | str):
        return value.rsplit(".", 1)[-1] if isinstance(value, str) and value.startswith("embodirl.") else value
    if isinstance(value, int | float):
        return float(value)
    return None if value is None else str(value)


def hparams(config: Mapping[str, Any], overrides: RunOverrides) -> dict[str, HParam]:
    """The run's hyperparameters: :data:`HEADLINE` values of ``config`` and the overrides (the varying ones in a
    sweep), each the config's resolved value where it names a config key, else the override's text."""
    out: dict[str, HParam] = {}
    for key in HEADLINE:
        value = _hparam(_select(config, key))
        if value is not None:
            out[key.removesuffix("._target_")] = value
    chosen = overrides.varying if overrides.varying is not None else overrides.given
    for override in _parse(chosen):
        key = override.key_or_group
        if key.startswith("hydra"):
            continue
        resolved = _select(config, key)
        value = _hparam(resolved if resolved is not None and not isinstance(resolved, Mapping | list)
                        else override.value())
        if value is not None:
            out[key] = value
    return out


def tb_run_name(overrides: RunOverrides) -> str | None:
    """A sweep job's TensorBoard run name, its varying overrides (``algo.learning_rate=0.001,seed=0``); None outside
    a sweep or when nothing varies. Slashes (group overrides, paths) become dots: a name is one folder."""
    if not overrides.varying:
        return None
    name = ",".join(o.lstrip("+~") for o in overrides.varying).replace("/", ".").replace("\\", ".")
    if len(name.encode()) > _MAX_NAME:
        digest = hashlib.sha1(name.encode()).hexdigest()[:8]
        name = name.encode()[:_MAX_NAME - 9].decode(errors="ignore") + "-" + digest
    return name

"""What the user meant: the closest real key for a mistyped one, the option that has a key, the closest option.

Hydra answers an unknown key with "to append to your config use +KEY=VALUE", which only moves the typo
into the config (where the component then refuses it). :func:`explain_composition_error` turns Hydra's
composition errors into one line whose fix works instead:

* ``algo.learning_rat=1e-3``: the closest key of the composed ``algo`` node (``difflib``), ``algo.learning_rate``;
* ``env.id=...`` without ``env=gym``, ``algo.group_size=4`` under PPO: the option whose file has the key
  (``env=gym``, ``algo=grpo``);
* ``+experiment=ppo_pushcube``: the closest option, with the ``+`` the group needs.

Nothing here imports torch: the suggestion costs one composition of the config without the bad override.
"""

from __future__ import annotations

import difflib
import importlib.resources
import re
from collections.abc import Sequence
from typing import Any

__all__ = ["explain_composition_error"]


def _parse(argv: Sequence[str]) -> tuple[list[Any], str | None]:
    """Hydra's parsed overrides of ``argv`` (an empty list when they do not parse) and ``--config-dir``."""
    from hydra._internal.utils import get_args_parser
    from hydra.core.override_parser.overrides_parser import OverridesParser

    try:
        args = get_args_parser().parse_args(list(argv))
        return OverridesParser.create().parse_overrides(args.overrides), args.config_dir
    except (SystemExit, Exception):
        return [], None


def _composed(config_name: str, overrides: list[Any], skip: str) -> Any | None:
    """The config composed with ``overrides`` except ``skip`` (and sweeps), Hydra's node included, or None if that
    fails too."""
    from hydra import compose, initialize_config_module
    from hydra.core.global_hydra import GlobalHydra

    kept = [o.input_line for o in overrides if o.key_or_group != skip and not o.is_sweep_override()]
    GlobalHydra.instance().clear()
    try:
        with initialize_config_module("embodirl.conf", version_base="1.3"):
            return compose(config_name, overrides=kept, return_hydra_config=True)
    except Exception:
        return None
    finally:
        GlobalHydra.instance().clear()


def _option_keys(group: str) -> dict[str, set[str]]:
    """Option name -> the full dotted keys its packaged YAML file sets, for a config group folder (``algo``)."""
    from embodirl.cli.help import _package, key_comments

    folder = importlib.resources.files("embodirl.conf").joinpath(group)
    if not folder.is_dir():
        return {}
    found = {}
    for file in folder.iterdir():
        if file.name.endswith(".yaml"):
            text = file.read_text(encoding="utf-8")
            package = _package(text, group)
            found[file.name.removesuffix(".yaml")] = {f"{package}.{k}" if package else k for k in key_comments(text)}
    return found


def _options_holding(key: str, chosen: dict[str, str]) -> list[str]:
    """``group=option`` choices (other than the chosen one) whose file has ``key``: ``env.id`` -> ``["env=gym"]``."""
    parts = key.split(".")
    for split in range(len(parts) - 1, 0, -1):
        group = "/".join(parts[:split])
        holders = [f"{group}={option}" for option, keys in sorted(_option_keys(group).items())
                   if key in keys and option != chosen.get(group)]
        if holders:
            return holders
    return []


def _closest_key(missing: str, cfg: Any) -> str | None:
    """The key next to ``missing`` in ``cfg`` that is spelled most like it (``difflib``), or None."""
    from omegaconf import DictConfig, OmegaConf

    parent, _, name = missing.rpartition(".")
    node = OmegaConf.select(cfg, parent) if parent else cfg
    if not isinstance(node, DictConfig):
        return None
    keys = [str(k) for k in node if not str(k).startswith("_")]
    close = difflib.get_close_matches(name, keys, n=1, cutoff=0.6)
    return f"{parent}.{close[0]}" if close and parent else (close[0] if close else None)


def _unknown_key(exc: BaseException, argv: Sequence[str], config_name: str) -> str | None:
    found = re.search(r"Could not override '([^']+)'", str(exc))
    if found is None:
        return None
    key = found[1]
    from embodirl.cli.help import needs_plus, package_groups

    if key in package_groups() and needs_plus(key):  # experiment=NAME: a group that is added, not overridden
        option = next((o.split("=", 1)[1] for o in argv if o.startswith(f"{key}=")), "<option>")
        return (f"{key}={option} is invalid: {key} is a config group that is added with a +. "
                f"Fix: pass +{key}={option}")
    # The first part of the key that is not there: algo.foo of algo.foo.bar.
    missing = getattr(exc.__cause__, "full_key", None) or key
    overrides, config_dir = _parse(argv)
    override = next((o for o in overrides if o.key_or_group == key), None)
    value = _text(override.value()) if override is not None and not override.is_sweep_override() else "<value>"
    cfg = None if config_dir else _composed(config_name, overrides, key)
    chosen = {str(k): str(v) for k, v in cfg.hydra.runtime.choices.items()} if cfg is not None else {}
    parent, _, name = missing.rpartition(".")
    where = f"{parent}={chosen[parent]}" if parent in chosen else parent or "the top level"
    holders = _options_holding(key, chosen)
    closest = _closest_key(missing, cfg) if cfg is not None else None
    meant = closest + key[len(missing):] if closest else None
    text = f"{key}={value} is invalid: {where} has no key {name}"
    if holders:
        return (f"{text}; it is a key of {', '.join(holders)}. Fix: pass {holders[0]} {key}={value}"
                + (f" (or did you mean {meant}?)" if meant else f", or remove {key}"))
    if meant:
        return f"{text} (did you mean {meant}?). Fix: pass {meant}={value}"
    return f"{text}. Fix: remove {key} or correct its spelling ({_help(config_name)} lists every key)"


def _help(config_name: str) -> str:
    return "embodirl-eval --help" if config_name == "eval" else "embodirl-train --help"


def _text(value: Any) -> str:
    """A value as typed on the command line (lists and mappings without spaces)."""
    return str(value).replace(" ", "").replace("'", "") if isinstance(value, list | dict) else str(value)


def _unknown_option(exc: BaseException) -> str | None:
    from hydra.errors import MissingConfigException

    from embodirl.cli.help import needs_plus

    if not isinstance(exc, MissingConfigException) or not exc.options:
        return None
    group, _, option = str(exc.missing_cfg_file).rpartition("/")
    if not group:
        return None
    choices = ", ".join(exc.options)
    close = difflib.get_close_matches(option, exc.options, n=1, cutoff=0.5)
    plus = "+" if needs_plus(group) else ""
    suggestion = close[0] if close else exc.options[0]
    return (f"{group}={option} is invalid: expected one of: {choices} (the options in {group}/). "
            f"Fix: pass {plus}{group}={suggestion}" + ("" if close else f" (or another of: {choices})"))


def _wrong_kind(exc: BaseException) -> str | None:
    """A list given for a mapping key (``env.env_kwargs=[1,2]``) or a mapping for a list key
    (``trainer.stop_on={}``)."""
    found = re.match(r"Error merging override (?P<key>[^=\s]+)=(?P<value>.*)", str(exc))
    cause = str(exc.__cause__ or "")
    kind = re.search(r"object_type=(dict|list)", cause)
    if found is None or "Cannot merge" not in cause or kind is None:
        return None
    key, value = found["key"].lstrip("+~"), found["value"]
    if kind[1] == "dict":
        return (f"{key}={value} is invalid: expected a mapping ({key} holds name: value pairs). "
                f"Fix: pass {key}={{}} or {key}={{name: value}}, or set one entry with +{key}.NAME=VALUE")
    return f"{key}={value} is invalid: expected a list. Fix: pass {key}=[] or {key}=[item,...]"


def explain_composition_error(exc: BaseException, argv: Sequence[str], config_name: str) -> str | None:
    """One line with a working fix for Hydra's unknown-key, unknown-option and wrong-kind errors, else None."""
    return _unknown_option(exc) or _wrong_kind(exc) or _unknown_key(exc, argv, config_name)

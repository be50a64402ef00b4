"""What the user meant: the closest real key for a mistyped one, the option that has a key, the closest option.

Hydra answers an unknown key with "to append to your config use +KEY=VALUE", which only moves the typo
into the config (where the component then refuses it). :func:`explain_composition_error` turns Hydra's
composition errors into one line whose fix works instead:

* ``algo.learning_rat=1e-3``: the closest key of the composed ``algo`` node (``difflib``), ``algo.learning_rate``;
* ``num_envs=512``, ``lr=1e-3``: a nested key of that name (``env.num_envs``) or those initials
  (``algo.learning_rate``) before a spelling guess, and a guess of another name says what that key does;
* ``env.id=...`` without ``env=gym``, ``algo.group_size=4`` under PPO: the option whose file has the key
  (``env=gym``, ``algo=grpo``);
* ``experiment=ppo_pushcube``, ``algo=PPO``: the closest option (case folded);
* ``sweep=optuna_lr`` without its plugin: the extra that installs it (``pip install "embodirl[optuna]"``);
* ``embodirl-eval env=push_cube``: ``env`` is a node of keys there, not an option.

Nothing here imports torch: the suggestion reads the config composed without the bad override, which the run's
own composition leaves (:mod:`embodirl.cli.composition`) or, without it, one composition here.
"""

from __future__ import annotations

import difflib
import importlib.metadata
import importlib.resources
import re
from collections.abc import Sequence
from typing import Any

__all__ = ["explain_composition_error", "key_meant", "mapping_override"]


def _parse(argv: Sequence[str]) -> tuple[list[Any], str | None]:
    """Hydra's parsed overrides of ``argv`` (an empty list when they do not parse) and ``--config-dir``."""
    from hydra._internal.utils import get_args_parser
    from hydra.core.override_parser.overrides_parser import OverridesParser

    try:
        args = get_args_parser().parse_args(list(argv))
        return OverridesParser.create().parse_overrides(args.overrides), args.config_dir
    except (SystemExit, Exception):
        return [], None


def _composed(config_name: str, overrides: list[Any], skip: str | set[str]) -> Any | None:
    """The config composed with ``overrides`` except those of the keys in ``skip`` (and sweeps), Hydra's node
    included, or None if that fails too."""
    from hydra import compose, initialize_config_module
    from hydra.core.global_hydra import GlobalHydra

    skipped = {skip} if isinstance(skip, str) else skip
    kept = [o.input_line for o in overrides if o.key_or_group not in skipped and not o.is_sweep_override()]
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
    keys = [str(k) for k in node if not str(k).startswith("_") and not (not parent and k == "hydra")]
    close = difflib.get_close_matches(name, keys, n=1, cutoff=0.6)
    return f"{parent}.{close[0]}" if close and parent else (close[0] if close else None)


def _paths(node: Any, prefix: str = "") -> list[str]:
    """Every dotted key of a plain mapping, depth first in the config's order (structural keys left out)."""
    found = []
    for key, value in node.items():
        if not str(key).startswith("_"):
            found.append(f"{prefix}{key}")
            if isinstance(value, dict):
                found += _paths(value, f"{prefix}{key}.")
    return found


def _initials(name: str) -> str:
    return "".join(word[:1] for word in name.split("_"))


def _meant(missing: str, job: dict[str, Any], cfg: Any) -> list[str]:
    """The keys the user may have meant by ``missing``, the likeliest first: keys of that very name elsewhere
    (``num_envs`` -> ``env.num_envs``, ``eval.num_envs``), then keys with those initials (``lr`` ->
    ``algo.learning_rate``), then the closest spelling next to it."""
    name = missing.rpartition(".")[2]
    paths = [p for p in _paths(job) if p != missing]
    same = [p for p in paths if p.rpartition(".")[2] == name]
    initials = [p for p in paths if len(name) > 1 and _initials(p.rpartition(".")[2]) == name]
    closest = _closest_key(missing, cfg)
    return same or initials or ([closest] if closest else [])


def _doc(path: str, docs: dict[str, Any]) -> str:
    """``path: what it is`` (the schema's doc), or just ``path``."""
    row = docs.get(path)
    return f"{path}: {row.doc}" if row is not None and row.doc else path


def _did_you_mean(missing: str, suffix: str, job: dict[str, Any], cfg: Any) -> tuple[str | None, str]:
    """``(key to pass, the words after "did you mean")`` for a missing key; the words say what each key is
    wherever its name differs from the one typed, or several keys have that name."""
    from embodirl.config.reference import documented_keys

    meant = _meant(missing, job, cfg)
    if not meant:
        return None, ""
    docs = documented_keys(job)
    name = missing.rpartition(".")[2]
    first = meant[0] + suffix
    if suffix or (len(meant) == 1 and meant[0].rpartition(".")[2] == name):
        return first, f"{first}?"
    return first, f"{first}? " + "; ".join(_doc(path, docs) for path in meant[:3])


def _job(cfg: Any) -> dict[str, Any]:
    """The composed config as plain containers (interpolations unresolved), Hydra's node left out."""
    from omegaconf import OmegaConf

    plain = OmegaConf.to_container(cfg, resolve=False)
    return {str(k): v for k, v in plain.items() if k != "hydra"} if isinstance(plain, dict) else {}


def key_meant(name: str, config_name: str = "train") -> tuple[str | None, str]:
    """``(key, words)`` for a key the user named ``name`` (``learning_rate`` of ``--learning-rate``) in the default
    config: the key to pass (or None) and what to say after "did you mean"."""
    cfg = _composed(config_name, [], set())
    if cfg is None:
        return None, ""
    return _did_you_mean(name, "", _job(cfg), cfg)


def _holds_keys(key: str, value: str, node: Any, config_name: str) -> str:
    """``env=push_cube`` for ``embodirl-eval``, whose ``env`` is a node of keys rather than a config group."""
    from embodirl.cli.help import _conf_text, key_comments

    comment = key_comments(_conf_text(f"{config_name}.yaml") or "").get(key)
    child = next((str(k) for k in node if not str(k).startswith("_")), "KEY")
    prog = _help(config_name).split()[0]
    return (f"{key}={value} is invalid: {prog} has no option {key}=; {key} holds keys"
            + (f" ({comment})" if comment else "")
            + f". Fix: remove {key}={value}, or set one of its keys, e.g. {key}.{child}=<value>")


def _unknown_key(exc: BaseException, argv: Sequence[str], config_name: str, composed: Any = None) -> str | None:
    found = re.search(r"Could not override '([^']+)'", str(exc))
    if found is None:
        return None
    key = found[1]
    # The first part of the key that is not there: algo.foo of algo.foo.bar.
    missing = getattr(exc.__cause__, "full_key", None) or key
    overrides, config_dir = _parse(argv)
    override = next((o for o in overrides if o.key_or_group == key), None)
    value = _text(override.value()) if override is not None and not override.is_sweep_override() else "<value>"
    cfg = None if config_dir else composed if composed is not None else _composed(config_name, overrides, key)
    if cfg is None:
        return _unknown_key_line(key, missing, value, {}, None, config_name)
    from omegaconf import DictConfig, OmegaConf

    node = OmegaConf.select(cfg, missing)
    if missing == key and isinstance(node, DictConfig):
        return _holds_keys(key, value, node, config_name)
    return _unknown_key_line(key, missing, value, {str(k): str(v) for k, v in cfg.hydra.runtime.choices.items()},
                             cfg, config_name)


def _unknown_key_line(key: str, missing: str, value: str, chosen: dict[str, str], cfg: Any,
                      config_name: str) -> str:
    parent, _, name = missing.rpartition(".")
    where = f"{parent}={chosen[parent]}" if parent in chosen else parent or "the top level"
    holders = _options_holding(key, chosen)
    meant, words = _did_you_mean(missing, key[len(missing):], _job(cfg), cfg) if cfg is not None else (None, "")
    text = f"{key}={value} is invalid: {where} has no key {name}"
    if holders:
        return (f"{text}; it is a key of {', '.join(holders)}. Fix: pass {holders[0]} {key}={value}"
                + (f" (or did you mean {words})" if meant else f", or remove {key}"))
    if meant:
        return f"{text} (did you mean {words}). Fix: pass {meant}={value}"
    return f"{text}. Fix: remove {key} or correct its spelling ({_help(config_name)} lists every key)"


def _help(config_name: str) -> str:
    return "embodirl-eval --help" if config_name == "eval" else "embodirl-train --help"


def _text(value: Any) -> str:
    """A value as typed on the command line (lists and mappings without spaces)."""
    return str(value).replace(" ", "").replace("'", "") if isinstance(value, list | dict) else str(value)


def _plugin_extra(group: str, option: str) -> str | None:
    """The extra of embodirl that installs the Hydra plugin behind ``hydra/<group>=<option>`` (``optuna``), or None."""
    if not group.startswith("hydra/"):
        return None
    try:
        requires = importlib.metadata.requires("embodirl") or []
    except importlib.metadata.PackageNotFoundError:
        return None
    for requirement in requires:
        name = re.match(r"[A-Za-z0-9._-]+", requirement)
        extra = re.search(r"extra == \"([^\"]+)\"", requirement)
        if name and extra and name[0].startswith("hydra-") and option in name[0]:
            return extra[1]
    return None


def _unknown_option(exc: BaseException, argv: Sequence[str]) -> str | None:
    from hydra.errors import MissingConfigException

    from embodirl.cli.help import needs_plus

    if not isinstance(exc, MissingConfigException) or not exc.options:
        return None
    group, _, option = str(exc.missing_cfg_file).rpartition("/")
    if not group:
        return None
    choices = ", ".join(exc.options)
    extra = _plugin_extra(group, option)
    if extra is not None:
        chosen_by = next((f" ({a.lstrip('+')} selects it)" for a in argv if a.lstrip("+").startswith("sweep=")), "")
        return (f"{group}={option} is invalid: Hydra's {option} plugin is not installed{chosen_by}; installed: "
                f"{choices}. Fix: pip install \"embodirl[{extra}]\"")
    folded = [o for o in exc.options if o.lower() == option.lower()]  # algo=PPO means algo=ppo
    close = folded or difflib.get_close_matches(option.lower(), exc.options, n=1, cutoff=0.5)
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


def mapping_override(exc: BaseException, argv: Sequence[str], config_name: str) -> list[str] | None:
    """``argv`` with each ``KEY={name: ...}`` written ``+KEY={name: ...}`` where ``KEY`` is a mapping, once Hydra
    refused an override: a mapping whose entries are the user's to name (``env.randomize``, ``trainer.curriculum``);
    None when there is none.

    Hydra merges a mapping into a node and refuses a new entry there ("Key 'pole_length' is not in struct"); the
    ``+`` form merges it without that check. What the entry holds is then the component's schema to judge.
    """
    from omegaconf import DictConfig, OmegaConf

    if re.search(r"Could not override '([^']+)'", str(exc)) is None:
        return None
    overrides, config_dir = _parse(argv)
    mappings = [o for o in overrides if not (o.is_add() or o.is_force_add() or o.is_delete() or o.is_sweep_override())
                and isinstance(o.value(), dict)]
    cfg = _composed(config_name, overrides, {o.key_or_group for o in mappings}) if mappings and not config_dir else None
    if cfg is None:
        return None
    lines = {o.input_line for o in mappings if isinstance(OmegaConf.select(cfg, o.key_or_group), DictConfig)}
    return [f"+{arg}" if arg in lines else arg for arg in argv] if lines else None


def explain_composition_error(exc: BaseException, argv: Sequence[str], config_name: str,
                              composed: Any = None) -> str | None:
    """One line with a working fix for Hydra's unknown-key, unknown-option and wrong-kind errors, else None.

    Args:
        exc: Hydra's error.
        argv: The command line after the program's name.
        config_name: The primary config's name (``train``).
        composed: The config composed from ``argv`` without the override that failed, Hydra's node included
            (:meth:`embodirl.cli.composition.Composition.without_failed`), if the caller has it; else composed here.
    """
    return _unknown_option(exc, argv) or _wrong_kind(exc) or _unknown_key(exc, argv, config_name, composed)

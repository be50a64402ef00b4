"""``embodirl-train --help``: usage, examples, the config groups and every key with its doc.

The page replaces Hydra's stock one (``--hydra-help`` still shows Hydra's flags). It composes the
config exactly as a run would, with the overrides on the command line (``embodirl-train
experiment=ppo_push_cube --help`` documents that recipe), and takes each key's explanation from its
component's schema (:func:`key_help`: doc, type and range), or, for a class without a schema, from the
inline comment (``key: value  # comment``) in the packaged YAML file that set it; an appended recipe's
comment adds why it chose its value. A key documented by neither is a documentation bug:
``tests/cli/test_help.py`` fails on it. No torch import: the page needs none.
"""

from __future__ import annotations

import functools
import importlib.resources
import os
import re
from collections.abc import Iterable, Mapping
from typing import Any

import yaml

__all__ = ["STRUCTURAL_KEYS", "config_comments", "eval_help_page", "export_help_page", "file_description", "help_page",
           "help_request", "key_comments", "needs_plus", "package_groups", "primary_groups", "recipe_groups"]

STRUCTURAL_KEYS = frozenset({"_target_", "_partial_", "_convert_", "_recursive_", "_args_"})
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's parser where PyYAML has it: the same data


def _parse(text: str) -> Any:
    """A config file's data, as ``yaml.safe_load`` reads it (the help page reads every group's option files)."""
    return yaml.load(text, Loader=_LOADER)

EXAMPLES = (
    ("embodirl-train", "PPO on the batched CartPole until solved (about 2 s of training on a CPU)"),
    ("embodirl-train algo=grpo env=push_cube", "choose the algorithm and the env (group=option)"),
    ("embodirl-train algo.learning_rate=1e-3 env.num_envs=512 seed=3", "set any key below"),
    ("embodirl-train experiment=ppo_push_cube", "a tuned recipe (conf/experiment/)"),
    ("embodirl-train -m algo.learning_rate=1e-3,2e-3 seed='range(0,3)'", "a sweep: one run per combination"),
    ("embodirl-train sweep=seeds algo=grpo", "a ready sweep (conf/sweep/)"),
    ("embodirl-train -m hydra/launcher=slurm hydra.launcher.partition=gpu sweep=seeds", "one SLURM job per run"),
    ("embodirl-train -m --config-dir launch +site=<site> sweep=seeds", "your site's SLURM profile (launch/)"),
    ("embodirl-train resume=outputs/<date>/<time>", "continue that run (or sweep job) as it was started"),
    ("embodirl-eval run=outputs/<date>/<time> checkpoint=best", "evaluate a run's best.pt (or last) into <run>/eval/"),
    ("embodirl-eval checkpoint=path/to/file.pt", "evaluate any checkpoint file"),
    ("embodirl-export run=outputs/<date>/<time>", "its last.pt as ONNX + manifest.json for a robot (<run>/export/)"),
    ("embodirl-report multirun/<date>/<time>", "a sweep's table (mean ± std, IQM [95% CI]) and curves"),
)

EVAL_EXAMPLES = (
    ("embodirl-eval run=outputs/<date>/<time>", "the run's checkpoints/last.pt, results into <run>/eval/<time>/"),
    ("embodirl-eval run=outputs/<date>/<time> checkpoint=best", "its best.pt (or step_*.pt, a file in checkpoints/)"),
    ("embodirl-eval checkpoint=path/to/file.pt", "any checkpoint file (a run directory works too)"),
    ("embodirl-eval run=<run> num_episodes=20 env.num_envs=4", "fewer episodes, on 4 env copies"),
    ("embodirl-eval run=<run> eval.video=true", "also film one episode (video.mp4 next to eval.json)"),
    ("embodirl-eval run=<run> trusted_targets=[mypkg.MyEnv]", "a run whose config names your own classes"),
    ("embodirl-eval export=<run>/export/onnx", "the exported file beside its checkpoint (sim-to-sim check)"),
    ("embodirl-eval export=<dir> env=gym env.id=CartPole-v1", "... and in a second env of the same layout"),
)

EXPORT_EXAMPLES = (
    ("embodirl-export run=outputs/<date>/<time>", "last.pt as <run>/export/onnx/policy.onnx + manifest.json"),
    ("embodirl-export run=<run> checkpoint=best format=torchscript", "best.pt as <run>/export/torchscript/policy.pt"),
    ("embodirl-export run=<run> out=deploy/v2", "into a directory of your choice"),
    ("embodirl-export run=<run> overwrite=true", "replace the earlier export (refused without it)"),
)

_KEY = re.compile(r"^(?P<indent> *)(?P<key>[A-Za-z_][\w.-]*|'[^']*'|\"[^\"]*\") *:(?:\s+(?P<rest>.*))?$")


def help_request(argv: list[str]) -> list[str] | None:
    """The overrides to document when ``argv`` asks for ``--help``/``-h`` (read by Hydra's own argument
    parser; ``--hydra-help`` stays Hydra's), else None. ``--config-dir DIR`` becomes a search-path override."""
    from hydra._internal.utils import get_args_parser

    args = get_args_parser().parse_args(argv)
    if not args.help:
        return None
    if args.config_dir is None:
        return list(args.overrides)
    return [f"hydra.searchpath=[file://{os.path.abspath(args.config_dir)}]", *args.overrides]


# --- comments in YAML text ---------------------------------------------------------------------------
def _split_comment(rest: str) -> tuple[str, str | None]:
    """``value  # comment`` -> ``(value, comment)``; a ``#`` inside quotes or glued to text is no comment."""
    quote = None
    for i, char in enumerate(rest):
        if quote:
            quote = None if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and (i == 0 or rest[i - 1] in " \t"):
            return rest[:i].rstrip(), rest[i + 1:].strip()
    return rest.rstrip(), None


def key_comments(text: str) -> dict[str, str | None]:
    """Every mapping key of a block-style YAML document -> its inline comment (None without one).

    Keys are dotted paths from the document root (``wandb.mode``); keys inside list items and flow
    collections are not keys of the config tree and are skipped, as is the ``defaults`` list.

    Example: ``"a:  # node\\n  b: 1  # one\\n  c: 2\\n"`` -> ``{"a": "node", "a.b": "one", "a.c": None}``.
    """
    found: dict[str, str | None] = {}
    stack: list[tuple[int, str]] = []  # (indent, dotted path) of the open mapping keys
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#") or stripped.startswith("- ") or stripped == "-":
            continue
        match = _KEY.match(line)
        if match is None:
            continue
        indent = len(match["indent"])
        while stack and stack[-1][0] >= indent:
            stack.pop()
        key = match["key"].strip("'\"")
        path = f"{stack[-1][1]}.{key}" if stack else key
        if path == "defaults":
            continue
        value, comment = _split_comment(match["rest"] or "")
        found[path] = comment or None
        if not value:  # a block mapping or list follows
            stack.append((indent, path))
    return found


def file_description(text: str) -> str | None:
    """The leading comment block of a config file on one line (``# @package`` headers left out)."""
    lines = []
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped.startswith("#"):
            break
        if not re.match(r"#\s*@package\b", stripped):
            lines.append(stripped.lstrip("#").strip())
    return " ".join(x for x in lines if x) or None


def _package(text: str, group: str) -> str:
    """The dotted package a config file's keys land in (``# @package`` header; default: its group)."""
    for line in text.splitlines():
        header = re.match(r"#\s*@package\s+(\S+)", line.strip())
        if header:
            name = header[1]
            return "" if name == "_global_" else group.replace("/", ".") if name == "_group_" else name
        if line.strip() and not line.lstrip().startswith("#"):
            break
    return group.replace("/", ".")


@functools.cache
def _conf_text(relative: str) -> str | None:
    """A packaged config file's text (``algo/ppo.yaml``), or None when it is not in ``embodirl.conf``."""
    path = importlib.resources.files("embodirl.conf").joinpath(relative)
    return path.read_text(encoding="utf-8") if path.is_file() else None


def _group_name(entry: Any) -> str | None:
    """The group of one primary defaults-list entry (``{"policy": "actor_critic"}`` -> ``policy``)."""
    if not isinstance(entry, dict) or len(entry) != 1:
        return None
    words = str(next(iter(entry))).split()
    return words[-1].lstrip("/") if words and words[0] not in ("override",) else None


@functools.cache
def primary_groups() -> tuple[str, ...]:
    """The groups ``train.yaml``'s defaults list selects (``policy``, ``algo``...), in its order."""
    defaults = _parse(_conf_text("train.yaml") or "{}").get("defaults", [])
    return tuple(g for g in map(_group_name, defaults) if g)


@functools.cache
def package_groups() -> frozenset[str]:
    """The top-level config groups shipped in ``embodirl.conf`` (its folders of YAML files)."""
    root = importlib.resources.files("embodirl.conf")
    return frozenset(p.name for p in root.iterdir() if p.is_dir() and any(f.name.endswith(".yaml")
                                                                         for f in p.iterdir()))


@functools.cache
def nested_groups() -> frozenset[str]:
    """Groups that a primary group's option files select in their own defaults lists (``algo/optimizer``)."""
    found = set()
    for parent in primary_groups():
        for file in importlib.resources.files("embodirl.conf").joinpath(parent).iterdir():
            text = file.read_text(encoding="utf-8") if file.name.endswith(".yaml") else ""
            if "defaults" in text:  # the other files select no group: not parsed (most env, policy, logger files)
                defaults = (_parse(text) or {}).get("defaults", [])
                for name in map(_group_name, defaults):
                    if name and name != "_self_":
                        name = name.split("@")[0]
                        found.add(name.lstrip("/") if name.startswith("/") else f"{parent}/{name}")
    return frozenset(found)


@functools.cache
def recipe_groups() -> frozenset[str]:
    """The groups ``train.yaml`` declares with no option (``experiment: null``): recipes merged last,
    chosen as ``experiment=NAME`` (lightning-hydra-template's pattern)."""
    defaults = _parse(_conf_text("train.yaml") or "{}").get("defaults", [])
    return frozenset(g for entry in defaults if isinstance(entry, dict) and None in entry.values()
                     and (g := _group_name(entry)))


def needs_plus(group: str) -> bool:
    """Whether an option of ``group`` is selected with ``+group=option``: a group that neither ``train.yaml``'s
    defaults list nor its groups' option files select (``debug``, a site's ``site``, ``policy/encoder``); never
    ``hydra/...``."""
    return group.split("/")[0] != "hydra" and group not in primary_groups() and group not in nested_groups()


def config_comments(choices: Mapping[str, str | None]) -> dict[str, str | None]:
    """Dotted key -> comment from ``train.yaml`` and the chosen option files (Hydra's ``runtime.choices``).

    Files are read in composition order: the primary config, its groups, then appended ones
    (``experiment=...``, ``+debug=...``). A group file's comment says what a key does; a recipe's comment
    (why this value) is added to it: ``relu | elu | tanh [ppo_pendulum: RL Zoo's ...]``. A group's
    own node (``algo``) gets its option file's leading comment.
    """
    return _yaml_comments(choices)[0]


def _yaml_comments(choices: Mapping[str, str | None]) -> tuple[dict[str, str | None], dict[str, str]]:
    """``(config_comments, notes)``: ``notes`` holds only what appended files say of a key (``[option: why]``)."""
    notes: dict[str, str] = {}
    comments: dict[str, str | None] = {k: v for k, v in key_comments(_conf_text("train.yaml") or "").items()
                                       if v is not None}
    chosen = [(g, o) for g, o in choices.items() if o is not None and not g.startswith("hydra")]
    ordered = sorted(chosen, key=lambda item: (needs_plus(item[0]), item[0] in recipe_groups(), _order(item[0])))
    for choice, option in ordered:
        group, _, placed_at = choice.partition("@")  # policy/encoder@policy.encoders.rgb: a file placed at a key
        text = _conf_text(f"{group}/{option}.yaml")
        if text is None:
            continue
        package = placed_at or _package(text, group)
        # A file placed at its own parent's node (algo/ppo_sizing@algo) tunes that choice: its header describes
        # the tuning, not the algorithm, so it is a note like a recipe's rather than the node's description.
        tunes_parent = bool(placed_at) and placed_at == group.rpartition("/")[0].replace("/", ".")
        appended = ((needs_plus(group) or group in recipe_groups()) and not placed_at) or tunes_parent
        if not appended:
            comments[placed_at or group.replace("/", ".")] = file_description(text)
        for key, comment in key_comments(text).items():
            path = f"{package}.{key}" if package else key
            if comment is None:
                continue
            base = comments.get(path)
            if appended and base != comment:  # a recipe's note, also on a key its group file leaves to the schema
                notes[path] = f"{notes.get(path, '')} [{option}: {comment}]".strip()
            comments[path] = f"{base} [{option}: {comment}]" if appended and base and base != comment else comment
    return comments, notes


def key_help(config: Mapping[str, Any], choices: Mapping[str, str | None]) -> dict[str, str | None]:
    """Dotted key -> its line of help: the schema's doc, type and range, and what an appended recipe says of it;
    a key no schema documents (a class of your own) gets its YAML comment."""
    from embodirl.config.reference import documented_keys, summary

    comments, notes = _yaml_comments(choices)
    docs = documented_keys(config)
    found: dict[str, str | None] = dict(comments)
    for path, row in docs.items():
        if row.type.startswith("a node") and comments.get(path):
            continue  # a group's node: its option file's own description says more than "the algorithm"
        found[path] = f"{summary(row)} {notes[path]}" if path in notes else summary(row)
    for path, node in config.items():  # a class of the user's own: its schema's docstring says what it is
        doc = _own_schema_doc(node.get("_target_")) if isinstance(node, Mapping) else None
        found[path] = doc or found.get(path)
    return found


def _own_schema_doc(target: Any) -> str | None:
    """The first paragraph of the docstring of the schema of a class of the user's own (None for embodirl's)."""
    import inspect

    from embodirl.config.schema import schema_for

    if not isinstance(target, str) or target.startswith("embodirl."):
        return None
    schema = schema_for(target)
    if schema is None:
        return None
    doc = inspect.cleandoc(schema.__doc__ or "")
    if not doc or doc.startswith(f"{schema.__name__}("):  # dataclass's generated signature: no docstring
        return None
    return " ".join(doc.split("\n\n")[0].split())


def _order(group: str) -> int:
    groups = primary_groups()
    return groups.index(group) if group in groups else len(groups)


# --- the page -----------------------------------------------------------------------------------------
def _value(value: Any) -> str:
    """A config value as it would be typed on the command line (``null``, ``true``, ``[64, 64]``)."""
    text = yaml.safe_dump(value, default_flow_style=True, width=10**6, allow_unicode=True).strip()
    return text.removesuffix("\n...").removesuffix("...").strip()


def _leaves(node: Mapping[str, Any], prefix: str = "") -> Iterable[tuple[str, Any, bool]]:
    """``(dotted key, value, is_mapping)`` depth first, structural keys left out."""
    for key, value in node.items():
        if key in STRUCTURAL_KEYS:
            continue
        path = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            yield path, value, True
            yield from _leaves(value, f"{path}.")
        else:
            yield path, value, False


def _groups_section(repository: Any, choices: Mapping[str, str | None]) -> list[str]:
    """The groups and their options, from the config loader's ``repository`` (the loader's own ``get_group_options``
    deep-copies the repository on every call: about a tenth of a second for the page's groups)."""
    from hydra.core.object_type import ObjectType

    top = [g for g in repository.get_group_options("", results_filter=ObjectType.GROUP) if g != "hydra"]
    ordered = [*sorted(top, key=lambda g: (needs_plus(g), _order(g), g)), "hydra/launcher"]
    lines = ["Config groups (group=option; * = the one selected now; + = add it with +group=option):"]
    width = max(map(len, ordered)) + 3
    for group in ordered:
        options = repository.get_group_options(group, results_filter=ObjectType.CONFIG)
        marked = ", ".join(f"{o}*" if choices.get(group) == o else o for o in options)
        name = f"+{group}" if needs_plus(group) else group
        lines.append(f"  {name:<{width}}{marked}")
    return lines


def _keys_section(config: Mapping[str, Any], comments: Mapping[str, str | None],
                  choices: Mapping[str, str | None]) -> list[str]:
    scalars_first = dict(sorted(config.items(), key=lambda item: isinstance(item[1], Mapping) and bool(item[1])))
    rows = list(_leaves(scalars_first))
    width = min(max(len(f"{p}={_value(v)}") for p, v, m in rows if not m) + 2, 60)
    lines = ["Keys (key=value as composed now; set any of them on the command line):"]
    for path, value, is_map in rows:
        comment = comments.get(path) or "(undocumented)"
        if is_map:
            name = f"{path}={choices[path]}" if choices.get(path) else path
            target = f" ({value['_target_']})" if value.get("_target_") else ""
            lines += ["", f"  {name}{target}: {comment}"]
            continue
        setting = f"{path}={_value(value)}"
        pad = " " * max(width - len(setting), 2)
        lines.append(f"  {setting}{pad}# {comment}")
    return lines


def help_page(overrides: list[str], prog: str = "embodirl-train") -> str:
    """The whole help page for ``overrides`` (sweep overrides such as ``a=1,2`` are left out of the composition).

    Raises:
        hydra.errors.HydraException: An override that does not compose (unknown option or key).
    """
    from hydra import compose, initialize_config_module
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from embodirl.cli.containers import plain_dict

    parsed = OverridesParser.create().parse_overrides(overrides)  # one per override, in order
    single = [line for line, o in zip(overrides, parsed, strict=True) if not o.is_sweep_override()]
    swept = [line for line, o in zip(overrides, parsed, strict=True) if o.is_sweep_override()]
    with initialize_config_module("embodirl.conf", version_base="1.3"):
        cfg = compose("train", overrides=single, return_hydra_config=True)
        choices = plain_dict(cfg.hydra.runtime.choices)
        repository = GlobalHydra.instance().config_loader().repository  # type: ignore[attr-defined]
        groups = _groups_section(repository, choices)
        algos = "|".join(repository.get_group_options("algo"))  # the folder is the list
    job = plain_dict(cfg)
    job.pop("hydra")
    lines = [f"{prog}: train a policy (algo={algos}) on batched envs; every key below is a command-line override.",
             "", f"Usage: {prog} [group=option ...] [key=value ...] [experiment=NAME] [sweep=NAME] [-m]", "",
             "Examples:"]
    for command, what in EXAMPLES:
        lines += [f"  {command:<46}# {what}"] if len(command) <= 44 else [f"  {command}", f"  {'':<46}# {what}"]
    lines += ["", *groups, ""]
    if overrides:
        lines.append(f"Composed with: {' '.join(single) or '(defaults)'}"
                     + (f" (sweep overrides left out: {' '.join(swept)})" if swept else ""))
    lines += _keys_section(job, key_help(job, choices), choices)
    lines += ["", "More: --cfg job prints the composed config as YAML; --hydra-help lists Hydra's flags;",
              f"      eval \"$({prog} -sc install=bash)\" installs shell completion (docs/getting-started.md)."]
    return "\n".join(lines)


def export_help_page(overrides: list[str], prog: str = "embodirl-export") -> str:
    """``embodirl-export --help``: usage, examples and every key of ``conf/export.yaml`` with its comment.

    Raises:
        hydra.errors.HydraException: An override that does not compose (unknown key).
    """
    from hydra import compose, initialize_config_module

    from embodirl.cli.containers import plain_dict

    with initialize_config_module("embodirl.conf", version_base="1.3"):
        cfg = compose("export", overrides=list(overrides))
    comments = {k: v for k, v in key_comments(_conf_text("export.yaml") or "").items() if v is not None}
    lines = [f"{prog}: write a trained policy's deterministic actor (observation normaliser and action clip inside) "
             "as ONNX or TorchScript, with manifest.json naming its inputs and outputs (docs/guides/export.md).", "",
             f"Usage: {prog} run=RUN_DIR [checkpoint=best|last|step_*.pt] [format=onnx|torchscript] [key=value ...]",
             "", "Examples:"]
    lines += [f"  {command:<62}# {what}" for command, what in EXPORT_EXAMPLES]
    lines += ["", *_keys_section(plain_dict(cfg), comments, {})]
    return "\n".join(lines)


def eval_help_page(overrides: list[str], prog: str = "embodirl-eval") -> str:
    """``embodirl-eval --help``: usage, examples and every key of ``conf/eval.yaml`` with its comment.

    Raises:
        hydra.errors.HydraException: An override that does not compose (unknown key).
    """
    from hydra import compose, initialize_config_module

    from embodirl.cli.containers import plain_dict

    with initialize_config_module("embodirl.conf", version_base="1.3"):
        cfg = compose("eval", overrides=list(overrides))
    job = plain_dict(cfg)
    comments = {k: v for k, v in key_comments(_conf_text("eval.yaml") or "").items() if v is not None}
    lines = [f"{prog}: run deterministic episodes with a trained policy. The env and the policy are rebuilt from the "
             "checkpoint's own config (no training flags to repeat); results go to eval.json (and a video).", "",
             f"Usage: {prog} run=RUN_DIR [checkpoint=best|last|step_*.pt] [key=value ...]",
             f"       {prog} checkpoint=PATH.pt [key=value ...]", "", "Examples:"]
    for command, what in EVAL_EXAMPLES:
        lines += [f"  {command:<58}# {what}"] if len(command) <= 56 else [f"  {command}", f"  {'':<58}# {what}"]
    lines += ["", *_keys_section(job, comments, {})]
    lines += ["", "Env keys of the checkpoint's config can be changed too: env.num_envs=8, or any other with "
              "+env.KEY=VALUE.",
              "More: --cfg job prints the composed config as YAML; --hydra-help lists Hydra's flags."]
    return "\n".join(lines)

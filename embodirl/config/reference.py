"""Every key's documentation, read from the schemas: for ``--help`` and the configuration reference page.

:func:`documented_keys` walks a composed config (the top level, then each group's node by its class's schema,
nested nodes such as ``algo.optimizer`` included). :func:`reference_markdown` writes the configuration
reference of every shipped option (``python -m embodirl.config.reference docs/reference/configuration.md``);
a test keeps the committed page equal to what this writes.
"""

from __future__ import annotations

import importlib.resources
import re
import sys
import typing
from collections.abc import Iterator, Mapping
from dataclasses import MISSING
from pathlib import Path
from typing import Any

import yaml

from embodirl.config.run import RunConfig
from embodirl.config.schema import KeyDoc, Schema, cli_text, entry_docs, key_docs, schema_for

__all__ = ["documented_keys", "main", "reference_markdown", "summary"]


def summary(row: KeyDoc) -> str:
    """``doc (type bounds)``, the one line ``--help`` shows after a key (the type left out where the doc already
    lists the choices or it says nothing: a string, any value)."""
    kind = "" if row.type.startswith(("one of:", "a string", "any value")) else row.type
    kind = f"{kind} {row.bounds}".strip()
    return f"{row.doc} ({kind})" if kind else row.doc


def documented_keys(config: Mapping[str, Any]) -> dict[str, KeyDoc]:
    """Dotted key -> its documentation for every key of ``config`` that a schema documents."""
    rows = {row.path: row for row in key_docs(RunConfig)}
    for name, value in config.items():
        if isinstance(value, Mapping):
            rows.update(_node_keys(value, f"{name}."))
            setup = _setup_schema(str(name))
            rows.update({row.path: row for row in key_docs(setup, f"{name}.")} if setup else {})
    return rows


def _setup_schema(group: str) -> type[Schema] | None:
    """The schema of the keys every option of a group holds for the build (``env``: solved criterion, wrappers)."""
    return getattr(typing.get_type_hints(RunConfig).get(group), "setup_schema", None)


def _node_keys(node: Mapping[str, Any], prefix: str) -> dict[str, KeyDoc]:
    """The rows of a node's schema, and of the nodes nested in it (an optimizer, encoders, a distribution)."""
    target = node.get("_target_")
    schema = schema_for(target) if isinstance(target, str) else None
    rows = {row.path: row for row in key_docs(schema, prefix)} if schema is not None else {}
    if schema is not None:  # the entries of env.randomize, trainer.curriculum, ...
        rows.update({row.path: row for row in entry_docs(schema, node, prefix)})
    for key, value in node.items():
        if isinstance(value, Mapping):
            rows.update(_node_keys(value, f"{prefix}{key}."))
    return rows


# --- the reference page --------------------------------------------------------------------------------------
def _options() -> Iterator[tuple[str, str, str]]:
    """``(group, option, _target_)`` of every shipped option file that names a class, experiments and launchers
    left out."""
    root = importlib.resources.files("embodirl.conf")
    stack = [(root, "")]
    while stack:
        folder, group = stack.pop()
        for entry in sorted(folder.iterdir(), key=lambda e: e.name):
            name = f"{group}/{entry.name}" if group else entry.name
            if entry.is_dir() and entry.name not in ("experiment", "sweep", "hydra", "debug", "__pycache__"):
                stack.append((entry, name))
            elif entry.name.endswith(".yaml") and group:
                data = yaml.safe_load(entry.read_text(encoding="utf-8")) or {}
                node = data if "_target_" in data else data.get(group, {})  # a "@package _global_" file (grpo)
                if isinstance(node, dict) and isinstance(node.get("_target_"), str):
                    yield group, entry.name.removesuffix(".yaml"), node["_target_"]


# A word between underscores (_target_, _partial_) outside a code span: Markdown would set it in italics.
_EMPHASIS = re.compile(r"(?<![\w`])(_\w+_)(?![\w`])")


def _table(schema: type[Schema], prefix: str) -> list[str]:
    lines = ["| key | type | default | range | what it does |", "|---|---|---|---|---|"]
    for row in key_docs(schema, prefix):
        default = "(required)" if row.default is MISSING else cli_text(row.default)
        cells = [f"`{row.path}`", _EMPHASIS.sub(r"`\1`", row.type), f"`{default}`", row.bounds or "",
                 _EMPHASIS.sub(r"`\1`", row.doc)]
        lines.append("| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |")
    return lines


def reference_markdown() -> str:
    """The configuration reference: the top-level keys, then every option of every group with its keys."""
    lines = ["# Configuration reference", "",
             "Generated from the schemas (`embodirl/config/`) by "
             "`python -m embodirl.config.reference docs/reference/configuration.md`; do not edit by hand.",
             "Every key is a command-line override (`key=value`); a group's option is chosen with `group=option`.",
             "", "## Top-level keys", "", *_table(RunConfig, "")]
    seen: set[tuple[str, str]] = set()
    for group, option, target in sorted(_options()):
        schema = schema_for(target)
        if schema is None or (group, target) in seen:
            continue
        prefix = group.replace("/", ".") + "."
        setup = _setup_schema(group)
        if setup is not None and group not in {g for g, _ in seen}:
            lines += ["", f"## Keys of every `{group}` option", "", " ".join((setup.__doc__ or "").split()), "",
                      *_table(setup, prefix)]
        seen.add((group, target))
        lines += ["", f"## `{group}={option}`: `{target}`", "", (schema.__doc__ or "").strip().splitlines()[0], "",
                  *_table(schema, prefix)]
    return "\n".join(lines) + "\n"


def main() -> None:
    """Write the reference page to the path given (or print it)."""
    text = reference_markdown()
    if len(sys.argv) > 1:
        Path(sys.argv[1]).write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)


if __name__ == "__main__":
    main()

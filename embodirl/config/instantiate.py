"""Build the class a config node names (``_target_``) from its checked keys and the objects of the run.

A class with a schema (:mod:`embodirl.config.schema`) is called as ``cls(cfg, **runtime)``: ``cfg`` is the
node parsed by the schema, ``runtime`` what exists only at run time (the device, the spaces, the policy); a class
whose schema says ``takes_keywords`` (an optimizer) gets the keys as keyword arguments instead. A class without
a schema (a user's callback or env) is built the way Hydra builds a ``_partial_`` node, nested nodes included,
with every key first checked against the annotation of its parameter, so a wrong key or type is one line too.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import typing
from collections.abc import Mapping
from typing import Any

from embodirl.config.schema import (
    NO_MATCH,
    Node,
    check_finite_values,
    cli_text,
    conform,
    describe_type,
    parse_node,
    suggest,
)
from embodirl.errors import ConfigError

__all__ = ["check_finite_values", "import_callable", "instantiate", "keywords", "to_node"]


def keywords(cfg: Any) -> dict[str, Any]:
    """A schema instance's keys as keyword arguments (for classes that take them so, such as optimizers)."""
    return {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg)}


def to_node(node: Any, prefix: str, kind: type[Node] = Node) -> Node:
    """A parsed :class:`Node` (of ``kind``, which splits off the setup keys) from a Hydra ``DictConfig``, a plain
    mapping or a :class:`Node`."""
    if isinstance(node, Node):
        return node
    from omegaconf import DictConfig, OmegaConf

    values = OmegaConf.to_container(node, resolve=True) if isinstance(node, DictConfig) else node
    if not isinstance(values, Mapping) or not isinstance(values.get("_target_"), str):
        raise ConfigError(prefix.rstrip("."), values, "a node naming a class with _target_",
                          f"select an option of its config group, or set {prefix}_target_=<module.Class>",
                          absolute=True)
    return parse_node({str(k): v for k, v in values.items()}, prefix, kind)


def instantiate(node: Any, prefix: str, **runtime: Any) -> Any:
    """Build ``node``'s class with its checked keys and ``runtime``.

    Args:
        node: A config node with ``_target_`` (``DictConfig``, mapping or parsed :class:`Node`).
        prefix: The node's dotted path with a trailing dot (``"algo."``), for messages.
        **runtime: Arguments that exist only at run time.

    Raises:
        ConfigError: An unimportable class, an unknown key, a wrong type or a value the class refuses.
    """
    parsed = to_node(node, prefix)
    if parsed.cfg is None:
        return _instantiate_by_signature(parsed, prefix, runtime)
    cls = _import(parsed.target, prefix)
    try:
        if parsed.cfg.takes_keywords:
            return cls(**keywords(parsed.cfg), **runtime)
        return cls(parsed.cfg, **runtime)
    except ConfigError as exc:
        raise exc.with_prefix(prefix) from None


def _import(target: str, prefix: str) -> Any:
    from hydra.utils import get_class

    try:
        return get_class(target)
    except Exception as exc:
        raise ConfigError(f"{prefix}_target_", target, "an importable class",
                          f"check the module path, or select an option of the {prefix.rstrip('.')} group",
                          absolute=True) from exc


def import_callable(key: str, path: str, expected: str, fix: str) -> Any:
    """The callable the import path ``path`` (config key ``key``) names.

    Raises:
        ConfigError: One line naming ``key``, ``path``, ``expected`` and ``fix``, where the import fails (with its
            reason) or the object is not callable.
    """
    from hydra.utils import get_object

    try:
        found = get_object(path)
    except Exception as exc:  # Hydra reports import failures as several types
        reason = " ".join(str(exc).split())[:240]
        raise ConfigError(key, path, f"{expected}; importing it failed: {reason}", fix) from None
    if not callable(found):
        raise ConfigError(key, path, f"{expected}; it is not callable", fix)
    return found


def _instantiate_by_signature(node: Node, prefix: str, runtime: Mapping[str, Any]) -> Any:
    """A class without a schema: Hydra builds the ``_partial_`` node (nested nodes too), each key checked against
    the signature and annotations first."""
    from hydra.utils import instantiate as hydra_instantiate
    from omegaconf import OmegaConf

    _import(node.target, prefix)
    spec = OmegaConf.create({**node.values, **node.flags, "_target_": node.target, "_partial_": True})
    partial = hydra_instantiate(spec, _convert_="all")
    func = partial.func if isinstance(partial, functools.partial) else partial
    kwargs = dict(partial.keywords) if isinstance(partial, functools.partial) else {}
    init = func.__init__ if inspect.isclass(func) else func
    params = inspect.signature(init).parameters
    try:
        hints = typing.get_type_hints(init)
    except Exception:  # an annotation that does not resolve: check names only
        hints = {}
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    for key, value in kwargs.items():
        if key not in params and not takes_any:
            valid = [k for k in params if k not in ("self", *runtime)]
            close = suggest(key, valid)
            raise ConfigError(prefix + key, value, f"a key of {node.target} (one of: {', '.join(valid)})",
                              (f"did you mean {prefix}{close}? " if close else "")
                              + f"correct the spelling, or remove {prefix}{key}", absolute=True)
        converted = conform(value, hints.get(key, Any))
        default = params[key].default if key in params else inspect.Parameter.empty
        if converted is NO_MATCH:
            example = f", e.g. {prefix}{key}={cli_text(default)}" if default is not inspect.Parameter.empty else ""
            raise ConfigError(prefix + key, value, describe_type(hints[key]), f"pass a value of that type{example}",
                              absolute=True)
        check_finite_values(prefix + key, converted, None if default is inspect.Parameter.empty else default)
        kwargs[key] = converted
    try:
        return func(**kwargs, **runtime)
    except ConfigError as exc:
        raise exc.with_prefix(prefix) from None

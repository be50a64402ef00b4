"""Build the class a config node names (``_target_``) from its checked keys and the objects of the run.

A class with a schema (:mod:`embodirl.config.schema`) is called as ``cls(cfg, **runtime)``: ``cfg`` is the
node parsed by the schema, ``runtime`` what exists only at run time (the device, the spaces, the policy). A
class without one (a user's callback, an optimizer) is called with the node's keys as keyword arguments, each
checked against the annotation of its parameter first, so a wrong key or type is a one-line error too.
"""

from __future__ import annotations

import dataclasses
import inspect
import typing
from collections.abc import Mapping
from typing import Any

from embodirl.config.schema import NO_MATCH, STRUCTURAL_KEYS, Node, conform, describe_type, parse_node, suggest
from embodirl.errors import ConfigError

__all__ = ["instantiate", "keywords", "to_node"]


def keywords(cfg: Any) -> dict[str, Any]:
    """A schema instance's keys as keyword arguments (for classes that take them so, such as optimizers)."""
    return {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg)}


def to_node(node: Any, prefix: str) -> Node:
    """A parsed :class:`Node` from a Hydra ``DictConfig``, a plain mapping or a :class:`Node`."""
    if isinstance(node, Node):
        return node
    from omegaconf import DictConfig, OmegaConf

    values = OmegaConf.to_container(node, resolve=True) if isinstance(node, DictConfig) else node
    if not isinstance(values, Mapping) or not isinstance(values.get("_target_"), str):
        raise ConfigError(prefix.rstrip("."), values, "a node naming a class with _target_",
                          f"select an option of its config group, or set {prefix}_target_=<module.Class>",
                          absolute=True)
    return parse_node(values, prefix)


def instantiate(node: Any, prefix: str, **runtime: Any) -> Any:
    """Build ``node``'s class with its checked keys and ``runtime``.

    Args:
        node: A config node with ``_target_`` (``DictConfig``, mapping or parsed :class:`Node`).
        prefix: The node's dotted path with a trailing dot (``"algo."``), for messages.
        **runtime: Arguments that exist only at run time.

    Raises:
        ConfigError: An unimportable class, an unknown key, a wrong type or a value the class refuses.
    """
    from hydra.utils import get_class

    parsed = to_node(node, prefix)
    try:
        cls = get_class(parsed.target)
    except Exception as exc:
        raise ConfigError(f"{prefix}_target_", parsed.target, "an importable class",
                          f"check the module path, or select an option of the {prefix.rstrip('.')} group",
                          absolute=True) from exc
    try:
        if parsed.cfg is not None and parsed.cfg.takes_keywords:
            return cls(**keywords(parsed.cfg), **runtime)
        if parsed.cfg is not None:
            return cls(parsed.cfg, **runtime)
        return cls(**_checked_kwargs(cls, parsed.values, prefix, runtime), **runtime)
    except ConfigError as exc:
        raise exc.with_prefix(prefix) from None


def _checked_kwargs(cls: Any, values: Mapping[str, Any], prefix: str, runtime: Mapping[str, Any]) -> dict:
    """The node's keys checked against the signature and annotations of a class without a schema."""
    init = cls.__init__ if inspect.isclass(cls) else cls
    params = inspect.signature(init).parameters
    try:
        hints = typing.get_type_hints(init)
    except Exception:  # an annotation that does not resolve: check names only
        hints = {}
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    kwargs = {}
    for key, value in values.items():
        if key in STRUCTURAL_KEYS:
            continue
        if key not in params and not takes_any:
            valid = [k for k in params if k not in ("self", *runtime)]
            close = suggest(key, valid)
            raise ConfigError(prefix + key, value, f"a key of {cls.__name__} (one of: {', '.join(valid)})",
                              (f"did you mean {prefix}{close}? " if close else "")
                              + f"correct the spelling, or remove {prefix}{key}", absolute=True)
        annotation = hints.get(key, Any)
        converted = conform(value, annotation)
        if converted is NO_MATCH:
            raise ConfigError(prefix + key, value, describe_type(annotation), "pass a value of that type",
                              absolute=True)
        kwargs[key] = converted
    return kwargs

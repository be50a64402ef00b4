"""Typed schemas of the configuration: one frozen dataclass per configurable component.

Each key of a component is a dataclass field declared with :func:`key`: the annotation is its type, and the
field holds its default, its bounds and its one-line doc. :func:`parse` checks a plain mapping (a composed
Hydra node) against a schema and returns the schema instance, which the component's constructor takes.
Schemas import neither torch nor the components they configure, so the command line checks the whole
composed config before importing torch; ``--help`` and the configuration reference are generated from them.

A schema names the class its nodes build (``target``, the YAML's ``_target_``); a class of your own declares
its schema by annotating its constructor's first argument (``def __init__(self, cfg: MyConfig, ...)``).
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import importlib
import inspect
import logging
import math
import types
import typing
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import MISSING, dataclass
from importlib.metadata import entry_points
from typing import Any, ClassVar, TypeVar

from embodirl.errors import ConfigError

__all__ = ["ENTRY_POINT_GROUP", "NO_MATCH", "STRUCTURAL_KEYS", "Bounds", "KeyDoc", "Node", "Schema",
           "check_finite_values", "cli_text", "conform", "describe_type", "entry_docs", "entry_schema", "key",
           "key_docs", "load_user_schemas", "parse", "parse_node", "schema_for", "schemas", "suggest"]

NO_MATCH = object()
STRUCTURAL_KEYS = frozenset({"_target_", "_partial_", "_convert_", "_recursive_", "_args_"})
S = TypeVar("S", bound="Schema")


@dataclass(frozen=True)
class Bounds:
    """The numeric range of a key: ``ge``/``gt`` below, ``le``/``lt`` above; ``finite`` refuses nan and inf."""

    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    lt: float | None = None
    finite: bool = True
    text: str | None = None

    def holds(self, value: Any) -> bool:
        """Whether a number is in range (non-numbers are the type check's business)."""
        if isinstance(value, bool) or not isinstance(value, int | float):
            return True
        if self.finite and not math.isfinite(value):
            return False
        return not ((self.ge is not None and not value >= self.ge) or (self.gt is not None and not value > self.gt)
                    or (self.le is not None and not value <= self.le) or (self.lt is not None and not value < self.lt))

    def describe(self) -> str:
        """``"in [0, 1]"``, ``"> 0"``, ``">= 1"`` (empty without bounds)."""
        if self.text:
            return self.text
        low = (f"[{_num(self.ge)}" if self.ge is not None else f"({_num(self.gt)}" if self.gt is not None else None)
        high = (f"{_num(self.le)}]" if self.le is not None else f"{_num(self.lt)})" if self.lt is not None else None)
        if low and high:
            return f"in {low}, {high}"
        if low:
            return f"{'>=' if self.ge is not None else '>'} {low[1:]}"
        if high:
            return f"{'<=' if self.le is not None else '<'} {high[:-1]}"
        return ""


def _num(value: float) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def key(default: Any = MISSING, *, doc: str, ge: float | None = None, gt: float | None = None,
        le: float | None = None, lt: float | None = None, finite: bool = True,
        factory: Callable[[], Any] | None = None, range_text: str | None = None, example: Any = MISSING) -> Any:
    """A schema key: its default (or ``factory`` for lists and mappings), bounds and one-line doc.

    Args:
        default: The value when the config does not set the key (MISSING: the key is required).
        doc: One line saying what the key does (shown by ``--help`` and in the configuration reference).
        ge, gt, le, lt: Bounds of a number (``>=``, ``>``, ``<=``, ``<``).
        finite: Refuse nan and inf for a float (default); False where inf means "no limit".
        factory: Builds a mutable default (``list``, ``dict``).
        range_text: The range in words where the bounds' own are unreadable (``"in [-2^62, 2^62]"``).
        example: A value the fix of an error proposes where the default is no example (null, a list or none).
    """
    metadata = {"doc": doc, "bounds": Bounds(ge, gt, le, lt, finite, range_text), "example": example}
    if factory is not None:
        return dataclasses.field(default_factory=factory, metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


class Schema:
    """Base class of component schemas (subclasses are ``@dataclass(frozen=True, kw_only=True)``).

    Attributes:
        target: The class a node of this schema builds (its ``_target_``); None for parts of a component.
        takes_keywords: The class takes the keys as keyword arguments (a ``torch.optim`` class) rather than
            the schema instance.
        renamed: Old key -> new key (relative to the node), for one-line "renamed to" errors.
        moved: Old key -> its new full path, for keys that moved to another node (``eval_every_env_steps`` ->
            ``eval.every_env_steps``).
        refused: Key -> ``(what is valid, fix)`` for keys that must not be set here.
        unknown_hint: Added to the fix for an unknown key (e.g. where to find the options that have it).
    """

    target: ClassVar[str | None] = None
    takes_keywords: ClassVar[bool] = False
    renamed: ClassVar[Mapping[str, str]] = {}
    moved: ClassVar[Mapping[str, str]] = {}
    refused: ClassVar[Mapping[str, tuple[str, str]]] = {}
    unknown_hint: ClassVar[str] = ""
    # Set by @dataclass on every subclass; declared so type checkers accept a schema class in dataclasses.fields().
    __dataclass_fields__: ClassVar[dict[str, dataclasses.Field[Any]]]

    def check(self) -> None:
        """Rules across keys (``log_std_min < log_std_max``); raise :class:`ConfigError` with the relative key."""


@dataclass(frozen=True)
class Node:
    """A checked config node that names a class with ``_target_`` (an env, a policy, an optimizer, a callback).

    A kind of node whose keys include some that the build applies around the class it builds (``env.frame_stack``,
    ``policy.init_from``) is a subclass naming their schema in ``setup_schema``: those keys are parsed by it alone,
    and the class never sees them.

    Attributes:
        target: The class's import path.
        cfg: Its keys parsed by the class's schema; None for a class without one (its keys are then checked
            against its signature when it is built).
        values: The node's own keys as written (structural keys and the setup keys left out).
        flags: Its structural keys other than ``_target_`` (``_partial_``, ``_recursive_``, ...), which tell Hydra
            how to build a class without a schema.
        setup: The setup keys parsed by ``setup_schema`` (None for a kind of node without one).
        setup_values: The setup keys as written.
    """

    setup_schema: ClassVar[type[Schema] | None] = None
    target: str
    cfg: Schema | None
    values: Mapping[str, Any]
    flags: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    setup: Schema | None = None
    setup_values: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    def written(self) -> dict[str, Any]:
        """The node as the config writes it (``_target_``, flags, the class's keys and the setup keys)."""
        return {"_target_": self.target, **self.flags, **self.values, **self.setup_values}


# --- types -------------------------------------------------------------------------------------------------
def _is_schema(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, Schema)


def _is_node_type(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, Node)


def _is_node_value(value: Any) -> bool:
    return isinstance(value, Mapping) and isinstance(value.get("_target_"), str)


def conform(value: Any, annotation: Any) -> Any:
    """``value`` converted to fit ``annotation``, or :data:`NO_MATCH`.

    The only conversion is an integral float for an int (``1e5`` on the command line is a float to Hydra):
    ``1e5`` -> ``100000``; ``1.5`` stays a mismatch. Bools never pass for numbers. Schemas nested in the
    annotation are not parsed here (see :func:`parse`); a mapping matches them.
    """
    origin = typing.get_origin(annotation)
    if annotation is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        for arg in typing.get_args(annotation):
            converted = conform(value, arg)
            if converted is not NO_MATCH:
                return converted
        return NO_MATCH
    if origin is typing.Literal:
        return value if any(value == a and type(value) is type(a) for a in typing.get_args(annotation)) else NO_MATCH
    if annotation is type(None):
        return value if value is None else NO_MATCH
    if annotation is bool:
        return value if isinstance(value, bool) else NO_MATCH
    if annotation is int:
        if isinstance(value, float) and value.is_integer() and abs(value) < 2**63:
            return int(value)
        return value if isinstance(value, int) and not isinstance(value, bool) else NO_MATCH
    if annotation is float:
        return value if isinstance(value, int | float) and not isinstance(value, bool) else NO_MATCH
    if annotation is str:
        return value if isinstance(value, str) else NO_MATCH
    if _is_schema(annotation):
        return value if isinstance(value, Mapping) else NO_MATCH
    if _is_node_type(annotation):
        return value if _is_node_value(value) else NO_MATCH
    if origin in (list, tuple, Sequence) or annotation in (list, tuple):
        return _conform_items(value, typing.get_args(annotation))
    if origin in (dict, Mapping) or annotation in (dict, Mapping):
        if not isinstance(value, Mapping):
            return NO_MATCH
        args = typing.get_args(annotation)
        items = {k: conform(v, args[1]) if args else v for k, v in value.items()}
        return NO_MATCH if any(v is NO_MATCH for v in items.values()) else items
    return value


def _conform_items(value: Any, args: tuple[Any, ...]) -> Any:
    if not isinstance(value, list | tuple):
        return NO_MATCH
    if not args or (args[-1] is Ellipsis and args[0] is Any):
        return list(value)
    item = args[0]
    if len(args) > 1 and args[-1] is not Ellipsis:  # a fixed-length tuple
        if len(value) != len(args):
            return NO_MATCH
        items = [conform(v, a) for v, a in zip(value, args, strict=True)]
    else:
        items = [conform(v, item) for v in value]
    return NO_MATCH if any(v is NO_MATCH for v in items) else items


def describe_type(annotation: Any) -> str:
    """The type in words, as error messages and the reference show it (``"null or a float"``)."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(annotation)
        choices = _choices(args)
        if choices is not None:
            return "one of: " + ", ".join(choices)
        words = [describe_type(a) for a in args if a is not type(None)]
        return ("null or " if type(None) in args else "") + " or ".join(words)
    if origin is typing.Literal:
        return "one of: " + ", ".join("null" if a is None else str(a).lower() if isinstance(a, bool) else str(a)
                                      for a in typing.get_args(annotation))
    names = {int: "an int", float: "a float", bool: "true or false", str: "a string", type(None): "null",
             Any: "any value"}
    if annotation in names:
        return names[annotation]
    if _is_schema(annotation):
        return f"a mapping ({annotation.__name__})"
    if _is_node_type(annotation):
        return "a node naming a class with _target_"
    if origin in (list, tuple, Sequence) or annotation in (list, tuple):
        args = typing.get_args(annotation)
        if len(args) > 1 and args[-1] is not Ellipsis:
            if len(set(args)) == 1 and len(args) <= 4:
                return f"{('two', 'three', 'four')[len(args) - 2]} {_plural(args[0])}"
            return f"a list of {len(args)} ({', '.join(describe_type(a) for a in args)})"
        return f"a list of {_plural(args[0])}" if args else "a list"
    if origin in (dict, Mapping) or annotation in (dict, Mapping):
        return "a mapping"
    return getattr(annotation, "__name__", str(annotation))


def _choices(args: tuple[Any, ...]) -> list[str] | None:
    """The values of a union of bools, literals and None in words (``true, false, auto``), else None."""
    words: list[str] = []
    for arg in args:
        if arg is bool:
            words += ["true", "false"]
        elif arg is type(None):
            words.append("null")
        elif typing.get_origin(arg) is typing.Literal:
            words += [cli_text(a) for a in typing.get_args(arg)]
        else:
            return None
    return words


def _plural(annotation: Any) -> str:
    words = {int: "ints", float: "floats", str: "strings", bool: "bools"}
    return words.get(annotation, f"({describe_type(annotation)})")


# --- parsing ------------------------------------------------------------------------------------------------
_HINTS: dict[type, dict[str, Any]] = {}


def _hints(cls: type) -> dict[str, Any]:
    """The resolved annotations of a schema class (resolved once per class)."""
    if cls not in _HINTS:
        _HINTS[cls] = typing.get_type_hints(cls)
    return _HINTS[cls]


def suggest(name: str, choices: Sequence[str]) -> str | None:
    """The closest of ``choices`` to a misspelled ``name`` (difflib), or None when nothing is close."""
    found = difflib.get_close_matches(name, list(choices), n=1, cutoff=0.6)
    return found[0] if found else None


def _unknown(cls: type[Schema], name: str, value: Any, prefix: str, also: Sequence[str] = ()) -> ConfigError:
    if name in cls.refused:
        expected, fix = cls.refused[name]
        return ConfigError(prefix + name, value, expected, fix, absolute=True)
    if name in cls.renamed or name in cls.moved:
        new = cls.moved[name] if name in cls.moved else prefix + cls.renamed[name]
        return ConfigError(prefix + name, value, f"no key of this name: it was renamed to {new}",
                           f"pass {new}={cli_text(value)} instead", absolute=True)
    names = [*(f.name for f in dataclasses.fields(cls)), *also]
    close = suggest(name, names)
    hint = f"did you mean {prefix}{close}? " if close else ""
    where = f"a key of {prefix.rstrip('.')}" if prefix else "a top-level key"
    return ConfigError(prefix + name, value, f"{where} (one of: {', '.join(names)})",
                       f"{hint}correct the spelling, or remove it with ~{prefix}{name}{cls.unknown_hint}",
                       absolute=True)


def cli_text(value: Any) -> str:
    """A value as it is typed on the command line (``null``, ``true``, ``3e-4``, ``[0.45, 0.3]``)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list | tuple):  # a tuple too: YAML and the command line write both as lists
        return f"[{', '.join(cli_text(v) for v in value)}]"
    return str(value)


def _expected(annotation: Any, bounds: Bounds, value: Any = None) -> str:
    text, limits = describe_type(annotation), bounds.describe()
    text = f"{text} {limits}".strip() if limits else text
    if bounds.finite and _non_finite(value):
        text += " (finite: nan and inf are not values of this key)"
    return text


def _field_value(cls: type[Schema], f: dataclasses.Field, value: Any, prefix: str) -> Any:
    """One key checked: type, bounds, nested schemas."""
    annotation = _hints(cls)[f.name]
    bounds: Bounds = f.metadata.get("bounds", Bounds())
    converted = conform(value, annotation)
    if converted is NO_MATCH and typing.get_origin(annotation) is list and isinstance(value, list | tuple):
        item = typing.get_args(annotation)[0]
        i = next(i for i, v in enumerate(value) if conform(v, item) is NO_MATCH)  # name the entry that is wrong
        example = ", e.g. {_target_: mypkg.MyClass}" if _is_node_type(item) else ""
        raise ConfigError(f"{prefix}{f.name}[{i}]", value[i], describe_type(item),
                          f"pass a value of that type{example}", absolute=True)
    if converted is NO_MATCH or not _in_bounds(converted, bounds):
        raise ConfigError(prefix + f.name, value, _expected(annotation, bounds, value), _fix(f, prefix),
                          absolute=True)
    return _nested(annotation, converted, prefix + f.name)


def _non_finite(value: Any) -> bool:
    if isinstance(value, list | tuple):
        return any(_non_finite(v) for v in value)
    return isinstance(value, float) and not math.isfinite(value)


def _in_bounds(value: Any, bounds: Bounds) -> bool:
    if isinstance(value, list | tuple):
        return all(_in_bounds(v, bounds) for v in value)
    return bounds.holds(value)


def _fix(f: dataclasses.Field, prefix: str) -> str:
    """``pass algo.num_steps=32`` (the default) where the default is a plain value or a list of them (typed as the
    command line takes it: ``[64,64]``), else general advice."""
    default = f.default
    if default is MISSING and f.default_factory is not MISSING:  # a list's default; not a nested schema's
        made = f.default_factory()
        default = made if isinstance(made, list | tuple) else MISSING
    example = f.metadata.get("example", MISSING)
    if default is MISSING or default is None or isinstance(default, Mapping) or default in ([], ()):
        if example is MISSING:
            return "pass a value of that type"
        return f"pass e.g. {prefix}{f.name}={_typed(example)}" + (" (or null, the default)" if default is None else "")
    return f"pass {prefix}{f.name}={_typed(default)} (the default) or another value of that type"


def _typed(value: Any) -> str:
    """A value as typed in a shell, lists without spaces (``[64,64]``)."""
    return f"[{','.join(cli_text(v) for v in value)}]" if isinstance(value, list | tuple) else cli_text(value)


def _nested(annotation: Any, value: Any, path: str) -> Any:
    """Parse schemas and nodes nested in ``annotation`` (one, or a list or mapping of them)."""
    union = typing.get_origin(annotation) in (typing.Union, types.UnionType)  # X | None: try each member
    for arg in (annotation, *(typing.get_args(annotation) if union else ())):
        if _is_schema(arg) and isinstance(value, Mapping):
            return parse(arg, value, f"{path}.")
        if _is_node_type(arg) and _is_node_value(value):
            return parse_node(value, f"{path}.", arg)
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    item = args[-1] if args else None
    if origin in (list, tuple, Sequence) and args and (_is_schema(args[0]) or _is_node_type(args[0])):
        return [_nested(args[0], v, f"{path}[{i}]") for i, v in enumerate(value)]
    if origin in (dict, Mapping) and len(args) == 2 and (_is_schema(item) or _is_node_type(item)):
        return {k: _nested(item, v, f"{path}.{k}") for k, v in value.items()}
    return value


def parse_node(values: Mapping[str, Any], prefix: str = "", kind: type[Node] = Node) -> Node:
    """A ``_target_`` node checked by its class's schema (:func:`schema_for`), and its setup keys by ``kind``'s
    ``setup_schema``; a class without a schema keeps its keys unchecked until it is built."""
    target = values["_target_"]
    schema = schema_for(target)
    if schema is None and isinstance(target, str) and not target.startswith("embodirl."):
        _check_module_imports(target, prefix)
    setup_keys = [f.name for f in dataclasses.fields(kind.setup_schema)] if kind.setup_schema else []
    own = {k: v for k, v in values.items() if k not in STRUCTURAL_KEYS and k not in setup_keys}
    flags = {k: v for k, v in values.items() if k in STRUCTURAL_KEYS and k != "_target_"}
    written = {k: v for k, v in values.items() if k in setup_keys}
    setup = parse(kind.setup_schema, written, prefix) if kind.setup_schema else None
    if schema is None:  # its own keys wait for the class; the nodes in it are checked by their schemas now
        for name, value in own.items():
            if _is_node_value(value):
                parse_node(value, f"{prefix}{name}.")
    cfg = None if schema is None else parse(schema, own, prefix, setup_keys)
    return kind(target, cfg, own, flags, setup, written)


def _check_module_imports(target: str, prefix: str) -> None:
    """A ``_target_`` of the user's own whose module fails to import: one line naming the module and the error."""
    module = target.rpartition(".")[0]
    if not module:
        return
    try:
        importlib.import_module(module)
    except Exception as exc:  # any error of the user's module: one line, not a traceback
        reason = " ".join(f"{type(exc).__name__}: {exc}".split())[:240]
        raise ConfigError(f"{prefix}_target_", target, f"a class whose module imports; importing {module} failed "
                          f"with {reason}", f"fix that import in {module}, or the module path in {prefix}_target_",
                          absolute=True) from None


def parse(cls: type[S], values: Mapping[str, Any] | None, prefix: str = "", also: Sequence[str] = ()) -> S:
    """``values`` checked against schema ``cls``: unknown keys, types, bounds, nested schemas, cross-key rules.

    Args:
        cls: The schema.
        values: Plain mapping of the node (structural keys such as ``_target_`` are skipped).
        prefix: The node's dotted path with a trailing dot (``"algo."``), for messages.
        also: The other keys the node may hold (its setup keys), listed beside ``cls``'s for an unknown key.

    Raises:
        ConfigError: Naming the full key, the value, what is valid and a fix.
    """
    values = {} if values is None else values
    if not isinstance(values, Mapping):
        raise ConfigError(prefix.rstrip(".") or cls.__name__, values, f"a mapping of {cls.__name__} keys",
                          "pass key=value overrides of its keys", absolute=True)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    for name, value in values.items():
        if name not in fields and name not in STRUCTURAL_KEYS:
            raise _unknown(cls, str(name), value, prefix, also)
    kwargs = {}
    for name, f in fields.items():
        if name in values:
            kwargs[name] = _field_value(cls, f, values[name], prefix)
        elif f.default is MISSING and f.default_factory is MISSING:
            raise ConfigError(prefix + name, None, f"a value ({f.metadata.get('doc', '')})",
                              f"pass {prefix}{name}=<value>", absolute=True)
    instance = cls(**kwargs)
    try:
        instance.check()
    except ConfigError as exc:
        raise exc.with_prefix(prefix) from None
    return instance


def check_finite_values(key: str, value: Any, example: Any = None) -> None:
    """Refuse nan and infinite floats anywhere in ``value`` (a node of a class without a schema, an env's
    keyword arguments): a learning rate of ``inf`` trains nothing and fails late. Raises a :class:`ConfigError`
    naming the (nested) key."""
    found = _non_finite_key(value, key)
    if found is None:
        return
    shown = value
    for part in found.removeprefix(key).split(".")[1:]:
        shown = shown[part]
    advice = f", e.g. {found}={example}" if example is not None and found == key else ""
    raise ConfigError(found, shown, "finite numbers (nan and inf are not values of this key)",
                      f"pass a finite value{advice}")


def _non_finite_key(value: Any, key: str) -> str | None:
    """The key of the first nan or infinite float in ``value`` (a mapping's entries by dotted key; a list as a
    whole)."""
    if isinstance(value, float):
        return None if math.isfinite(value) else key
    if isinstance(value, Mapping):
        return next((found for k, v in value.items() if (found := _non_finite_key(v, f"{key}.{k}"))), None)
    if isinstance(value, list | tuple):
        return key if any(_non_finite_key(v, key) for v in value) else None
    return None


# --- lookup and documentation -------------------------------------------------------------------------------
def schemas() -> Iterator[type[Schema]]:
    """Every schema class defined so far (subclasses of :class:`Schema`, depth first)."""
    stack = list(Schema.__subclasses__())
    while stack:
        cls = stack.pop()
        stack.extend(cls.__subclasses__())
        yield cls


def _shipped() -> dict[str, type[Schema]]:
    # embodirl's own schemas are registered when the package embodirl.config is imported (its components module);
    # those an installed package declares load here, at the first lookup
    load_user_schemas()
    return {cls.target: cls for cls in schemas() if cls.target}


ENTRY_POINT_GROUP = "embodirl.schemas"


@functools.cache
def load_user_schemas() -> tuple[str, ...]:
    """Import every module the ``embodirl.schemas`` entry points name (their schemas then register by ``target``);
    returns their names.

    Raises:
        ConfigError: A module that fails to import, in one line naming it, its package and the import error.
    """
    loaded = []
    for entry in entry_points(group=ENTRY_POINT_GROUP):
        try:
            importlib.import_module(entry.value.partition(":")[0])
        except Exception as exc:  # any error of the user's module: one line, not a traceback
            load_user_schemas.cache_clear()
            reason = " ".join(f"{type(exc).__name__}: {exc}".split())[:240]
            package = entry.dist.name if entry.dist is not None else "a package"
            raise ConfigError(f"entry point {ENTRY_POINT_GROUP}:{entry.name}", entry.value,
                              f"a schema module that imports; importing it failed with {reason}",
                              f"fix that import in {entry.value}, or remove the entry point from {package}'s "
                              "pyproject.toml and reinstall it", absolute=True) from None
        loaded.append(entry.value)
    return tuple(loaded)


def schema_for(target: str) -> type[Schema] | None:
    """The schema of the class ``target`` names: a shipped component's without importing it, else (importing a
    class of the user's own) its ``cfg: MyConfig`` annotation or its first constructor argument's; None when it
    has neither."""
    shipped = _shipped().get(target)
    if shipped is not None or target.startswith("embodirl."):
        return shipped  # embodirl's own classes are never imported to look: their schemas are in the registry
    from hydra.utils import get_class  # user classes: imported, as instantiating them would

    hydra_log = logging.getLogger("hydra.utils")  # it logs a failed import in three lines: parse_node says it in one
    quiet, hydra_log.disabled = hydra_log.disabled, True
    try:
        cls = get_class(target)
    except Exception:  # an unimportable _target_ is reported by parse_node (with its reason) or where it is built
        return None
    finally:
        hydra_log.disabled = quiet
    own = _own_cfg_annotation(cls)
    if own is not None:
        return own
    init = getattr(cls, "__init__", None)
    try:
        hints = typing.get_type_hints(init)
    except Exception:
        return None
    first = next(iter(p for p in _parameters(init) if p != "self"), None)
    annotation = hints.get(first) if first else None
    return annotation if _is_schema(annotation) else None


def _own_cfg_annotation(cls: type) -> type[Schema] | None:
    """The schema a class declares as ``cfg: MyConfig`` in its own body: a subclass that only adds keys names its
    schema there, while the constructor it inherits is annotated with its base class's schema."""
    if "cfg" not in inspect.get_annotations(cls):  # its own body, not a base class's
        return None
    try:
        annotation = typing.get_type_hints(cls).get("cfg")
    except Exception:
        return None
    return annotation if _is_schema(annotation) else None


def _parameters(func: Any) -> list[str]:
    try:
        return list(inspect.signature(func).parameters)
    except (TypeError, ValueError):
        return []


@dataclass(frozen=True)
class KeyDoc:
    """One key as ``--help`` and the configuration reference show it."""

    path: str
    type: str
    default: Any
    bounds: str
    doc: str


def entry_schema(cls: type[Schema], name: str) -> type[Schema] | None:
    """The schema of each entry of key ``name`` when it is a mapping of schemas (``env.randomize``), else None."""
    annotation = _hints(cls).get(name)
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) in (dict, Mapping) and len(args) == 2 and _is_schema(args[1]):
        return args[1]
    return None


def entry_docs(cls: type[Schema], node: Mapping[str, Any], prefix: str = "") -> list[KeyDoc]:
    """The rows of the entries a node holds under its mapping-of-schemas keys: ``env.randomize.<name>`` (its
    schema's summary) and ``env.randomize.<name>.range`` (that key's doc)."""
    rows = []
    for name, entries in node.items():
        entry = entry_schema(cls, str(name)) if isinstance(entries, Mapping) else None
        if entry is None:
            continue
        first = (entry.__doc__ or entry.__name__).strip().split("\n\n")[0]  # the docstring's first paragraph
        summary = " ".join(first.split()).replace("``", "")
        for entry_name in entries:
            path = f"{prefix}{name}.{entry_name}"
            rows.append(KeyDoc(path, f"a {entry.__name__} mapping", MISSING, "", summary))
            rows.extend(key_docs(entry, f"{path}."))
    return rows


def key_docs(cls: type[Schema], prefix: str = "") -> list[KeyDoc]:
    """Every key of ``cls`` (nested schemas expanded) with its type, default, bounds and doc."""
    rows = []
    for f in dataclasses.fields(cls):
        annotation = _hints(cls)[f.name]
        nested = next((a for a in (annotation, *typing.get_args(annotation)) if _is_schema(a)), None)
        default = f.default if f.default is not MISSING else (
            f.default_factory() if f.default_factory is not MISSING else MISSING)
        if nested is not None and typing.get_origin(annotation) not in (list, dict, Mapping, Sequence):
            rows.extend(key_docs(nested, f"{prefix}{f.name}."))
            continue
        bounds: Bounds = f.metadata.get("bounds", Bounds())
        rows.append(KeyDoc(prefix + f.name, describe_type(annotation), default, bounds.describe(),
                           f.metadata.get("doc", "")))
    return rows

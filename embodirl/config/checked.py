"""Values from YAML and the command line, checked against the type annotations of the code they configure.

Every config group option names its class with ``_target_``; the class's ``__init__`` is the schema.
:func:`instantiate_checked` checks every value against the annotation of its parameter before the class
is called, so ``trainer.total_env_steps=abc`` fails with the key, the value and an example instead of a
traceback. :func:`check_fields` does the same for plain nested dicts described by a dataclass.
"""

from __future__ import annotations

import dataclasses
import inspect
import types
import typing
from collections.abc import Sequence
from typing import Any

from embodirl.config.instantiate import check_finite_values
from embodirl.config.schema import describe_type
from embodirl.errors import ConfigError, check

__all__ = [
    "NO_MATCH",
    "check_fields",
    "conform",
    "conform_int",
    "describe",
]

NO_MATCH = object()


def conform(value: Any, annotation: Any) -> Any:
    """``value`` converted to fit ``annotation``, or ``NO_MATCH``.

    The only conversion is an integral float for an int (``1e5`` on the command line is a float to
    Hydra): ``1e5`` -> ``100000``; ``1.5`` stays a mismatch. Bools never pass for numbers.
    """
    origin = typing.get_origin(annotation)
    if annotation is Any or annotation is inspect.Parameter.empty:
        return value
    if origin in (typing.Union, types.UnionType):
        for arg in typing.get_args(annotation):
            converted = conform(value, arg)
            if converted is not NO_MATCH:
                return converted
        return NO_MATCH
    if origin is typing.Literal:
        return value if value in typing.get_args(annotation) else NO_MATCH
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
    if origin in (list, tuple, Sequence, typing.Sequence) or annotation in (list, tuple):
        if not isinstance(value, list | tuple):
            return NO_MATCH
        args = typing.get_args(annotation)
        if not args:
            return value
        items = [conform(v, args[0]) for v in value]
        return NO_MATCH if any(v is NO_MATCH for v in items) else type(value)(items)
    if origin is dict or annotation is dict:
        return value if isinstance(value, dict) else NO_MATCH
    return value


def conform_int(key: str, value: Any, minimum: int, fix: str) -> int:
    """An int config value (integral floats accepted) of at least ``minimum``, or a :class:`ConfigError`."""
    converted = conform(value, int)
    check(converted is not NO_MATCH and converted >= minimum, key, value, f"an int >= {minimum}", fix)
    return converted


def describe(annotation: Any) -> str:
    """The type in words (:func:`embodirl.config.schema.describe_type`)."""
    return describe_type(annotation)


def check_fields(prefix: str, values: Any, cls: type) -> Any:
    """Build dataclass ``cls`` from the dict ``values``, checking every key and type (``prefix`` names them)."""
    check(isinstance(values, dict), prefix.rstrip("."), values, f"a mapping with keys of {cls.__name__}")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    hints = typing.get_type_hints(cls)
    converted = {}
    for key, value in values.items():
        if key not in fields:
            raise ConfigError(prefix + key, value, f"a known key (one of: {', '.join(fields)})",
                              f"remove {prefix}{key} or correct its spelling")
        result = conform(value, hints[key])
        if result is NO_MATCH:
            raise ConfigError(prefix + key, value, describe(hints[key]),
                              f"pass a value of that type, e.g. {prefix}{key}={_example(fields[key])}")
        check_finite_values(prefix + key, result, _example(fields[key]))
        converted[key] = result
    return cls(**converted)


def _example(field: dataclasses.Field) -> Any:
    """A field's default as an example value (``[]`` for a ``default_factory``)."""
    if field.default is not dataclasses.MISSING:
        return field.default
    if field.default_factory is not dataclasses.MISSING:
        return _value_text(field.default_factory())
    return "<value>"


def _value_text(value: Any) -> Any:
    return "[]" if value == [] else "{}" if value == {} else value

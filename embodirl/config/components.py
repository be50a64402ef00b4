"""The schemas of embodirl's own components, imported together so a ``_target_`` finds its schema without
importing the component (:func:`embodirl.config.schema.schema_for`), and those of the user's own components that
an installed package names in the ``embodirl.schemas`` entry point group (:func:`load_user_schemas`).

A package of one's own keeps that fast path by declaring its torch-free schema modules in its ``pyproject.toml``::

    [project.entry-points."embodirl.schemas"]
    my_rl = "my_rl.schemas"

Without the entry, a schema is still found, by importing the class that ``_target_`` names (and torch with it).
"""

import functools
import importlib
from importlib.metadata import entry_points

from embodirl.config import algos, envs, optim, policies, training
from embodirl.errors import ConfigError

__all__ = ["ENTRY_POINT_GROUP", "algos", "envs", "load_user_schemas", "optim", "policies", "training"]

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

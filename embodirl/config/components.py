"""The schemas of embodirl's own components, imported together so a ``_target_`` finds its schema without
importing the component (:func:`embodirl.config.schema.schema_for`), and those of the user's own components that
an installed package names in the ``embodirl.schemas`` entry point group (loaded by the schema engine,
:func:`embodirl.config.schema.load_user_schemas`, at the first lookup). Importing the package ``embodirl.config``
imports this module, so the schema engine itself imports no shipped schema.

A package of one's own keeps that fast path by declaring its torch-free schema modules in its ``pyproject.toml``::

    [project.entry-points."embodirl.schemas"]
    my_rl = "my_rl.schemas"

Without the entry, a schema is still found, by importing the class that ``_target_`` names (and torch with it).
"""

from embodirl.config import algos, envs, optim, policies, training
from embodirl.config.schema import ENTRY_POINT_GROUP, load_user_schemas

__all__ = ["ENTRY_POINT_GROUP", "algos", "envs", "load_user_schemas", "optim", "policies", "training"]

"""The configuration's ground floor: typed schemas of every component, their checking, and building from them."""

# The shipped schemas register as they are defined: importing them with the package lets a ``_target_`` find its
# schema without importing its component, while the schema engine below them imports none of them.
from embodirl.config import components  # noqa: F401

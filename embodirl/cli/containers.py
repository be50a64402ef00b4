"""Plain Python dicts of Hydra config nodes, for code that reads them as mappings.

``OmegaConf.to_container`` is typed to return any container (a list for a ``ListConfig``, a string or None for
a node that is an interpolation or missing); a composed config node is a ``DictConfig``, so the dict is narrowed
here, once, with a check instead of at every call.
"""

from __future__ import annotations

from typing import Any

__all__ = ["plain_dict"]


def plain_dict(node: Any, *, resolve: bool = False) -> dict[str, Any]:
    """``node`` (a ``DictConfig``) as a plain dict with string keys; interpolations resolved with ``resolve``.

    Raises:
        TypeError: ``node`` is not a mapping node (a list node, or a value).
    """
    from omegaconf import OmegaConf

    values = OmegaConf.to_container(node, resolve=resolve)
    if not isinstance(values, dict):
        raise TypeError(f"expected a mapping config node, got {type(values).__name__}")
    return {str(key): value for key, value in values.items()}

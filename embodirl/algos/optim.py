"""The optimizer of the update, built from the ``algo.optimizer`` node.

``algo.optimizer`` names a ``torch.optim`` class (``_target_``) with its options; the algorithm passes the
parameters and the learning rate (``algo.learning_rate`` and its schedule own the rate, so the node must not set
``lr``). The shipped optimizers (``conf/algo/optimizer/``) have schemas (:mod:`embodirl.config.optim`); any other
``torch.optim`` class is built with its keys checked against its signature.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import Tensor

from embodirl.config.instantiate import instantiate, keywords, to_node
from embodirl.config.schema import Node
from embodirl.errors import ConfigError

__all__ = ["build_optimizer"]

PREFIX = "algo.optimizer."
DEFAULT = {"_target_": "torch.optim.Adam", "eps": 1e-5}
_FIX = "pass algo.optimizer._target_=torch.optim.Adam (or AdamW, SGD, ...), or select a preset (algo/optimizer=adam)"


def build_optimizer(node: Node | Mapping[str, Any] | None, params: Sequence[Tensor], lr: float, cuda_graphs: bool,
                    device: torch.device) -> tuple[torch.optim.Optimizer, bool]:
    """The optimizer over ``params`` with learning rate ``lr``; None means ``Adam(eps=1e-5)``.

    With ``cuda_graphs`` an optimizer that accepts ``capturable`` gets ``capturable=True`` (and ``foreach``) and a
    tensor learning rate (changed in place by schedules), so a captured step follows the schedule. Otherwise an
    optimizer with a ``fused`` option (Adam, AdamW, SGD) gets ``fused=True`` unless the node sets ``fused`` or
    ``foreach``: one kernel for all parameters, on the CPU too.

    Args:
        node: ``algo.optimizer``: a parsed node, a mapping with ``_target_``, or None.
        params: The trainable parameters.
        lr: The initial learning rate.
        cuda_graphs: Whether the update step will be captured.
        device: The parameters' device (of a tensor learning rate).

    Returns:
        ``(optimizer, capturable)``: whether its step may be captured in a CUDA graph.

    Raises:
        ConfigError: ``lr`` or ``params`` set in the node, an option the class does not take or refuses, or a
            class that is not an optimizer.
    """
    parsed = to_node(DEFAULT if node is None else node, PREFIX)
    cls = _optimizer_class(parsed.target)
    accepted = inspect.signature(cls.__init__).parameters
    given = _options(parsed)
    for name in ("lr", "params"):
        if name in given:  # a class with a schema refuses them when the node is parsed; this is for the others
            raise ConfigError(PREFIX + name, given[name], "no value here: the algorithm passes " + (
                "the learning rate (algo.learning_rate and algo.lr_schedule)" if name == "lr" else "the parameters"),
                f"remove it with ~{PREFIX}{name}", absolute=True)
    capturable = "capturable" in accepted
    chosen: dict[str, Any] = {}
    lr_value: float | Tensor = lr
    if cuda_graphs and capturable:
        if given.get("fused"):
            raise ConfigError(PREFIX + "fused", given["fused"], "null or false with CUDA graphs (the captured step "
                              "is the capturable multi-tensor one)", f"pass {PREFIX}fused=null, or cuda_graphs=false",
                              absolute=True)
        chosen = {"capturable": True, "foreach": True}
        lr_value = torch.tensor(lr, dtype=torch.float32, device=device)
    elif "fused" in accepted and given.get("fused") is None and given.get("foreach") is None:
        chosen = {"fused": True}
    parsed, runtime = _with_options(parsed, chosen)
    try:
        return instantiate(parsed, PREFIX, params=params, lr=lr_value, **runtime), capturable
    except (ValueError, TypeError, IndexError, RuntimeError) as exc:
        if isinstance(exc, ConfigError):
            raise
        raise _refused(parsed.target, given, accepted, exc) from None


def _optimizer_class(target: str) -> type[torch.optim.Optimizer]:
    from hydra.utils import get_class

    try:
        cls = get_class(target)
    except Exception:
        raise ConfigError(PREFIX + "_target_", target, "an importable torch.optim.Optimizer class", _FIX,
                          absolute=True) from None
    if not (inspect.isclass(cls) and issubclass(cls, torch.optim.Optimizer)):
        raise ConfigError(PREFIX + "_target_", target, "a torch.optim.Optimizer class", _FIX, absolute=True)
    return cls


def _options(node: Node) -> dict[str, Any]:
    """The options the node sets (a schema's keys with their defaults, or the keys as written)."""
    return keywords(node.cfg) if node.cfg is not None else dict(node.values)


def _with_options(node: Node, chosen: dict[str, Any]) -> tuple[Node, dict[str, Any]]:
    """``node`` with the options it holds replaced by ``chosen``'s; returns the rest as keyword arguments."""
    held = set(_options(node))
    mine = {k: v for k, v in chosen.items() if k in held}
    rest = {k: v for k, v in chosen.items() if k not in held}
    if node.cfg is not None:
        cfg: Any = node.cfg  # a schema instance: a frozen dataclass
        return dataclasses.replace(node, cfg=dataclasses.replace(cfg, **mine)), rest
    return dataclasses.replace(node, values={**node.values, **mine}), rest


# Words torch's optimizers use for their options in "Invalid <word> value" messages.
_TORCH_WORDS = {"epsilon": "eps", "beta": "betas", "learning": "lr"}


def _refused(name: str, options: dict[str, Any], accepted: Any, exc: Exception) -> ConfigError:
    """The :class:`ConfigError` for options a ``torch.optim`` class refused: the option it names, else all of them."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    word = re.search(r"[Ii]nvalid (\w+)", text)
    key = _TORCH_WORDS.get(word[1], word[1]) if word else None
    if key in options:
        default = accepted[key].default
        instead = "" if default is inspect.Parameter.empty else f"pass {PREFIX}{key}={default} " \
            f"({name.rpartition('.')[2]}'s default), or "
        return ConfigError(PREFIX + key, options[key], f"a value {name} accepts (torch says: {text})",
                           f"{instead}remove it with ~{PREFIX}{key}", absolute=True)
    return ConfigError(PREFIX.rstrip("."), options, f"options {name} accepts (torch says: {text})",
                       "correct the options of algo.optimizer, or select a preset (algo/optimizer=adam)",
                       absolute=True)

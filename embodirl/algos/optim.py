"""The optimizer node and mixed precision of the update.

``algo.optimizer`` is a ``_partial_`` config node naming a ``torch.optim`` class (``_target_``) with its
options; the algorithm gives it the parameters and the learning rate (``algo.learning_rate`` and its
schedule own the rate, so the node must not set ``lr``). ``algo.amp`` runs the forward pass and the loss
under ``torch.autocast`` (``bf16`` or ``fp16``; ``fp16`` adds a :class:`torch.amp.GradScaler`).
"""

from __future__ import annotations

import functools
import inspect
import re
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from embodirl.config.instantiate import check_finite_values
from embodirl.errors import ConfigError

__all__ = ["AMP_DTYPES", "OptimizerFactory", "autocast_loss", "build_optimizer"]

OptimizerFactory = Callable[..., torch.optim.Optimizer]
AMP_DTYPES = {"off": None, "bf16": torch.bfloat16, "fp16": torch.float16}
_FIX = "pass algo.optimizer._target_=torch.optim.Adam (or AdamW, SGD, ...) with _partial_: true"


def _describe(factory: Any) -> tuple[Callable, dict[str, Any]]:
    """``(class, options)`` of an optimizer factory (a ``functools.partial`` from a ``_partial_`` node, or a class)."""
    if isinstance(factory, functools.partial):
        return factory.func, dict(factory.keywords)
    if callable(factory):
        return factory, {}
    raise ConfigError("optimizer", factory, "a _partial_ node naming a torch.optim class", _FIX)


def build_optimizer(factory: OptimizerFactory | None, params: list[Tensor], lr: float, cuda_graphs: bool,
                    device: torch.device) -> tuple[torch.optim.Optimizer, bool]:
    """The optimizer over ``params`` with learning rate ``lr``; None means ``Adam(eps=1e-5)``.

    With ``cuda_graphs`` an optimizer that accepts ``capturable`` gets ``capturable=True`` and a tensor learning
    rate (changed in place by schedules), so a captured step follows the schedule. Otherwise an optimizer with a
    ``fused`` option (Adam, AdamW, SGD) gets ``fused=True`` unless the node sets ``fused`` or ``foreach``: one
    kernel for all parameters, on the CPU too.

    Args:
        factory: ``algo.optimizer`` as Hydra built it (``functools.partial`` of a ``torch.optim`` class).
        params: The trainable parameters.
        lr: The initial learning rate.
        cuda_graphs: Whether the update step will be captured.
        device: The parameters' device (of a tensor learning rate).

    Returns:
        ``(optimizer, capturable)``: whether its step may be captured in a CUDA graph.

    Raises:
        ConfigError: ``lr`` or ``params`` set in the node, an option the class does not take, or not an optimizer.
    """
    if factory is None:
        factory = functools.partial(torch.optim.Adam, eps=1e-5)
    cls, options = _describe(factory)
    name = f"{getattr(cls, '__module__', '')}.{getattr(cls, '__qualname__', cls)}"
    if not (inspect.isclass(cls) and issubclass(cls, torch.optim.Optimizer)):
        raise ConfigError("optimizer._target_", name, "a torch.optim.Optimizer class", _FIX)
    for key in ("lr", "params"):
        if key in options:
            raise ConfigError(f"optimizer.{key}", options[key], "no value here: the algorithm passes "
                              f"{'the learning rate (algo.learning_rate and algo.lr_schedule)' if key == 'lr' else 'the parameters'}",
                              f"remove it with ~optimizer.{key}" + (" and set learning_rate instead" if key == "lr" else ""))
    accepted = inspect.signature(cls.__init__).parameters
    for key, value in options.items():
        if key not in accepted:
            valid = ", ".join(k for k in accepted if k not in ("self", "params", "lr"))
            raise ConfigError(f"optimizer.{key}", value, f"an option of {name} (one of: {valid})",
                              f"remove it with ~optimizer.{key}, or select a preset of conf/algo/optimizer/ "
                              "(e.g. algo/optimizer=sgd)")
    for key, value in options.items():
        default = accepted[key].default
        check_finite_values(f"optimizer.{key}", value, None if default is inspect.Parameter.empty else default)
    _check_betas(options.get("betas"))
    capturable = "capturable" in accepted
    given = dict(options)
    if cuda_graphs and capturable:
        options.update(capturable=True, foreach=True)
        lr_value: float | Tensor = torch.tensor(lr, dtype=torch.float32, device=device)
    else:
        lr_value = lr
        if "fused" in accepted and not {"fused", "foreach"} & options.keys():
            options["fused"] = True  # one kernel over every parameter: Adam's step 319 -> 85 us on our CPU (12 tensors)
    try:
        return cls(params, lr=lr_value, **options), capturable
    except (ValueError, TypeError, IndexError, RuntimeError) as exc:
        raise _refused(name, given, accepted, exc) from None


# Words torch's optimizers use for their options in "Invalid <word> value" messages.
_TORCH_WORDS = {"epsilon": "eps", "beta": "betas", "learning": "lr"}


def _refused(name: str, options: dict[str, Any], accepted: Any, exc: Exception) -> ConfigError:
    """The :class:`ConfigError` for options a ``torch.optim`` class refused: the option it names, else all of them."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    word = re.search(r"[Ii]nvalid (\w+)", text)
    key = _TORCH_WORDS.get(word[1], word[1]) if word else None
    if key in options:
        default = accepted[key].default
        instead = "" if default is inspect.Parameter.empty else f"pass optimizer.{key}={default} " \
            f"({name.rpartition('.')[2]}'s default), or "
        return ConfigError(f"optimizer.{key}", options[key], f"a value {name} accepts (torch says: {text})",
                           f"{instead}remove it with ~optimizer.{key}")
    return ConfigError("optimizer", options, f"options {name} accepts (torch says: {text})",
                       "correct the options of algo.optimizer, or select a preset (algo/optimizer=adam)")


def _check_betas(betas: Any) -> None:
    """Adam-style ``betas``: two floats in [0, 1) (torch indexes the pair before checking it)."""
    if betas is None:
        return
    fits = isinstance(betas, list | tuple) and len(betas) == 2 and all(
        isinstance(b, int | float) and not isinstance(b, bool) and 0 <= b < 1 for b in betas)
    if not fits:
        raise ConfigError("optimizer.betas", list(betas) if isinstance(betas, tuple) else betas,
                          "two floats in [0, 1), the decay rates of the gradient's mean and square",
                          "pass optimizer.betas=[0.9,0.999]")


def autocast_loss(loss_fn: Callable[[Tensor, Tensor], tuple[Tensor, Tensor]], amp: str,
                  device: torch.device) -> Callable[[Tensor, Tensor], tuple[Tensor, Tensor]]:
    """``loss_fn`` run under ``torch.autocast`` in the ``amp`` dtype, its outputs back in float32 (``off``: as is).

    The autocast region is inside the function, so ``torch.compile(fullgraph=True)`` traces it as one graph.
    """
    dtype = AMP_DTYPES[amp]
    if dtype is None:
        return loss_fn

    @functools.wraps(loss_fn)
    def amp_loss(idx: Tensor, weight: Tensor) -> tuple[Tensor, Tensor]:
        with torch.autocast(device.type, dtype=dtype):
            loss, metrics = loss_fn(idx, weight)
        return loss.float(), metrics.float()

    return amp_loss

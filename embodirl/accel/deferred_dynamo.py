"""Keep torch._dynamo out of a run that compiles nothing.

Importing ``torch._dynamo`` is the largest part of an eager run's start-up, and two things import it
without compiling anything:

- tensordict marks a few of its functions for the compiler when it is imported
  (``torch.compiler.allow_in_graph`` and ``assume_constant_result``; both return the function
  unchanged). While tensordict is being imported these marks are recorded instead, and made by dynamo
  itself the moment ``torch._dynamo`` is first imported.
- torch's optimizers are wrapped in ``torch._disable_dynamo``, whose wrapper imports dynamo on its
  first call to build the disabled function, which it caches on the function as ``__dynamo_disable``.
  Before dynamo is imported nothing can be compiling, so the disabled function is the function itself:
  that cache is pre-filled with a stand-in that calls the function directly, and emptied again when
  dynamo is imported, so from then on torch builds and caches the real one exactly as without this
  module.

- an optimizer's ``step`` (``torch.optim.optimizer._use_grad_for_differentiable``) imports dynamo on
  every call to place a graph break, which means nothing outside a compiled function. Until dynamo is
  loaded the step runs with the same grad mode and no break; from then on torch's own wrapper runs.

A mark or a wrapper made after dynamo is loaded goes straight through. :func:`install` puts an import
hook on ``sys.meta_path`` that touches three imports only (``torch._compile``, ``tensordict`` and
``torch._dynamo``); it is a no-op when torch is already imported. The console scripts install it when
:mod:`embodirl.cli` is imported; ``import embodirl`` does not, so a library user's torch stays untouched.
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.machinery
import sys
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

_DEFERRED = ("allow_in_graph", "assume_constant_result")
_pending: list[tuple[str, Any]] = []
_stand_ins: list[Callable[..., Any]] = []  # functions whose "__dynamo_disable" cache holds a stand-in
_DYNAMO_READY = False  # set once torch._dynamo has executed and the recorded marks are applied


def install() -> None:
    """Put the hook first on ``sys.meta_path`` (once); a no-op when tensordict is already imported."""
    if "torch" in sys.modules or any(isinstance(f, _Hook) for f in sys.meta_path):
        return
    sys.meta_path.insert(0, _Hook())


def pending_marks() -> list[tuple[str, Any]]:
    """The marks recorded and not yet applied, as ``(torch.compiler function name, function)``."""
    return list(_pending)


def _recorder(name: str, real: Callable[[Any], Any]) -> Callable[[Any], Any]:
    def mark(fn: Any) -> Any:
        if _DYNAMO_READY:
            return real(fn)
        _pending.append((name, fn))
        return fn

    mark.__name__ = mark.__qualname__ = name
    mark.__doc__ = real.__doc__
    return mark


def _apply_pending(dynamo: ModuleType) -> None:
    global _DYNAMO_READY
    _DYNAMO_READY = True
    while _stand_ins:
        fn = _stand_ins.pop()
        if isinstance(getattr(fn, "__dynamo_disable", None), _Direct):
            delattr(fn, "__dynamo_disable")
    while _pending:
        name, fn = _pending.pop(0)
        getattr(dynamo, name)(fn)


class _Direct:
    """The stand-in for a dynamo-disabled function while dynamo is not loaded: the function itself."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)


def _lazy_disable(real: Callable[..., Any]) -> Callable[..., Any]:
    def _disable_dynamo(fn: Callable[..., Any] | None = None, recursive: bool = True) -> Any:
        wrapper = real(fn, recursive)
        if fn is not None and not _DYNAMO_READY and recursive:
            fn.__dynamo_disable = _Direct(fn)  # type: ignore[attr-defined]
            _stand_ins.append(fn)
        return wrapper

    _disable_dynamo.__doc__ = real.__doc__
    return _disable_dynamo


def _lazy_use_grad(real: Callable[..., Any]) -> Callable[..., Any]:
    def _use_grad_for_differentiable(func: Callable[..., Any]) -> Callable[..., Any]:
        import torch

        with_break = real(func)

        @functools.wraps(func)
        def _use_grad(*args: Any, **kwargs: Any) -> Any:
            if _DYNAMO_READY:
                return with_break(*args, **kwargs)
            with torch.set_grad_enabled(args[0].defaults["differentiable"]):
                return func(*args, **kwargs)

        return _use_grad

    return _use_grad_for_differentiable


class _Loader(importlib.abc.Loader):
    """Runs the real loader, with a step around (``tensordict``) or after (the others) it."""

    def __init__(self, real: importlib.abc.Loader, name: str) -> None:
        self.real, self.name = real, name

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self.real.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        if self.name != "tensordict":
            self.real.exec_module(module)
            if self.name == "torch._dynamo":
                _apply_pending(module)
            elif hasattr(module, _WRAPPED[self.name][0]):  # an unknown torch keeps its own function
                name, lazy = _WRAPPED[self.name]
                setattr(module, name, lazy(getattr(module, name)))
            return
        import torch.compiler

        originals = {name: getattr(torch.compiler, name) for name in _DEFERRED}
        if "torch._dynamo" not in sys.modules:
            for name, real in originals.items():
                setattr(torch.compiler, name, _recorder(name, real))
        try:
            self.real.exec_module(module)
        finally:
            for name, real in originals.items():
                setattr(torch.compiler, name, real)


# The torch functions replaced after their module has executed, and by what.
_WRAPPED = {"torch._compile": ("_disable_dynamo", _lazy_disable),
            "torch.optim.optimizer": ("_use_grad_for_differentiable", _lazy_use_grad)}


class _Hook(importlib.abc.MetaPathFinder):
    """Finds nothing itself: wraps the loader of the modules it watches."""

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if fullname not in ("tensordict", "torch._dynamo", *_WRAPPED):
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None:
                    spec.loader = _Loader(spec.loader, fullname)
                return spec
        return None

"""Training callbacks (``trainer.callbacks``): user code called with the records the trainer logs.

A callback is any object with some of these methods; :class:`Callback` gives no-op defaults to subclass.
List them as ``_target_`` nodes (``trainer.callbacks=[{_target_: mypkg.MyCallback, every: 10}]``); they are
built from the command line or YAML like every other option, run on rank 0 only, and never from a
checkpoint (``embodirl-eval`` does not build them; a checkpoint naming one is checked like any other
``_target_``, see :mod:`embodirl.config.trust`). An exception raised by a callback fails the run like any other.

Order of calls per iteration: ``on_evaluation`` (iterations that evaluated), ``on_iteration``, then
``on_checkpoint`` for each file saved; ``on_end`` once with the summary (also when the run fails or is
stopped by a signal; ``summary["status"]`` says which).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from embodirl.errors import ConfigError

__all__ = ["Callback", "CallbackProtocol", "Callbacks"]

log = logging.getLogger(__name__)


@runtime_checkable
class CallbackProtocol(Protocol):
    """What the trainer calls (every method optional)."""

    def on_iteration(self, record: dict[str, Any]) -> None: ...

    def on_evaluation(self, record: dict[str, Any]) -> None: ...

    def on_checkpoint(self, path: Path, record: dict[str, Any]) -> None: ...

    def on_end(self, summary: dict[str, Any]) -> None: ...


class Callback:
    """Base class with no-op hooks; override the ones you need."""

    def on_iteration(self, record: dict[str, Any]) -> None:
        """After every iteration, with its record (the line written to ``metrics.jsonl``)."""

    def on_evaluation(self, record: dict[str, Any]) -> None:
        """After an iteration that evaluated, with its record (``eval/*`` keys present)."""

    def on_checkpoint(self, path: Path, record: dict[str, Any]) -> None:
        """After a checkpoint file was written (``last.pt``, ``step_*.pt``, ``best.pt``), with the latest record."""

    def on_end(self, summary: dict[str, Any]) -> None:
        """Once at the end, with the summary written to ``summary.json``."""


_HOOKS = ("on_iteration", "on_evaluation", "on_checkpoint", "on_end")


class Callbacks:
    """Calls each hook on every callback that defines it, in list order.

    Args:
        callbacks: Objects with any of the hooks (at least one).

    Raises:
        TypeError: An object without any hook (e.g. a class left uninstantiated).
    """

    def __init__(self, callbacks: Iterable[Any] | None = None) -> None:
        self.callbacks = list(callbacks or [])
        for i, callback in enumerate(self.callbacks):
            if not any(callable(getattr(callback, hook, None)) for hook in _HOOKS):
                raise ConfigError(f"callbacks[{i}]", callback, "an object with on_iteration, on_evaluation, "
                                  "on_checkpoint or on_end (e.g. a subclass of embodirl.training.callbacks.Callback)",
                                  "pass trainer.callbacks=[{_target_: mypkg.MyCallback}]")

    def call(self, hook: str, *args: Any) -> None:
        for callback in self.callbacks:
            method = getattr(callback, hook, None)
            if callable(method):
                method(*args)

    def end_quietly(self, summary: dict[str, Any]) -> None:
        """``on_end`` while another error is propagating: a callback's own failure is only logged."""
        try:
            self.call("on_end", summary)
        except Exception:
            log.error("a callback's on_end failed as well", exc_info=True)

"""Stop signals: Ctrl-C, preemption and timeouts end a run cleanly, at a consistent point.

SLURM (through submitit) signals a job with SIGUSR2 before its time limit or on preemption, and
SIGTERM when it is cancelled or preempted; a user presses Ctrl-C (SIGINT). :class:`StopSignals` has two
modes:

* **immediate** (building, setting up): SIGINT raises ``KeyboardInterrupt`` at once; SIGTERM/SIGUSR2 call
  the handler installed before (submitit's ``checkpoint_and_try_requeue``: requeue and exit) and raise
  :class:`PreemptedError`. There is nothing to save yet, and the run records its fate.
* **deferred** (the training loop): the signal is only recorded; the trainer checks after every
  iteration (a consistent state), saves ``checkpoints/last.pt`` and then stops: for SIGTERM/SIGUSR2 by
  :meth:`StopSignals.hand_over` (requeue, then :class:`PreemptedError`), for the first Ctrl-C by
  raising :class:`Interrupted`. A second Ctrl-C raises ``KeyboardInterrupt`` at once (abort).

Nested instances chain: a deferred guard inside an immediate one hands over to the handler that was
installed before both (submitit's), never to its immediate parent. From the hand-over on, every guard of the chain
ignores further SIGTERM/SIGUSR2: submitit's ``scontrol requeue`` makes SLURM send SIGTERM while its handler still
runs, and that signal must not cut the requeue short. Outside the main thread both are no-ops.
"""

from __future__ import annotations

import logging
import signal
import threading
from types import FrameType
from typing import Any

__all__ = ["Interrupted", "PreemptedError", "StopSignals", "was_preempted"]

log = logging.getLogger(__name__)

_HANDED_OVER = False


class PreemptedError(RuntimeError):
    """The run stopped on a preemption/timeout signal (after saving its checkpoint, when training)."""


class Interrupted(KeyboardInterrupt):
    """The run stopped on Ctrl-C after finishing its iteration and saving ``checkpoints/last.pt``."""


def was_preempted() -> bool:
    """Whether this process stopped because of a preemption signal."""
    return _HANDED_OVER


class StopSignals:
    """Handles SIGINT, SIGTERM and SIGUSR2 while active (a context manager).

    Args:
        defer: Record signals for the trainer to act on after the iteration (True), or act at once (False).
    """

    PREEMPT = (signal.SIGUSR2, signal.SIGTERM)

    def __init__(self, defer: bool) -> None:
        self.defer = defer
        self.signum: int | None = None  # the preemption signal received, if any
        self.interrupted = False  # a first Ctrl-C was received (deferred mode)
        self.handed_over = False  # this guard's chain is handing over to the requeue: preemption signals are moot
        self._frame: FrameType | None = None
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, *self.PREEMPT):
                self._previous[sig] = signal.getsignal(sig)
                signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        self._restore()

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if signum == signal.SIGINT:
            if not self.defer or self.interrupted:
                raise KeyboardInterrupt
            self.interrupted = True
            log.warning("Ctrl-C: finishing this iteration and saving checkpoints/last.pt (Ctrl-C again aborts)")
            return
        if self.handed_over:
            log.warning("received %s while handing over to the requeue: ignored", signal.Signals(signum).name)
            return
        self.signum, self._frame = signum, frame
        if not self.defer:
            self.hand_over()
        log.warning("received %s: stopping after this iteration to save a checkpoint", signal.Signals(signum).name)

    def _restore(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous = {}

    @property
    def requested(self) -> bool:
        """A preemption signal (SIGTERM/SIGUSR2) was received."""
        return self.signum is not None

    def _chain(self, signum: int) -> list[StopSignals]:
        """This guard and the guards whose ``signum`` handler it replaced, innermost first."""
        guards: list[StopSignals] = []
        owner: Any = self
        while isinstance(owner, StopSignals):
            guards.append(owner)
            owner = getattr(owner._previous.get(signum), "__self__", None)
        return guards

    def hand_over(self, call_previous: bool = True) -> None:
        """Call the handler installed before (submitit: requeue + exit), then raise :class:`PreemptedError`.

        Args:
            call_previous: False on ranks other than 0, which only stop (rank 0 requeues the job).
        """
        global _HANDED_OVER
        _HANDED_OVER = True
        signum = self.signum if self.signum is not None else signal.SIGUSR2
        chain = self._chain(signum)
        previous = chain[-1]._previous.get(signum)  # the handler installed before every guard (submitit's)
        for guard in chain:
            guard.handed_over = True
        self._restore()
        if call_previous and callable(previous):
            previous(signum, self._frame)  # submitit's requeue handler exits the process on rank 0
        saved = "after saving checkpoints/last.pt" if self.defer else "before training started (nothing to save)"
        raise PreemptedError(f"stopped on {signal.Signals(signum).name} {saved}; "
                             "train again in the same run directory (hydra.run.dir) to resume")

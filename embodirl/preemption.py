"""Graceful preemption: finish the iteration, save, then let the launcher requeue.

SLURM (through submitit) signals a job with SIGUSR2 before its time limit or on preemption, and
SIGTERM when it is cancelled or preempted. Submitit's own handler requeues the job at once, in the
middle of whatever the process was doing, and Hydra offers no hook to save first. The
:class:`PreemptionGuard` therefore only records the signal; the trainer checks it after every
iteration (a consistent state), writes ``checkpoints/last.pt`` and ``status: preempted``, and then
calls the handler that was installed before it (submitit's ``checkpoint_and_try_requeue``: requeue and
exit). The requeued job runs the same Hydra job in the same directory and resumes from ``last.pt``.
Without a previous handler, :class:`PreemptedError` ends the run with a non-zero exit.
"""

from __future__ import annotations

import logging
import signal
import threading
from types import FrameType
from typing import Any

__all__ = ["PreemptedError", "PreemptionGuard", "was_preempted"]

log = logging.getLogger(__name__)

_HANDED_OVER = False


class PreemptedError(RuntimeError):
    """The run stopped on a preemption/timeout signal after saving its checkpoint."""


def was_preempted() -> bool:
    """Whether this process stopped training because of a preemption signal."""
    return _HANDED_OVER


class PreemptionGuard:
    """Defers SIGUSR2/SIGTERM to :meth:`hand_over` (a no-op outside the main thread)."""

    SIGNALS = (signal.SIGUSR2, signal.SIGTERM)

    def __init__(self) -> None:
        self.signum: int | None = None
        self._frame: FrameType | None = None
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> PreemptionGuard:
        if threading.current_thread() is threading.main_thread():
            for sig in self.SIGNALS:
                self._previous[sig] = signal.getsignal(sig)
                signal.signal(sig, self._record)
        return self

    def __exit__(self, *exc: object) -> None:
        self._restore()

    def _record(self, signum: int, frame: FrameType | None) -> None:
        log.warning("received %s: stopping after this iteration to save a checkpoint",
                    signal.Signals(signum).name)
        self.signum, self._frame = signum, frame

    def _restore(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous = {}

    @property
    def requested(self) -> bool:
        return self.signum is not None

    def hand_over(self, call_previous: bool = True) -> None:
        """Call the handler that was installed before (submitit: requeue + exit), then stop.

        Args:
            call_previous: False on ranks other than 0, which only stop (rank 0 requeues the job).
        """
        global _HANDED_OVER
        _HANDED_OVER = True
        signum = self.signum if self.signum is not None else signal.SIGUSR2
        previous = self._previous.get(signum)
        self._restore()
        if call_previous and callable(previous):
            previous(signum, self._frame)  # submitit's requeue handler exits the process on rank 0
        raise PreemptedError(f"stopped on {signal.Signals(signum).name} after saving checkpoints/last.pt; "
                             "start the same command in the same run directory to resume")

"""Keep Python's cyclic garbage collector (``gc``) off the objects that exist before a run, while it runs.

When a run starts, the process already holds every object that torch, Hydra, the composed config and
embodirl's modules created, and ``gc`` tracks them all. They outlive the run, yet ``gc`` walked all of them in
every full (oldest-generation) collection, and the allocations of training set one off early in the run, in the
middle of a PPO update, where its pause is a large share of a short run. :func:`setup_objects_frozen` moves them
into ``gc``'s permanent generation (``gc.freeze()``), which collections skip, for the duration of the run; what
the run allocates is collected as before, and a full collection walks only that.

The rollout collector, the evaluator and the algorithm hold bound methods of themselves, so a finished run's
rollout and buffers are freed only by ``gc``. :func:`free_finished_run`, called once the run is dropped and
before the freeze ends, frees them in a walk of the run's own objects only, so a process that trains
again (a sweep in one process, the bench, the tests) does not carry them into its next run.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["free_finished_run", "setup_objects_frozen"]


@contextmanager
def setup_objects_frozen() -> Iterator[bool]:
    """Freeze the objects ``gc`` tracks now for the duration of the block, then unfreeze them.

    Yields:
        True if it froze them; False, leaving ``gc`` alone, if something else had already frozen objects
        (that code decides when to unfreeze).
    """
    if gc.get_freeze_count():
        yield False
        return
    gc.freeze()
    try:
        yield True
    finally:
        gc.unfreeze()


def free_finished_run() -> None:
    """Free a finished run's objects now: call it once nothing refers to the run, inside
    :func:`setup_objects_frozen` (then the full collection walks only the run's objects)."""
    gc.collect()

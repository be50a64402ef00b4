"""How a console script's process ends: its work done, without tearing down the interpreter.

Once torch is imported, a normal interpreter exit spends a large part of a short run's wall time freeing every
module and object one by one (the user waits at the prompt for it, with nothing left to do). A console script
instead finishes what a normal exit finishes that matters, in the interpreter's own order (it runs the threading
exit hooks, which stop ``concurrent.futures`` workers such as torch's inductor prefetch pool, waits for non-daemon
threads, runs the ``atexit`` handlers: logging's flush, multiprocessing's child joins, wandb's, and flushes stdout
and stderr) and then ends the process at once with the same exit status. In-process callers (tests, notebooks)
call ``main`` directly and are never ended.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
import threading
from collections.abc import Callable
from typing import NoReturn

__all__ = ["run_console_script"]


def run_console_script(main: Callable[[], object]) -> NoReturn:
    """Run ``main`` and end the process with its exit status (``sys.exit``'s rules: None is 0, an int is itself,
    anything else is printed to stderr and is 1). An exception other than ``SystemExit`` propagates as usual,
    with its traceback and a normal interpreter exit."""
    try:
        returned = main()
        code = returned if isinstance(returned, int) else 0
    except SystemExit as stop:
        code = _status(stop.code)
    # What the interpreter's exit does first: the threading exit hooks (an idle executor worker waits for its hook
    # to stop it; joining it before would wait forever), then the join of every non-daemon thread.
    threading._shutdown()  # type: ignore[attr-defined]
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a closed or broken pipe: nothing more can go there
            stream.flush()
    os._exit(code)


def _status(code: object) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1

"""How a console script's process ends: its work done, without tearing down the interpreter.

Once torch is imported, a normal interpreter exit spends a large part of a short run's wall time freeing every
module and object one by one (the user waits at the prompt for it, with nothing left to do). A console script
instead finishes what a normal exit finishes that matters, in the interpreter's own order (it runs the threading
exit hooks, which stop ``concurrent.futures`` workers such as torch's inductor prefetch pool, waits for non-daemon
threads, runs the ``atexit`` handlers: logging's flush, multiprocessing's child joins, wandb's, and flushes stdout
and stderr) and then ends the process at once with the same exit status. In-process callers (tests, notebooks)
call ``main`` directly and are never ended.

Ctrl-C ends a command with one line and exit status 130, never a traceback: :func:`interrupted` for a command that
knows what it leaves behind, :func:`run_console_script` for an interrupt nothing else caught, and
:func:`install_interrupt_hook` (run when ``embodirl.cli`` is imported by a console script or ``python -m
embodirl.cli...``) for one that lands while the script's own modules (Hydra, torch) are still being imported.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import NoReturn

__all__ = ["install_interrupt_hook", "interrupted", "run_console_script"]

INTERRUPTED = 130  # 128 + SIGINT, what a shell shows for a program stopped by Ctrl-C


def run_console_script(main: Callable[[], object]) -> NoReturn:
    """Run ``main`` and end the process with its exit status (``sys.exit``'s rules: None is 0, an int is itself,
    anything else is printed to stderr and is 1). Ctrl-C that ``main`` did not report is one line and 130; another
    exception propagates as usual, with its traceback and a normal interpreter exit."""
    try:
        returned = main()
        code = returned if isinstance(returned, int) else 0
    except SystemExit as stop:
        code = _status(stop.code)
    except KeyboardInterrupt:
        print(f"{_prog()}: aborted on Ctrl-C", file=sys.stderr)
        code = INTERRUPTED
    _end(code)


def interrupted(prog: str, outcome: str) -> NoReturn:
    """End a command stopped by Ctrl-C: ``<prog>: aborted on Ctrl-C; <outcome>`` on stderr, exit status 130.

    Args:
        prog: The command's name.
        outcome: What the interrupted command leaves behind, and what to run next.
    """
    print(f"{prog}: aborted on Ctrl-C; {outcome}", file=sys.stderr)
    sys.exit(INTERRUPTED)


def install_interrupt_hook() -> None:
    """Make a Ctrl-C that no code catches (it lands while the console script's modules are imported) one line and
    exit status 130 instead of a traceback of the import machinery.

    Only in the process of a console script (``embodirl-*``, ``python -m embodirl.cli.<script>``) and only over
    Python's own hook: a program or notebook that imports ``embodirl.cli`` keeps its own handling.
    """
    if sys.excepthook is sys.__excepthook__ and _console_module() is not None:
        sys.excepthook = _one_line_interrupt


def _one_line_interrupt(kind: type[BaseException], value: BaseException, tb: TracebackType | None) -> None:
    if not issubclass(kind, KeyboardInterrupt):
        sys.__excepthook__(kind, value, tb)
        return
    print(f"{_prog()}: aborted on Ctrl-C while starting; nothing was run", file=sys.stderr)
    _end(INTERRUPTED)


def _console_module() -> str | None:
    """``embodirl.cli`` for a console script's process, the module of ``python -m embodirl.cli.<module>``, or None."""
    if Path(sys.argv[0]).name.startswith("embodirl-"):
        return "embodirl.cli"
    args = sys.orig_argv[1:]
    module = args[args.index("-m") + 1] if "-m" in args[:-1] else ""
    return module if module.startswith("embodirl.cli.") else None


def _prog() -> str:
    """The command's name: the console script's, or the one whose entry point is ``python -m``'s module."""
    module = _console_module()
    if module is None or module == "embodirl.cli":
        return Path(sys.argv[0]).name
    from importlib.metadata import entry_points

    names = [e.name for e in entry_points(group="console_scripts") if e.value.split(":")[0] == module]
    return names[0] if names else f"python -m {module}"


def _end(code: int) -> NoReturn:
    """Finish what the interpreter's exit finishes that matters, then end the process with ``code``."""
    if code == INTERRUPTED:
        # The line that reported the stop is the whole report: an import cut short by Ctrl-C (torch's) leaves its
        # loggers unconfigured, so its exit hooks' INFO lines (``FakeTensor cache stats``) would follow it.
        logging.disable(logging.INFO)
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

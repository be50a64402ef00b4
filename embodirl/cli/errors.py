"""How the console scripts end: every failure a user can fix is one line on stderr and an exit status.

Exit statuses:

* 2: bad input: an unknown option or key, a wrong type or impossible value, a missing, corrupt or hostile
  checkpoint, a changed config for an existing run, a busy or uncreatable run directory;
* 1: the machine failed the run (disk full, unwritable file, a logger error); unexpected errors (with a traceback);
* 3: training diverged (a non-finite loss, or a metric beyond ``trainer.divergence``);
* 124: preempted (SIGTERM/SIGUSR2);
* 130: Ctrl-C;
* 141: the reader of the output went away (e.g. ``--cfg job`` piped into ``head``); nothing printed.

:func:`hydra_entry` runs a ``@hydra.main`` function with Hydra's own error report turned off
(``HYDRA_FULL_ERROR=1`` makes Hydra re-raise) so composition errors get the same one-line treatment;
set ``HYDRA_FULL_ERROR=1`` yourself to see full tracebacks instead. It first refuses an empty output
directory on the command line (``hydra.run.dir=``: Hydra would write into the current directory).
"""

from __future__ import annotations

import errno
import logging
import os
import re
import sys
import traceback
from collections.abc import Callable
from typing import Any, NoReturn

from embodirl.errors import CheckpointError, ConfigError, DivergedError

__all__ = ["check_output_dirs", "exit_code", "fail", "hydra_entry", "message", "one_line"]

log = logging.getLogger(__name__)


def one_line(text: str) -> str:
    """``text`` on one line: newlines and runs of whitespace become single spaces."""
    return " ".join(str(text).split())


def _moved_key_message(text: str) -> str | None:
    if "Could not override '" not in text:
        return None
    from embodirl.config.run import MOVED_KEYS  # the schemas: only for an override Hydra refused

    for old, new in MOVED_KEYS.items():
        if f"Could not override '{old}'" in text:
            value = re.search(rf"\+{re.escape(old)}=(.+)", text)  # to the line's end: {a: 1} has a space
            return (f"{old} is no longer a key: it was renamed to {new}. "
                    f"Fix: pass {new}={value.group(1) if value else '<value>'}")
    return None


def _hydra_message(exc: BaseException) -> str:
    from hydra.errors import MissingConfigException, OverrideParseException

    moved = _moved_key_message(str(exc))
    if moved:
        return moved

    if isinstance(exc, MissingConfigException) and exc.options:
        group, _, option = str(exc.missing_cfg_file).rpartition("/")
        choices = ", ".join(exc.options)
        if group:
            return (f"{group}={option} is invalid: expected one of: {choices} (the options in {group}/). "
                    f"Fix: pass {group}={exc.options[0]} (or another of: {choices})")
    text = str(exc).split("Config search path:")[0]
    if isinstance(exc, OverrideParseException):
        text = text.replace(f"Error parsing override '{exc.override}'", "")
        return (f"cannot parse the override {exc.override!r}: {one_line(text)} Fix: write it as key=value "
                "(quote values with special characters, e.g. key='a,b')")
    if exc.__cause__ is not None and "struct" in str(exc.__cause__):
        text += f" ({one_line(str(exc.__cause__).splitlines()[0])})"
    return one_line(text)


def _os_message(exc: OSError) -> str:
    path = exc.filename or "a file"
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        fix = "free disk space there, or pass hydra.run.dir=<a directory on another disk>"
    elif exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        fix = "make it writable, or pass hydra.run.dir=<a writable directory>"
    elif exc.errno in (errno.ENOENT, errno.ENOTDIR):
        fix = "check the path, or pass hydra.run.dir=<a directory that can be created>"
    else:
        fix = "check the path and the file system, or pass hydra.run.dir=<another directory>"
    return f"{path}: {exc.strerror or type(exc).__name__} (errno {exc.errno}). Fix: {fix}"


def _link_refusal(exc: BaseException | None) -> BaseException | None:
    """The :class:`~embodirl.runtime.files.RunDirLinkError` behind ``exc`` (e.g. raised while Hydra resolved the
    output directory), or None."""
    from embodirl.runtime.files import RunDirLinkError

    for _ in range(8):  # a short chain: Hydra and OmegaConf wrap an error once or twice
        if exc is None or isinstance(exc, RunDirLinkError):
            return exc
        exc = exc.__cause__ or exc.__context__
    return None


def exit_code(exc: BaseException) -> int:
    """The exit status for ``exc`` (see the list in the module docstring)."""
    from hydra.errors import HydraException

    from embodirl.runtime.preemption import PreemptedError
    from embodirl.runtime.rundir import RunDirBusyError

    if isinstance(exc, KeyboardInterrupt):
        return 130
    if isinstance(exc, PreemptedError):
        return 124
    if isinstance(exc, DivergedError):
        return 3
    if (isinstance(exc, ConfigError | CheckpointError | RunDirBusyError | HydraException) or _is_sbatch_refusal(exc)
            or _link_refusal(exc)):
        return 2
    return 1


def message(exc: BaseException) -> str | None:
    """The one-line message for ``exc``, or None for an unexpected error (which deserves a traceback)."""
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from embodirl.runtime.preemption import Interrupted, PreemptedError
    from embodirl.runtime.rundir import RunDirBusyError

    loggers = sys.modules.get("embodirl.training.loggers")  # not imported (a refused config): none of its errors
    own = (ConfigError, CheckpointError, RunDirBusyError, DivergedError, *([loggers.LoggerError] if loggers else []))
    if isinstance(exc, Interrupted | PreemptedError):
        return one_line(str(exc))
    if isinstance(exc, KeyboardInterrupt):
        return "aborted on Ctrl-C; checkpoints/last.pt (if any) holds the last saved state"
    link = _link_refusal(exc)  # also when Hydra met it resolving the output directory
    if link is not None:
        return "error: " + one_line(str(link))
    if isinstance(exc, HydraException | OmegaConfBaseException):
        return "error: " + _hydra_message(exc)
    if isinstance(exc, own):
        return "error: " + one_line(str(exc))
    if isinstance(exc, OSError):
        return "error: " + _os_message(exc)
    if _is_sbatch_refusal(exc):
        from embodirl.runtime.slurm import explain_sbatch_error

        return "error: " + explain_sbatch_error(str(exc))
    return None


def _is_sbatch_refusal(exc: BaseException) -> bool:
    """submitit's FailedJobError carrying sbatch's own refusal (a request the cluster cannot serve)."""
    return type(exc).__name__ == "FailedJobError" and "sbatch: error" in str(exc)


def fail(prog: str, exc: BaseException, code: int | None = None) -> NoReturn:
    """Print ``exc`` as one line (or a traceback when unexpected) and exit with its status (or ``code``)."""
    text = message(exc)
    if text is None:
        traceback.print_exception(exc)
        text = f"error: unexpected {type(exc).__name__} (traceback above); please report it"
    print(f"{prog}: {text}", file=sys.stderr)
    sys.exit(exit_code(exc) if code is None else code)


OUTPUT_DIR_KEYS = ("hydra.run.dir", "hydra.sweep.dir", "hydra.sweep.subdir")


def check_output_dirs(args: list[str]) -> None:
    """Refuse an output directory override that is empty (or only quotes and spaces): Hydra would make it the
    current directory (or put every sweep job into the sweep directory itself).

    Raises:
        ConfigError: Naming the override.
    """
    for arg in args:
        key, sep, value = arg.partition("=")
        key = key.lstrip("+")
        if sep and key in OUTPUT_DIR_KEYS and not value.strip().strip("'\"").strip():
            example = "${hydra.job.num}" if key == "hydra.sweep.subdir" else "outputs/my_run"
            raise ConfigError(key, value, "a directory (an empty one would be the current directory)",
                              f"pass {key}={example}, or leave {key} out for the default")
        if sep:
            _check_output_dir(key, value.strip().strip("'\"").strip())


def _check_output_dir(key: str, value: str) -> None:
    """Refuse a run or sweep directory that is the current one (Hydra's files and every run's would land among
    the user's own), and a sweep subdirectory that is the same for every job (each job would take the others'
    directory: their checkpoints and metrics mixed)."""
    if key in ("hydra.run.dir", "hydra.sweep.dir") and "${" not in value and \
            os.path.realpath(os.path.expanduser(value)) == os.path.realpath(os.getcwd()):
        raise ConfigError(key, value, "a directory of its own (this is the current directory)",
                          f"pass {key}=outputs/my_run, or leave {key} out for the default")
    if key == "hydra.sweep.subdir" and "${" not in value:
        raise ConfigError(key, value, "a subdirectory that differs per job (this one is the same for every job, "
                          "so the jobs would share one run directory)",
                          "pass hydra.sweep.subdir='${hydra.job.num}', or leave it out for the default")


def _logging_os_error(exc: BaseException) -> OSError | None:
    """The OSError behind ``logging.config``'s "Unable to configure handler" (e.g. an unwritable ``train.log``)."""
    cause = exc.__cause__
    ok = isinstance(exc, ValueError) and str(exc).startswith("Unable to configure handler")
    return cause if ok and isinstance(cause, OSError) else None


def hydra_entry(prog: str, hydra_main: Callable[[], Any], config_name: str = "train") -> None:
    """Call a ``@hydra.main`` function, which composes a single run's config once (:mod:`embodirl.cli.composition`);
    a failure outside the task (composition, run directory) exits via :func:`fail`.

    An unknown key or option gets the closest real one (or the option that has the key) as its fix
    (:mod:`embodirl.cli.suggest`, which composes ``config_name`` with the command line's other overrides).
    """
    from embodirl.cli.composition import Composition, composed_once, parse_yaml_with_libyaml

    parse_yaml_with_libyaml()
    try:
        check_output_dirs(sys.argv[1:])
    except ConfigError as exc:
        fail(prog, exc)
    if os.environ.get("HYDRA_FULL_ERROR") == "1":  # the user asked for Hydra's full tracebacks
        with composed_once(sys.argv[1:]):
            hydra_main()
        return
    os.environ["HYDRA_FULL_ERROR"] = "1"  # Hydra re-raises instead of printing its multi-line report
    composition = Composition()
    try:
        with composed_once(sys.argv[1:]) as composition:
            hydra_main()
    except SystemExit:
        raise
    except BrokenPipeError:  # the reader went away (`embodirl-train --help | head`): stop quietly, as `cat` does
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # Python's exit flush fails no more
        sys.exit(141)  # 128 + SIGPIPE, what a shell shows for a program killed by a closed pipe
    except BaseException as exc:
        from hydra.errors import HydraException

        from embodirl.cli.suggest import explain_composition_error, mapping_override

        retry = mapping_override(exc, sys.argv[1:], config_name) if isinstance(exc, HydraException) else None
        if retry is not None:  # KEY={name: ...} for a mapping of the user's entries: Hydra takes it as +KEY=...
            sys.argv[1:] = retry
            hydra_entry(prog, hydra_main, config_name)
            return
        text = None
        if isinstance(exc, HydraException) and not _moved_key_message(str(exc)):
            text = explain_composition_error(exc, sys.argv[1:], config_name,
                                             composed=composition.without_failed(exc, config_name))
        if text is not None:
            print(f"{prog}: error: {text}", file=sys.stderr)
            sys.exit(2)
        cause = _logging_os_error(exc)  # Hydra's job logging could not open <run_dir>/train.log (read-only, ...)
        if cause is not None:
            fail(prog, cause, code=2)
        # An OSError outside the task: the run directory could not be created (a user's path: exit 2).
        fail(prog, exc, code=2 if isinstance(exc, OSError) and not isinstance(exc, HydraException) else None)
    finally:
        os.environ.pop("HYDRA_FULL_ERROR", None)

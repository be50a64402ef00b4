"""Hydra command-line flags that embodirl's Hydra console scripts refuse before Hydra parses anything, and the
one-line answers to flags that Hydra's parser would meet with its usage only (:func:`check_arguments`).

``--experimental-rerun FILE`` makes Hydra unpickle FILE, and unpickling runs whatever code the file names.
embodirl never writes that pickle (Hydra's ``PickleJobInfoCallback`` is not configured), so the flag could
only ever load a file from elsewhere. Hydra's parser is :mod:`argparse`, which also accepts the flag as
``--experimental-rerun=FILE`` and abbreviated to any unique prefix (``--exp FILE``): every form is refused.
"""

from __future__ import annotations

import argparse
import difflib
import shlex
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

__all__ = ["RERUN_FLAG", "OneLineParser", "check_arguments", "refuse_rerun", "rerun_flag"]

RERUN_FLAG = "--experimental-rerun"


def rerun_flag(argv: Sequence[str]) -> str | None:
    """The flag as written in ``argv`` when it asks Hydra for ``--experimental-rerun`` (in any form argparse
    accepts), else None. No other Hydra option starts with ``--e``, so every prefix from ``--e`` is this one."""
    for arg in argv:
        name = arg.partition("=")[0]
        if len(name) > 2 and RERUN_FLAG.startswith(name):
            return name
    return None


def refuse_rerun(prog: str, argv: Sequence[str], fix: str) -> None:
    """Exit with status 2 and one line when ``argv`` holds ``--experimental-rerun`` (see the module docstring).

    Args:
        prog: The console script, e.g. ``embodirl-train``.
        argv: Its arguments (without the program name).
        fix: What to run instead.
    """
    flag = rerun_flag(argv)
    if flag is None:
        return
    written = "" if flag == RERUN_FLAG else f" (written {flag})"
    print(f"{prog}: error: {RERUN_FLAG}{written} is refused: Hydra unpickles its file, which can run any code, "
          f"and embodirl never writes that file. Fix: {fix}", file=sys.stderr)
    sys.exit(2)


def _flag_value(argv: Sequence[str], word: str) -> str:
    """The value given with an unknown flag: ``--lr=1e-3`` or ``--lr 1e-3`` (the next word, unless it is one)."""
    _, eq, value = word.partition("=")
    if eq:
        return value
    at = list(argv).index(word) + 1
    following = argv[at] if at < len(argv) else ""
    return following if following and not following.startswith("-") and "=" not in following else "<value>"


def _argument_error(prog: str, argv: Sequence[str], unknown: list[str], config_name: str) -> str:
    from embodirl.cli.suggest import key_meant

    flags = [word for word in unknown if word.startswith("-")]
    if flags:  # --learning-rate 1e-3: CleanRL's habit
        word = flags[0]
        value = _flag_value(argv, word)
        key, words = key_meant(word.partition("=")[0].lstrip("-").replace("-", "_"), config_name)
        said = f" (did you mean {words})" if key else ""
        fix = f"pass {key}={value}" if key else f"pass KEY={value} ({prog} --help lists every key)"
        return f"{word} is not an option of {prog}: settings are key=value overrides{said}. Fix: {fix}"
    late = [word for word in argv if word in ("-m", "--multirun")]
    if late:  # +experiment=x -m seed=0,1: argparse takes one run of overrides, before or after the flags
        command = shlex.join([prog, *late, *(word for word in argv if word not in late)])
        return f"{late[0]} comes after an override: -m goes first (before every key=value). Fix: {command}"
    return (f"unrecognized arguments: {' '.join(unknown)}: the flags go before the key=value overrides, which come "
            f"as one run. Fix: move the flags (-m, --cfg job, --config-dir DIR) to the front")


def check_arguments(prog: str, argv: Sequence[str], config_name: str = "train") -> None:
    """Exit with status 2 and one line where Hydra's parser would answer ``argv`` with its usage only: an option
    Hydra does not have (``--learning-rate 1e-3``: the key to pass instead) or ``-m`` after an override.

    Args:
        prog: The console script, e.g. ``embodirl-train``.
        argv: Its arguments (without the program name).
        config_name: The primary config whose keys a flag may have meant.
    """
    from hydra._internal.utils import get_args_parser

    _, unknown = get_args_parser().parse_known_args(list(argv))  # Hydra's own flags given wrongly: argparse says so
    if unknown:
        print(f"{prog}: error: {_argument_error(prog, argv, unknown, config_name)}", file=sys.stderr)
        sys.exit(2)


class OneLineParser(argparse.ArgumentParser):
    """:class:`argparse.ArgumentParser` whose errors are one line with a fix (instead of the usage), and which
    answers an option it does not have with the closest one it has (``--metrics`` -> ``--metric KEY``)."""

    def parse_args(self, args: Sequence[str] | None = None, namespace: Any = None) -> Any:  # type: ignore[override]
        words = list(sys.argv[1:] if args is None else args)
        self._check_options(words)
        return super().parse_args(words, namespace)

    def _check_options(self, words: list[str]) -> None:
        options = {o: action for action in self._actions for o in action.option_strings if o.startswith("--")}
        for word in words:
            name = word.partition("=")[0]
            if word == "--":
                return
            if not name.startswith("--") or any(o.startswith(name) for o in options):  # argparse takes a prefix
                continue
            close = difflib.get_close_matches(name, list(options), n=1, cutoff=0.6)
            if not close:
                self.error(f"{name} is not an option of {self.prog}")
            action = options[close[0]]
            usage = f"{close[0]} {action.metavar}" if action.metavar else close[0]
            self.exit(2, f"{self.prog}: error: {name} is not an option of {self.prog} (did you mean {usage}: "
                         f"{action.help}?). Fix: pass {usage} instead\n")

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}. Fix: see {self.prog} --help for the arguments and options\n")

"""Run the console scripts in this process: ``main()`` with ``sys.argv`` patched, its exit status and output.

A subprocess per case costs a Python start and a torch import (seconds); in process a bad input costs
the composition and the checks only. :func:`tests.conftest.in_process_run` restores the root logger's
handlers, which Hydra's job logging replaces, and fails the session on a hang.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from dataclasses import dataclass

import pytest

from tests.conftest import in_process_run


@dataclass
class Outcome:
    """What a console script did: exit status, stdout and stderr."""

    code: int
    out: str
    err: str


def _logger_handlers() -> dict[str, list[logging.Handler]]:
    loggers = [("", logging.getLogger()), *logging.Logger.manager.loggerDict.items()]
    return {name: list(logger.handlers) for name, logger in loggers if isinstance(logger, logging.Logger)}


@pytest.fixture
def cli(monkeypatch, capsys) -> Callable[..., Outcome]:
    """``cli(prog, args)`` runs ``embodirl-train`` or ``embodirl-eval`` in process and returns its :class:`Outcome`;
    it also checks that no logger keeps a handler the run added."""
    from embodirl.cli import evaluate, train

    mains = {"embodirl-train": train.main, "embodirl-eval": evaluate.main}
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")

    def run(prog: str, args: list[str], timeout_s: float = 120) -> Outcome:
        capsys.readouterr()
        before = _logger_handlers()
        monkeypatch.setattr(sys, "argv", [prog, *args])
        code: int | str | None = 0
        with in_process_run(timeout_s):
            try:
                mains[prog]()
            except SystemExit as exc:
                code = exc.code
        out, err = capsys.readouterr()
        leaked = {name: h for name, h in _logger_handlers().items() if name in before and h != before[name]}
        assert not leaked, f"logging handlers left behind by {prog} {args}: {leaked}"
        return Outcome(0 if code is None else code if isinstance(code, int) else 1, out, err)

    return run

"""Shared helpers: compose configs, run the console scripts in this process (the ``cli`` fixture) or, where a test
is about processes, in subprocesses (:func:`run_cli`).

A subprocess per case costs a Python start and a torch import (seconds); in process a bad input costs the
composition and the checks only. :func:`in_process_run` restores the root logger's handlers, which Hydra's job
logging replaces, and fails the session on a hang.

Tiers: ``pytest -m "not slow"`` is the fast tier for the edit-test loop; ``-m slow`` (see pyproject's markers)
holds whole training runs to a threshold, torch.compile/inductor, launchers and other fresh-process tests.
"""

from __future__ import annotations

import contextlib
import faulthandler
import logging
import os
import pickle
import subprocess
import sys
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from embodirl.accel import deferred_dynamo

# As in the console scripts' process (embodirl/cli/__init__.py), before torch is imported: tensordict's import then
# leaves torch._dynamo unloaded until a test compiles, so no test process pays for dynamo unless it traces.
deferred_dynamo.install()

import torch  # noqa: E402 (after the hook, which only works when it comes first)
from hydra import compose, initialize_config_module  # noqa: E402
from omegaconf import DictConfig  # noqa: E402

from embodirl.cli.composition import parse_yaml_with_libyaml  # noqa: E402

torch.set_num_threads(1)
parse_yaml_with_libyaml()  # as every console script does before it composes: the configs composed here are the same

# Small, fast settings for runs that only need to exercise the machinery (evaluations of 4 episodes: push_cube's
# episodes run to their time limit).
TINY = ["env.num_envs=8", "algo.num_steps=16", "algo.minibatch_size=64", "trainer=debug",
        "trainer.total_env_steps=256", "eval.every_env_steps=128", "eval.num_envs=4", "eval.num_episodes=4",
        "trainer.checkpoint_every_env_steps=128", "logger.console=none", "device=cpu"]


_COMPOSED: dict[tuple[str, tuple[str, ...]], bytes] = {}  # pickled: a copy unpickles many times faster than deepcopy


def compose_config(overrides: list[str], config_name: str = "train") -> DictConfig:
    """Compose a config exactly as the CLI would, without running it.

    Hydra reads and merges every config file on each composition (a fifth of a second); the package's config files
    do not change while the tests run, so each distinct composition is made once per test process and every caller
    gets its own copy (unpickled) to read or change."""
    key = (config_name, tuple(overrides))
    if key not in _COMPOSED:
        with initialize_config_module("embodirl.conf", version_base="1.3"):
            _COMPOSED[key] = pickle.dumps(compose(config_name, overrides=list(overrides)))
    return pickle.loads(_COMPOSED[key])


@contextlib.contextmanager
def in_process_run(timeout_s: float) -> Iterator[None]:
    """Run a Hydra entry point in this process: a hang fails the session after ``timeout_s`` (faulthandler),
    and the root logger's handlers and level (which Hydra's job logging replaces) are restored afterwards."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    faulthandler.dump_traceback_later(timeout_s, exit=True, file=sys.__stderr__)
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()
        for handler in root.handlers:
            if handler not in handlers:
                handler.close()
        root.handlers[:], root.level = handlers, level


def train_summary(monkeypatch: pytest.MonkeyPatch, run_dir: Path, args: list[str], timeout_s: float = 600) -> dict:
    """Run ``embodirl-train *args hydra.run.dir=run_dir`` in this process (:func:`in_process_run`), require a
    clean exit, and return the run's ``summary.json``."""
    import json

    from embodirl.cli import train

    monkeypatch.setattr(sys, "argv", ["embodirl-train", *args, f"hydra.run.dir={run_dir}"])
    with in_process_run(timeout_s):
        try:
            train.main()
        except SystemExit as exc:
            assert exc.code in (0, None), exc.code
    return json.loads((run_dir / "summary.json").read_text())


def algo_on_cartpole(algo: str = "ppo", *overrides: str, **keys):
    """A small ``algo`` (8 CartPole envs, 16-step rollouts, minibatches of 32, layers of 16) built as the command
    line builds it, with further ``overrides`` and ``algo.<key>=<value>`` for each of ``keys``; returns it and its
    reset collector."""
    import json

    from embodirl.app.build import build_components

    small = ["device=cpu", f"algo={algo}", "env.num_envs=8", "algo.num_steps=16", "algo.minibatch_size=32",
             "policy.hidden_sizes=[16]", "trainer.total_env_steps=1024", "eval.num_envs=2"]
    algo_keys = [f"algo.{k}={json.dumps(v, separators=(',', ':'))}" for k, v in keys.items()]
    parts = build_components(compose_config([*small, *overrides, *algo_keys]))
    parts.collector.reset(seed=0)
    return parts.algo, parts.collector


def ppo_on_cartpole(**keys):
    """:func:`algo_on_cartpole` with PPO."""
    return algo_on_cartpole("ppo", **keys)


def representatives(fast: Collection[str], cases: Mapping[str, Any]) -> list[Any]:
    """A case table (id -> the case's argument, or a tuple of its arguments) for ``pytest.mark.parametrize``, with
    every case but the representatives named in ``fast`` marked slow: the fast tier runs one case of each kind the
    table holds, CI's full suite runs them all (pyproject's markers)."""
    unknown = sorted(set(fast) - set(cases))
    assert not unknown, f"no such case: {unknown}"
    return [pytest.param(*(case if isinstance(case, tuple) else (case,)), id=key,
                         marks=() if key in fast else pytest.mark.slow) for key, case in cases.items()]


def run_cli(script: str, args: list[str], cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    """Run an installed console script (falls back to ``python -m``) and capture its output."""
    module = {"embodirl-train": "embodirl.cli.train", "embodirl-eval": "embodirl.cli.evaluate",
              "embodirl-bench": "embodirl.cli.bench", "embodirl-report": "embodirl.cli.report"}[script]
    env = {**os.environ, "WANDB_MODE": "offline", "WANDB_SILENT": "true"}
    return subprocess.run([sys.executable, "-m", module, *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env=env)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked ``gpu`` need a CUDA device: skip them, saying so, where none is visible."""
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device (marked gpu)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _no_test_ends_the_process(monkeypatch):
    """A console script's ``console`` ends its process with ``os._exit``; called in process by mistake it would
    end the test session with status 0, hiding every result after it. Here it fails the test instead."""

    test_process, real_exit = os.getpid(), os._exit

    def refuse(code: int) -> None:
        if os.getpid() != test_process:  # a forked child ends itself this way: let it
            real_exit(code)
        raise AssertionError(f"os._exit({code}) called in the test process: call the script's main, not console")

    monkeypatch.setattr(os, "_exit", refuse)


@pytest.fixture
def tiny() -> list[str]:
    return list(TINY)


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

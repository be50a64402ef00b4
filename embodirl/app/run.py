"""The lifecycle of one training run: lock the run directory, check a resumed config, build, train, record the
run's fate in ``status.json``."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from embodirl.accel.garbage import free_finished_run, setup_objects_frozen
from embodirl.app.build import build, checked, resolved_config, wants_cuda
from embodirl.app.resume import check_resume_config
from embodirl.config.run import RunConfig
from embodirl.errors import ConfigError
from embodirl.runtime.checkpoint import load_checkpoint
from embodirl.runtime.distributed import init_distributed, shutdown
from embodirl.runtime.preemption import StopSignals
from embodirl.runtime.rank import env_rank
from embodirl.runtime.rundir import RunDirLock, remove_temp_files, write_hydra_files
from embodirl.runtime.status import fate_of, write_status
from embodirl.training.summary import SUMMARY_KEYS

__all__ = ["OBJECTIVES", "check_objective", "env_label", "experiment_env", "run_training", "wandb_identity"]

log = logging.getLogger(__name__)


OBJECTIVES = (*SUMMARY_KEYS, "solved_env_steps", "solved_wall_time_s", "env_steps", "wall_time_s", "sps")


def check_objective(key: str) -> None:
    """The value a sweep optimises must be a summary key (``loss/*`` and ``diag/*`` are also accepted)."""
    if key not in OBJECTIVES and not str(key).startswith(("loss/", "diag/")):
        raise ConfigError("objective", key, "a summary key: " + ", ".join(OBJECTIVES),
                          "pass objective=eval/return_mean")


def wandb_identity(choices: Mapping[str, Any], seed: int, sweep: tuple[str, list[str]] | None,
                   env: Mapping[str, Any] | None = None,
                   experiment_env: Mapping[str, Any] | None = None) -> tuple[str, str]:
    """Default wandb ``(name, group)``: ``<what>-seed<seed>``, grouped by ``<what>``, where ``<what>`` is the
    experiment (``ppo_pendulum``) when the run trains the experiment's own env, else ``<algo>-<env>`` with the env
    named by :func:`env_label` (``ppo-Pendulum-v1``: every gymnasium id shares ``env=gym``, every vector env
    ``env=gym_vector``, and their runs must not share a name). In a sweep the name adds the job's overrides and
    the group is the sweep directory, so sweep runs never collide.

    Args:
        choices: Config group choices, e.g. ``{"algo": "ppo", "env": "cartpole"}``.
        seed: The run seed.
        sweep: ``(sweep_dir, job_overrides)`` for a multirun job, else None.
        env: The run's env node.
        experiment_env: The env node the experiment composes by itself (:func:`experiment_env`); the experiment
            names the run only when ``env`` is that env (``+experiment=ppo_push_cube env=cartpole`` is
            ``ppo-cartpole``). None: not known, the experiment names it.
    """
    env_node = env or {}
    label = env_label(env_node, str(choices.get("env", "env")))
    experiment = choices.get("experiment")
    if experiment and experiment_env is not None and env_label(experiment_env, "") != env_label(env_node, ""):
        experiment = None
    base = experiment or f"{choices.get('algo', 'algo')}-{label}"
    name = f"{base}-seed{seed}"
    if sweep is None:
        return name, base
    sweep_dir, overrides = sweep
    extra = " ".join(o for o in overrides if not o.startswith("seed="))
    return (f"{name} {extra}" if extra else name), sweep_dir


def env_label(env: Mapping[str, Any], option: str) -> str:
    """The env a run trains, for its name: a gymnasium ``id``, else ``make``'s target (an import path, or a
    node's ``_target_``), else the env class, else ``option`` (the env group's option)."""
    make = env.get("make")
    target = make.get("_target_") if isinstance(make, Mapping) else make
    for name in (env.get("id"), target):
        if isinstance(name, str) and name:
            return name
    return option or str(env.get("_target_", ""))


def experiment_env(config_name: str, overrides: list[str], env: Any | None = None) -> Any | None:
    """The env node the experiment among ``overrides`` (``+experiment=x``) composes with nothing else changed;
    None without an experiment, or where it does not compose alone. Called inside the Hydra app (its search path).

    ``env``, the run's own env node, is that node when the experiment is the run's only override: then nothing
    is composed again (a run's second composition would cost as much as its first)."""
    from hydra import compose
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    chosen = [o for o in overrides if o.lstrip("+").split("=", 1)[0] == "experiment"]
    if not chosen:
        return None
    if env is not None and len(overrides) == 1:
        return env
    try:
        return compose(config_name=config_name, overrides=chosen[-1:]).env
    except (HydraException, OmegaConfBaseException):
        return None


def _checkpoint_config(run_dir: Path, resume: str | None) -> tuple[Any, str | None] | None:
    """The config the run continues from and the file it came from when not its own ``last.pt`` (None: a fresh
    start): the run directory's ``last.pt`` wins over ``trainer.resume``, as in :class:`Checkpointer`."""
    path = run_dir / "checkpoints" / "last.pt"
    if path.exists():
        return load_checkpoint(path, key="checkpoint")["config"], None
    if resume:
        return load_checkpoint(resume, key="trainer.resume")["config"], f"trainer.resume={str(resume)!r}"
    return None


def run_training(cfg: DictConfig, run_dir: str | Path, hydra_files: Mapping[str, str] | None = None,
                 run_name: tuple[str, str] = ("", ""), locked: bool = False,
                 run: RunConfig | None = None) -> dict[str, Any]:
    """Train with ``cfg`` in ``run_dir``, continuing from its ``checkpoints/last.pt`` if present.

    Rank 0 holds the run directory's lock for the whole run, removes debris of interrupted writes,
    refuses a changed config for an existing run (before writing anything), writes ``hydra_files`` into
    ``.hydra/`` and records the run's fate in ``status.json`` (``running``, then ``completed``,
    ``failed``, ``preempted`` or ``interrupted``, the same status ``summary.json`` carries).

    Args:
        cfg: The composed config.
        run_dir: The run directory.
        hydra_files: ``.hydra/`` file name -> YAML text (the CLI passes Hydra's three files).
        run_name: Default wandb ``(name, group)`` (:func:`wandb_identity`).
        locked: The caller holds ``run_dir``'s :class:`RunDirLock` already (``embodirl-train`` takes it before
            importing torch, so that a busy directory is told at once).
        run: ``cfg`` checked already (``embodirl-train`` checks it before importing torch); None: checked here.

    Returns:
        The summary also written to ``run_dir/summary.json``.

    Raises:
        RunDirBusyError: Another process holds the run directory (nothing was written).
        RunDirLinkError: An entry of the run directory that embodirl writes is a link (nothing was written).
        ConfigError: A bad value; raised before any training.
        CheckpointError: A missing, corrupt or incompatible checkpoint, or a changed config for an existing run.
        DivergedError: Training diverged (a non-finite loss, or a metric beyond ``trainer.divergence``); the last
            good checkpoint is kept.
        PreemptedError, Interrupted, KeyboardInterrupt: Stopped by a signal (see :mod:`embodirl.runtime.preemption`).
    """
    run_dir = Path(run_dir)
    main_rank = env_rank() == 0
    with (RunDirLock(run_dir) if main_rank and not locked else contextlib.nullcontext()), StopSignals(defer=False):
        config = resolved_config(cfg)
        run = checked(cfg) if run is None else run
        if main_rank:
            _prepare(run, run_dir, config, hydra_files)
        try:
            check_objective(run.objective)
            with setup_objects_frozen():  # full collections walk only what the run itself allocates
                summary = _train(run, run_dir, config, run_name)
                free_finished_run()  # the trainer is gone: free its buffers before a sweep's next job
        except BaseException as exc:
            if main_rank:
                _record(run_dir, fate_of(exc), exc=exc)
            raise
        if main_rank:
            objective = summary.get(run.objective)
            _record(run_dir, "completed", objective_key=run.objective,
                    objective=None if objective is None else float(objective), stop_reason=summary["stop_reason"],
                    stop_condition=summary.get("stop_condition"))
        return summary


def _prepare(run: RunConfig, run_dir: Path, config: dict[str, Any], hydra_files: Mapping[str, str] | None) -> None:
    """Rank 0, before anything is built: clear debris, refuse a changed config for an existing run (before
    writing anything), write ``.hydra/`` and the ``running`` status."""
    remove_temp_files(run_dir)
    trainer = run.trainer_config()  # the run lifecycle's keys live there
    previous = _checkpoint_config(run_dir, trainer.resume)
    if previous is not None:
        changes = check_resume_config(run_dir, previous[0], config, trainer.allow_config_change, previous[1])
        if changes:
            what = f"starting {run_dir} from {previous[1]}" if previous[1] else f"continuing {run_dir}"
            log.info("%s with config changes: %s", what, "; ".join(changes))
    if hydra_files:
        write_hydra_files(run_dir, hydra_files)
    write_status(run_dir, "running")


def _record(run_dir: Path, status: str, **fields: Any) -> None:
    """Write ``status.json``; when the disk itself fails, log one line instead of hiding the original error."""
    try:
        write_status(run_dir, status, **fields)
    except OSError as exc:
        log.error("could not record status %r in %s: %s", status, run_dir / "status.json", exc)


def _train(run: RunConfig, run_dir: Path, config: dict, run_name: tuple[str, str]) -> dict[str, Any]:
    dist = init_distributed(use_cuda=wants_cuda(run.device))
    try:
        trainer = build(run, run_dir, config, run_name, dist)
        try:
            return trainer.train()
        finally:
            trainer.collector.env.close()
            trainer.evaluation.env.close()
    finally:
        shutdown()

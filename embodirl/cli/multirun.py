"""Checks of a multirun before Hydra launches anything: a sweep that runs nothing, a launcher that cannot start.

``-m seed='range(0)'`` would exit 0 having run no job, ``-m hydra/launcher=slurm`` off a cluster dies in
submitit ("Could not detect srun"), ``hydra.launcher.tasks_per_node=0`` fails inside the launcher, and a job that
asks for GPUs, cores or memory that no node of its partition has is refused by sbatch mid-sweep.
:func:`check_multirun` refuses each in one line first. It composes Hydra's node once (no torch import) and asks
``sinfo`` once for a SLURM launcher.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Sequence
from typing import Any

from embodirl.errors import ConfigError, check, is_int

__all__ = ["check_multirun"]

# Launcher counts: (minimum, what it counts). gpus_per_node may also be null (CPU-only partitions).
_LAUNCHER_INTS = {"nodes": 1, "tasks_per_node": 1, "cpus_per_task": 1, "timeout_min": 1, "array_parallelism": 1,
                  "gpus_per_node": 0, "max_num_timeout": 0, "signal_delay_s": 0}


def _check_sweeps(overrides: list[Any]) -> None:
    """Every sweep override (``a=1,2``, ``range(...)``) must give at least one value."""
    for override in overrides:
        if not override.is_sweep_override():
            continue
        try:
            values = list(override.sweep_string_iterator())
        except Exception:
            continue
        text = override.input_line.split("=", 1)[1]
        check(bool(values), override.key_or_group, text, "a sweep of at least one value (this one has none, so the "
              "multirun would run no job)", f"pass e.g. {override.key_or_group}='range(0,3)' (range stops before "
              "its end)", absolute=True)


def _check_launcher(launcher: Any, choice: str | None) -> None:
    """The launcher's counts are in range, and a SLURM launcher finds SLURM's commands."""
    for key, minimum in _LAUNCHER_INTS.items():
        value = launcher.get(key) if hasattr(launcher, "get") else None
        if value is None and (key == "gpus_per_node" or key not in launcher):
            continue
        check(is_int(value) and value >= minimum, f"hydra.launcher.{key}", value, f"an int >= {minimum}",
              f"pass hydra.launcher.{key}={max(minimum, 1)}", absolute=True)
    mem = launcher.get("mem_gb") if hasattr(launcher, "get") else None
    check(mem is None or (isinstance(mem, int | float) and not isinstance(mem, bool) and mem > 0),
          "hydra.launcher.mem_gb", mem, "a number > 0 (GB per job)", "pass hydra.launcher.mem_gb=4", absolute=True)
    if "slurm" in str(launcher.get("_target_", "")).lower():
        _check_signal_delay(launcher)
        missing = [tool for tool in ("sbatch", "srun") if shutil.which(tool) is None]
        if missing:
            raise ConfigError("hydra/launcher", choice or "slurm", "a launcher this machine can start: SLURM's "
                              f"{' and '.join(missing)} {'is' if len(missing) == 1 else 'are'} not on PATH (this is "
                              "not a SLURM login node)", "run the sweep on a SLURM login node, or pass "
                              "hydra/launcher=local to run its jobs on this machine", absolute=True)
        _check_cluster(launcher)


# slurmctld checks time limits on a 30-s timer and signals a job at the first tick with under signal_delay_s + 30 s
# left: with less of the limit than that, the signal can come at the job's start, before anything is saved, and the
# job requeues itself until max_num_timeout is spent without training.
SLURM_SIGNAL_TICK_S = 30


def _check_signal_delay(launcher: Any) -> None:
    """SIGUSR2's delay leaves the job time to train before SLURM's timer can send it."""
    timeout_min, delay = launcher.get("timeout_min"), launcher.get("signal_delay_s")
    if not (is_int(timeout_min) and is_int(delay)):
        return
    limit_s = timeout_min * 60
    check(delay + SLURM_SIGNAL_TICK_S < limit_s, "hydra.launcher.signal_delay_s", delay,
          f"under {limit_s - SLURM_SIGNAL_TICK_S} s for hydra.launcher.timeout_min={timeout_min} (SLURM's "
          f"{SLURM_SIGNAL_TICK_S}-s timer can signal that much early: with this delay the job is signalled at its "
          "start and requeued before it trains)",
          f"pass hydra.launcher.signal_delay_s={limit_s // 4}, or a larger hydra.launcher.timeout_min",
          absolute=True)


def _check_cluster(launcher: Any) -> None:
    """What the job asks for exists on the cluster (``sinfo``): its partition, and GPUs, cores and memory on one
    node of it. sbatch would refuse the same later, in words that name no config key. Every request that does not
    fit is named in the one fix, so that following it submits. Skipped where sinfo cannot tell; sbatch then has
    the last word (see :func:`embodirl.runtime.slurm.explain_sbatch_error`)."""
    from embodirl.runtime.slurm import cluster_partitions

    partitions = cluster_partitions()
    if not partitions:
        return
    names = {p.name: p for p in partitions}
    wanted = launcher.get("partition")
    default = next((p for p in partitions if p.default), partitions[0])
    check(wanted is None or wanted in names, "hydra.launcher.partition", wanted,
          f"a partition of this cluster: one of {', '.join(sorted(names))}",
          f"pass hydra.launcher.partition={default.name}", absolute=True)
    part = names[wanted] if wanted is not None else default
    tasks = launcher.get("tasks_per_node") or 1
    asked = {"gpus_per_node": launcher.get("gpus_per_node") or 0, "cpus_per_task": launcher.get("cpus_per_task") or 1,
             "mem_gb": launcher.get("mem_gb") or 0}
    limits = {"gpus_per_node": part.gpus, "cpus_per_task": part.cpus // tasks, "mem_gb": part.memory_mb // 1024}
    too_big = [key for key, value in asked.items() if (limits[key] or key == "gpus_per_node") and value > limits[key]]
    if not too_big:
        return
    first = too_big[0]
    fixes = [f"hydra.launcher.{key}={'null' if key == 'gpus_per_node' and not limits[key] else max(1, limits[key])}"
             for key in too_big]
    node = f"one node of partition {part.name} has {part.gpus} GPUs, {part.cpus} CPUs, {part.memory_mb} MB"
    expected = (f"a request that fits a node ({node}; asked: {tasks} task(s) x {asked['cpus_per_task']} CPUs, "
                f"{asked['gpus_per_node']} GPUs, {asked['mem_gb']} GB)")
    no_gpus = "gpus_per_node" in too_big and not part.gpus
    cpu_profile = " (hydra/launcher=slurm_cpu is the CPU profile)" if no_gpus else ""
    raise ConfigError(f"hydra.launcher.{first}", asked[first], expected, f"pass {' '.join(fixes)}{cpu_profile}",
                      absolute=True)


def check_multirun(argv: Sequence[str], config_name: str = "train") -> Any:
    """Refuse a multirun (``-m``) whose sweeps give no value or whose launcher cannot start; no-op otherwise.

    Returns:
        The multirun's ``hydra`` node (its sweep directory and choices, for the line that reports a Ctrl-C), or
        None for a single run.

    Raises:
        ConfigError: An empty sweep, a launcher count out of range, or a SLURM launcher without SLURM.
    """
    from hydra import compose, initialize_config_module
    from hydra._internal.utils import get_args_parser
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.override_parser.overrides_parser import OverridesParser

    args = get_args_parser().parse_args(list(argv))
    if not args.multirun:
        if any(o.split("=", 1)[0].lstrip("+") in ("sweep", "hydra.mode") for o in args.overrides):
            _register_launchers()  # a ready sweep (sweep=seeds) is a multirun by its hydra.mode
        return None
    overrides = OverridesParser.create().parse_overrides(args.overrides)  # one per override, in order
    _check_sweeps(overrides)
    single = [line for line, o in zip(args.overrides, overrides, strict=True) if not o.is_sweep_override()]
    if args.config_dir is not None:
        single.append(f"hydra.searchpath=[file://{os.path.abspath(args.config_dir)}]")
    GlobalHydra.instance().clear()
    try:
        with initialize_config_module("embodirl.conf", version_base="1.3"):
            cfg = compose(config_name, overrides=single, return_hydra_config=True)
    finally:
        GlobalHydra.instance().clear()
    _check_launcher(cfg.hydra.launcher, cfg.hydra.runtime.choices.get("hydra/launcher"))
    _register_launchers()
    if "slurm" in str(cfg.hydra.launcher.get("_target_", "")).lower():
        _follow_jobs_without_accounting()
    return cfg.hydra


def _register_launchers() -> None:
    """Make embodirl's launchers (``hydra_plugins.embodirl_launcher``) known to Hydra: it finds plugins by walking
    the ``hydra_plugins`` folders, which misses an editable install (``pip install -e .``), and then refuses them."""
    from hydra.core.plugins import Plugins

    from hydra_plugins.embodirl_launcher import LocalLauncher, SlurmLauncher

    for launcher in (LocalLauncher, SlurmLauncher):
        Plugins.instance().register(launcher)


def _follow_jobs_without_accounting() -> None:
    """On a cluster without accounting (sacct fails), follow the jobs through squeue (see
    :func:`embodirl.runtime.slurm.squeue_watcher`: otherwise a cancelled job keeps the sweep waiting for ever)."""
    from submitit.slurm.slurm import SlurmJob

    from embodirl.runtime.slurm import accounting_available, squeue_watcher

    if accounting_available():
        return
    print("embodirl: SLURM accounting is not available here (sacct fails, as on clusters without slurmdbd): "
          "job states are read from squeue instead", file=sys.stderr)
    SlurmJob.watcher = squeue_watcher()

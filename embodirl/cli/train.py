"""``embodirl-train``: compose a config with Hydra and train.

Examples::

    embodirl-train                                  # PPO on the batched CartPole until solved
    embodirl-train algo=grpo env=cartpole           # GRPO (selects policy=actor_only)
    embodirl-train algo.clip_coef=0.1 env.num_envs=512 seed=3 device=cpu
    embodirl-train env=gym env.id=Pendulum-v1 trainer.total_env_steps=200000
    embodirl-train -m algo.learning_rate=1e-3,2e-3 seed='range(0,3)'
"""

from __future__ import annotations

import logging
import math
import os
import shlex
import sys
from pathlib import Path
from typing import Any, NoReturn

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

log = logging.getLogger("embodirl.train")

PROG = "embodirl-train"


def _share_run_time() -> None:
    """Under torchrun, join the process group now and adopt rank 0's start time before Hydra names the run dir."""
    from embodirl.runtime.resolvers import RUN_TIME_ENV, START

    if int(os.environ.get("WORLD_SIZE", "1")) <= 1 or "RANK" not in os.environ or RUN_TIME_ENV in os.environ:
        return
    from embodirl.runtime.distributed import broadcast_object, init_distributed

    init_distributed(use_cuda=None)
    os.environ[RUN_TIME_ENV] = broadcast_object(START.isoformat())


def resume_command(hydra_cfg: Any, run_dir: Path, argv: list[str]) -> str:
    """The command that continues the run in ``run_dir``: the same overrides, with ``hydra.run.dir`` pinned to it
    (the default run directory is named by the start time, so "the same command" would start a new run)."""
    config_dir = [a for i, a in enumerate(argv) if a in ("--config-dir", "-cd") or (i and argv[i - 1] in
                                                                                    ("--config-dir", "-cd"))]
    hydra_overrides = [o for o in hydra_cfg.overrides.hydra if not str(o).startswith(("hydra.run.dir=", "hydra.mode="))]
    words = [PROG, *config_dir, *map(str, hydra_cfg.overrides.task), *map(str, hydra_overrides),
             f"hydra.run.dir={run_dir.resolve()}"]
    return shlex.join(words)


def _what_happened(exc: BaseException) -> str:
    """The stop's own words without its advice (ours follows): ``stopped on Ctrl-C after saving ...``."""
    return " ".join(str(exc).split(";")[0].split()) or "aborted on Ctrl-C"


def stopped(exc: BaseException, hydra_cfg: Any, run_dir: Path, code: int) -> NoReturn:
    """End a run stopped by Ctrl-C or a signal with one line saying how to resume it, and exit with ``code``."""
    said = _what_happened(exc)
    print(f"{PROG}: {said}; resume with: {resume_command(hydra_cfg, run_dir, sys.argv[1:])}", file=sys.stderr)
    sys.exit(code)


def sweep_stopped(exc: BaseException, hydra_node: Any, code: int) -> NoReturn:
    """End a multirun stopped by Ctrl-C with one line naming its directory and the command that resumes it.

    The same command with ``hydra.sweep.dir`` pinned gives every job its directory again: a finished job ends at
    once, an interrupted one continues from its ``checkpoints/last.pt``. A sweeper that chooses its points as it
    goes (Optuna) would choose others, and jobs that another launcher started may still run: the line says so.
    """
    from omegaconf.errors import OmegaConfBaseException

    from embodirl.app.sweep import report_command

    said = _what_happened(exc)
    try:
        sweep_dir = Path(str(hydra_node.sweep.dir)).resolve()
    except OmegaConfBaseException:  # a sweep.dir naming runtime values: Hydra printed it at the start
        sweep_dir = Path("<the sweep directory Hydra printed>")
    choices = hydra_node.runtime.choices
    argv = [a for a in sys.argv[1:] if not a.startswith(("hydra.sweep.dir=", "hydra.mode="))]
    advice = f"resume it with: {shlex.join([PROG, *argv, f'hydra.sweep.dir={sweep_dir}'])}"
    if choices.get("hydra/sweeper") != "basic":
        advice = f"its finished jobs stay there ({report_command(sweep_dir)}); this sweeper cannot resume a sweep"
    if choices.get("hydra/launcher") not in ("basic", "local"):
        advice += f" (jobs already submitted by hydra/launcher={choices.get('hydra/launcher')} keep running)"
    print(f"{PROG}: {said}; sweep {sweep_dir}: {advice}", file=sys.stderr)
    sys.exit(code)


def _job_failed(exc: Exception, hydra_cfg: Any, run_dir: Path, files: dict[str, str]) -> float:
    """Record a failed multirun job where the sweep's reports find it, say so in one line, and return NaN."""
    from embodirl.app.sweep import record_job_failure
    from embodirl.cli.errors import message
    from embodirl.runtime.rank import env_rank
    from embodirl.runtime.rundir import record_refused_job

    if env_rank() == 0:
        record_refused_job(run_dir, files, exc)  # a job refused before its run began: reports still list it
        record_job_failure(hydra_cfg.sweep.dir, hydra_cfg.job.num, run_dir, list(hydra_cfg.overrides.task), exc)
    text = message(exc)
    if text is None:
        log.exception("job failed (recorded in %s)", run_dir / "status.json")
    else:
        print(f"{PROG}: job {run_dir}: {text}", file=sys.stderr)
    return math.nan


HYDRA_FILES = (".hydra/config.yaml", ".hydra/hydra.yaml", ".hydra/overrides.yaml")  # the run writes them


def _discard_if_unproduced(run_dir: Path, start: set[str] | None, hydra_cfg: Any) -> bool:
    """Remove a single run's directory that this process made (``start``: the files it held then, else None) and
    in which the run produced nothing (a refused config, an error or Ctrl-C before training): a report would list
    it as a failed run. The default directory's parents (``outputs/<date>``, ``outputs``) go too when left empty."""
    from embodirl.runtime.rundir import LOCK_FILE, discard_unproduced
    from embodirl.runtime.status import STATUS_FILE

    if start is None:
        return False
    default = not any(str(o).startswith("hydra.run.dir=") for o in hydra_cfg.overrides.hydra)
    return discard_unproduced(run_dir, {*start, LOCK_FILE, STATUS_FILE, *HYDRA_FILES}, parents=2 if default else 0)


def _hydra_files(cfg: DictConfig) -> dict[str, str]:
    """The run's ``.hydra/*.yaml`` (file name -> text): its config, Hydra's node and the command line's overrides."""
    return {"config.yaml": OmegaConf.to_yaml(cfg), "hydra.yaml": OmegaConf.to_yaml(HydraConfig.instance().cfg),
            "overrides.yaml": OmegaConf.to_yaml(HydraConfig.get().overrides.task)}


def _run_dir_lock(run_dir: Path) -> Any:
    """The run directory's lock on rank 0 (held for the whole run), nothing elsewhere; imports no torch."""
    import contextlib

    from embodirl.runtime.rank import env_rank
    from embodirl.runtime.rundir import RunDirLock

    return RunDirLock(run_dir) if env_rank() == 0 else contextlib.nullcontext()


@hydra.main(version_base="1.3", config_path="pkg://embodirl.conf", config_name="train")
def _train(cfg: DictConfig) -> float:
    """Train one configuration; return ``summary[cfg.objective]`` for Hydra sweepers (NaN if it failed).

    In a multirun a failing job records its failure in the sweep directory (and ``failed`` in its
    ``status.json`` where it may write it) and returns NaN so the other jobs go on; the sweep's end callback
    then fails the command naming it. A single run exits with the status of :mod:`embodirl.cli.errors`, and its
    directory goes again if the run produced nothing in it. Ctrl-C and preemption stop a sweep too.
    """
    from embodirl.cli.errors import fail
    from embodirl.cli.process import interrupted
    from embodirl.config.run import check_run_config
    from embodirl.runtime.preemption import PreemptedError
    from embodirl.runtime.rank import env_rank
    from embodirl.runtime.rundir import holds_only_empty_files

    hydra_cfg = HydraConfig.get()
    run_dir = Path(hydra_cfg.runtime.output_dir)
    multirun = hydra_cfg.mode == RunMode.MULTIRUN
    # Whether Hydra has just made the directory for this run (it holds only Hydra's new, empty log): looked at
    # before this process writes anything into it (its lock included).
    made = not multirun and env_rank() == 0 and holds_only_empty_files(run_dir)
    start = {p.name for p in run_dir.iterdir()} if made else None
    try:
        run = check_run_config(cfg)  # every key against its schema, once, before torch is imported
        files = _hydra_files(cfg)  # after the check: a refused single run never writes them
        with _run_dir_lock(run_dir):  # before torch too: a busy run directory is told in a fraction of a second
            from embodirl.app.run import experiment_env, run_training, wandb_identity  # imports torch

            sweep = (str(hydra_cfg.sweep.dir), list(hydra_cfg.overrides.task)) if multirun else None
            names = wandb_identity(hydra_cfg.runtime.choices, run.seed, sweep, cfg.env,
                                   experiment_env(hydra_cfg.job.config_name or "train",
                                                  list(hydra_cfg.overrides.task), cfg.env))
            summary = run_training(cfg, run_dir, files, names, locked=True, run=run)
    except Exception as exc:
        if multirun and not isinstance(exc, PreemptedError):
            return _job_failed(exc, hydra_cfg, run_dir, _hydra_files(cfg))
        if multirun:
            fail(PROG, exc)
        _discard_if_unproduced(run_dir, start, hydra_cfg)
        if isinstance(exc, PreemptedError):
            stopped(exc, hydra_cfg, run_dir, 124)
        fail(PROG, exc)
    except KeyboardInterrupt as exc:  # or Interrupted: the iteration finished and checkpoints/last.pt was saved
        if multirun and hydra_cfg.runtime.choices.get("hydra/launcher") == "basic":
            raise  # a job in the sweep's own process: the sweep's command reports it (main)
        if multirun:
            fail(PROG, exc)
        if _discard_if_unproduced(run_dir, start, hydra_cfg):
            interrupted(PROG, f"training had not begun (nothing was kept); start it again with: "
                              f"{shlex.join([PROG, *sys.argv[1:]])}")
        stopped(exc, hydra_cfg, run_dir, 130)
    objective = summary.get(run.objective)
    if env_rank() == 0:
        from embodirl.analysis.summary import print_summary  # rich: after training, not before its clock

        print_summary(summary)
    return math.nan if objective is None else float(objective)


def expand_resume(argv: list[str]) -> list[str]:
    """``resume=RUN_DIR [key=value ...]``: the overrides ``RUN_DIR`` was started with (a sweep job's included), then
    the given ones, and ``hydra.run.dir=RUN_DIR``; ``argv`` itself without ``resume=``.

    Raises:
        ConfigError: ``RUN_DIR`` holds no ``.hydra/overrides.yaml`` of embodirl-train.
    """
    from embodirl.errors import ConfigError
    from embodirl.runtime.rundir import resume_overrides

    given = [arg for arg in argv if arg.startswith("resume=")]
    if not given:
        return argv
    run_dir = given[-1].partition("=")[2]
    stored = resume_overrides(run_dir) if run_dir else None
    if stored is None:
        raise ConfigError("resume", run_dir, "a run directory of embodirl-train (it holds .hydra/overrides.yaml)",
                          "pass resume=<run dir>, e.g. resume=outputs/<date>/<time>")
    return [*stored[:-1], *(arg for arg in argv if arg not in given), stored[-1]]


def plain_recipes(argv: list[str]) -> list[str]:
    """``argv`` with ``+experiment=NAME`` (``+sweep=``, ``+debug=``) written ``experiment=NAME``: ``train.yaml``
    declares those groups (``experiment: null``), and Hydra refuses the ``+`` that older commands carry."""
    from embodirl.cli.help import recipe_groups

    return [arg[1:] if arg.startswith("+") and arg[1:].partition("=")[0] in recipe_groups() else arg for arg in argv]


def debug_last(argv: list[str]) -> list[str]:
    """``argv`` with ``debug=trainer`` after the experiment when it selects ``trainer=debug`` and an experiment.

    An ``experiment=...`` is merged after every group, so its budget (10M steps) would beat the debug
    trainer's; ``conf/debug/trainer.yaml`` applies the debug trainer again after it, as lightning-hydra-template
    applies ``debug=`` last. Keys set on the command line still win over both.
    """
    from hydra._internal.utils import get_args_parser
    from hydra.core.override_parser.overrides_parser import OverridesParser

    try:
        lines = get_args_parser().parse_args(argv).overrides
        overrides = OverridesParser.create().parse_overrides(lines)  # one per line, in order
    except Exception:
        return argv
    chosen = {(o.key_or_group, o.is_add()): (o, line) for o, line in zip(overrides, lines, strict=True)
              if not o.is_sweep_override()}
    debug = chosen.get(("trainer", False))
    if debug is None or debug[0].value() != "debug" or ("experiment", False) not in chosen or any(
            o.key_or_group == "debug" for o in overrides):
        return argv
    at = argv.index(chosen[("experiment", False)][1]) + 1  # right after it: among the positional overrides
    return [*argv[:at], "debug=trainer", *argv[at:]]


def main() -> None:
    """The ``embodirl-train`` console script (``--help`` and bash completion are answered here, see
    :mod:`embodirl.cli.help` and :mod:`embodirl.cli.completion`; everything else goes to Hydra)."""
    from embodirl.cli.completion import shell_completion
    from embodirl.cli.errors import fail, hydra_entry
    from embodirl.cli.flags import check_arguments, refuse_rerun
    from embodirl.cli.help import help_page, help_request
    from embodirl.cli.multirun import check_multirun
    from embodirl.cli.process import interrupted
    from embodirl.errors import ConfigError

    argv = sys.argv[1:]
    refuse_rerun(PROG, argv, "run again with the overrides in <run dir>/.hydra/overrides.yaml, or continue that run "
                 "as it was started with embodirl-train resume=<run dir>")
    if shell_completion(argv, _train):
        return
    check_arguments(PROG, argv)
    try:
        argv = expand_resume(argv)
    except ConfigError as exc:
        fail(PROG, exc)
    wants_help = help_request(argv) is not None  # parses the flags first: argparse reports bad ones, as before
    argv = debug_last(plain_recipes(argv))
    sys.argv[1:] = argv  # Hydra reads the command line from sys.argv
    overrides = help_request(argv) if wants_help else None
    if overrides is not None:
        hydra_entry(PROG, lambda: print(help_page(overrides, PROG)))
        return

    def train() -> None:
        sweep = None
        try:
            sweep = check_multirun(sys.argv[1:])  # hydra_entry may rewrite an override (KEY={...} as +KEY={...})
            _share_run_time()
            _train()
        except KeyboardInterrupt as exc:  # a single run's job reports its own (_train)
            if sweep is None:
                interrupted(PROG, "before the run began; nothing was written")
            sweep_stopped(exc, sweep, 130)

    hydra_entry(PROG, train)


def console() -> None:
    """The console script: :func:`main`, then a quick end of the process (:mod:`embodirl.cli.process`)."""
    from embodirl.cli.process import run_console_script

    run_console_script(main)


if __name__ == "__main__":
    console()

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
import sys
from pathlib import Path

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


@hydra.main(version_base="1.3", config_path="pkg://embodirl.conf", config_name="train")
def _train(cfg: DictConfig) -> float:
    """Train one configuration; return ``summary[cfg.objective]`` for Hydra sweepers (NaN if it failed).

    In a multirun a failing job records its failure in the sweep directory (and ``failed`` in its
    ``status.json`` where it may write it) and returns NaN so the other jobs go on; the sweep's end callback
    then fails the command naming it. A single run exits with the status of :mod:`embodirl.cli.errors`.
    Ctrl-C and preemption stop a sweep too.
    """
    from embodirl.cli.errors import fail, message
    from embodirl.runtime.distributed import env_rank
    from embodirl.runtime.run import run_training, wandb_identity  # after parsing: fast --help
    from embodirl.runtime.preemption import PreemptedError
    from embodirl.runtime.sweep import record_job_failure
    from embodirl.analysis.summary import print_summary

    hydra_cfg = HydraConfig.get()
    run_dir = Path(hydra_cfg.runtime.output_dir)
    multirun = hydra_cfg.mode == RunMode.MULTIRUN
    files = {"config.yaml": OmegaConf.to_yaml(cfg), "hydra.yaml": OmegaConf.to_yaml(HydraConfig.instance().cfg),
             "overrides.yaml": OmegaConf.to_yaml(hydra_cfg.overrides.task)}
    sweep = (str(hydra_cfg.sweep.dir), list(hydra_cfg.overrides.task)) if multirun else None
    names = wandb_identity(hydra_cfg.runtime.choices, cfg.get("seed"), sweep)
    try:
        summary = run_training(cfg, run_dir, files, names)
    except Exception as exc:
        if not multirun or isinstance(exc, PreemptedError):
            fail(PROG, exc)
        if env_rank() == 0:
            record_job_failure(hydra_cfg.sweep.dir, hydra_cfg.job.num, run_dir, list(hydra_cfg.overrides.task), exc)
        text = message(exc)
        if text is None:
            log.exception("job failed (recorded in %s)", run_dir / "status.json")
        else:
            print(f"{PROG}: job {run_dir}: {text}", file=sys.stderr)
        return math.nan
    except KeyboardInterrupt as exc:
        fail(PROG, exc)
    objective = summary.get(cfg.objective)
    if env_rank() == 0:
        print_summary(summary)
    return math.nan if objective is None else float(objective)


def main() -> None:
    """The ``embodirl-train`` console script (``--help`` and bash completion are answered here, see
    :mod:`embodirl.cli.help` and :mod:`embodirl.cli.completion`; everything else goes to Hydra)."""
    from embodirl.cli.completion import shell_completion
    from embodirl.cli.errors import hydra_entry
    from embodirl.cli.flags import refuse_rerun
    from embodirl.cli.help import help_page, help_request

    argv = sys.argv[1:]
    refuse_rerun(PROG, argv, "run again with the overrides in <run dir>/.hydra/overrides.yaml, or continue that run "
                 "with them and hydra.run.dir=<run dir>")
    if shell_completion(argv, _train):
        return
    overrides = help_request(argv)
    if overrides is not None:
        hydra_entry(PROG, lambda: print(help_page(overrides, PROG)))
        return
    hydra_entry(PROG, lambda: (_share_run_time(), _train()))


if __name__ == "__main__":
    main()

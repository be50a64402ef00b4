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
import sys
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from embodirl.errors import CheckpointError, ConfigError, NonFiniteLossError

log = logging.getLogger("embodirl.train")


def _rank_suffix() -> str:
    """``""`` on rank 0, ``".rank<r>"`` elsewhere: per-rank log files (resolver used in train.yaml)."""
    from embodirl.distributed import env_rank

    rank = env_rank()
    return f".rank{rank}" if rank else ""


OmegaConf.register_new_resolver("embodirl_rank_suffix", _rank_suffix, replace=True)

USER_ERRORS = (ConfigError, CheckpointError, NonFiniteLossError)


@hydra.main(version_base="1.3", config_path="pkg://embodirl.conf", config_name="train")
def main(cfg: DictConfig) -> float:
    """Train one configuration; return ``summary[cfg.objective]`` for Hydra sweepers (NaN if it failed).

    In a multirun a failing job records ``failed`` in its ``status.json`` and returns NaN so the other
    jobs go on; the sweep's end callback then fails the command naming it. A single run exits non-zero.
    """
    from embodirl.distributed import env_rank
    from embodirl.experiment import check_objective, run_training  # after parsing: fast --help
    from embodirl.fate import write_status
    from embodirl.preemption import PreemptedError, was_preempted
    from embodirl.summary import print_summary

    run_dir = Path(HydraConfig.get().runtime.output_dir)
    multirun = HydraConfig.get().mode == RunMode.MULTIRUN
    main_rank = env_rank() == 0  # only rank 0 records the run's fate
    record = write_status if main_rank else (lambda *a, **k: None)
    record(run_dir, "running")
    try:
        check_objective(cfg.objective)
        summary = run_training(cfg, run_dir)
    except PreemptedError as exc:  # saved; no launcher handler took over (plain process)
        record(run_dir, "preempted", exc=exc)
        print(f"embodirl-train: {exc}", file=sys.stderr)
        sys.exit(124)
    except Exception as exc:
        record(run_dir, "failed", exc=exc)
        if isinstance(exc, USER_ERRORS):
            print(f"embodirl-train: error: {exc}", file=sys.stderr)
        elif multirun:
            log.exception("job failed (recorded in %s)", run_dir / "status.json")
        if multirun:
            return math.nan
        if isinstance(exc, USER_ERRORS):
            sys.exit(3 if isinstance(exc, NonFiniteLossError) else 2)
        raise
    except BaseException as exc:  # KeyboardInterrupt, or SystemExit from submitit's requeue: record, pass on
        record(run_dir, "preempted" if was_preempted() else "failed", exc=exc)
        raise
    objective = summary.get(cfg.objective)
    objective = math.nan if objective is None else float(objective)
    record(run_dir, "completed", objective_key=cfg.objective, objective=objective,
           stop_reason=summary["stop_reason"])
    if main_rank:
        print_summary(summary)
    return objective


if __name__ == "__main__":
    main()

"""One training run from a composed config: build, dry-run, train, summarise."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from embodirl.build import build, instantiate_checked, rank_seed, wants_cuda
from embodirl.distributed import init_distributed, shutdown
from embodirl.errors import ConfigError
from embodirl.loggers import MetricLoggers, build_loggers
from embodirl.trainer import SUMMARY_KEYS

__all__ = ["OBJECTIVES", "check_objective", "run_training"]

log = logging.getLogger(__name__)


OBJECTIVES = (*SUMMARY_KEYS, "solved_env_steps", "solved_wall_time_s", "env_steps", "wall_time_s", "sps")


def check_objective(key: str) -> None:
    """The value a sweep optimises must be a summary key (``loss/*`` and ``diag/*`` are also accepted)."""
    if key not in OBJECTIVES and not str(key).startswith(("loss/", "diag/")):
        raise ConfigError("objective", key, "a summary key: " + ", ".join(OBJECTIVES), "pass objective=eval/return_mean")


def run_training(cfg: DictConfig, run_dir: str | Path) -> dict[str, Any]:
    """Train with ``cfg`` in ``run_dir`` (resuming from its ``checkpoints/last.pt`` if present).

    Returns:
        The summary also written to ``run_dir/summary.json``.

    Raises:
        ConfigError: A bad value; raised before any training.
        CheckpointError: A missing, corrupt or incompatible checkpoint to resume from.
        NonFiniteLossError: Training diverged; the last good checkpoint is kept.
    """
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    config = OmegaConf.to_container(cfg, resolve=True)
    dist = init_distributed(use_cuda=wants_cuda(cfg.device))
    try:
        parts = build(cfg, dist.rank, dist.local_rank)
        total = cfg.trainer.total_env_steps

        def make_loggers(resume_env_steps: int | None) -> MetricLoggers:
            if not dist.is_main:  # only rank 0 writes metrics, TensorBoard and wandb
                return MetricLoggers([])
            return build_loggers(run_dir, cfg.logger, config, total, resume_env_steps)

        trainer = instantiate_checked(
            cfg.trainer, "trainer.", collector=parts.collector, algo=parts.algo, eval_env=parts.eval_env,
            run_dir=run_dir, config=config, seed=rank_seed(cfg.seed, dist.rank), make_loggers=make_loggers,
            video=parts.video, num_update_threads=cfg.num_update_threads,
        )
        log.info("training %s with %s on %s (%d envs x %d ranks, device %s); run dir %s",
                 type(parts.policy).__name__, type(parts.algo).__name__, type(parts.env).__name__,
                 parts.env.num_envs, dist.world_size, parts.device, run_dir)
        try:
            return trainer.train()
        finally:
            parts.env.close()
            parts.eval_env.close()
    finally:
        shutdown()

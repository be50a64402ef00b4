"""``embodirl-train``: compose a config with Hydra and train.

Examples::

    embodirl-train                                  # PPO on the batched CartPole until solved
    embodirl-train algo.clip_coef=0.1 env.num_envs=512 seed=3 device=cpu
    embodirl-train env=gym env.id=Pendulum-v1 trainer.total_env_steps=200000
    embodirl-train -m algo.learning_rate=1e-3,2e-3 seed='range(0,3)'
"""

from __future__ import annotations

import sys

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from embodirl.errors import CheckpointError, ConfigError, NonFiniteLossError
from embodirl.summary import print_summary



@hydra.main(version_base="1.3", config_path="pkg://embodirl.conf", config_name="train")
def main(cfg: DictConfig) -> float | None:
    """Train one configuration; returns the final ``eval/return_mean`` for Hydra sweepers."""
    from embodirl.experiment import run_training  # after Hydra parsed the command line: fast --help

    run_dir = HydraConfig.get().runtime.output_dir
    try:
        summary = run_training(cfg, run_dir)
    except (ConfigError, CheckpointError, NonFiniteLossError) as exc:
        print(f"embodirl-train: error: {exc}", file=sys.stderr)
        sys.exit(2 if not isinstance(exc, NonFiniteLossError) else 3)
    print_summary(summary)
    return summary.get("eval/return_mean")


if __name__ == "__main__":
    main()

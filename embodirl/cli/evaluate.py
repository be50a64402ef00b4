"""``embodirl-eval checkpoint=PATH``: deterministic episodes with a trained policy.

Rebuilds the env and policy from the checkpoint's stored config (so no training flags need to be
repeated), runs ``num_episodes`` deterministic episodes, prints a table and writes ``eval.json``
into this command's run directory. The checkpoint is data: it is loaded with ``weights_only=True`` and
its config may only name classes embodirl ships (or ``trusted_targets`` given on the command line);
see :mod:`embodirl.targets`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, ListConfig, OmegaConf

from embodirl.errors import CheckpointError, ConfigError

PROG = "embodirl-eval"


def evaluate_checkpoint(cfg: DictConfig, out_dir: Path) -> dict[str, Any]:
    """Load ``cfg.checkpoint``, rebuild env and policy, evaluate (and film); return the result record."""
    from embodirl.build import build_env, build_policy, build_video_settings, configure_torch, resolve_device
    from embodirl.video import record_episode, save_video
    from embodirl.checkpoint import load_checkpoint
    from embodirl.evaluation import evaluate_policy
    from embodirl.targets import check_config_from_file

    trusted = cfg.trusted_targets
    if not isinstance(trusted, ListConfig | list) or not all(isinstance(t, str) for t in trusted):
        raise ConfigError("trusted_targets", trusted, "a list of class paths, e.g. [mypkg.envs.MyEnv]",
                          "pass 'trusted_targets=[mypkg.envs.MyEnv]' or leave it empty")
    state = load_checkpoint(cfg.checkpoint, key="checkpoint")
    check_config_from_file(state["config"], f"checkpoint={cfg.checkpoint!r}", list(trusted))
    train_cfg = OmegaConf.create(state["config"])
    train_cfg.policy.init_from = None  # the checkpoint's own weights are evaluated, not the ones it started from
    overrides = {k: v for k, v in OmegaConf.to_container(cfg.env).items() if v is not None}
    train_cfg.env = OmegaConf.merge(train_cfg.env, overrides)
    if not isinstance(cfg.num_episodes, int) or isinstance(cfg.num_episodes, bool) or cfg.num_episodes < 1:
        raise ConfigError("num_episodes", cfg.num_episodes, "an int >= 1", "pass num_episodes=100")
    configure_torch(cfg.seed, cfg.num_threads)
    device = resolve_device(cfg.device)
    num_envs = overrides.get("num_envs", train_cfg.trainer.num_eval_envs)
    env = build_env(train_cfg.env, device, cfg.seed, num_envs=num_envs)
    policy = build_policy(train_cfg.policy, env, device)
    try:
        policy.load_state_dict(state["policy"])
    except (RuntimeError, KeyError, TypeError, ValueError) as exc:
        raise CheckpointError(f"checkpoint={cfg.checkpoint!r}: its policy weights do not fit its own config "
                              f"({str(exc).splitlines()[0]})") from exc
    policy.eval()
    video = build_video_settings(cfg.eval, env)
    extra = {}
    try:
        metrics = evaluate_policy(env, policy, cfg.num_episodes, seed=cfg.seed)
        if video.video:
            frames = record_episode(env, policy, video.video_num_envs, video.video_size, cfg.seed)
            extra["video"] = str(save_video(frames, out_dir / f"video.{video.video_format}", video.video_fps))
    finally:
        env.close()
    solved = env.is_solved(metrics)
    trained = state["trainer"].get("env_steps") if isinstance(state["trainer"], dict) else None
    return {"checkpoint": str(Path(cfg.checkpoint).resolve()), "env": train_cfg.env._target_,
            "num_envs": env.num_envs, "env_steps_trained": trained if isinstance(trained, int) else None, **metrics,
            "solved_metric": env.solved_metric, "solved_threshold": env.solved_threshold, "solved": solved, **extra}


@hydra.main(version_base="1.3", config_path="pkg://embodirl.conf", config_name="eval")
def _evaluate(cfg: DictConfig) -> float:
    from embodirl.checkpoint import atomic_write_json
    from embodirl.cli.errors import fail
    from embodirl.analysis.summary import print_eval

    out_dir = Path(HydraConfig.get().runtime.output_dir)
    try:
        result = evaluate_checkpoint(cfg, out_dir)
        out = out_dir / "eval.json"
        atomic_write_json(out, result)
    except (Exception, KeyboardInterrupt) as exc:  # one line and an exit status for every failure
        fail(PROG, exc)
    print_eval(result)
    print(f"wrote {out}")
    return result["eval/return_mean"]


def main() -> None:
    """The ``embodirl-eval`` console script."""
    from embodirl.cli.errors import hydra_entry

    hydra_entry(PROG, _evaluate)


if __name__ == "__main__":
    main()

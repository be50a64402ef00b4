"""``embodirl-bench``: throughput and time-to-solve of presets, as a Markdown table (+ JSON).

Examples::

    embodirl-bench                                   # every preset, seeds 0 1 2
    embodirl-bench --presets ppo_cartpole --seeds 0 1 2 3 4 --out bench.json
    embodirl-bench --presets ppo_cartpole -- env.num_envs=512   # extra Hydra overrides
    embodirl-bench --presets ppo_push_cube_arm grpo_push_cube_arm --envs push_cube_arm --env-sizes 1 64 512 2048

Progress (one line per measurement, or a bar on a terminal) goes to stderr; the tables to stdout.
For each preset it measures, on the same machine in one process:
  * collection env steps/s and update env steps/s (mean over timed iterations after warm-up);
  * per seed, a full ``embodirl-train`` run (no TensorBoard, no console): wall time and env steps
    until deterministic evaluation first reached the solved threshold, and end-to-end env steps/s.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

PRESETS: dict[str, list[str]] = {
    "ppo_cartpole": ["algo=ppo", "policy=actor_critic", "env=cartpole"],
    "grpo_cartpole": ["algo=grpo", "env=cartpole"],
    "ppo_push_cube": ["+experiment=ppo_push_cube"],
    "grpo_push_cube": ["+experiment=grpo_push_cube"],
    "ppo_push_cube_arm": ["+experiment=ppo_push_cube_arm"],
    "grpo_push_cube_arm": ["+experiment=grpo_push_cube_arm"],
}
ENV_PRESETS: dict[str, list[str]] = {
    "cartpole": ["env=cartpole"],
    "push_cube": ["env=push_cube"],
    "push_cube_joint": ["env=push_cube", "env.control_mode=joint_delta_pos"],
    "push_cube_arm": ["env=push_cube_arm"],
}
ON_REQUEST = {"ppo_push_cube_arm", "grpo_push_cube_arm", "push_cube_arm"}  # minutes each: run only when named
QUIET = ["logger.console=none", "logger.tensorboard=false"]


def _compose(overrides: list[str]):
    from hydra import compose, initialize_config_module

    with initialize_config_module("embodirl.conf", version_base="1.3"):
        return compose("train", overrides=overrides)


def throughput(overrides: list[str], iterations: int = 10, warmup: int = 3) -> dict[str, float]:
    """Collection and update env steps/s of a built config, timed separately (no eval, no logging)."""
    import torch

    from embodirl.build import build

    parts = build(_compose(overrides))
    parts.collector.reset(seed=0)
    collect_s = update_s = 0.0
    steps = 0
    for i in range(warmup + iterations):
        t0 = time.perf_counter()
        rollout = parts.collector.collect()
        if parts.device.type == "cuda":
            torch.cuda.synchronize()
        t1 = time.perf_counter()
        parts.algo.update(rollout)
        t2 = time.perf_counter()
        if i >= warmup:
            collect_s += t1 - t0
            update_s += t2 - t1
            steps += rollout.batch_size[0] * rollout.get_non_tensor("num_steps_collected")
    return {"collect_sps": steps / collect_s, "update_sps": steps / update_s,
            "collect_update_sps": steps / (collect_s + update_s)}


def env_speed(overrides: list[str], num_envs: int, steps: int = 200, warmup: int = 10) -> float:
    """Raw env steps/s: random actions, no policy, no learning."""
    import torch

    from embodirl.build import build_env, configure_torch, resolve_device

    cfg = _compose(overrides)
    configure_torch(0, cfg.num_threads)
    env = build_env(cfg.env, resolve_device(cfg.device), seed=0, num_envs=num_envs)
    space = env.action_space
    if env.is_discrete:
        action = torch.randint(0, int(space.n), (num_envs,), device=env.device)
    else:
        action = torch.rand(num_envs, *space.shape, device=env.device) * 2 - 1
    for _ in range(warmup):
        env.step(action)
    if env.device.type == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(steps):
        env.step(action)
    if env.device.type == "cuda":
        torch.cuda.synchronize()
    env.close()
    return steps * num_envs / (time.perf_counter() - start)


def time_to_solve(overrides: list[str], seed: int) -> dict[str, Any]:
    """One full training run; returns its summary's timing fields."""
    from embodirl.experiment import run_training

    with tempfile.TemporaryDirectory(prefix="embodirl-bench-") as run_dir:
        summary = run_training(_compose([*overrides, f"seed={seed}", *QUIET]), run_dir)
    return {"seed": seed, "solved_wall_time_s": summary["solved_wall_time_s"],
            "solved_env_steps": summary["solved_env_steps"], "e2e_sps": summary["sps"],
            "wall_time_s": summary["wall_time_s"], "eval_return": summary["eval/return_mean"]}


def _median(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if len(present) == len(values) and present else None


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="embodirl-bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--presets", nargs="+", default=[p for p in PRESETS if p not in ON_REQUEST],
                        choices=list(PRESETS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--out", type=Path, default=None, help="also write the results as JSON here")
    parser.add_argument("--envs", nargs="*", default=[e for e in ENV_PRESETS if e not in ON_REQUEST],
                        choices=list(ENV_PRESETS),
                        help="raw env speed tables for these envs (pass none to skip)")
    parser.add_argument("--env-sizes", nargs="+", type=int, default=[1, 256, 4096, 16384])
    parser.add_argument("overrides", nargs="*", help="extra Hydra overrides applied to every preset")
    args = parser.parse_args(argv)

    import platform

    import torch

    from embodirl.console import task_progress

    env_rows, results = [], []
    num_tasks = len(args.envs) * len(args.env_sizes) + len(args.presets) * (1 + len(args.seeds))
    with task_progress(num_tasks, "embodirl-bench") as progress:  # on stderr: stdout keeps the tables
        for name in args.envs:
            row = {"env": name}
            for n in args.env_sizes:
                progress.start(f"{name} env speed, {n:,} envs")
                row[str(n)] = env_speed([*ENV_PRESETS[name], *args.overrides], n)
                progress.finish(f"{name} env speed, {n:,} envs: {row[str(n)]:,.0f} steps/s")
            env_rows.append(row)
        for name in args.presets:
            overrides = [*PRESETS[name], *args.overrides]
            progress.start(f"{name} throughput")
            speed = throughput([*overrides, *QUIET])
            progress.finish(f"{name} throughput: collect {speed['collect_sps']:,.0f}, update "
                            f"{speed['update_sps']:,.0f} steps/s")
            runs = []
            for seed in args.seeds:
                progress.start(f"{name} seed {seed}: training until solved")
                runs.append(time_to_solve(overrides, seed))
                solved = runs[-1]["solved_wall_time_s"]
                progress.finish(f"{name} seed {seed}: " + ("not solved" if solved is None else
                                f"solved in {solved:.2f} s at {runs[-1]['solved_env_steps']:,} steps"))
            results.append({"preset": name, "overrides": overrides, **speed, "runs": runs,
                            "median_solved_wall_time_s": _median([r["solved_wall_time_s"] for r in runs]),
                            "median_solved_env_steps": _median([r["solved_env_steps"] for r in runs]),
                            "median_e2e_sps": _median([r["e2e_sps"] for r in runs])})
    machine = {"torch": torch.__version__, "threads": torch.get_num_threads(), "cpu": platform.processor() or
               platform.machine(), "cuda": torch.cuda.get_device_name() if torch.cuda.is_available() else None}
    print(f"machine: {machine}")
    if env_rows:
        print("| env (raw steps/s, random actions) | " + " | ".join(f"{n:,} envs" for n in args.env_sizes) + " |")
        print("|---|" + "---:|" * len(args.env_sizes))
        for row in env_rows:
            print(f"| {row['env']} | " + " | ".join(f"{row[str(n)]:,.0f}" for n in args.env_sizes) + " |")
        print()
    print("| preset | collect sps | update sps | e2e sps (median) | solved in s (median) | solved at steps "
          "(median) | per seed: s / steps |")
    print("|---|---:|---:|---:|---:|---:|---|")
    for r in results:
        per_seed = ", ".join(
            f"{x['solved_wall_time_s']:.2f} / {x['solved_env_steps']:,}" if x["solved_wall_time_s"] is not None
            else "not solved" for x in r["runs"])
        solved = r["median_solved_wall_time_s"]
        steps = r["median_solved_env_steps"]
        print(f"| {r['preset']} | {r['collect_sps']:,.0f} | {r['update_sps']:,.0f} | {r['median_e2e_sps']:,.0f} | "
              f"{'-' if solved is None else f'{solved:.2f}'} | {'-' if steps is None else f'{steps:,.0f}'} | "
              f"{per_seed} |")
    if args.out:
        args.out.write_text(json.dumps({"machine": machine, "env_speed": env_rows, "results": results}, indent=2)
                            + "\n")


if __name__ == "__main__":
    main()

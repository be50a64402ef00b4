"""``embodirl-bench``: throughput and time-to-solve of presets, as a Markdown table (+ JSON).

Examples::

    embodirl-bench                                   # every preset, seeds 0 1 2
    embodirl-bench --presets ppo_cartpole --seeds 0 1 2 3 4 --out bench.json
    embodirl-bench --presets ppo_cartpole -- env.num_envs=512   # extra Hydra overrides
    embodirl-bench --presets ppo_push_cube_arm grpo_push_cube_arm --envs push_cube_arm --env-sizes 1 64 512 2048

    embodirl-bench --presets --envs --costs cartpole push_cube --scaling ppo_cartpole   # the GPU tables
    embodirl-bench --presets --envs --cli-runs 10   # the default embodirl-train, as users run it, 10 times
    embodirl-bench --presets --envs --scaling ppo_cartpole --scaling-sizes 1024 65536 1048576 device=cuda
    embodirl-bench --seeds 0 1 2 3 4 --markdown bench.md                  # the results as a Markdown page
    embodirl-bench --seeds 0 1 2 3 4 --markdown bench.md --merge gpu.json  # beside a GPU run's --out file

Progress (one line per measurement, or a bar on a terminal) goes to stderr; the tables to stdout. ``--markdown``
writes the results as a page (:func:`markdown_report`): a header naming the machine, the versions and the
settings, then one table per measurement with a CPU and a GPU row for each item ("not measured" where no run
on that device is given; ``--merge`` adds the ``--out`` files of runs on other machines).
On the same machine in one process it measures:
  * per env (``--envs``): raw env steps/s with random actions at several sizes;
  * per env and policy (``--costs``): the work one step launches, eager and compiled: dispatched aten ops
    (CPU) or CUDA kernels (GPU) of ``env.step``, ``policy.act`` and the whole collection step, the kernels
    of their compiled versions, the time of one call eager and compiled, and the compile time (a cold inductor
    cache unless ``$TORCHINDUCTOR_CACHE_DIR`` holds them);
  * per preset (``--presets``): collection and update env steps/s (mean over timed iterations after the
    compile warm-up; the compile time is reported apart) and, per seed, a full ``embodirl-train`` run (no
    TensorBoard, no console): wall time and env steps until deterministic evaluation first reached the solved
    threshold (compile time excluded: it happens before training), and end-to-end env steps/s;
  * per off-policy preset (``--updates``): gradient steps per second on a filled replay buffer (a batch
    sampled and one ``train_step``: critic, delayed actor, targets), eager and ``compile=true`` (the compile
    time, spent in the first steps, reported apart);
  * per preset (``--scaling``): training throughput (collection + update) over num_envs, rollouts of 16
    steps in 4 minibatches, until memory runs out.
In fresh processes it measures (``--cli-runs N``): ``embodirl-train`` with the default config (TensorBoard on,
console lines) plus the extra overrides, N times in a row, timed from the moment the process is started:
start-up (until the training clock starts; the first env step follows), Enter to solved, until exit, and the
training clock to solved from its ``summary.json``, with their min / median / max. On a shared machine, run
it in two checkouts alternately to compare versions: the load moves absolute figures by tens of percent within
minutes.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

PRESETS: dict[str, list[str]] = {
    "ppo_cartpole": ["algo=ppo", "policy=actor_critic", "env=cartpole"],
    "grpo_cartpole": ["algo=grpo", "env=cartpole"],
    "ppo_push_cube": ["experiment=ppo_push_cube"],
    "grpo_push_cube": ["experiment=grpo_push_cube"],
    "ppo_push_cube_arm": ["experiment=ppo_push_cube_arm"],
    "grpo_push_cube_arm": ["experiment=grpo_push_cube_arm"],
    "ppo_push_cube_rgb": ["experiment=ppo_push_cube_rgb"],
}
ENV_PRESETS: dict[str, list[str]] = {
    "cartpole": ["env=cartpole"],
    "push_cube": ["env=push_cube"],
    "push_cube_joint": ["env=push_cube", "env.control_mode=joint_delta_pos"],
    "push_cube_arm": ["env=push_cube_arm"],
    "push_cube_rgb": ["env=push_cube", "env.obs_mode=rgb"],  # + the 64x64 top view every step
}
UPDATE_PRESETS: dict[str, list[str]] = {  # off-policy: gradient steps/s on a filled buffer, eager and compiled
    "sac_push_cube": ["experiment=sac_push_cube"],
    "fasttd3_push_cube": ["experiment=fasttd3_push_cube"],
}
ON_REQUEST = {"ppo_push_cube_arm", "grpo_push_cube_arm", "push_cube_arm",  # minutes each: run only when named
              "ppo_push_cube_rgb"}
QUIET = ["logger.console=none", "logger.tensorboard=false"]


def _compose(overrides: list[str]):
    from hydra import compose, initialize_config_module

    with initialize_config_module("embodirl.conf", version_base="1.3"):
        return compose("train", overrides=overrides)


def throughput(overrides: list[str], iterations: int = 10, warmup: int = 3) -> dict[str, float]:
    """Collection and update env steps/s of a built config, timed separately (no eval, no logging).

    The steps run as in training: compiled when ``compile`` resolves on (the compile time, spent in the build's
    warm-up, is ``compile_s``) and replayed as CUDA graphs when ``cuda_graphs`` does.
    """
    import torch

    from embodirl.app.build import build_components

    parts = build_components(_compose(overrides))
    parts.collector.reset(seed=0)
    for part in (parts.collector, parts.algo, parts.evaluator):
        part.use_cuda_graphs()
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
            "collect_update_sps": steps / (collect_s + update_s), "compile_s": parts.compile_s}


def update_speed(overrides: list[str], compile: bool, steps: int = 40, warmup: int = 3) -> dict[str, float]:
    """Gradient steps/s of an off-policy preset: ``train_step`` (critic, delayed actor, targets) on batches sampled
    from a buffer that collection filled to a batch, timed after ``warmup`` steps (the compile, when ``compile``)."""
    import torch

    from embodirl.app.build import build_components
    from embodirl.collect.replay import TRANSITION_KEYS

    parts = build_components(_compose([*overrides, *QUIET, f"compile={str(compile).lower()}"]))
    parts.collector.reset(seed=0)
    algo: Any = parts.algo
    batch_size = algo.cfg.minibatch_size
    while len(algo.buffer) < batch_size:
        rollout = parts.collector.collect()
        algo.buffer.extend(rollout[:, :rollout.get_non_tensor("num_steps_collected")].select(*TRANSITION_KEYS))
    timed = []
    for count in (warmup, steps):
        t0 = time.perf_counter()
        for _ in range(count):
            algo.train_step(algo.buffer.sample(batch_size))
            algo.num_updates += 1  # the delayed actor steps every policy_frequency-th time, as in training
        if parts.device.type == "cuda":
            torch.cuda.synchronize()
        timed.append(time.perf_counter() - t0)
    return {"grad_steps_per_s": steps / timed[1], "warmup_s": timed[0], "minibatch_size": batch_size}


def step_costs(overrides: list[str], num_envs: int) -> dict[str, float]:
    """Work per step of ``env.step``, ``policy.act`` and the collection step, eager and compiled.

    Eager: dispatched aten ops that run a kernel (CPU), or CUDA kernels launched (GPU). Compiled: the work
    items ``torch.profiler`` sees one call of the inductor-compiled function launch (generated kernels plus
    library calls such as matrix products), and the seconds its first call took (compilation included). Both:
    the median time of one call in microseconds (``*_us``, :func:`_call_us`; work outside torch, such as
    CartPole's numpy arithmetic on the CPU, shows only there).
    """
    import torch
    import torch._dynamo

    from embodirl.accel.profiling import count_kernels, count_ops, inductor_kernel_events
    from embodirl.app.build import build_components

    parts = build_components(_compose([*overrides, f"env.num_envs={num_envs}", "eval.num_envs=1",
                                       "compile=false", "cuda_graphs=false", *QUIET]))
    collector, env = parts.collector, parts.env
    collector.reset(seed=0)
    obs, state = collector.loop.carry["obs"], collector.loop.carry["state"]
    action = collector.policy.act(obs, state)[0]

    def collection_step() -> None:
        collector.loop.rewind()  # stay inside the rollout however often it is called
        collector.loop.run()

    calls: dict[str, tuple[Callable[..., Any], tuple[Any, ...]]] = {
        "env": (env.step, (action,)), "act": (collector.policy.act, (obs, state)), "collect": (collection_step, ())}
    cuda = parts.device.type == "cuda"
    row: dict[str, Any] = {"device": parts.device.type}
    with torch.no_grad():
        for name, (fn, args) in calls.items():
            fn(*args)  # warm: lazy initialisations are not per-step work
            row[f"{name}_eager"] = count_kernels(fn, *args) if cuda else count_ops(fn, *args).compute
            row[f"{name}_eager_us"] = _call_us(fn, args)
            torch._dynamo.reset()
            with inductor_kernel_events():
                compiled = torch.compile(fn, fullgraph=True, dynamic=False)
                start = time.perf_counter()
                compiled(*args)
                if cuda:
                    torch.cuda.synchronize()
                row[f"{name}_compile_s"] = time.perf_counter() - start
                row[f"{name}_compiled"] = count_kernels(compiled, *args)
                row[f"{name}_compiled_us"] = _call_us(compiled, args)
    torch._dynamo.reset()
    return row


def _call_us(fn: Any, args: tuple) -> float:
    """Median wall time of one call of ``fn(*args)`` in microseconds, by ``torch.utils.benchmark`` (blocks of calls
    for at least 0.1 s in all, at the process's thread count; its timer waits for the GPU on CUDA)."""
    import torch
    from torch.utils import benchmark

    timer = benchmark.Timer(stmt="fn(*args)", globals={"fn": fn, "args": args}, num_threads=torch.get_num_threads())
    return 1e6 * timer.blocked_autorange(min_run_time=0.1).median


SCALING = ["algo.num_steps=16"]  # with algo.minibatch_size = num_envs * 4: four minibatches per epoch


def scaling(overrides: list[str], sizes: list[int], iterations: int = 3) -> list[dict[str, Any]]:
    """Training throughput (collection + update) over num_envs; stops at the first size that does not fit."""
    from embodirl.errors import ConfigError

    rows = []
    for n in sizes:
        try:
            speed = throughput([*overrides, *SCALING, f"env.num_envs={n}", f"algo.minibatch_size={4 * n}",
                                "eval.num_envs=1", *QUIET], iterations=iterations, warmup=1)
        except (MemoryError, ConfigError, RuntimeError) as exc:  # torch.OutOfMemoryError is a RuntimeError
            if "memory" not in str(exc).lower():
                raise
            rows.append({"num_envs": n, "error": "out of memory"})
            break
        rows.append({"num_envs": n, **speed})
    return rows


def env_speed(overrides: list[str], num_envs: int, steps: int = 200, warmup: int = 10) -> float:
    """Raw env steps/s: random actions, no policy, no learning."""
    import torch
    from gymnasium.spaces import Box, Discrete

    from embodirl.app.build import build_env, configure_torch, resolve_device

    cfg = _compose(overrides)
    configure_torch(0, cfg.num_threads)
    env = build_env(cfg.env, resolve_device(cfg.device), seed=0, num_envs=num_envs)
    space = env.action_space
    if isinstance(space, Discrete):
        action = torch.randint(0, int(space.n), (num_envs,), device=env.device)
    elif isinstance(space, Box):
        action = torch.rand(num_envs, *space.shape, device=env.device) * 2 - 1
    else:
        raise TypeError(f"{type(space).__name__} action space: envs act in a Box or a Discrete space")
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
    from embodirl.app.run import run_training

    with tempfile.TemporaryDirectory(prefix="embodirl-bench-") as run_dir:
        summary = run_training(_compose([*overrides, f"seed={seed}", *QUIET]), run_dir)
    return {"seed": seed, **_timings(summary), "eval_return": summary["eval/return_mean"]}


def _timings(summary: dict[str, Any]) -> dict[str, Any]:
    """A run summary's timing fields."""
    return {"solved_wall_time_s": summary["solved_wall_time_s"], "solved_env_steps": summary["solved_env_steps"],
            "e2e_sps": summary["sps"], "wall_time_s": summary["wall_time_s"]}


def cli_run(overrides: list[str]) -> dict[str, Any]:
    """One ``embodirl-train`` process with the default config plus ``overrides``: its summary's timing fields, and
    the times a user waits, counted from the moment the process is started (as when Enter is pressed):
    ``startup_s`` until the training clock starts (imports, config, building; the first env step follows),
    ``enter_to_solved_s`` until the solved evaluation, ``process_s`` until the process has exited."""
    with tempfile.TemporaryDirectory(prefix="embodirl-bench-") as run_dir:
        command = [sys.executable, "-m", "embodirl.cli.train", *overrides, f"hydra.run.dir={run_dir}"]
        launched = time.time()
        done = subprocess.run(command, capture_output=True, text=True)
        process_s = time.time() - launched
        if done.returncode != 0:
            raise RuntimeError(f"embodirl-train exited with {done.returncode}: {done.stderr.strip()[-2000:]}")
        summary = json.loads((Path(run_dir) / "summary.json").read_text())
    startup_s = summary["started_at"] - launched
    solved = summary["solved_wall_time_s"]
    return {**_timings(summary), "startup_s": startup_s, "process_s": process_s,
            "enter_to_solved_s": None if solved is None else startup_s + solved}


def _median(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present and len(present) == len(values) else None


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="embodirl-bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--presets", nargs="*", default=[p for p in PRESETS if p not in ON_REQUEST],
                        choices=list(PRESETS))
    parser.add_argument("--seeds", nargs="*", type=int, default=[0, 1, 2])
    parser.add_argument("--out", type=Path, default=None, help="also write the results as JSON here")
    parser.add_argument("--envs", nargs="*", default=[e for e in ENV_PRESETS if e not in ON_REQUEST],
                        choices=list(ENV_PRESETS),
                        help="raw env speed tables for these envs (pass none to skip)")
    parser.add_argument("--env-sizes", nargs="+", type=int, default=[1, 256, 4096, 16384])
    parser.add_argument("--costs", nargs="*", default=[], choices=list(ENV_PRESETS),
                        help="ops/kernels per step and compile times of these envs with the actor-critic policy")
    parser.add_argument("--costs-envs", type=int, default=4096, help="num_envs of the --costs measurements")
    parser.add_argument("--updates", nargs="*", default=[], choices=list(UPDATE_PRESETS),
                        help="gradient steps/s of these off-policy presets, eager and compile=true")
    parser.add_argument("--scaling", nargs="*", default=[], choices=list(PRESETS),
                        help="training throughput of these presets over --scaling-sizes")
    parser.add_argument("--scaling-sizes", nargs="+", type=int, default=None,
                        help="num_envs of --scaling (default 1k-64k on a CPU, 1k-1M on CUDA)")
    parser.add_argument("--cli-runs", type=int, default=0, metavar="N",
                        help="run the default embodirl-train (TensorBoard on) N times in fresh processes")
    parser.add_argument("--markdown", type=Path, default=None, metavar="PATH",
                        help="also write the results as a Markdown page (header: machine, versions, settings)")
    parser.add_argument("--merge", type=Path, nargs="+", default=[], metavar="JSON",
                        help="with --markdown: --out files of runs on other devices, shown beside this run's rows")
    parser.add_argument("overrides", nargs="*", help="extra Hydra overrides applied to every preset")
    return parser


def main(argv: list[str] | None = None) -> None:
    args = _parser().parse_args(argv)
    info = run_info(args.overrides)
    merged = _read_merges(args.merge, info["device"])  # a bad file fails now, not after the measurements

    import torch

    from embodirl.training.console import task_progress

    num_tasks = (len(args.envs) * len(args.env_sizes) + len(args.presets) * (1 + len(args.seeds)) + len(args.costs)
                 + len(args.scaling) + 2 * len(args.updates) + args.cli_runs)
    with task_progress(num_tasks, "embodirl-bench") as progress:  # on stderr: stdout keeps the tables
        env_rows = _measure_env_speed(args, progress)
        cost_rows = _measure_costs(args, progress)
        scaling_rows = _measure_scaling(args, progress)
        update_rows = _measure_updates(args, progress)
        results = _measure_presets(args, progress)
        cli_runs = _measure_cli_runs(args, progress)
    machine = {"torch": torch.__version__, "threads": torch.get_num_threads(), "cpu": platform.processor() or
               platform.machine(), "cuda": torch.cuda.get_device_name() if torch.cuda.is_available() else None}
    print(f"machine: {machine}")
    _print_env_speed(env_rows, args.env_sizes)
    _print_costs(cost_rows)
    _print_scaling(scaling_rows)
    _print_updates(update_rows)
    if results:
        _print_presets(results)
    if cli_runs:
        _print_cli_runs(cli_runs)
    measured = {"machine": machine, "run": info, "env_speed": env_rows, "step_costs": cost_rows,
                "scaling": scaling_rows, "updates": update_rows, "results": results, "cli_runs": cli_runs}
    if args.out:
        args.out.write_text(json.dumps(measured, indent=2) + "\n")
    if args.markdown:
        command = "embodirl-bench " + shlex.join(sys.argv[1:] if argv is None else argv)
        args.markdown.write_text(markdown_report([measured, *merged], command))


def _measure_env_speed(args: argparse.Namespace, progress: Any) -> list[dict[str, Any]]:
    """``--envs``: one row per env, raw env steps/s at each of ``--env-sizes``."""
    rows = []
    for name in args.envs:
        row: dict[str, Any] = {"env": name}
        for n in args.env_sizes:
            progress.start(f"{name} env speed, {n:,} envs")
            row[str(n)] = env_speed([*ENV_PRESETS[name], *args.overrides], n)
            progress.finish(f"{name} env speed, {n:,} envs: {row[str(n)]:,.0f} steps/s")
        rows.append(row)
    return rows


def _measure_costs(args: argparse.Namespace, progress: Any) -> list[dict[str, Any]]:
    """``--costs``: one row per env, the work per step eager and compiled."""
    rows = []
    for name in args.costs:
        progress.start(f"{name} ops/kernels per step and compile time, {args.costs_envs:,} envs")
        rows.append({"env": name, "num_envs": args.costs_envs,
                     **step_costs([*ENV_PRESETS[name], *args.overrides], args.costs_envs)})
        progress.finish(f"{name}: collection step {rows[-1]['collect_eager']:.0f} eager -> "
                        f"{rows[-1]['collect_compiled']:.0f} compiled")
    return rows


def _measure_scaling(args: argparse.Namespace, progress: Any) -> list[dict[str, Any]]:
    """``--scaling``: one block per preset, training throughput over ``--scaling-sizes``."""
    sizes = args.scaling_sizes or ([1 << k for k in range(10, 21, 2)] if _wants_cuda(args.overrides)
                                   else [1024, 4096, 16384, 65536])
    blocks = []
    for name in args.scaling:
        progress.start(f"{name} training throughput over num_envs")
        blocks.append({"preset": name, "rows": scaling([*PRESETS[name], *args.overrides], sizes)})
        fitted = [r for r in blocks[-1]["rows"] if "error" not in r]
        progress.finish(f"{name} scaling: " + ", ".join(
            f"{r['num_envs']:,}: {r['collect_update_sps']:,.0f}" for r in fitted))
    return blocks


def _measure_updates(args: argparse.Namespace, progress: Any) -> list[dict[str, Any]]:
    """``--updates``: per off-policy preset, gradient steps/s eager then compiled."""
    rows = []
    for name in args.updates:
        row: dict[str, Any] = {"preset": name}
        for compiled in (False, True):
            mode = "compiled" if compiled else "eager"
            progress.start(f"{name} gradient steps ({mode})")
            speed = update_speed([*UPDATE_PRESETS[name], *args.overrides], compiled)
            row.update({f"{mode}_{k}": v for k, v in speed.items()})
            progress.finish(f"{name} ({mode}): {speed['grad_steps_per_s']:,.1f} gradient steps/s")
        rows.append(row)
    return rows


def _measure_presets(args: argparse.Namespace, progress: Any) -> list[dict[str, Any]]:
    """``--presets``: per preset its throughput, then one training run per seed until solved."""
    results = []
    for name in args.presets:
        overrides = [*PRESETS[name], *args.overrides]
        progress.start(f"{name} throughput")
        speed = throughput([*overrides, *QUIET])
        progress.finish(f"{name} throughput: collect {speed['collect_sps']:,.0f}, update "
                        f"{speed['update_sps']:,.0f} steps/s (compile {speed['compile_s']:.1f} s)")
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
    return results


def _measure_cli_runs(args: argparse.Namespace, progress: Any) -> list[dict[str, Any]]:
    """``--cli-runs N``: the default ``embodirl-train`` N times, each in a fresh process."""
    runs = []
    for k in range(args.cli_runs):
        progress.start(f"embodirl-train run {k + 1} of {args.cli_runs}")
        runs.append(cli_run(args.overrides))
        run = runs[-1]
        solved = "not solved" if run["enter_to_solved_s"] is None else f"solved {run['enter_to_solved_s']:.2f} s"
        progress.finish(f"embodirl-train run {k + 1}: start-up {run['startup_s']:.2f} s, {solved} after Enter, "
                        f"exited after {run['process_s']:.2f} s")
    return runs


def _wants_cuda(overrides: list[str]) -> bool:
    import torch

    return any(o.startswith("device=cuda") for o in overrides) or (
        torch.cuda.is_available() and not any(o.startswith("device=") for o in overrides))


def _print_env_speed(rows: list[dict[str, Any]], sizes: list[int]) -> None:
    if not rows:
        return
    print("| env (raw steps/s, random actions) | " + " | ".join(f"{n:,} envs" for n in sizes) + " |")
    print("|---|" + "---:|" * len(sizes))
    for row in rows:
        print(f"| {row['env']} | " + " | ".join(f"{row[str(n)]:,.0f}" for n in sizes) + " |")
    print()


def _print_costs(rows: list[dict[str, Any]]) -> None:
    if not rows:
        return
    print("| env (actor-critic policy) | device | num_envs | env.step eager / compiled | policy.act eager / compiled "
          "| collection step eager / compiled | us per call eager / compiled (env / act / collection step) "
          "| compile s (env / act / collection step) |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        cells = [f"{r[f'{k}_eager']:.0f} / {r[f'{k}_compiled']:.0f}" for k in ("env", "act", "collect")]
        times = ", ".join(f"{r[f'{k}_eager_us']:.0f} / {r[f'{k}_compiled_us']:.0f}" for k in ("env", "act", "collect"))
        compile_s = " / ".join(f"{r[f'{k}_compile_s']:.1f}" for k in ("env", "act", "collect"))
        print(f"| {r['env']} | {r['device']} | {r['num_envs']:,} | " + " | ".join(cells)
              + f" | {times} | {compile_s} |")
    print("(eager: aten ops dispatched on a CPU, CUDA kernels on a GPU; compiled: kernels and library calls "
          "one call launches; CartPole's eager CPU step does its arithmetic in numpy, which only its time shows)\n")


def _print_scaling(blocks: list[dict[str, Any]]) -> None:
    for block in blocks:
        print(f"| {block['preset']}: num_envs | collect sps | update sps | training sps (collect + update) | "
              "compile s |")
        print("|---:|---:|---:|---:|---:|")
        for r in block["rows"]:
            if "error" in r:
                print(f"| {r['num_envs']:,} | {r['error']} | | | |")
            else:
                print(f"| {r['num_envs']:,} | {r['collect_sps']:,.0f} | {r['update_sps']:,.0f} | "
                      f"{r['collect_update_sps']:,.0f} | {r['compile_s']:.1f} |")
        print()


def _print_updates(rows: list[dict[str, Any]]) -> None:
    if not rows:
        return
    print("| off-policy preset | batch | gradient steps/s eager | gradient steps/s compiled | speed-up | "
          "first steps s eager / compiled (compile) |")
    print("|---|---:|---:|---:|---:|---:|")
    for r in rows:
        eager, compiled = r["eager_grad_steps_per_s"], r["compiled_grad_steps_per_s"]
        print(f"| {r['preset']} | {r['eager_minibatch_size']:,} | {eager:,.1f} | {compiled:,.1f} | "
              f"{compiled / eager:.2f}x | {r['eager_warmup_s']:.1f} / {r['compiled_warmup_s']:.1f} |")
    print()


def _print_cli_runs(runs: list[dict[str, Any]]) -> None:
    print("| embodirl-train (default, TensorBoard on) | start-up s | Enter to solved s | process s | "
          "training to solved s | e2e env steps/s | solved at steps |")
    print("|---|---:|---:|---:|---:|---:|---|")
    steps = ", ".join("not solved" if r["solved_env_steps"] is None else f"{r['solved_env_steps']:,}" for r in runs)
    print(f"| {len(runs)} runs, fresh processes, min / median / max | {_spread(runs, 'startup_s')} | "
          f"{_spread(runs, 'enter_to_solved_s')} | {_spread(runs, 'process_s')} | "
          f"{_spread(runs, 'solved_wall_time_s')} | {statistics.median(r['e2e_sps'] for r in runs):,.0f} | {steps} |")
    print()


def _spread(runs: list[dict[str, Any]], key: str) -> str:
    """``min / median / max`` of a timing over runs; ``-`` when a run lacks it (not solved)."""
    values = [r[key] for r in runs if r.get(key) is not None]
    if len(values) < len(runs):
        return "-"
    return f"{min(values):.2f} / {statistics.median(values):.2f} / {max(values):.2f}"


def _print_presets(results: list[dict[str, Any]]) -> None:
    print("| preset | collect sps | update sps | compile s | e2e sps (median) | solved in s (median, compile "
          "excluded) | solved at steps (median) | per seed: s / steps |")
    print("|---|---:|---:|---:|---:|---:|---:|---|")
    for r in results:
        per_seed = ", ".join(
            f"{x['solved_wall_time_s']:.2f} / {x['solved_env_steps']:,}" if x["solved_wall_time_s"] is not None
            else "not solved" for x in r["runs"])
        solved = r["median_solved_wall_time_s"]
        steps = r["median_solved_env_steps"]
        print(f"| {r['preset']} | {r['collect_sps']:,.0f} | {r['update_sps']:,.0f} | {r['compile_s']:.1f} | "
              f"{'-' if r['median_e2e_sps'] is None else format(r['median_e2e_sps'], ',.0f')} | "
              f"{'-' if solved is None else f'{solved:.2f}'} | {'-' if steps is None else f'{steps:,.0f}'} | "
              f"{per_seed} |")


# --- the Markdown page (--markdown) --------------------------------------------------------------------------------

DEVICES = ("CPU", "GPU")
NOT_MEASURED = "not measured"


def cpu_model() -> str:
    """The CPU's model name from ``/proc/cpuinfo`` (Linux), else what :mod:`platform` knows."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def run_info(overrides: list[str]) -> dict[str, Any]:
    """What a results page says about the run that measured them: machine, versions, settings, date."""
    from importlib.metadata import PackageNotFoundError, version

    import torch

    try:
        embodirl_version = version("embodirl")
    except PackageNotFoundError:  # running from a source tree that is not installed
        embodirl_version = "unknown"
    cuda = _wants_cuda(overrides)
    compile_choice = next((o.split("=", 1)[1] for o in reversed(overrides) if o.startswith("compile=")), "auto")
    return {"device": "GPU" if cuda else "CPU", "date": datetime.datetime.now(datetime.timezone.utc).date().isoformat(),
            "embodirl": embodirl_version, "torch": torch.__version__, "cpu": cpu_model(), "cores": os.cpu_count(),
            "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
            "threads": _num_threads(overrides), "overrides": list(overrides),
            "compile": cuda if compile_choice == "auto" else compile_choice.lower() == "true"}


def _num_threads(overrides: list[str]) -> str:
    """The ``num_threads`` every measurement sets, as given (a bad value fails the first measurement in one line),
    else the config's default.

    torch's own default (the core count) is not what the measurements use. The overrides are not composed: they
    may name keys only a preset has (``env.obs_mode`` for push_cube).
    """
    given = [o.split("=", 1)[1] for o in overrides if o.startswith("num_threads=")]
    return given[-1] if given else str(_compose([]).num_threads)


def _read_merges(paths: list[Path], device: str) -> list[dict[str, Any]]:
    """The ``--out`` files of earlier runs to show beside this one (on ``device``), one per other device.

    Raises:
        SystemExit: A file that is not embodirl-bench output, or two runs on one device (one line, status 2).
    """
    merged, devices = [], {device}
    for path in paths:
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            _refuse(f"--merge {path} cannot be read as JSON ({type(exc).__name__}: {exc}). Fix: pass a file written "
                    "by embodirl-bench --out")
        run = data.get("run") if isinstance(data, dict) else None
        if not isinstance(run, dict) or run.get("device") not in DEVICES:
            _refuse(f"--merge {path} holds no embodirl-bench results with their run description. Fix: pass a file "
                    "written by embodirl-bench --out")
        if run["device"] in devices:
            _refuse(f"--merge {path} holds a second {run['device']} run (expected one run per device: CPU, GPU). "
                    f"Fix: merge only the results of a run on the other device")
        devices.add(run["device"])
        merged.append(data)
    return merged


def _refuse(text: str) -> NoReturn:
    print(f"embodirl-bench: error: {text}", file=sys.stderr)
    raise SystemExit(2)


def markdown_report(runs: list[dict[str, Any]], command: str) -> str:
    """The results of ``runs`` (``--out`` dictionaries, one per device) as a Markdown page.

    A header table describes each device's run (or says it was not measured); each measurement then gets one
    table with a CPU row and a GPU row per item, "not measured" where no run on that device measured it.
    """
    by_device = {measured["run"]["device"]: measured for measured in runs}
    sections = [_md_header(by_device, command), _md_env_speed(by_device), _md_presets(by_device),
                _md_cli_runs(by_device), _md_costs(by_device), _md_scaling(by_device)]
    return "\n\n".join(s for s in sections if s) + "\n"


def _md_table(headers: list[str], rows: list[list[str]], numbers_from: int = 2) -> str:
    """A Markdown table; columns from ``numbers_from`` on hold figures and are right-aligned."""
    align = ["---" if i < numbers_from else "---:" for i in range(len(headers))]
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join(align) + "|"]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])


def _md_header(by_device: dict[str, dict[str, Any]], command: str) -> str:
    def cell(device: str, describe: Any) -> str:
        return describe(by_device[device]["run"]) if device in by_device else NOT_MEASURED

    rows = [[label, *(cell(d, describe) for d in DEVICES)] for label, describe in (
        ("date", lambda r: r["date"]),
        ("embodirl / torch", lambda r: f"{r['embodirl']} / {r['torch']}"),
        ("CPU", lambda r: f"{r['cpu']}, {r['cores']} cores"),
        ("GPU", lambda r: r["gpu"] or "none"),
        ("torch threads", lambda r: r["threads"]),
        ("compile", lambda r: "on: steps compiled before training; compile time excluded from every figure, "
                              "shown apart as compile s" if r["compile"] else "off (eager): no compile time"),
        ("overrides", lambda r: " ".join(f"`{o}`" for o in r["overrides"]) or "none"))]
    notes = ("Written by `embodirl-bench --markdown`; regenerate it rather than edit it. This run: "
             f"`{command}`. Times to solve count from the start of training (after the build), evaluation "
             "included; env step counts are exact for a seed, times vary with the machine's load.")
    return "# Benchmark tables\n\n" + notes + "\n\n" + _md_table(["", *DEVICES], rows, numbers_from=3)


def _device_rows(by_device: dict[str, dict[str, Any]], key: str, name: str, width: int,
                 cells: Any) -> list[list[str]]:
    """One row per (item, device) for the items under ``key`` of any run; ``cells(entry)`` gives a measured
    row's cells after the item and device columns, ``width`` of them."""
    items = list(dict.fromkeys(entry[name] for m in by_device.values() for entry in m[key]))
    rows = []
    for item in items:
        for device in DEVICES:
            entry = next((e for e in by_device.get(device, {}).get(key, []) if e[name] == item), None)
            rows.append([f"`{item}`", device, *(cells(entry) if entry else [NOT_MEASURED] * width)])
    return rows


def _md_env_speed(by_device: dict[str, dict[str, Any]]) -> str:
    sizes = sorted({int(n) for m in by_device.values() for row in m["env_speed"] for n in row if n != "env"})
    if not sizes:
        return ""
    rows = _device_rows(by_device, "env_speed", "env", len(sizes),
                        lambda r: [f"{r[str(n)]:,.0f}" if str(n) in r else "-" for n in sizes])
    return ("## Raw env speed (env steps/s, random actions, eager)\n\n"
            + _md_table(["env", "device", *(f"{n:,} envs" for n in sizes)], rows))


def _num_envs(overrides: list[str]) -> str:
    """``env.num_envs`` of the config these overrides compose (the presets pin it)."""
    try:
        return f"{_compose(overrides).env.num_envs:,}"
    except Exception:  # a preset this version does not ship (a merged file): the page still gets written
        return "-"


def _md_presets(by_device: dict[str, dict[str, Any]]) -> str:
    def cells(r: dict[str, Any]) -> list[str]:
        solved = [x for x in r["runs"] if x["solved_wall_time_s"] is not None]
        time, steps, e2e = r["median_solved_wall_time_s"], r["median_solved_env_steps"], r["median_e2e_sps"]
        return [_num_envs(r["overrides"]), f"{r['collect_sps']:,.0f}", f"{r['update_sps']:,.0f}",
                f"{r['compile_s']:.1f}", "-" if e2e is None else f"{e2e:,.0f}",
                "-" if time is None else f"{time:.2f} s", "-" if steps is None else f"{steps:,.0f}",
                f"{len(solved)}/{len(r['runs'])}"]

    rows = _device_rows(by_device, "results", "preset", 8, cells)
    if not rows:
        return ""
    return ("## Training presets\n\nCollection and update timed apart after the compile warm-up; then one full "
            "training run per seed (no TensorBoard, no console) until the deterministic evaluation first reaches "
            "the env's solved threshold.\n\n"
            + _md_table(["preset", "device", "num_envs", "collection env steps/s", "update env steps/s", "compile s",
                         "end-to-end env steps/s, median", "time to solve, median", "env steps to solve, median",
                         "seeds solved"], rows))


def _md_cli_runs(by_device: dict[str, dict[str, Any]]) -> str:
    if not any(m["cli_runs"] for m in by_device.values()):
        return ""
    rows = []
    for device in DEVICES:
        runs = by_device.get(device, {}).get("cli_runs", [])
        if not runs:
            rows.append([device, *[NOT_MEASURED] * 7])
            continue
        steps = _median([r["solved_env_steps"] for r in runs])
        rows.append([device, _num_envs(by_device[device]["run"]["overrides"]), str(len(runs)),
                     _spread(runs, "startup_s"), _spread(runs, "enter_to_solved_s"), _spread(runs, "process_s"),
                     _spread(runs, "solved_wall_time_s"), "-" if steps is None else f"{steps:,.0f}"])
    return ("## `embodirl-train` as users run it\n\nThe default config (TensorBoard on, console lines) in fresh "
            "processes, one after another, timed from the moment each process is started: start-up until the "
            "training clock starts (imports, config, building; the first env step follows), Enter to solved until "
            "the evaluation that solved it, process until it has exited (summary, checkpoint, interpreter exit). "
            "Training to solved is the training clock alone. Seconds, min / median / max.\n\n"
            + _md_table(["device", "num_envs", "runs", "start-up s", "Enter to solved s", "process s",
                         "training to solved s", "env steps to solve, median"], rows, numbers_from=1))


def _md_costs(by_device: dict[str, dict[str, Any]]) -> str:
    def cells(r: dict[str, Any]) -> list[str]:
        return [f"{r['num_envs']:,}",
                *(f"{r[f'{k}_eager']:.0f} / {r[f'{k}_compiled']:.0f}" for k in ("env", "act", "collect")),
                *(f"{r[f'{k}_eager_us']:.0f} / {r[f'{k}_compiled_us']:.0f}" for k in ("env", "act", "collect")),
                " / ".join(f"{r[f'{k}_compile_s']:.1f}" for k in ("env", "act", "collect"))]

    rows = _device_rows(by_device, "step_costs", "env", 8, cells)
    if not rows:
        return ""
    return ("## Work per step\n\nEager: aten ops dispatched (CPU) or CUDA kernels launched (GPU); compiled: the "
            "kernels and library calls one call launches. Times: median microseconds per call.\n\n"
            + _md_table(["env (actor-critic policy)", "device", "num_envs", "env.step eager / compiled",
                         "policy.act eager / compiled", "collection step eager / compiled", "env.step us",
                         "policy.act us", "collection step us", "compile s (env / act / collection)"], rows))


def _md_scaling(by_device: dict[str, dict[str, Any]]) -> str:
    presets = list(dict.fromkeys(b["preset"] for m in by_device.values() for b in m["scaling"]))
    rows = []
    for preset in presets:
        for device in DEVICES:
            block = next((b for b in by_device.get(device, {}).get("scaling", []) if b["preset"] == preset), None)
            if block is None:
                rows.append([f"`{preset}`", device, *[NOT_MEASURED] * 5])
                continue
            for r in block["rows"]:
                speeds = [r["error"], "", "", ""] if "error" in r else [
                    f"{r['collect_sps']:,.0f}", f"{r['update_sps']:,.0f}", f"{r['collect_update_sps']:,.0f}",
                    f"{r['compile_s']:.1f}"]
                rows.append([f"`{preset}`", device, f"{r['num_envs']:,}", *speeds])
    if not rows:
        return ""
    return ("## Training throughput over num_envs\n\nRollouts of 16 steps in 4 minibatches, until memory runs "
            "out.\n\n" + _md_table(["preset", "device", "num_envs", "collection env steps/s", "update env steps/s",
                                     "training env steps/s", "compile s"], rows))


def console() -> None:
    """The console script: :func:`main`, then a quick end of the process (:mod:`embodirl.cli.process`)."""
    from embodirl.cli.process import run_console_script

    run_console_script(main)


if __name__ == "__main__":
    console()

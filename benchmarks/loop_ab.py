"""The training loop's parts, A/B: two checkouts' collection, update and evaluation, alternated round by round.

Each round runs, for each checkout in turn, a fresh process that builds the preset (``compile`` as given: its
warm-up time is ``compile_s``), then times ``iterations`` rollouts and updates after ``warmup`` of them, and
``evals`` evaluations of ``eval.num_episodes`` episodes of the policy those updates trained (CartPole's default
solves in about 20 iterations: its episodes then run to the 500-step limit, as in a run's last, longest
evaluation). Both wall seconds and the process's CPU seconds are reported: on a
shared machine the load moves wall time by tens of percent within minutes, CPU seconds much less.

    python benchmarks/loop_ab.py 3 before=/work/main after=. -- compile=true

Each NAME=DIR names a checkout (put first on PYTHONPATH); what follows ``--`` are Hydra overrides of the
default ``embodirl-train`` (CartPole PPO at the shipped defaults, one thread). Prints one JSON line per run and the
medians per version.
"""
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

KEYS = ("collect_sps", "update_sps", "loop_sps", "collect_cpu_sps", "update_cpu_sps", "loop_cpu_sps",
        "eval_ms", "eval_cpu_ms", "compile_s", "compile_cpu_s")


def measure(overrides: list[str], iterations: int = 20, warmup: int = 3, evals: int = 3) -> dict[str, float]:
    """Build the preset in this process and time its parts (wall and CPU seconds of this process)."""
    import torch
    from hydra import compose, initialize_config_module

    from embodirl.app.build import build_components

    with initialize_config_module("embodirl.conf", version_base="1.3"):
        cfg = compose("train", overrides=["logger.console=none", "logger.tensorboard=false", *overrides])
    torch.set_num_threads(cfg.num_threads)
    cpu0 = time.process_time()
    parts = build_components(cfg)
    compile_cpu_s = time.process_time() - cpu0
    parts.collector.reset(seed=0)
    wall = {"collect": 0.0, "update": 0.0, "eval": 0.0}
    cpu = dict.fromkeys(wall, 0.0)
    steps = 0

    def timed(part: str, fn: Callable[[], Any], count: bool) -> Any:
        w, c = time.perf_counter(), time.process_time()
        out = fn()
        if count:
            wall[part] += time.perf_counter() - w
            cpu[part] += time.process_time() - c
        return out

    for i in range(warmup + iterations):
        rollout = timed("collect", parts.collector.collect, i >= warmup)
        timed("update", lambda r=rollout: parts.algo.update(r), i >= warmup)
        steps += rollout.batch_size[0] * rollout.get_non_tensor("num_steps_collected") if i >= warmup else 0
    for _ in range(evals):
        timed("eval", lambda: parts.evaluator.evaluate(cfg.eval.num_episodes, seed=12345), True)
    return {"collect_sps": steps / wall["collect"], "update_sps": steps / wall["update"],
            "loop_sps": steps / (wall["collect"] + wall["update"]), "collect_cpu_sps": steps / cpu["collect"],
            "update_cpu_sps": steps / cpu["update"], "loop_cpu_sps": steps / (cpu["collect"] + cpu["update"]),
            "eval_ms": 1e3 * wall["eval"] / evals, "eval_cpu_ms": 1e3 * cpu["eval"] / evals,
            "compile_s": parts.compile_s, "compile_cpu_s": compile_cpu_s if parts.compile_s else 0.0}


def main(argv: list[str]) -> None:
    split = argv.index("--") if "--" in argv else len(argv)
    rounds, versions = int(argv[0]), dict(a.split("=", 1) for a in argv[1:split])
    overrides = argv[split + 1:]
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in versions}
    for r in range(rounds):
        for name, tree in versions.items():
            env = dict(os.environ, PYTHONPATH=os.path.abspath(tree))
            load = os.getloadavg()[0]
            out = subprocess.run([sys.executable, __file__, "--measure", *overrides], env=env, check=True,
                                 capture_output=True, text=True, cwd="/tmp").stdout.strip().splitlines()[-1]
            row = {"version": name, "round": r, "load_1min": load, **json.loads(out)}
            runs[name].append(row)
            print(json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in row.items()}), flush=True)
    for name, rows in runs.items():
        print(name, "median:", {k: round(statistics.median(row[k] for row in rows), 2) for k in KEYS})


if __name__ == "__main__":
    if sys.argv[1:2] == ["--measure"]:
        print(json.dumps(measure(sys.argv[2:])))
    else:
        main(sys.argv[1:])

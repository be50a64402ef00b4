"""Env steps and loop wall time to solved, over seeds and config variants, in one process.

Each variant is a list of overrides of ``embodirl-train``; every (variant, seed) run trains until solved or its
budget, with the console off and checkpoints only at the end, and prints one JSON line:
``{"variant", "seed", "solved_env_steps", "solved_wall_time_s", "wall_time_s", "cpu_s"}`` (``cpu_s``: this
process's CPU seconds in training, which a loaded machine inflates less than wall time). A summary per variant follows
(median, range and how many seeds solved). Composing and building happen in this process, so a run costs its
training time only::

    python benchmarks/sample_sweep.py --seeds 0-15 --variant base= --variant lr3="algo.learning_rate=3e-3"

Runs go one after another (``num_threads=1``): on a shared machine, read env steps (load-independent) first.
``--alternate`` runs the variants in turn for each seed (seed 0 of every variant, then seed 1, ...), so that a
change in the machine's load falls on every variant alike when their times are compared.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from hydra import compose, initialize_config_module

from embodirl.app.build import build

QUIET = ["logger=none", "logger.console=none", "device=cpu", "num_threads=1",
         "trainer.checkpoint_every_env_steps=100000000", "trainer.keep_checkpoints=1"]


def parse_seeds(text: str) -> list[int]:
    """``0-15`` or ``0,3,7`` (or both, comma-separated) -> the seeds."""
    seeds: list[int] = []
    for part in text.split(","):
        low, _, high = part.partition("-")
        seeds.extend(range(int(low), int(high or low) + 1))
    return seeds


def parse_variant(text: str) -> tuple[str, list[str]]:
    """``name=override override ...`` -> ``(name, overrides)``."""
    name, _, rest = text.partition("=")
    return name, rest.split()


def run_order(names: list[str], seeds: list[int], alternate: bool) -> list[tuple[str, int]]:
    """The ``(variant, seed)`` runs in the order they go: each variant's seeds in a row, or with ``alternate``
    every variant in turn for each seed."""
    if alternate:
        return [(name, seed) for seed in seeds for name in names]
    return [(name, seed) for name in names for seed in seeds]


def run_one(overrides: list[str], seed: int, budget: int) -> dict:
    """Train one run until solved or ``budget`` env steps; its summary, with ``cpu_s``."""
    with initialize_config_module("embodirl.conf", version_base="1.3"):
        cfg = compose("train", overrides=[*QUIET, f"trainer.total_env_steps={budget}", f"seed={seed}", *overrides])
    with tempfile.TemporaryDirectory() as run_dir:
        trainer = build(cfg, Path(run_dir))
        start = time.process_time()
        summary = trainer.train()
        return {**summary, "cpu_s": time.process_time() - start}


def summarise(name: str, rows: list[dict], budget: int) -> dict:
    """Median, quartiles and range of the solve step (an unsolved seed counts as beyond the budget)."""
    steps = sorted(r["solved_env_steps"] or budget * 10 for r in rows)
    times = sorted(r["solved_wall_time_s"] or float("inf") for r in rows)
    solved = sum(r["solved_env_steps"] is not None and r["solved_env_steps"] <= budget for r in rows)
    quartiles = statistics.quantiles(steps, n=4) if len(steps) > 1 else [steps[0]] * 3
    return {"variant": name, "solved": f"{solved}/{len(rows)}", "median_env_steps": statistics.median(steps),
            "q1": quartiles[0], "q3": quartiles[2], "max": steps[-1],
            "median_solved_wall_s": statistics.median(times),
            "total_wall_s": round(sum(r["wall_time_s"] for r in rows), 1),
            "median_cpu_s": statistics.median(r["cpu_s"] for r in rows)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="0-15", help="0-15, or 0,3,7")
    parser.add_argument("--budget", type=int, default=500_000, help="env steps per run before it counts as failed")
    parser.add_argument("--variant", action="append", default=[], help="name=override override ... (repeatable)")
    parser.add_argument("--alternate", action="store_true",
                        help="run the variants in turn for each seed rather than each variant's seeds in a row")
    args = parser.parse_args(argv)
    variants = dict(parse_variant(v) for v in args.variant) or {"default": []}
    seeds = parse_seeds(args.seeds)
    rows: dict[str, list[dict]] = {name: [] for name in variants}
    for name, seed in run_order(list(variants), seeds, args.alternate):
        out = run_one(variants[name], seed, args.budget)
        row = {"variant": name, "seed": seed, "solved_env_steps": out["solved_env_steps"],
               "solved_wall_time_s": out["solved_wall_time_s"], "wall_time_s": round(out["wall_time_s"], 2),
               "cpu_s": round(out["cpu_s"], 2)}
        rows[name].append(row)
        print(json.dumps(row), flush=True)
        if not args.alternate and seed == seeds[-1]:
            print(json.dumps(summarise(name, rows[name], args.budget)), flush=True)
    if args.alternate:
        for name, variant_rows in rows.items():
            print(json.dumps(summarise(name, variant_rows, args.budget)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

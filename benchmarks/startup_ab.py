"""What a user waits for, A/B: two checkouts' embodirl-train alternated round by round.

Per round and version, in fresh processes timed from the outside: the default run from Enter to its
"stopped: solved" line and to its exit (plus, where summary.json records started_at, the start-up until the
training clock starts, and the training clock to solved), ``embodirl-train --help``, three config errors (an
unknown key, a value of the wrong type, an unknown option) and, as the floor, ``python -c "import torch"``. The
short commands' CPU seconds (user + system, ``*_cpu_s``) are recorded beside their wall time: on a loaded machine
they vary less. So does ``clock_cpu_s``: the CPU seconds of the default run from process start to its training
clock, in a process that stops there (``Trainer.train`` replaced by an exit; the trainer's module is imported
first, which changes the order of the imports and not their sum).

    python benchmarks/startup_ab.py 10 before=../old/.venv/bin after=.venv/bin
    python benchmarks/startup_ab.py 10 main=/work/main mine=.     # checkouts, run with this Python

Each NAME=DIR names a venv's bin directory holding embodirl-train, or a checkout (a directory holding
``embodirl/``), whose code this Python runs as the console script does. Prints one JSON line per run and the
median and minimum per version; writes every run to startup_ab_<time>.json in the working directory.
"""
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SHORT = {"help": ["--help"], "error": ["algo.learning_rat=1e-3"], "bad_value": ["algo.learning_rate=abc"],
         "bad_option": ["algo=nope"]}
KEYS = ("startup_s", "enter_to_solved_line_s", "exit_s", "loop_s", *(f"{k}_s" for k in SHORT), "torch_s",
        *(f"{k}_cpu_s" for k in SHORT), "torch_cpu_s", "clock_cpu_s")
CONSOLE = "import sys; from embodirl.cli.train import console; sys.argv[0] = 'embodirl-train'; sys.exit(console())"
CLOCK = """
import os, sys, time
import embodirl.cli
from embodirl.cli.train import main
from embodirl.training.trainer import Trainer

def clock(self):
    print("clock_cpu_s", time.process_time(), flush=True)
    os._exit(0)

Trainer.train = clock
sys.argv[0] = "embodirl-train"
main()
"""


def command(where: str) -> tuple[list[str], dict[str, str]]:
    """The ``embodirl-train`` of ``where`` (a venv's bin directory or a checkout) and its environment."""
    if (Path(where) / "embodirl" / "__init__.py").is_file():
        # -P: no working directory first on sys.path, so run from inside a checkout it still times ``where``
        return [sys.executable, "-P", "-c", CONSOLE], dict(os.environ, PYTHONPATH=str(Path(where).resolve()))
    return [f"{where}/embodirl-train"], dict(os.environ)


def timed(argv: list[str], env: dict[str, str], pattern: str | None = None) -> dict:
    """Run ``argv``: its start (epoch s), when a line matched ``pattern``, when it exited, its CPU s, its status."""
    t0 = time.time()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=dict(env, PYTHONUNBUFFERED="1"))
    t_line = None
    for line in proc.stdout or []:
        if pattern and t_line is None and re.search(pattern, line):
            t_line = time.time() - t0
    _, status, usage = os.wait4(proc.pid, 0)
    return dict(start=t0, line_s=t_line, exit_s=time.time() - t0, cpu_s=usage.ru_utime + usage.ru_stime,
                rc=os.waitstatus_to_exitcode(status))


def one_round(name: str, where: str, r: int) -> dict:
    load = os.getloadavg()[0]
    train, env = command(where)
    with tempfile.TemporaryDirectory() as d:
        run = timed([*train, f"hydra.run.dir={d}/run"], env, r"stopped: solved")
        summary = json.loads(Path(f"{d}/run/summary.json").read_text())
    short = {key: timed([*train, *argv], env) for key, argv in SHORT.items()}
    python = sys.executable if train[0] == sys.executable else f"{where}/python"
    short["torch"] = timed([python, "-c", "import torch"], env)
    with tempfile.TemporaryDirectory() as d:
        stop = subprocess.run([python, "-P", "-c", CLOCK, f"hydra.run.dir={d}/run"], env=env, capture_output=True,
                              text=True)
    clock = re.search(r"clock_cpu_s (\S+)", stop.stdout)
    return dict(version=name, round=r, load=round(load, 2),
                startup_s=summary["started_at"] - run["start"] if summary.get("started_at") else None,
                enter_to_solved_line_s=run["line_s"], exit_s=run["exit_s"], loop_s=summary["solved_wall_time_s"],
                steps=summary["solved_env_steps"], **{f"{k}_s": v["exit_s"] for k, v in short.items()},
                **{f"{k}_cpu_s": v["cpu_s"] for k, v in short.items()},
                clock_cpu_s=float(clock.group(1)) if clock else None, rcs=[v["rc"] for v in short.values()])


def main() -> None:
    rounds, versions = int(sys.argv[1]), dict(a.split("=", 1) for a in sys.argv[2:])
    rows = []
    for r in range(rounds):
        order = list(versions.items()) if r % 2 == 0 else list(versions.items())[::-1]
        for name, where in order:
            rows.append(one_round(name, where, r))
            print(json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in rows[-1].items()}), flush=True)
    for name in versions:
        mine = [x for x in rows if x["version"] == name]
        runs = {k: [x[k] for x in mine if x[k] is not None] for k in KEYS}
        print(name, "medians:", {k: round(statistics.median(v), 3) if v else None for k, v in runs.items()})
        print(name, "minima:", {k: round(min(v), 3) if v else None for k, v in runs.items()})
    Path(f"startup_ab_{int(time.time())}.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()

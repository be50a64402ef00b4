"""What a user waits for, A/B: two checkouts' embodirl-train alternated round by round.

Per round and version, in fresh processes timed from the outside: the default run from Enter to its
"stopped: solved" line and to its exit (plus, where summary.json records started_at, the start-up until the
training clock starts, and the training clock to solved), ``embodirl-train --help``, three config errors (an
unknown key, a value of the wrong type, an unknown option) and, as the floor, ``python -c "import torch"``.

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

KEYS = ("startup_s", "enter_to_solved_line_s", "exit_s", "loop_s", "help_s", "error_s", "bad_value_s",
        "bad_option_s", "torch_s")
CONSOLE = "import sys; from embodirl.cli.train import console; sys.argv[0] = 'embodirl-train'; sys.exit(console())"


def command(where: str) -> tuple[list[str], dict[str, str]]:
    """The ``embodirl-train`` of ``where`` (a venv's bin directory or a checkout) and its environment."""
    if (Path(where) / "embodirl" / "__init__.py").is_file():
        return [sys.executable, "-c", CONSOLE], dict(os.environ, PYTHONPATH=str(Path(where).resolve()))
    return [f"{where}/embodirl-train"], dict(os.environ)


def timed(argv: list[str], env: dict[str, str], pattern: str | None = None) -> tuple[float, float | None, float, int]:
    """Start ``argv``; return its start (epoch s), when a line matched ``pattern``, when it exited, its status."""
    t0 = time.time()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=dict(env, PYTHONUNBUFFERED="1"))
    t_line = None
    for line in proc.stdout or []:
        if pattern and t_line is None and re.search(pattern, line):
            t_line = time.time() - t0
    proc.wait()
    return t0, t_line, time.time() - t0, proc.returncode


def one_round(name: str, where: str, r: int) -> dict:
    load = os.getloadavg()[0]
    train, env = command(where)
    with tempfile.TemporaryDirectory() as d:
        t0, solved, exited, _ = timed([*train, f"hydra.run.dir={d}/run"], env, r"stopped: solved")
        summary = json.loads(Path(f"{d}/run/summary.json").read_text())
    _, _, help_s, _ = timed([*train, "--help"], env)
    _, _, err_s, erc = timed([*train, "algo.learning_rat=1e-3"], env)
    _, _, value_s, vrc = timed([*train, "algo.learning_rate=abc"], env)
    _, _, option_s, orc = timed([*train, "algo=nope"], env)
    _, _, torch_s, _ = timed([sys.executable if train[0] == sys.executable else f"{where}/python", "-c",
                              "import torch"], env)
    return dict(version=name, round=r, load=round(load, 2),
                startup_s=summary["started_at"] - t0 if summary.get("started_at") else None,
                enter_to_solved_line_s=solved, exit_s=exited, loop_s=summary["solved_wall_time_s"],
                steps=summary["solved_env_steps"], help_s=help_s, error_s=err_s, bad_value_s=value_s,
                bad_option_s=option_s, torch_s=torch_s, error_rcs=(erc, vrc, orc))


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

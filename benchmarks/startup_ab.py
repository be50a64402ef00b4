"""What a user waits for, A/B: two checkouts' embodirl-train alternated round by round.

Per round and version, in fresh processes timed from the outside: the default run from Enter to its
"stopped: solved" line and to its exit (plus, where summary.json records started_at, the start-up until the
training clock starts, and the training clock to solved), ``embodirl-train --help``, and a config error.

    python benchmarks/startup_ab.py 5 before=../old/.venv/bin after=.venv/bin

Each NAME=DIR names a venv's bin directory holding embodirl-train. Prints one JSON line per run and the
medians per version; writes every run to startup_ab_<time>.json in the working directory.
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

KEYS = ("startup_s", "enter_to_solved_line_s", "exit_s", "loop_s", "help_s", "error_s")


def timed(argv: list[str], pattern: str | None = None) -> tuple[float, float | None, float, int]:
    """Start ``argv``; return its start (epoch s), when a line matched ``pattern``, when it exited, its status."""
    t0 = time.time()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=dict(os.environ, PYTHONUNBUFFERED="1"))
    t_line = None
    for line in proc.stdout or []:
        if pattern and t_line is None and re.search(pattern, line):
            t_line = time.time() - t0
    proc.wait()
    return t0, t_line, time.time() - t0, proc.returncode


def one_round(name: str, vbin: str, r: int) -> dict:
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as d:
        t0, solved, exited, _ = timed([f"{vbin}/embodirl-train", f"hydra.run.dir={d}/run"], r"stopped: solved")
        summary = json.loads(Path(f"{d}/run/summary.json").read_text())
    _, _, help_s, _ = timed([f"{vbin}/embodirl-train", "--help"])
    _, _, err_s, erc = timed([f"{vbin}/embodirl-train", "algo.learning_rat=1e-3"])
    return dict(version=name, round=r, load=round(load, 2),
                startup_s=summary["started_at"] - t0 if summary.get("started_at") else None,
                enter_to_solved_line_s=solved, exit_s=exited, loop_s=summary["solved_wall_time_s"],
                steps=summary["solved_env_steps"], help_s=help_s, error_s=err_s, error_rc=erc)


def main() -> None:
    rounds, versions = int(sys.argv[1]), dict(a.split("=", 1) for a in sys.argv[2:])
    rows = []
    for r in range(rounds):
        order = list(versions.items()) if r % 2 == 0 else list(versions.items())[::-1]
        for name, vbin in order:
            rows.append(one_round(name, vbin, r))
            print(json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in rows[-1].items()}), flush=True)
    for name in versions:
        mine = [x for x in rows if x["version"] == name]
        medians = {k: round(statistics.median(v), 3) if (v := [x[k] for x in mine if x[k] is not None]) else None
                   for k in KEYS}
        print(name, "medians:", medians)
    Path(f"startup_ab_{int(time.time())}.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()

"""Race embodirl against its peers to "solved" on CartPole-v1, on one machine, in one run.

Each contender runs in its own interpreter (its own venv), one process per run, one compute thread:
  embodirl   the default ``embodirl-train`` (``python -m embodirl.cli.train``), ``num_threads=1 device=cpu``;
  purejaxrl  ``benchmarks/purejaxrl_cartpole.py`` (PureJaxRL's PPO on gymnax, one XLA thread);
  sb3        ``benchmarks/sb3_cartpole.py --threads 1 --stop-on b`` (Stable-Baselines3, RL-Zoo settings).
Rounds alternate the contenders in a rotating order (round 0: embodirl, purejaxrl, sb3; round 1: purejaxrl,
sb3, embodirl; ...), so a change in the machine's load hits them alike. Round r uses seed r (``--seeds``
cycles a list instead).

Per run it records: the 1/5/15-minute load average just before the start (``os.getloadavg()``); the wall
time from starting the process to the line that announces the solve, and to the process's exit, measured
from outside; and the contender's own figures: the training loop's time to solved (evaluations included,
compile and start-up excluded), its env steps, and, where the contender reports them, its compile and
import seconds. "Solved" is each contender's deterministic evaluation reaching a mean return of 475 (see
each script's docstring; embodirl: ``summary.json`` ``solved_wall_time_s``).

Usage (each peer's interpreter is a flag; a contender whose interpreter is missing or cannot import its
libraries is skipped with the reason printed):
    python benchmarks/race.py --rounds 10 --out race.json --markdown race.md \\
        --embodirl-python .venv/bin/python --purejaxrl-python /work/jaxvenv/bin/python \\
        --sb3-python /work/sb3venv/bin/python [--cpu 1]
"""
import argparse
import dataclasses
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent


@dataclasses.dataclass(frozen=True)
class Contender:
    """How to start one contender, recognise its solve, and read its own figures."""

    name: str
    probe: str  # Python code printing a JSON dict of versions; failing means "skip"
    argv: Callable[[str, int, Path], list]  # (python, seed, run dir) -> command line
    solved_line: str  # regex of the output line printed when it solves
    read: Callable[[Path], dict]  # run dir -> {loop_s, env_steps, compile_s, import_s}


def _embodirl_argv(python, seed, run_dir):
    return [python, "-m", "embodirl.cli.train", f"seed={seed}", "num_threads=1", "device=cpu",
            f"hydra.run.dir={run_dir / 'run'}"]


def _embodirl_read(run_dir):
    s = json.loads((run_dir / "run" / "summary.json").read_text())
    return dict(loop_s=s.get("solved_wall_time_s"), env_steps=s.get("solved_env_steps"),
                compile_s=s.get("compile_s"), import_s=None)


def _script_argv(script, extra):
    def argv(python, seed, run_dir):
        return [python, str(HERE / script), "--seeds", str(seed), "--threads", "1",
                "--out", str(run_dir / "result.json"), *extra]
    return argv


def _script_read(run_dir):
    d = json.loads((run_dir / "result.json").read_text())
    row, summary = d["runs"][0], d["summary"]
    return dict(loop_s=row["b_wall_s"], env_steps=row["b_steps"],
                compile_s=summary.get("compile_s"), import_s=summary.get("import_s"))


_VERSIONS = "import json, importlib.metadata as m; print(json.dumps({{d: m.version(d) for d in {}}}))"
CONTENDERS = {
    "embodirl": Contender(
        "embodirl", _VERSIONS.format(("embodirl", "torch")), _embodirl_argv,
        r"stopped: solved at", _embodirl_read),
    "purejaxrl": Contender(
        "purejaxrl", _VERSIONS.format(("jax", "flax", "optax", "distrax", "gymnax")),
        _script_argv("purejaxrl_cartpole.py", []), r"^solved: seed", _script_read),
    "sb3": Contender(
        "sb3", _VERSIONS.format(("stable-baselines3", "torch", "gymnasium")),
        _script_argv("sb3_cartpole.py", ["--stop-on", "b"]), r'"b_wall_s": [0-9]', _script_read),
}
INSTALL_HINT = {
    "embodirl": "a venv with embodirl installed (pip install -e .)",
    "purejaxrl": 'a venv with: pip install "jax[cpu]" flax optax distrax gymnax',
    "sb3": "a venv with: pip install stable-baselines3",
}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=5, help="rounds; each runs every contender once")
    p.add_argument("--seeds", type=int, nargs="+", default=None,
                   help="seeds, cycled over the rounds (default: round r uses seed r)")
    p.add_argument("--contenders", nargs="+", choices=list(CONTENDERS), default=list(CONTENDERS))
    p.add_argument("--embodirl-python", default=sys.executable,
                   help="interpreter of embodirl's venv (default: this one)")
    p.add_argument("--purejaxrl-python", default=None, help="interpreter of the JAX venv")
    p.add_argument("--sb3-python", default=None, help="interpreter of the Stable-Baselines3 venv")
    p.add_argument("--cpu", type=int, default=None,
                   help="pin every contender to this CPU (as taskset -c), on top of its one thread")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds before a run is killed")
    p.add_argument("--workdir", default=None, help="run dirs and logs (default: a new temporary dir)")
    p.add_argument("--out", default="race.json")
    p.add_argument("--markdown", default="race.md")
    args = p.parse_args(argv)
    if args.rounds < 1:
        p.error(f"--rounds {args.rounds}: must be at least 1; try --rounds 5")
    if args.cpu is not None and args.cpu not in os.sched_getaffinity(0):
        p.error(f"--cpu {args.cpu}: not a CPU this process may use; choose one of "
                f"{sorted(os.sched_getaffinity(0))}")
    return args


def probe(name, python):
    """Returns (versions, None) when ``python`` can import the contender's libraries, else (None, why)."""
    if python is None:
        return None, f"--{name}-python not given ({INSTALL_HINT[name]})"
    if not Path(python).exists():
        return None, f"--{name}-python {python}: no such file ({INSTALL_HINT[name]})"
    try:
        out = subprocess.run([python, "-c", CONTENDERS[name].probe], capture_output=True, text=True,
                             timeout=300)
    except (OSError, subprocess.TimeoutExpired) as e:
        return None, f"--{name}-python {python}: {e}"
    if out.returncode != 0:
        last = (out.stderr.strip().splitlines() or [f"exit status {out.returncode}"])[-1]
        return None, f"--{name}-python {python}: {last} ({INSTALL_HINT[name]})"
    return json.loads(out.stdout), None


def run_once(contender, python, seed, run_dir, cpu, timeout):
    """Runs one contender to its exit; returns the outside timings and its own figures."""
    run_dir.mkdir(parents=True)
    load = os.getloadavg()
    env = dict(os.environ, PYTHONUNBUFFERED="1")  # the solve line must arrive when it is printed
    pin = (lambda: os.sched_setaffinity(0, {cpu})) if cpu is not None else None
    solved_re, t_line = re.compile(contender.solved_line), None
    t0 = time.perf_counter()
    proc = subprocess.Popen(contender.argv(python, seed, run_dir), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=env, preexec_fn=pin,
                            cwd=run_dir)
    killer = threading.Timer(timeout, proc.kill)
    killer.start()
    with open(run_dir / "output.log", "w") as log:
        for line in proc.stdout:
            if t_line is None and solved_re.search(line):
                t_line = time.perf_counter() - t0
            log.write(line)
    rc = proc.wait()
    t_exit = time.perf_counter() - t0
    killer.cancel()
    row = dict(contender=contender.name, seed=seed, rc=rc, load_avg=[round(x, 2) for x in load],
               start_to_solved_line_s=t_line and round(t_line, 3), start_to_exit_s=round(t_exit, 3),
               loop_s=None, env_steps=None, compile_s=None, import_s=None, run_dir=str(run_dir))
    try:
        row.update({k: v for k, v in contender.read(run_dir).items()})
    except (OSError, ValueError, KeyError, IndexError) as e:
        row["error"] = f"no result ({type(e).__name__}: {e}); see {run_dir / 'output.log'}"
    row["solved"] = rc == 0 and t_line is not None and row["loop_s"] is not None
    row["loop_steps_per_s"] = round(row["env_steps"] / row["loop_s"]) if row["solved"] else None
    return row


def race(args, pythons):
    """Runs the rounds, the contenders in a rotating order; returns one row per run."""
    names = list(pythons)
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="race-")).resolve()
    rows = []
    for r in range(args.rounds):
        seed = args.seeds[r % len(args.seeds)] if args.seeds else r
        order = names[r % len(names):] + names[:r % len(names)]
        for name in order:
            row = run_once(CONTENDERS[name], pythons[name], seed, workdir / f"r{r}-{name}",
                           args.cpu, args.timeout)
            row["round"] = r
            rows.append(row)
            print(f"round {r + 1}/{args.rounds} {name} seed {seed}: "
                  + (f"solved, loop {row['loop_s']:.2f} s, start to solved {row['start_to_solved_line_s']:.2f} s"
                     if row["solved"] else f"NOT solved (exit {row['rc']}; {row.get('error', '')})")
                  + f", load {row['load_avg'][0]:.2f}", flush=True)
    return rows, workdir


def stats(values):
    """min / median / max of the values that exist, or None."""
    values = [v for v in values if v is not None]
    if not values:
        return None
    return dict(median=statistics.median(values), min=min(values), max=max(values), n=len(values))


def summarise(rows, names):
    """Per contender: the spread of each timing over its solved runs, and its ratio to embodirl's median."""
    out = {}
    for name in names:
        mine = [r for r in rows if r["contender"] == name]
        solved = [r for r in mine if r["solved"]]
        out[name] = dict(
            runs=len(mine), solved=len(solved),
            **{k: stats([r[k] for r in solved]) for k in
               ("loop_s", "start_to_solved_line_s", "start_to_exit_s", "env_steps", "loop_steps_per_s",
                "compile_s", "import_s")},
            load_avg_1min=stats([r["load_avg"][0] for r in mine]))
    base = out.get("embodirl")
    for s in out.values():
        for k in ("loop_s", "start_to_solved_line_s"):
            ok = base and base[k] and s[k] and base[k]["median"] > 0
            s[f"{k}_vs_embodirl"] = round(s[k]["median"] / base[k]["median"], 2) if ok else None
    return out


def machine():
    """CPU model and counts, for the page's header."""
    model = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return dict(cpu_model=model, cpu_count=os.cpu_count(), platform=platform.platform(),
                python=sys.version.split()[0])


def _fmt(s, digits=2):
    if s is None:
        return "-"
    f = (lambda v: f"{v:,.0f}") if digits == 0 else (lambda v: f"{v:.{digits}f}")
    return f"{f(s['median'])} ({f(s['min'])}-{f(s['max'])})"


def markdown(result):
    """The race table: median (min-max) per contender, with the header a reader needs to judge it."""
    m, a = result["machine"], result["args"]
    lines = [
        "# Race to solved CartPole-v1", "",
        f"Measured {result['date']} on {m['cpu_model']} ({m['cpu_count']} CPUs), "
        f"{a['rounds']} rounds alternated, one compute thread per contender"
        + (f", every contender pinned to CPU {a['cpu']}" if a["cpu"] is not None else "") + ".",
        f"Command: `{result['command']}`", "",
        "| contender | versions | solved | training loop to solved, s | process start to solved, s "
        "| loop vs embodirl | env steps | env steps/s in the loop | compile, s | load avg (1 min) |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, s in result["summary"].items():
        vers = ", ".join(f"{k} {v}" for k, v in result["versions"][name].items())
        ratio = s["loop_s_vs_embodirl"]
        lines.append(
            f"| {name} | {vers} | {s['solved']}/{s['runs']} | {_fmt(s['loop_s'])} "
            f"| {_fmt(s['start_to_solved_line_s'])} | {'-' if ratio is None else f'{ratio:.2f}x'} "
            f"| {_fmt(s['env_steps'], 0)} | {_fmt(s['loop_steps_per_s'], 0)} | {_fmt(s['compile_s'])} "
            f"| {_fmt(s['load_avg_1min'])} |")
    lines += ["", "Median (min-max) over the solved runs; the load average is over all runs."]
    lines += [f"{name} skipped: {why}." for name, why in result["skipped"].items()]
    return "\n".join(lines) + "\n"


def main(argv=None):
    args = parse_args(argv)
    # Absolute (the runs start in their own dirs) but not resolved: a venv's python is a symlink whose
    # path is what makes it that venv's.
    given = {name: path and os.path.abspath(path) for name, path in
             (("embodirl", args.embodirl_python), ("purejaxrl", args.purejaxrl_python),
              ("sb3", args.sb3_python))}
    pythons, versions, skipped = {}, {}, {}
    for name in args.contenders:
        versions[name], why = probe(name, given[name])
        if why:
            skipped[name] = why
            print(f"skipping {name}: {why}", flush=True)
        else:
            pythons[name] = given[name]
    if not pythons:
        print("race.py: no contender can run; give at least one working --*-python", file=sys.stderr)
        return 2
    rows, workdir = race(args, pythons)
    result = dict(date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), machine=machine(),
                  command=" ".join([Path(sys.executable).name, *sys.argv]), args=vars(args),
                  versions={k: v for k, v in versions.items() if v}, skipped=skipped,
                  workdir=str(workdir), summary=summarise(rows, list(pythons)), runs=rows)
    Path(args.out).write_text(json.dumps(result, indent=2))
    Path(args.markdown).write_text(markdown(result))
    print(markdown(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Make the documentation's figures from short runs of the shipped commands.

    python docs/figures/make.py                  # all figures, into docs/figures/
    python docs/figures/make.py --only curve     # one of: curve, sweep, push_cube, arm
    python docs/figures/make.py --work runs/doc-figures   # keep the runs in a new directory (default: a temporary one)

Each figure comes from a command the docs name, run as a user runs it (the console scripts, by module):

* ``default_run_curve.png``: ``embodirl-train`` (the default PPO on CartPole, until solved), drawn from the run
  directory's ``metrics.jsonl``;
* ``sweep_report.png``: ``embodirl-train -m algo=ppo,grpo seed=0,1,2`` then ``embodirl-report`` on the sweep
  (its ``curves_return.png``);
* ``push_cube_frames.png``: frames of the last evaluation video of ``+experiment=grpo_push_cube
  eval.video=true``, which stops once solved;
* ``push_cube_arm_frames.png``: frames of the evaluation video of ``+experiment=ppo_push_cube_arm
  eval.video=true`` after one iteration (training the arm takes minutes; the picture shows the scene).

Everything runs on the CPU in about a minute; the runs are seeded, so the figures change only when the code does.
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

log = logging.getLogger("figures")

OUT = Path(__file__).resolve().parent
MODULES = {"embodirl-train": "embodirl.cli.train", "embodirl-report": "embodirl.cli.report"}
QUIET = ["logger.console=none", "device=cpu"]


def run(script: str, *args: str) -> None:
    """Run a console script (by its module, with this interpreter); a failure stops with its output."""
    command = [sys.executable, "-m", MODULES[script], *args]
    log.info("%s %s", script, " ".join(args))
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"{script} {' '.join(args)} failed with status {done.returncode}:\n{done.stderr[-3000:]}")


def learning_curve(run_dir: Path, out: Path) -> None:
    """The training return per iteration and the evaluations of one run, with its solved threshold."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    summary = json.loads((run_dir / "summary.json").read_text())
    train = [(r["env_steps"], r["episode/return_mean"]) for r in records if r.get("episode/return_mean") is not None]
    evals = [(r["env_steps"], r["eval/return_mean"]) for r in records if r.get("eval/return_mean") is not None]
    fig, ax = plt.subplots(figsize=(7, 3.2), dpi=100)
    ax.plot(*zip(*train, strict=True), color="tab:blue", label="training return (episode/return_mean)")
    ax.plot(*zip(*evals, strict=True), "o-", color="tab:orange", label="deterministic evaluation (eval/return_mean)")
    ax.axhline(summary["solved_threshold"], color="gray", linestyle="--", linewidth=1,
               label=f"solved threshold ({summary['solved_threshold']:g})")
    ax.set_xlabel("env steps")
    ax.set_ylabel("return")
    ax.set_title(f"embodirl-train (PPO, CartPole): solved at {summary['solved_env_steps']:,} env steps")
    ax.legend(loc="upper left", fontsize=8, frameon=False)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out)
    plt.close(fig)


def video_frames(video: Path, out: Path, count: int = 6, size: int = 160) -> None:
    """``count`` frames spread over a GIF, from its first to its last, side by side on one white strip."""
    from PIL import Image, ImageSequence

    with Image.open(video) as gif:
        frames = [frame.convert("RGB") for frame in ImageSequence.Iterator(gif)]
    picks = [frames[round(i * (len(frames) - 1) / (count - 1))] for i in range(count)]
    gap = 6
    strip = Image.new("RGB", (count * size + (count - 1) * gap, size), "white")
    for i, frame in enumerate(picks):
        strip.paste(frame.resize((size, size), Image.Resampling.LANCZOS), (i * (size + gap), 0))
    strip.save(out, optimize=True)


def last_video(run_dir: Path) -> Path:
    """The run's evaluation video of the most env steps."""
    videos = sorted((run_dir / "videos").glob("eval_*.gif"), key=lambda p: int(re.findall(r"\d+", p.stem)[-1]))
    if not videos:
        sys.exit(f"{run_dir} wrote no evaluation video")
    return videos[-1]


def make_curve(work: Path) -> None:
    run("embodirl-train", f"hydra.run.dir={work / 'default'}", *QUIET)
    learning_curve(work / "default", OUT / "default_run_curve.png")


def make_sweep(work: Path) -> None:
    sweep = work / "sweep"
    run("embodirl-train", "-m", "algo=ppo,grpo", "seed=0,1,2", f"hydra.sweep.dir={sweep}",
        "logger.tensorboard=false", *QUIET)
    run("embodirl-report", str(sweep), "--out", str(work / "sweep-report"))
    shutil.copyfile(work / "sweep-report" / "curves_return.png", OUT / "sweep_report.png")


def make_push_cube(work: Path) -> None:
    run_dir = work / "push_cube"
    run("embodirl-train", "+experiment=grpo_push_cube", "eval.video=true", "eval.video_num_envs=1",
        "eval.video_format=gif", f"hydra.run.dir={run_dir}", *QUIET)
    video_frames(last_video(run_dir), OUT / "push_cube_frames.png")


def make_arm(work: Path) -> None:
    run_dir = work / "arm"
    run("embodirl-train", "+experiment=ppo_push_cube_arm", "trainer.total_env_steps=8192", "eval.video=true",
        "eval.video_num_envs=1", "eval.video_format=gif", f"hydra.run.dir={run_dir}", *QUIET)
    video_frames(last_video(run_dir), OUT / "push_cube_arm_frames.png")


FIGURES = {"curve": make_curve, "sweep": make_sweep, "push_cube": make_push_cube, "arm": make_arm}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", nargs="+", choices=list(FIGURES), default=list(FIGURES))
    parser.add_argument("--work", type=Path, default=None, help="keep the runs here (default: a temporary dir)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    with tempfile.TemporaryDirectory(prefix="embodirl-figures-") as tmp:
        work = args.work or Path(tmp)
        for name in args.only:
            FIGURES[name](work)
            log.info("wrote the %s figure into %s", name, OUT)


if __name__ == "__main__":
    main()

"""Make the documentation's figures by running the commands the docs name, as a user runs them.

    python docs/figures/make.py                  # all figures, into docs/figures/
    python docs/figures/make.py --only curve     # some of: curve, sweep, push_cube, arm, distill
    python docs/figures/make.py --work runs/doc-figures   # keep the runs there (default: a temporary directory)

Every picture is a file ``embodirl-report`` writes; this script only runs the commands and copies the files:

* ``default_run_curve.png``, ``default_run_training.png``: ``embodirl-train hydra.run.dir=runs/first`` (the
  default PPO on CartPole, until solved), then ``embodirl-report runs/first --metric episode/return_mean``
  (its ``curves_return.png`` and ``curves_episode_return_mean.png``);
* ``sweep_report.png``: ``embodirl-train -m algo=ppo,grpo seed=0,1,2``, then ``embodirl-report`` on the sweep
  directory (its ``curves_return.png``);
* ``push_cube_frames.png``: ``embodirl-train +experiment=grpo_push_cube eval.video=true eval.video_num_envs=1
  eval.video_format=gif`` (until solved), then ``embodirl-report RUN --frames 6``;
* ``push_cube_arm_frames.png``: the same with ``+experiment=ppo_push_cube_arm`` (until solved).
* ``distill_camera_shift.png``: ``+experiment=ppo_push_cube_teacher``, then for seeds 0, 1, 2 a pixel student
  with visual randomization (``+experiment=distill_push_cube_rgb_dr``) and one without
  (``+experiment=distill_push_cube_rgb trainer.total_env_steps=98304``), each evaluated with
  ``embodirl-eval ... eval.sweep.param=camera_shift eval.sweep.scale=absolute``; the report's sweep plot
  (:func:`embodirl.analysis.sweeps.plot_sweep`) of the two students. Runs already in ``--work`` (a
  ``checkpoints/best.pt``, an evaluation with the sweep) are reused: the eight runs take about 15 minutes on an
  idle 2-core CPU.

The runs are seeded and run on the CPU (``device=cpu``), with the console table off; each stops once solved
(push_cube_arm after minutes, the others within a minute).
"""

from __future__ import annotations

import argparse
import logging
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

log = logging.getLogger("figures")

OUT = Path(__file__).resolve().parent
MODULES = {"embodirl-train": "embodirl.cli.train", "embodirl-report": "embodirl.cli.report",
           "embodirl-eval": "embodirl.cli.evaluate"}
QUIET = ["logger.console=none", "device=cpu"]
FILM = ["eval.video=true", "eval.video_num_envs=1", "eval.video_format=gif"]


def run(script: str, *args: str) -> None:
    """Run a console script (by its module, with this interpreter); a failure stops with its output."""
    command = [sys.executable, "-m", MODULES[script], *args]
    log.info("%s %s", script, " ".join(args))
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"{script} {' '.join(args)} failed with status {done.returncode}:\n{done.stderr[-3000:]}")


def copy(report: Path, name: str, figure: str) -> None:
    shutil.copyfile(report / name, OUT / figure)
    log.info("wrote %s (%d KB)", OUT / figure, (OUT / figure).stat().st_size // 1024)


def make_curve(work: Path) -> None:
    run_dir = work / "runs" / "first"
    run("embodirl-train", f"hydra.run.dir={run_dir}", *QUIET)
    run("embodirl-report", str(run_dir), "--metric", "episode/return_mean")
    copy(run_dir / "report", "curves_return.png", "default_run_curve.png")
    copy(run_dir / "report", "curves_episode_return_mean.png", "default_run_training.png")


def make_sweep(work: Path) -> None:
    sweep = work / "sweep"
    run("embodirl-train", "-m", "algo=ppo,grpo", "seed=0,1,2", f"hydra.sweep.dir={sweep}",
        "logger.tensorboard=false", *QUIET)
    run("embodirl-report", str(sweep))
    copy(sweep / "report", "curves_return.png", "sweep_report.png")


def make_frames(work: Path, experiment: str, figure: str) -> None:
    run_dir = work / "runs" / experiment
    run("embodirl-train", f"+experiment={experiment}", *FILM, f"hydra.run.dir={run_dir}", *QUIET)
    run("embodirl-report", str(run_dir), "--frames", "6")
    copy(run_dir / "report", f"frames_{experiment}.png", figure)


#: The students of the distillation figure: name -> the experiment and its overrides.
STUDENTS = {"dr": ["+experiment=distill_push_cube_rgb_dr"],
            "nom": ["+experiment=distill_push_cube_rgb", "trainer.total_env_steps=98304"]}
SHIFTS = "[0,0.025,0.05,0.075,0.1]"  # m; the randomized student trained on 0-0.05


def make_distill(work: Path) -> None:
    from embodirl.analysis.report import load_run
    from embodirl.analysis.sweeps import find_sweeps, plot_sweep

    teacher = work / "teacher-s0"
    if not (teacher / "checkpoints" / "best.pt").is_file():
        run("embodirl-train", "+experiment=ppo_push_cube_teacher", f"hydra.run.dir={teacher}", *QUIET)
    groups = []
    for kind, overrides in STUDENTS.items():
        runs = []
        for seed in range(3):
            student = work / "students" / f"{kind}-s{seed}"
            if not (student / "checkpoints" / "best.pt").is_file():
                run("embodirl-train", *overrides, f"algo.teacher.run={teacher}", f"seed={seed}",
                    f"hydra.run.dir={student}", *QUIET)
            if ("camera_shift", "absolute") not in find_sweeps(load_run(student)):
                run("embodirl-eval", f"run={student}", "checkpoint=best", "num_episodes=128", "seed=777",
                    "eval.sweep.param=camera_shift", f"eval.sweep.values={SHIFTS}", "eval.sweep.scale=absolute")
            runs.append(load_run(student))
        groups.append(runs)
    png = plot_sweep(groups, ["with visual randomization", "nominal look only"], ("camera_shift", "absolute"))
    if png is None:
        sys.exit("no camera_shift sweep found in the students' evaluations")
    (OUT / "distill_camera_shift.png").write_bytes(png)
    log.info("wrote %s (%d KB)", OUT / "distill_camera_shift.png", len(png) // 1024)


FIGURES = {
    "curve": make_curve,
    "sweep": make_sweep,
    "push_cube": lambda work: make_frames(work, "grpo_push_cube", "push_cube_frames.png"),
    "arm": lambda work: make_frames(work, "ppo_push_cube_arm", "push_cube_arm_frames.png"),
    "distill": make_distill,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", nargs="+", choices=list(FIGURES), default=list(FIGURES))
    parser.add_argument("--work", type=Path, default=None, help="keep the runs here (default: a temporary dir)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    with tempfile.TemporaryDirectory(prefix="embodirl-figures-") as tmp:
        work = args.work.resolve() if args.work else Path(tmp)
        for name in args.only:
            FIGURES[name](work)


if __name__ == "__main__":
    main()

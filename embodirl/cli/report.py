"""``embodirl-report``: a Markdown report and learning curves of a sweep (or of one run).

Examples::

    embodirl-report multirun/2026-11-22/17-34-47-123456            # writes <sweep>/report/
    embodirl-report multirun/ --out /tmp/report --per-run           # every sweep below multirun/, together
    embodirl-report outputs/2026-11-22/17-40-02-000000              # a single run
    embodirl-report runs/first --metric episode/return_mean --frames 6   # also the training return, video frames

Writes ``report.md`` (the sweep directory, the overrides common to every run, one row per configuration
with mean ± std and IQM [95 % bootstrap CI] over seeds, one row per run), ``curves_return.png`` and,
when any run reports success, ``curves_success.png`` (each seed thin, their mean bold, a completed run
that stopped early held at its final value); ``curves_<metric>.png`` for each ``--metric`` (any key of
``metrics.jsonl``, drawn the same way); with ``--frames N``, ``frames_<run>.png``: N frames of each run's latest
evaluation video side by side (:mod:`embodirl.analysis.frames`). Prints the grouped table and the paths written.
Runs may still be running, preempted or failed: the report shows each as it is (see :mod:`embodirl.analysis.report` and
:mod:`embodirl.analysis.curves` for the conventions). Unreadable files get one warning line each on stderr.
"""

from __future__ import annotations

import argparse
import difflib
import logging
import re
import sys
from collections.abc import Sequence
from pathlib import Path

from embodirl.analysis.report import (
    RETURN_KEY,
    SUCCESS_KEY,
    ReportError,
    Run,
    config_label,
    group_runs,
    load_runs,
    render_report,
    varying_keys,
)
from embodirl.cli.flags import OneLineParser

__all__ = ["main", "write_report"]

log = logging.getLogger(__name__)

CURVES = (("eval return", "curves_return.png", RETURN_KEY), ("eval success rate", "curves_success.png", SUCCESS_KEY))


def write_report(root: Path, out: Path, metrics: Sequence[str] = (), num_frames: int = 0
                 ) -> tuple[str, str, list[Path]]:
    """Write the report of the runs under ``root`` into ``out``.

    Args:
        root: A sweep directory, any directory above runs, or one run.
        out: The directory to write into (created).
        metrics: More ``metrics.jsonl`` keys to draw, each into ``curves_<key>.png``.
        num_frames: Frames of each run's latest evaluation video to draw into ``frames_<run>.png`` (0: none).

    Returns:
        ``(grouped table, per-run table, paths written)``.

    Raises:
        ReportError: ``root`` is missing or holds no run; no run logged a requested metric; ``num_frames`` is
            asked for and no run wrote a video; matplotlib is missing. Raised before anything is written.
    """
    runs = load_runs(root)  # bad input fails here, before the slow imports
    extra = [key for key in dict.fromkeys(metrics) if key not in {key for _, _, key in CURVES}]
    for key in extra:
        check_metric(runs, key, root)
    videos = find_videos(runs, root) if num_frames else {}

    from embodirl.analysis.curves import plot_curves
    from embodirl.runtime.files import atomic_write_bytes

    groups = group_runs(runs)
    keys, _ = varying_keys(groups)
    labels = [config_label(g[0].params, keys) for g in groups]
    curves = [*CURVES, *((key, f"curves_{slug(key)}.png", key) for key in extra)]
    images: dict[str, str] = {}
    frames: dict[str, str] = {}
    pngs = [(images, caption, name, plot_curves(groups, labels, key)) for caption, name, key in curves]
    pngs += [(frames, str(video), name, png) for name, (video, png) in draw_frames(videos, num_frames).items()]
    written = []
    for embedded, caption, name, png in pngs:
        if png is not None:
            atomic_write_bytes(out / name, png)
            embedded[caption] = name
            written.append(out / name)
    text, grouped, per_run = render_report(root, runs, images, frames, [_sweeps(groups, labels, out, written)])
    atomic_write_bytes(out / "report.md", text.encode())
    return grouped, per_run, [out / "report.md", *written]


def _sweeps(groups: list[list[Run]], labels: list[str], out: Path, written: list[Path]) -> str:
    """Draw ``sweep_<param>.png`` for each held-out sweep the runs hold (adding them to ``written``); the report's
    section on them."""
    from embodirl.analysis.sweeps import find_sweeps, plot_sweep, sweep_section
    from embodirl.runtime.files import atomic_write_bytes

    images = {}
    for key in dict.fromkeys(k for runs in groups for run in runs for k in find_sweeps(run)):
        png = plot_sweep(groups, labels, key)
        if png is not None:
            name = f"sweep_{slug(key[0])}_{key[1]}.png"
            atomic_write_bytes(out / name, png)
            images[key] = name
            written.append(out / name)
    return sweep_section(groups, labels, images)


def slug(text: str) -> str:
    """``text`` as a file-name part: runs of characters other than letters, digits, ``.``, ``-`` become ``_``."""
    return re.sub(r"[^A-Za-z0-9.-]+", "_", text).strip("_") or "run"


def check_metric(runs: list[Run], key: str, root: Path) -> None:
    """Raise :class:`ReportError` unless some run logged a number under ``key``, naming the closest keys."""
    logged = sorted({k for run in runs for record in run.metrics for k, v in record.items()
                     if isinstance(v, int | float) and not isinstance(v, bool)})
    if any(isinstance(record.get(key), int | float) for run in runs for record in run.metrics):
        return
    if not logged:
        raise ReportError(f"--metric {key!r}: no run under {str(root)!r} has a readable metrics.jsonl, so there "
                          "is nothing to draw. Fix: point embodirl-report at a run directory that has trained "
                          "at least one iteration.")
    close = difflib.get_close_matches(key, logged, n=3, cutoff=0.5) or [k for k in logged if "/" in k][:5]
    raise ReportError(f"--metric {key!r}: no run under {str(root)!r} logged it; logged keys include "
                      f"{', '.join(close)}. Fix: pass one of them, e.g. --metric {close[0]}.")


def find_videos(runs: list[Run], root: Path) -> dict[str, Path]:
    """``{frames file name: latest video}`` of every run that wrote an evaluation video.

    Raises:
        ReportError: No run wrote one.
    """
    from embodirl.analysis.frames import latest_video

    videos: dict[str, Path] = {}
    latest = {run.path: latest_video(run.path) for run in runs}
    if not any(latest.values()):
        raise ReportError(f"--frames: no run under {str(root)!r} wrote an evaluation video (videos/eval_*.mp4 "
                          "or eval/*/video.mp4). Fix: train with eval.video=true, or film a checkpoint: "
                          f"embodirl-eval run={root} eval.video=true")
    for run in runs:
        video = latest[run.path]
        if video is None:
            log.warning("%s wrote no evaluation video: no frames of it", run.path)
            continue
        name = f"frames_{slug(run.name)}.png"
        while name in videos:  # two run names that differ only in characters a slug drops
            name = name.replace(".png", "_.png")
        videos[name] = video
    return videos


def draw_frames(videos: dict[str, Path], num_frames: int) -> dict[str, tuple[Path, bytes]]:
    """``{file name: (video, PNG)}`` strips of ``num_frames`` frames; an unreadable video gets one warning."""
    from embodirl.analysis.frames import frame_strip

    strips = {}
    for name, video in videos.items():
        try:
            strips[name] = (video, frame_strip(video, num_frames))
        except ValueError as exc:
            log.warning("%s: no frames drawn", exc)
    return strips


def _positive(text: str) -> int:
    """argparse type: an integer of at least 1."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of frames of at least 1; e.g. --frames 6")
    return value


def main(argv: list[str] | None = None) -> int:
    """Run the command; returns the exit status (0, or 2 for bad input, with one message on stderr)."""
    parser = OneLineParser(prog="embodirl-report", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sweep_dir", type=Path, metavar="SWEEP_DIR",
                        help="a sweep directory (multirun/<date>/<time>), any directory above runs, or one run")
    parser.add_argument("--out", type=Path, default=None, help="output directory (default: SWEEP_DIR/report)")
    parser.add_argument("--per-run", action="store_true", help="also print the per-run table")
    parser.add_argument("--metric", action="append", default=[], metavar="KEY",
                        help="also draw this metrics.jsonl key against env steps, e.g. episode/return_mean, into "
                             "curves_<key>.png (repeatable)")
    parser.add_argument("--frames", type=_positive, default=0, metavar="N",
                        help="draw N frames of each run's latest evaluation video (eval.video=true) side by side "
                             "into frames_<run>.png")
    args = parser.parse_args(argv)
    warnings = logging.StreamHandler(sys.stderr)  # the report modules' warnings, one line each
    warnings.setFormatter(logging.Formatter("embodirl-report: warning: %(message)s"))
    warnings.setLevel(logging.WARNING)
    logger = logging.getLogger("embodirl")
    logger.addHandler(warnings)
    try:
        return _report(args)
    finally:
        logger.removeHandler(warnings)


def _report(args: argparse.Namespace) -> int:
    out = args.out if args.out is not None else args.sweep_dir / "report"
    try:
        grouped, per_run, written = write_report(args.sweep_dir, out, args.metric, args.frames)
    except ReportError as exc:
        print(f"embodirl-report: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"embodirl-report: error: cannot write the report into {str(out)!r} ({exc.strerror or exc}). "
              "Fix: pass a writable directory with --out DIR.", file=sys.stderr)
        return 2
    print(grouped)
    if args.per_run:
        print()
        print(per_run)
    print()
    for path in written:
        print(f"wrote {path}")
    return 0


def console() -> None:
    """The console script: :func:`main`, then a quick end of the process (:mod:`embodirl.cli.process`)."""
    from embodirl.cli.process import run_console_script

    run_console_script(main)


if __name__ == "__main__":
    console()

"""``embodirl-report``: a Markdown report and learning curves of a sweep (or of one run).

Examples::

    embodirl-report multirun/2026-11-22/17-34-47-123456            # writes <sweep>/report/
    embodirl-report multirun/ --out /tmp/report --per-run           # every sweep below multirun/, together
    embodirl-report outputs/2026-11-22/17-40-02-000000              # a single run

Writes ``report.md`` (the sweep directory, the overrides common to every run, one row per configuration
with mean ± std and IQM [95 % bootstrap CI] over seeds, one row per run), ``curves_return.png`` and,
when any run reports success, ``curves_success.png`` (each seed thin, their mean bold, a completed run
that stopped early held at its final value). Prints the grouped table and the paths written. Runs may
still be running, preempted or failed: the report shows each as it is (see :mod:`embodirl.analysis.report` and
:mod:`embodirl.analysis.curves` for the conventions). Unreadable files get one warning line each on stderr.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from embodirl.analysis.report import (
    RETURN_KEY,
    SUCCESS_KEY,
    ReportError,
    config_label,
    group_runs,
    load_runs,
    render_report,
    varying_keys,
)

__all__ = ["main", "write_report"]

CURVES = (("eval return", "curves_return.png", RETURN_KEY), ("eval success rate", "curves_success.png", SUCCESS_KEY))


def write_report(root: Path, out: Path) -> tuple[str, str, list[Path]]:
    """Write the report of the runs under ``root`` into ``out``.

    Returns:
        ``(grouped table, per-run table, paths written)``.

    Raises:
        ReportError: ``root`` is missing or holds no run; matplotlib is missing.
    """
    runs = load_runs(root)  # bad input fails here, before the slow imports

    from embodirl.analysis.curves import plot_curves
    from embodirl.runtime.files import atomic_write_bytes

    groups = group_runs(runs)
    keys, _ = varying_keys(groups)
    labels = [config_label(g[0].params, keys) for g in groups]
    images, written = {}, []
    for caption, name, key in CURVES:
        png = plot_curves(groups, labels, key)
        if png is not None:
            atomic_write_bytes(out / name, png)
            images[caption] = name
            written.append(out / name)
    text, grouped, per_run = render_report(root, runs, images)
    atomic_write_bytes(out / "report.md", text.encode())
    return grouped, per_run, [out / "report.md", *written]


def main(argv: list[str] | None = None) -> int:
    """Run the command; returns the exit status (0, or 2 for bad input, with one message on stderr)."""
    parser = argparse.ArgumentParser(prog="embodirl-report", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sweep_dir", type=Path, metavar="SWEEP_DIR",
                        help="a sweep directory (multirun/<date>/<time>), any directory above runs, or one run")
    parser.add_argument("--out", type=Path, default=None, help="output directory (default: SWEEP_DIR/report)")
    parser.add_argument("--per-run", action="store_true", help="also print the per-run table")
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
        grouped, per_run, written = write_report(args.sweep_dir, out)
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


if __name__ == "__main__":
    sys.exit(main())

"""Sweep bookkeeping as a Hydra callback (configured in ``train.yaml``; no plugin discovery needed).

Jobs of a multirun never abort the sweep: a failing job records ``failed`` in its ``status.json`` and
returns NaN. When the sweep ends, :class:`SweepFate` prints one table of the jobs (overrides, status,
objective, env steps, wall time) and the ``embodirl-report`` command for the sweep, then fails the
command (non-zero exit) naming each job that did not complete.
"""

from __future__ import annotations

import logging
import shlex
import sys
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig
from rich.console import Console
from rich.table import Table
from rich.text import Text

from embodirl.analysis.stats import format_count, format_number
from embodirl.runtime.files import parse_yaml, printable, read_regular_file
from embodirl.runtime.status import read_status

__all__ = ["SweepFate", "report_command", "sweep_fates", "sweep_table"]

log = logging.getLogger(__name__)


def sweep_fates(sweep_dir: Path) -> list[tuple[Path, dict[str, Any] | None]]:
    """``(run_dir, status or None)`` for every job directory under ``sweep_dir`` (those with ``.hydra/``)."""
    runs = sorted({p.parent.parent for p in sweep_dir.rglob(".hydra/overrides.yaml")})
    return [(run, read_status(run)) for run in runs]


def _varying(overrides: list[list[str]]) -> tuple[list[str], list[list[str]]]:
    """``(overrides every job shares, each job's other overrides)``, command-line order kept."""
    common = [o for o in overrides[0] if all(o in job for job in overrides[1:])] if len(overrides) > 1 else []
    return common, [[o for o in job if o not in common] for job in overrides]


def sweep_table(sweep_dir: Path, objective: str) -> Table:
    """One row per job of the sweep: overrides (those that vary), status, ``objective``, env steps, wall time.

    Numbers to significant digits (:mod:`embodirl.analysis.stats`); a failed job shows its exception's class
    (the message follows in :class:`SweepFate`'s failure lines), a job still running (or never
    started) its latest values. Text from the jobs' files is shown as it is (never read as rich markup).

    Raises:
        ReportError: ``sweep_dir`` holds no job.
    """
    from embodirl.analysis.report import discover_runs, load_run

    runs = [load_run(run, sweep_dir) for run in discover_runs(sweep_dir)]
    common, varying = _varying([_overrides(run.path) for run in runs])
    title = f"sweep {sweep_dir}" + (f"  (every job: {printable(' '.join(common), 2000)})" if common else "")
    table = Table(title=Text(title), title_justify="left")
    for name, justify in (("job", "right"), ("overrides", "left"), ("status", "left"), (objective, "right"),
                          ("env steps", "right"), ("wall time", "right")):
        table.add_column(name, justify=justify, overflow="fold")
    for run, job_overrides in zip(runs, varying, strict=True):
        wall = run.final("wall_time_s")
        status = f"{run.status}: {run.error.split(':')[0]}" if run.error else run.status  # the message: below
        table.add_row(Text(printable(run.name)), Text(printable(" ".join(job_overrides) or "-")),
                      Text(printable(status)), format_number(run.final(objective)),
                      format_count(run.env_steps), "-" if wall is None else f"{format_number(wall, 3)} s")
    return table


def _overrides(run: Path) -> list[str]:
    """The job's overrides; none when its ``overrides.yaml`` is unreadable (the report's loader warns about it)."""
    try:
        found = parse_yaml(read_regular_file(run / ".hydra" / "overrides.yaml"))
    except (OSError, ValueError):
        return []
    return [str(o) for o in found] if isinstance(found, list) else []


def report_command(sweep_dir: Path) -> str:
    """The ``embodirl-report`` command line for ``sweep_dir``, quoted for a POSIX shell."""
    return f"embodirl-report {shlex.quote(str(sweep_dir))}"


class SweepFate(Callback):
    """At the end of a multirun: print one table of the jobs and the ``embodirl-report`` command, then
    exit non-zero naming every job that failed or never finished.

    Hydra turns exceptions raised by callbacks into warnings, so this prints the report to stderr and
    raises ``SystemExit(1)``.
    """

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        sweep_dir = Path(config.hydra.sweep.dir)
        fates = sweep_fates(sweep_dir)
        bad = [(run, st) for run, st in fates if st is None or st.get("status") != "completed"]
        log.info("sweep %s: %d of %d jobs completed", sweep_dir, len(fates) - len(bad), len(fates))
        if fates:
            console = Console(width=None if sys.stdout.isatty() else 200)  # log files: no folding at 80
            console.print(sweep_table(sweep_dir, str(config.get("objective", "eval/return_mean"))))
            console.print(f"Report (table + curves): {report_command(sweep_dir)}", highlight=False, markup=False)
        if not bad:
            return
        lines = []
        for run, st in bad:
            overrides = " ".join(_overrides(run))
            what = st["status"] if st is not None else (
                "an unreadable status.json" if (run / "status.json").is_symlink() or (run / "status.json").exists()
                else "no status.json (never started?)")
            if st and st.get("message"):
                what += f": {st.get('exception')}: {(str(st['message']).strip().splitlines() or [''])[0]}"
            lines.append("  " + printable(f"job {run.relative_to(sweep_dir)} [{overrides}] {what} "
                                          f"(see {run / 'status.json'})", 2000))
        message = f"{len(bad)} of {len(fates)} sweep jobs did not complete:\n" + "\n".join(lines)
        print(f"embodirl-train: error: {message}", file=sys.stderr)
        raise SystemExit(1)

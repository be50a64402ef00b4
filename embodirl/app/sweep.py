"""Sweep bookkeeping as a Hydra callback (configured in ``train.yaml``; no plugin discovery needed).

Jobs of a multirun never abort the sweep: a failing job records ``failed`` in its ``status.json`` and
returns NaN. When the sweep ends, :class:`SweepFate` prints one table of the jobs (overrides, status,
objective, env steps, wall time) and the ``embodirl-report`` command for the sweep, then fails the
command (non-zero exit) naming each job that did not complete.

A job can fail before it may write its run directory's ``status.json``: its directory holds an earlier
run trained with another config, a corrupt checkpoint, or is in use by another live process (which
records its own fate there). So every failed job also records its failure in the sweep directory,
``.jobs/<sweep id>/<job number>.json`` (:func:`record_job_failure`), under an id that
:class:`SweepFate` gives each multirun; the table shows this sweep's failure for that job, and the
run directory keeps what its earlier run produced (``status.json`` included).
"""

from __future__ import annotations

import logging
import os
import re
import shlex
import socket
import sys
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hydra.experimental.callback import Callback

from embodirl.runtime.files import atomic_write_json, parse_json, parse_yaml, printable, read_regular_file
from embodirl.runtime.status import SWEEP_ID_ENV, as_failed_if_gone, read_status

if TYPE_CHECKING:  # Hydra builds the callback for every run, a single one too: rich and numpy wait for a sweep's end
    from omegaconf import DictConfig
    from rich.table import Table

__all__ = ["SweepFate", "failed_jobs", "record_job_failure", "report_command", "sweep_fates", "sweep_table"]

log = logging.getLogger(__name__)

JOBS_DIR = ".jobs"
_SWEEP_ID = re.compile(r"[0-9a-f]{32}")


def _sweep_id() -> str | None:
    """This multirun's id (set by :class:`SweepFate`), or None outside one."""
    value = os.environ.get(SWEEP_ID_ENV, "")
    return value if _SWEEP_ID.fullmatch(value) else None


def record_job_failure(sweep_dir: str | Path, job_num: int, run_dir: str | Path, overrides: list[str],
                       exc: BaseException) -> Path | None:
    """Record that this multirun's job ``job_num`` failed with ``exc``; return the record's path.

    Written into the sweep directory, never into ``run_dir``: a job refused before it took the run
    directory's lock must leave the directory (and the process holding it) alone. Nothing is written
    outside a multirun of :class:`SweepFate` (no sweep id); a write that fails is only logged.
    """
    sweep_id = _sweep_id()
    if sweep_id is None:
        return None
    path = Path(sweep_dir) / JOBS_DIR / sweep_id / f"{job_num}.json"
    record = {"status": "failed", "exception": type(exc).__name__, "message": str(exc),
              "run_dir": str(Path(run_dir).resolve()), "overrides": [str(o) for o in overrides],
              "host": socket.gethostname(), "pid": os.getpid(), "at": time.time()}
    try:
        atomic_write_json(path, record)
    except OSError:
        log.error("could not record the failure of job %s in %s", job_num, path, exc_info=True)
        return None
    return path


def failed_jobs(sweep_dir: str | Path, sweep_id: str) -> dict[Path, dict[str, Any]]:
    """The failures :func:`record_job_failure` recorded for the multirun ``sweep_id``, by resolved run directory
    (each record gains ``record``, its file). Records that are unreadable (read as any file from a run:
    :mod:`embodirl.runtime.files`), malformed, or name a directory outside the sweep are skipped with a warning."""
    root = Path(sweep_dir).resolve()
    found: dict[Path, dict[str, Any]] = {}
    for file in sorted((root / JOBS_DIR / sweep_id).glob("*.json")):
        try:
            record = parse_json(read_regular_file(file))
            run = Path(record["run_dir"]).resolve()
            if not run.is_relative_to(root) or not all(isinstance(o, str) for o in record["overrides"]):
                raise ValueError("not a job of this sweep")
        except (OSError, ValueError, TypeError, KeyError) as exc:
            log.warning("%s: skipped, not a job record (%s)", file, printable(exc, 200))
            continue
        found[run] = {**record, "record": str(file)}
    return found


def sweep_fates(sweep_dir: Path, failures: dict[Path, dict[str, Any]] | None = None
                ) -> list[tuple[Path, dict[str, Any] | None]]:
    """``(run_dir, status or None)`` for every job directory under ``sweep_dir`` (those with ``.hydra/``, and the
    directories of ``failures``, which may have none)."""
    runs = {p.parent.parent.resolve(): p.parent.parent for p in sweep_dir.rglob(".hydra/overrides.yaml")}
    for run in failures or {}:
        runs.setdefault(run, run)
    ordered = sorted(runs.values(), key=lambda p: [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", str(p))])
    return [(run, read_status(run)) for run in ordered]


def _varying(overrides: list[list[str]]) -> tuple[list[str], list[list[str]]]:
    """``(overrides every job shares, each job's other overrides)``, command-line order kept."""
    common = [o for o in overrides[0] if all(o in job for job in overrides[1:])] if len(overrides) > 1 else []
    return common, [[o for o in job if o not in common] for job in overrides]


def sweep_table(sweep_dir: Path, objective: str, failures: dict[Path, dict[str, Any]] | None = None,
                sweep_id: str | None = None) -> Table:
    """One row per job of the sweep: overrides (those that vary), status, ``objective``, env steps, wall time.

    Numbers to significant digits (:mod:`embodirl.analysis.stats`); a failed job shows its exception's class
    (the message follows in :class:`SweepFate`'s failure lines), a job still running (or never
    started) its latest values. A job in ``failures`` (:func:`failed_jobs` of the multirun ``sweep_id``) shows
    that failure and its own overrides; its values only when its run directory's ``status.json`` is this
    sweep's (else they belong to an earlier run). Text from the jobs' files is shown as it is (never read as
    rich markup).
    """
    from rich.table import Table
    from rich.text import Text

    from embodirl.analysis.report import load_run
    from embodirl.analysis.stats import format_count, format_number

    failures = failures or {}
    root = sweep_dir.resolve()
    runs = [load_run(run, root) for run, _ in sweep_fates(root, failures)]
    job_overrides = [failures[run.path]["overrides"] if run.path in failures else _overrides(run.path) for run in runs]
    common, varying = _varying(job_overrides)
    title = f"sweep {sweep_dir}" + (f"  (every job: {printable(' '.join(common), 2000)})" if common else "")
    table = Table(title=Text(title), title_justify="left")
    for name in ("job", "overrides", "status", objective, "env steps", "wall time"):
        table.add_column(name, justify="left" if name in ("overrides", "status") else "right", overflow="fold")
    for run, shown in zip(runs, varying, strict=True):
        failure = failures.get(run.path)
        status = f"{run.status}: {run.error.split(':')[0]}" if run.error else run.status  # the message: below
        value, steps, wall = format_number(run.final(objective)), format_count(run.env_steps), run.final("wall_time_s")
        if failure is not None:
            status = f"failed: {failure.get('exception')}"
            if not _written_by(run.path, sweep_id):
                value, steps, wall = "-", "-", None  # the directory's values are an earlier run's
        table.add_row(Text(printable(run.name)), Text(printable(" ".join(shown) or "-")), Text(printable(status)),
                      value, steps, "-" if wall is None else f"{format_number(wall, 3)} s")
    return table


def _written_by(run_dir: Path, sweep_id: str | None) -> bool:
    """Whether ``run_dir``'s ``status.json`` was written by a job of the multirun ``sweep_id``."""
    status = read_status(run_dir)
    return sweep_id is not None and status is not None and status.get("sweep_id") == sweep_id


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

    At its start it gives the multirun an id (a random hex string in the environment variable
    ``EMBODIRL_SWEEP_ID``, which launchers pass on to the jobs), under which the jobs record their failures.
    Hydra turns exceptions raised by callbacks into warnings, so this prints the report to stderr and
    raises ``SystemExit(1)``.
    """

    def __init__(self) -> None:
        self.sweep_id: str | None = None

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        self.sweep_id = uuid.uuid4().hex
        os.environ[SWEEP_ID_ENV] = self.sweep_id

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        from rich.console import Console

        if self.sweep_id is not None and os.environ.get(SWEEP_ID_ENV) == self.sweep_id:
            del os.environ[SWEEP_ID_ENV]  # the jobs have ended: later runs in this process are not this sweep's
        sweep_dir = Path(config.hydra.sweep.dir)
        failures = failed_jobs(sweep_dir, self.sweep_id) if self.sweep_id else {}
        fates = [(run, st and as_failed_if_gone(st)) for run, st in sweep_fates(sweep_dir.resolve(), failures)]
        bad = [(run, failures.get(run, st)) for run, st in fates
               if run in failures or st is None or st.get("status") != "completed"]
        log.info("sweep %s: %d of %d jobs completed", sweep_dir, len(fates) - len(bad), len(fates))
        if fates:
            console = Console(width=None if sys.stdout.isatty() else 200)  # log files: no folding at 80
            console.print(sweep_table(sweep_dir, str(config.get("objective", "eval/return_mean")), failures,
                                      self.sweep_id))
            console.print(f"Report (table + curves): {report_command(sweep_dir)}", highlight=False, markup=False)
        if not bad:
            return
        lines = [self._failure_line(sweep_dir.resolve(), run, st) for run, st in bad]
        message = f"{len(bad)} of {len(fates)} sweep jobs did not complete:\n" + "\n".join(lines)
        print(f"embodirl-train: error: {message}", file=sys.stderr)
        raise SystemExit(1)

    def _failure_line(self, root: Path, run: Path, st: dict[str, Any] | None) -> str:
        """One failure line: ``  job <dir> [<overrides>] <status>: <exception>: <message> (see <file>)``."""
        overrides = " ".join(st["overrides"] if st and "record" in st else _overrides(run))
        what = str(st["status"]) if st is not None else (
            "an unreadable status.json" if (run / "status.json").is_symlink() or (run / "status.json").exists()
            else "no status.json (never started?)")
        if st and st.get("message"):
            what += f": {st.get('exception')}: {(str(st['message']).strip().splitlines() or [''])[0]}"
        see = run / "status.json"
        if st and "record" in st:
            see = Path(st["record"])
            earlier = read_status(run)
            if earlier is not None and not _written_by(run, self.sweep_id):
                what += f"; {run} keeps its earlier run ({earlier.get('status')})"
        return "  " + printable(f"job {run.relative_to(root)} [{overrides}] {what} (see {see})", 2000)

"""Sweep reports: find runs, load them, group seeds into configurations, aggregate, tabulate.

A *run* is a directory holding ``.hydra/overrides.yaml`` (what ``embodirl-train`` writes into each run
or multirun job directory). Runs are grouped into *configurations* by their command-line overrides
minus ``seed=`` and minus Hydra's own (``hydra.*``, ``hydra/...``); the override keys whose values
differ between configurations become the columns of the table.

Conventions (also stated in the report):

* Statistics of a configuration are over its **completed** runs only (a running, preempted or failed
  run's last values are not final): mean ± sample standard deviation (n - 1) over seeds; no ± for a
  single seed; and the interquartile mean (IQM) with a 95 % stratified-bootstrap percentile interval
  (rliable's method, 10,000 resamples, seeded: see :mod:`embodirl.analysis.stats`). Solved wall time and env
  steps are over the completed runs that solved ("k/n solved"). Steps/s is end to end: the run's env
  steps over its training wall time. Numbers are formatted by :mod:`embodirl.analysis.stats`.
* Learning curves (:mod:`embodirl.analysis.curves`) use every run with evaluations, running ones included, and
  hold a completed run's final value so that a seed that stopped early does not pull the mean down.

Every loader tolerates missing, partial, torn, corrupt or hostile files: a run may be completed, failed,
running or preempted, ``metrics.jsonl`` may end in a half-written line or hold bytes that are not UTF-8, and
``status.json`` may be unreadable. Only regular files are read, each up to a cap (1 MiB; the last 64 MiB
of ``metrics.jsonl``), YAML without aliases and JSON or YAML nested at most 32 deep
(:mod:`embodirl.runtime.files`). Each unreadable file gets one warning (logged, naming the file and what
was wrong) and the run is shown with what could be read (an unreadable status is ``unknown``).

Every string taken from a file (run names, overrides, seeds, statuses, error messages) is written into the
Markdown as text: one line, control characters replaced, Markdown and HTML syntax escaped (:func:`md_text`,
:func:`md_code`), so a file cannot add links, images, HTML or table cells to the report.
"""

from __future__ import annotations

import logging
import math
import os
import re
import statistics
from collections import Counter
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from embodirl.analysis.stats import (
    finite,
    format_count,
    format_estimate,
    format_interval,
    format_number,
    stratified_bootstrap_ci,
)
from embodirl.runtime.files import (
    MAX_METRICS_BYTES,
    describe_size,
    open_regular_file,
    parse_json,
    parse_yaml,
    printable,
    read_regular_file,
)
from embodirl.runtime.status import as_failed_if_gone, process_gone

__all__ = ["ConfigStats", "ReportError", "Run", "Stat", "discover_runs", "group_runs", "iqm_interval", "load_run",
           "load_runs", "md_code", "md_text", "read_metrics", "render_report", "render_table", "solved_threshold",
           "split_overrides", "summarize", "varying_keys"]

log = logging.getLogger(__name__)

RETURN_KEY = "eval/return_mean"
SUCCESS_KEY = "eval/success_rate"
STATUS_ORDER = ("completed", "running", "preempted", "failed")
IQM_NOTE = ("IQM: mean of the middle 50 % of the seeds (the plain mean below 4 seeds), with a 95 % "
            "stratified-bootstrap percentile interval (rliable's method, Agarwal et al. 2021; 10,000 "
            "resamples, seed 0; none for one seed)")


class ReportError(ValueError):
    """The report cannot be made from this input (no such directory, no runs in it)."""


# --- loading -------------------------------------------------------------------------------------------
@dataclass
class Run:
    """One run directory as found on disk.

    Attributes:
        path: The run directory.
        name: ``path`` relative to the report root (its own name when it is the root).
        params: Overrides minus ``seed`` and Hydra's own, as ``{key: value}`` strings in command-line order.
        seed: The seed (from the overrides, else from ``.hydra/config.yaml``), or None when unknown.
        status: ``completed``, ``running``, ``preempted``, ``failed``, or ``unknown`` (no status record).
        error: ``Exception: first line of the message`` for failed runs.
        summary: ``summary.json`` (only once the run ended), or None.
        metrics: The readable lines of ``metrics.jsonl`` in order.
    """

    path: Path
    name: str
    params: dict[str, str]
    seed: str | None
    status: str
    error: str | None = None
    summary: dict[str, Any] | None = None
    metrics: list[dict[str, Any]] = field(default_factory=list)

    @property
    def final_summary(self) -> dict[str, Any] | None:
        """``summary.json`` when it describes this run, else None (a requeued run that is running again has a
        stale one)."""
        return self.summary if self.status != "running" else None

    @property
    def ended(self) -> bool:
        """Whether ``summary.json`` describes this run (see :attr:`final_summary`)."""
        return self.final_summary is not None

    def final(self, key: str) -> float | None:
        """``key`` from the summary once the run ended, else its last non-null value in the metrics."""
        summary = self.final_summary
        if summary is not None:
            return finite(summary.get(key))
        return next((v for r in reversed(self.metrics) if (v := finite(r.get(key))) is not None), None)

    @property
    def env_steps(self) -> float | None:
        return self.final("env_steps")

    @property
    def sps(self) -> float | None:
        """End-to-end env steps per second (summary, else last metrics line's env steps over its wall time)."""
        summary = self.final_summary
        if summary is not None:
            return finite(summary.get("sps"))
        steps, wall = self.final("env_steps"), self.final("wall_time_s")
        return finite(steps / wall) if steps is not None and wall else None


def _natural_key(path: Path) -> list:
    return [[int(t) if t.isdigit() else t for t in re.split(r"(\d+)", part)] for part in path.parts]


def discover_runs(root: str | Path) -> list[Path]:
    """Every run directory at or below ``root`` (those holding ``.hydra/overrides.yaml``), naturally sorted.

    Raises:
        ReportError: ``root`` is not a directory, or holds no run.
    """
    root = Path(root)
    if not root.is_dir():
        raise ReportError(f"{str(root)!r} is not a directory. Fix: pass a run directory (outputs/<date>/<time>) "
                          "or a sweep directory (multirun/<date>/<time>) written by embodirl-train.")
    runs = sorted({p.parent.parent for p in root.rglob(".hydra/overrides.yaml")}, key=_natural_key)
    if not runs:
        raise ReportError(f"no runs found in {str(root)!r} (no directory below it holds .hydra/overrides.yaml). "
                          "Fix: pass the run or sweep directory that embodirl-train printed, e.g. "
                          "multirun/<date>/<time>.")
    return runs


def _read_json(path: Path, what: str) -> dict[str, Any] | None:
    """A JSON object file; None if missing, and None with one warning if unreadable (``what`` follows then)."""
    try:
        data = parse_json(read_regular_file(path))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        log.warning("%s is not readable JSON (%s): %s", path, _reason(exc), what)
        return None
    if not isinstance(data, dict):
        log.warning("%s holds a JSON %s, not an object: %s", path, type(data).__name__, what)
        return None
    return data


def _read_yaml(path: Path, what: str) -> Any:
    """A YAML file; None if missing, and None with one warning if unreadable (``what`` follows then)."""
    try:
        return parse_yaml(read_regular_file(path))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        log.warning("%s is not readable YAML (%s): %s", path, _reason(exc), what)
        return None


def _reason(exc: Exception) -> str:
    if isinstance(exc, UnicodeDecodeError):
        return f"bytes that are not UTF-8 at offset {exc.start}"
    return printable(exc, 300) if str(exc) else type(exc).__name__


def _read_tail(path: Path, max_bytes: int) -> tuple[bytes, int]:
    """``(data, skipped)``: the last ``max_bytes`` of the regular file ``path`` from the start of a line, and
    the number of bytes before them left unread (0 for a file that fits)."""
    with open_regular_file(path) as file:
        size = os.fstat(file.fileno()).st_size
        skipped = max(size - max_bytes, 0)
        file.seek(skipped)
        data = file.read(max_bytes)
    if skipped:
        cut = data.find(b"\n") + 1  # the first line began before the window; 0: the window is inside one line
        skipped, data = skipped + (cut or len(data)), data[cut:] if cut else b""
    return data, skipped


def read_metrics(path: Path) -> list[dict[str, Any]]:
    """The JSON objects of a ``metrics.jsonl``, one per line, in order.

    A missing file gives no records and a torn last line (no newline after it: the run is writing) is
    skipped silently. A file that is no regular file gives no records; of a file over 64 MiB the lines in
    its last 64 MiB are read (earlier points are left out of the curves); any other line that is not UTF-8
    JSON holding an object (at most 32 deep) is skipped. Each gives one warning for the file, naming it.
    """
    try:
        data, skipped = _read_tail(path, MAX_METRICS_BYTES)
    except FileNotFoundError:
        return []
    except OSError as exc:
        log.warning("%s is not readable (%s): the run is shown without its metrics", path, _reason(exc))
        return []
    lines = data.splitlines()
    records, bad = [], []
    for number, line in enumerate(lines, start=1):
        try:
            record = parse_json(line)
        except ValueError:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
            record = None
        if isinstance(record, dict):
            records.append(record)
        elif line.strip() and not (number == len(lines) and not data.endswith(b"\n")):
            bad.append(number)
    problems = [f"only its last {describe_size(MAX_METRICS_BYTES)} were read ({skipped:,} bytes before them "
                "are left out of the curves)"] if skipped else []
    if bad:
        shown = ", ".join(map(str, bad[:5])) + (", ..." if len(bad) > 5 else "")
        problems.append(f"skipped {len(bad)} line{'s' if len(bad) > 1 else ''} that "
                        f"{'are' if len(bad) > 1 else 'is'} not UTF-8 JSON objects (line {shown})")
    if problems:
        log.warning("%s: %s; the report uses the %d readable lines", path, "; ".join(problems), len(records))
    return records


def _read_status(path: Path, summary: dict[str, Any] | None) -> tuple[str, dict[str, Any]]:
    """``(status, status.json record)``: ``status.json``'s status, else the summary's, else ``unknown``.

    An unreadable ``status.json`` or a status that is not a non-empty string gives ``unknown`` and
    one warning (the run is then listed but not averaged).
    """
    file = path / "status.json"
    unknown = "the run's status counts as 'unknown' (listed, not averaged)"
    record = _read_json(file, unknown)
    if record is None:
        if file.exists():
            return "unknown", {}
        record, file = {}, path / "summary.json"
        status = (summary or {}).get("status")
        if status is None:
            return "unknown", record
    else:
        status = record.get("status")
    if not isinstance(status, str) or not status.strip():
        log.warning("%s: status %s is not a status name (completed, running, preempted, failed): %s",
                    file, printable(repr(status), 100), unknown)
        return "unknown", record
    return status, record


def split_overrides(overrides: list[str]) -> tuple[dict[str, str], str | None]:
    """``(params, seed)`` from Hydra overrides: ``seed=`` and ``hydra.*``/``hydra/...`` are left out of params.

    A leading ``+``/``++`` is dropped from keys; a deletion (``~key``) is kept as ``~key`` with an empty value.
    """
    params: dict[str, str] = {}
    seed = None
    for item in overrides:
        key, _, value = str(item).partition("=")
        key = key.lstrip("+")
        if key == "hydra" or key.startswith(("hydra.", "hydra/")):
            continue
        if key == "seed":
            seed = value
        else:
            params[key] = value
    return params, seed


def load_run(path: str | Path, root: str | Path | None = None) -> Run:
    """Load one run directory, whatever state it is in."""
    path = Path(path)
    overrides = _read_yaml(path / ".hydra" / "overrides.yaml", "the run is grouped as if it had no overrides")
    params, seed = split_overrides(overrides if isinstance(overrides, list) else [])
    if seed is None:
        config = _read_yaml(path / ".hydra" / "config.yaml", "its seed is unknown")
        if isinstance(config, dict) and config.get("seed") is not None:
            seed = str(config["seed"])
    summary = _read_json(path / "summary.json", "the run's final values come from metrics.jsonl")
    status, record = _read_status(path, summary)
    if status == "running" and process_gone(record):  # killed outright: summary.json, if any, is an earlier attempt's
        status, summary, record = "failed", None, as_failed_if_gone(record)
    error = None
    if status == "failed":
        message = str(record.get("message") or "").strip()
        first = message.splitlines()[0] if message else (summary or {}).get("stop_reason") or "no message recorded"
        error = f"{record['exception']}: {first}" if record.get("exception") else str(first)
    name = path.name if root is None or Path(root) == path else str(path.relative_to(root))
    return Run(path=path, name=name, params=params, seed=seed, status=status, error=error, summary=summary,
               metrics=read_metrics(path / "metrics.jsonl"))


def load_runs(root: str | Path) -> list[Run]:
    """Discover and load every run at or below ``root`` (see :func:`discover_runs`)."""
    return [load_run(path, root) for path in discover_runs(root)]


# --- grouping and aggregation --------------------------------------------------------------------------
def group_runs(runs: list[Run]) -> list[list[Run]]:
    """Runs grouped by their params (overrides minus seed), in order of first appearance."""
    groups: dict[tuple, list[Run]] = {}
    for run in runs:
        groups.setdefault(tuple(sorted(run.params.items())), []).append(run)
    return list(groups.values())


def varying_keys(groups: list[list[Run]]) -> tuple[list[str], dict[str, str]]:
    """``(keys that differ across configurations, {key: value} equal in all of them)``, in first-seen order."""
    keys = list(dict.fromkeys(k for group in groups for k in group[0].params))
    varying, common = [], {}
    for key in keys:
        values = {group[0].params.get(key) for group in groups}
        only = values.pop() if len(values) == 1 else None  # None too where a configuration lacks the key
        if only is not None:
            common[key] = only
        else:
            varying.append(key)
    return varying, common


@dataclass
class Stat:
    """Mean and sample standard deviation (None for fewer than two values) of ``n`` values, and their values."""

    mean: float | None
    std: float | None
    n: int
    values: list[float] = field(default_factory=list)

    @classmethod
    def of(cls, values: list[float | None]) -> Stat:
        """The statistics of the values that are not None; a mean or std beyond the float range (values near
        1e308 from a diverged or corrupt run) is None."""
        present = [v for v in values if v is not None]
        if not present:
            return cls(None, None, 0)
        try:
            mean = statistics.fmean(present)
        except OverflowError:  # the sum overflowed: the mean of the values scaled down is in range
            mean = math.fsum(v / len(present) for v in present)
        try:
            std = finite(statistics.stdev(present)) if len(present) > 1 else None
        except OverflowError:
            std = None
        return cls(finite(mean), std, len(present), present)


def iqm_interval(values: list[float]) -> tuple[float | None, float | None, float | None]:
    """``(IQM, low, high)`` of one configuration's seeds with a 95 % bootstrap interval (seeded).

    ``(None, None, None)`` for no values; ``(value, None, None)`` for one (no interval from one seed).
    """
    if not values:
        return None, None, None
    if len(values) == 1:
        return values[0], None, None
    with np.errstate(all="ignore"):  # values near 1e308 overflow: checked below
        point, low, high = stratified_bootstrap_ci([values])
    if not all(math.isfinite(x) for x in (point, low, high)):
        return finite(point), None, None
    return point, low, high


@dataclass
class ConfigStats:
    """One configuration's aggregate (statistics over its completed runs)."""

    params: dict[str, str]
    runs: list[Run]
    num_completed: int
    status: str
    eval_return: Stat
    success_rate: Stat
    num_solved: int
    solved_wall_time_s: Stat
    solved_env_steps: Stat
    sps: Stat


def status_tally(runs: list[Run], errors: bool = False) -> str:
    """E.g. ``"2 completed, 1 failed"`` (completed, running, preempted, failed first).

    With ``errors``, the failed count is followed by the first failed run's error in parentheses.
    """
    counts = Counter(run.status for run in runs)
    order = [s for s in STATUS_ORDER if s in counts] + sorted(set(counts) - set(STATUS_ORDER))
    parts = [f"{counts[s]} {s}" for s in order]
    error = next((run.error for run in runs if run.error), None)
    if errors and error and "failed" in counts:
        index = order.index("failed")
        parts[index] += f" ({error})"
    return ", ".join(parts)


def summarize(runs: list[Run]) -> ConfigStats:
    """Aggregate one configuration's runs (see the module docstring for what is over which runs)."""
    done = [run for run in runs if run.status == "completed"]
    solved = [run for run in done if run.final("solved_env_steps") is not None]
    return ConfigStats(
        params=runs[0].params, runs=runs, num_completed=len(done), status=status_tally(runs, errors=True),
        eval_return=Stat.of([run.final(RETURN_KEY) for run in done]),
        success_rate=Stat.of([run.final(SUCCESS_KEY) for run in done]),
        num_solved=len(solved),
        solved_wall_time_s=Stat.of([run.final("solved_wall_time_s") for run in solved]),
        solved_env_steps=Stat.of([run.final("solved_env_steps") for run in solved]),
        sps=Stat.of([run.sps for run in done]),
    )


def solved_threshold(runs: list[Run], key: str) -> float | None:
    """The solved threshold on ``key`` when all runs that record one agree on it."""
    found = {finite(r.summary.get("solved_threshold")) for r in runs
             if r.summary and r.summary.get("solved_metric") == key}
    return found.pop() if len(found) == 1 else None


# --- Markdown ------------------------------------------------------------------------------------------
# Characters that Markdown (CommonMark with GitHub's tables, strikethrough and math) or HTML read as syntax in
# running text. An underscore inside a word cannot open emphasis, so `algo.learning_rate` stays readable.
_MARKDOWN_SYNTAX = re.compile(r"[\\`*\[\]<>&~$]|(?<![0-9A-Za-z])_|_(?![0-9A-Za-z])")


def md_text(text: Any) -> str:
    """A string from a file as Markdown text that shows it as it is: one line (:func:`printable`), and each
    character Markdown or HTML would read as syntax backslash-escaped (``|`` is left to the table cells)."""
    return _MARKDOWN_SYNTAX.sub(lambda match: "\\" + match.group(0), printable(text))


def md_code(text: Any) -> str:
    """A string from a file as one Markdown code span; its fence is longer than any run of backticks in it."""
    line = printable(text)
    fence = "`" * (max((len(run) for run in re.findall("`+", line)), default=0) + 1)
    pad = " " if line.startswith("`") or line.endswith("`") else ""
    return f"{fence}{pad}{line}{pad}{fence}"


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def render_table(headers: list[str], rows: list[list[str]], right: Collection[int] = frozenset()) -> str:
    """A Markdown table; columns whose index is in ``right`` are right-aligned."""
    lines = ["| " + " | ".join(_cell(h) for h in headers) + " |",
             "|" + "|".join("---:" if i in right else "---" for i in range(len(headers))) + "|"]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def config_label(params: dict[str, str], keys: list[str]) -> str:
    """``key=value`` of the varying keys (``all runs`` when nothing varies)."""
    return ", ".join(f"{k}={params.get(k, '-')}" for k in keys) or "all runs"


def config_table(stats: list[ConfigStats], keys: list[str]) -> str:
    """The grouped table: one row per configuration."""
    with_success = any(s.success_rate.n for s in stats) or any(
        r.final(SUCCESS_KEY) is not None for s in stats for r in s.runs)
    headers = [*(md_text(k) for k in keys or ["configuration"]), "seeds", "status", "eval return",
               "eval return IQM [95% CI]"]
    headers += ["eval success", "eval success IQM [95% CI]"] if with_success else []
    headers += ["solved", "solved time (s)", "solved env steps", "steps/s"]
    rows = []
    for s in stats:
        row = [md_text(s.params.get(k, "-")) for k in keys] or ["all runs"]
        row += [f"{s.num_completed}/{len(s.runs)}", md_text(s.status),
                format_estimate(s.eval_return.mean, s.eval_return.std),
                format_interval(*iqm_interval(s.eval_return.values))]
        if with_success:
            row += [format_estimate(s.success_rate.mean, s.success_rate.std, 3),
                    format_interval(*iqm_interval(s.success_rate.values), 3)]
        solved = f"{s.num_solved}/{s.num_completed} solved" if s.num_completed else "-"
        row += [solved, format_estimate(s.solved_wall_time_s.mean, s.solved_wall_time_s.std, 3),
                format_estimate(s.solved_env_steps.mean, s.solved_env_steps.std, max_decimals=0),
                format_count(s.sps.mean)]
        rows.append(row)
    first = max(len(keys), 1)
    return render_table(headers, rows, right={i for i in range(first, len(headers)) if i != first + 1})


def run_table(runs: list[Run], keys: list[str]) -> str:
    """The per-run table (final values once a run ended, latest ones while it runs)."""
    with_success = any(r.final(SUCCESS_KEY) is not None for r in runs)
    headers = ["run", *(md_text(k) for k in keys), "seed", "status", "env steps", "eval return"]
    headers += ["eval success"] if with_success else []
    headers += ["solved time (s)", "solved env steps", "steps/s"]
    rows = []
    for r in runs:
        status = f"{r.status}: {r.error}" if r.error else r.status
        row = [md_text(r.name), *(md_text(r.params.get(k, "-")) for k in keys), md_text(r.seed or "-"),
               md_text(status), format_count(r.env_steps), format_number(r.final(RETURN_KEY))]
        row += [format_number(r.final(SUCCESS_KEY), 3)] if with_success else []
        row += [format_number(r.final("solved_wall_time_s"), 3), format_count(r.final("solved_env_steps")),
                format_count(r.sps)]
        rows.append(row)
    seed = len(keys) + 1
    return render_table(headers, rows, right={seed, *range(seed + 2, len(headers))})


def render_report(root: str | Path, runs: list[Run], images: dict[str, str] | None = None,
                  frames: dict[str, str] | None = None, sections: Sequence[str] = ()) -> tuple[str, str, str]:
    """``(report.md text, grouped table, per-run table)`` for ``runs`` found under ``root``.

    Args:
        root: The directory the runs were found in (named in the header).
        runs: The loaded runs.
        images: ``{caption: file name}`` of curve PNGs to embed, relative to the report.
        frames: ``{video path: file name}`` of video frame strips to embed, relative to the report.
        sections: More Markdown sections, placed before the runs (the held-out sweeps).
    """
    groups = group_runs(runs)
    keys, common = varying_keys(groups)
    stats = [summarize(g) for g in groups]
    grouped, per_run = config_table(stats, keys), run_table(runs, keys)
    lines = [f"# embodirl report: {md_code(Path(root).resolve())}", "",
             f"{len(runs)} run{'s' if len(runs) != 1 else ''} in {len(groups)} configuration"
             f"{'s' if len(groups) != 1 else ''} ({md_text(status_tally(runs))}).", ""]
    if common:
        lines += ["Common overrides: " + " ".join(md_code(f"{k}={v}") for k, v in common.items()), ""]
    lines += ["## Configurations", "",
              "Over the completed runs of each configuration (seeds: completed/all runs): mean ± sample std "
              "(n-1) over seeds, no ± for one seed; " + IQM_NOTE + "; solved time and env steps over the runs "
              "that solved; steps/s end to end (env steps / training wall time, evaluation included). A value "
              "with an uncertainty is rounded to the uncertainty's second significant digit.", "", grouped, ""]
    if images:
        lines += ["## Learning curves", "",
                  "Deterministic evaluation (and each metric asked for with --metric) against env steps, every "
                  "run that logged it (running ones included). Thin lines are single seeds, the bold line their "
                  "mean (a single run is drawn bold on its own). Seeds are linearly interpolated between their "
                  "evaluations. A completed run that stopped before its configuration's last evaluation (it "
                  "solved, or hit its budget) keeps its final value from there on (dotted), so the mean does not "
                  "drop when a good seed finishes; a run still running, preempted or failed ends at its last "
                  "evaluation, and `n=` marks where the number of seeds behind the mean changes.", ""]
        lines += [f"![{md_text(caption)}]({name})" for caption, name in images.items()] + [""]  # keys from files
    if frames:
        lines += ["## Evaluation videos", "", "Frames of each run's latest evaluation video, first to last.", ""]
        lines += [f"{md_code(video)}:\n\n![frames of the video]({name})\n" for video, name in frames.items()]
    lines += [section for section in sections if section]
    lines += ["## Runs", "", "Final values once a run ended; the latest ones while it runs.", "", per_run, ""]
    return "\n".join(lines), grouped, per_run

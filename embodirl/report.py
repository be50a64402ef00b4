"""Sweep reports: find runs, load them, group seeds into configurations, aggregate, tabulate, plot.

A *run* is a directory holding ``.hydra/overrides.yaml`` (what ``embodirl-train`` writes into each run
or multirun job directory). Runs are grouped into *configurations* by their command-line overrides
minus ``seed=`` and minus Hydra's own (``hydra.*``, ``hydra/...``); the override keys whose values
differ between configurations become the columns of the table.

Conventions (also stated in the report):

* Statistics of a configuration are over its **completed** runs only (a running, preempted or failed
  run's last values are not final): mean ± sample standard deviation (n - 1) over seeds; no ± for a
  single seed. Solved wall time and env steps are over the completed runs that solved ("k/n solved").
  Steps/s is end to end: the run's env steps over its training wall time.
* Learning curves use every run with evaluations, running ones included. Each seed is linearly
  interpolated onto the union of the configuration's evaluation env steps and ends at its own last
  evaluation (no extrapolation). The mean is over the seeds with data at that step, so it is drawn
  wherever at least one seed has data; the band is the min–max over those same seeds.

Every loader tolerates missing, partial or torn files: a run may be completed, failed, running or
preempted, and ``metrics.jsonl`` may end in a half-written line.
"""

from __future__ import annotations

import io
import json
import math
import re
import statistics
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

__all__ = ["ConfigStats", "Curve", "ReportError", "Run", "Stat", "discover_runs", "eval_curve", "group_runs",
           "load_run", "load_runs", "mean_curve", "plot_curves", "render_report", "render_table",
           "split_overrides", "summarize", "varying_keys"]

RETURN_KEY = "eval/return_mean"
SUCCESS_KEY = "eval/success_rate"
STATUS_ORDER = ("completed", "running", "preempted", "failed")
BAND = "min–max over seeds"


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
    def ended(self) -> bool:
        """Whether ``summary.json`` describes this run (a requeued run that is running again has a stale one)."""
        return self.summary is not None and self.status != "running"

    def final(self, key: str) -> float | None:
        """``key`` from the summary once the run ended, else its last non-null value in the metrics."""
        if self.ended:
            return _number(self.summary.get(key))
        return next((v for r in reversed(self.metrics) if (v := _number(r.get(key))) is not None), None)

    @property
    def env_steps(self) -> float | None:
        return self.final("env_steps")

    @property
    def sps(self) -> float | None:
        """End-to-end env steps per second (summary, else last metrics line's env steps over its wall time)."""
        if self.ended:
            return _number(self.summary.get("sps"))
        steps, wall = self.final("env_steps"), self.final("wall_time_s")
        return steps / wall if steps is not None and wall else None


def _number(value: Any) -> float | None:
    """A finite float, or None for null, NaN, infinities and non-numbers."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


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


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _read_yaml(path: Path) -> Any:
    try:
        return yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError):
        return None


def read_metrics(path: Path) -> list[dict[str, Any]]:
    """The whole JSON objects of a ``metrics.jsonl`` (a torn last line or a missing file is skipped)."""
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return []
    records = []
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict):
            records.append(record)
    return records


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
    overrides = _read_yaml(path / ".hydra" / "overrides.yaml")
    params, seed = split_overrides(overrides if isinstance(overrides, list) else [])
    if seed is None:
        config = _read_yaml(path / ".hydra" / "config.yaml")
        if isinstance(config, dict) and config.get("seed") is not None:
            seed = str(config["seed"])
    summary = _read_json(path / "summary.json")
    record = _read_json(path / "status.json") or {}
    status = record.get("status") or (summary or {}).get("status") or "unknown"
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
        if len(values) == 1 and None not in values:
            common[key] = values.pop()
        else:
            varying.append(key)
    return varying, common


@dataclass
class Stat:
    """Mean and sample standard deviation (None for fewer than two values) of ``n`` values."""

    mean: float | None
    std: float | None
    n: int

    @classmethod
    def of(cls, values: list[float | None]) -> Stat:
        values = [v for v in values if v is not None]
        if not values:
            return cls(None, None, 0)
        return cls(statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else None, len(values))


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


# --- curves --------------------------------------------------------------------------------------------
@dataclass
class Curve:
    """A configuration's mean curve on a common env-step grid, with its band and seed count per point."""

    env_steps: list[float]
    mean: list[float]
    low: list[float]
    high: list[float]
    num_seeds: list[int]


def eval_curve(run: Run, key: str = RETURN_KEY) -> tuple[list[float], list[float]]:
    """``(env_steps, values)`` of ``key`` over a run's metrics, sorted by env steps (last value wins on ties)."""
    points: dict[float, float] = {}
    for record in run.metrics:
        steps, value = _number(record.get("env_steps")), _number(record.get(key))
        if steps is not None and value is not None:
            points[steps] = value
    xs = sorted(points)
    return xs, [points[x] for x in xs]


def mean_curve(curves: list[tuple[list[float], list[float]]]) -> Curve | None:
    """Mean and min–max band of several seeds' curves on the union of their env steps.

    Each seed is linearly interpolated between its own points and contributes nothing before its first or
    after its last point; a grid point is kept when at least one seed has data there. None if no points.
    """
    import numpy as np

    curves = [(np.asarray(x, float), np.asarray(y, float)) for x, y in curves if len(x)]
    if not curves:
        return None
    grid = np.unique(np.concatenate([x for x, _ in curves]))
    values = np.full((len(curves), grid.size), np.nan)
    for row, (x, y) in zip(values, curves):
        inside = (grid >= x[0]) & (grid <= x[-1])
        row[inside] = np.interp(grid[inside], x, y)
    count = (~np.isnan(values)).sum(axis=0)
    keep = count > 0
    values = values[:, keep]
    return Curve(grid[keep].tolist(), np.nanmean(values, axis=0).tolist(), np.nanmin(values, axis=0).tolist(),
                 np.nanmax(values, axis=0).tolist(), count[keep].tolist())


def _threshold(runs: list[Run], key: str) -> float | None:
    """The solved threshold on ``key`` when all runs that record one agree on it."""
    found = {_number(r.summary.get("solved_threshold")) for r in runs
             if r.summary and r.summary.get("solved_metric") == key}
    return found.pop() if len(found) == 1 else None


def plot_curves(groups: list[list[Run]], labels: list[str], key: str = RETURN_KEY) -> bytes | None:
    """A PNG of each configuration's mean ``key`` against env steps with a min–max band; None if no data."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as exc:
        raise ReportError("matplotlib is not installed, so no learning curves can be drawn. "
                          "Fix: pip install matplotlib") from exc
    fig = Figure(figsize=(8, 5), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    drawn = 0
    for index, (runs, label) in enumerate(zip(groups, labels)):
        curve = mean_curve([eval_curve(run, key) for run in runs])
        if curve is None:
            continue
        color = f"C{index % 10}"
        seeds = max(curve.num_seeds)
        ax.plot(curve.env_steps, curve.mean, color=color, marker="." if len(curve.env_steps) < 30 else None,
                label=f"{label} ({seeds} seed{'s' if seeds != 1 else ''})")
        ax.fill_between(curve.env_steps, curve.low, curve.high, color=color, alpha=0.2, linewidth=0)
        drawn += 1
    if not drawn:
        return None
    threshold = _threshold([run for runs in groups for run in runs], key)
    if threshold is not None:
        ax.axhline(threshold, color="0.4", linestyle="--", linewidth=1, label=f"solved threshold {threshold:g}")
    ax.set_xlabel("env steps")
    ax.set_ylabel(key)
    ax.set_title(f"{key}: mean over seeds, band = {BAND}", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    return buffer.getvalue()


# --- Markdown ------------------------------------------------------------------------------------------
def _fmt(value: float | None, digits: int = 4) -> str:
    if value is None:
        return "-"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.{digits}g}"


def _fmt_stat(stat: Stat, digits: int = 4) -> str:
    if stat.mean is None:
        return "-"
    return _fmt(stat.mean, digits) + ("" if stat.std is None else f" ± {_fmt(stat.std, digits)}")


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def render_table(headers: list[str], rows: list[list[str]], right: set[int] = frozenset()) -> str:
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
    headers = [*(keys or ["configuration"]), "seeds", "status", "eval return"]
    headers += ["eval success"] if with_success else []
    headers += ["solved", "solved time (s)", "solved env steps", "steps/s"]
    rows = []
    for s in stats:
        row = [s.params.get(k, "-") for k in keys] or ["all runs"]
        row += [f"{s.num_completed}/{len(s.runs)}", s.status, _fmt_stat(s.eval_return)]
        row += [_fmt_stat(s.success_rate, 3)] if with_success else []
        solved = f"{s.num_solved}/{s.num_completed} solved" if s.num_completed else "-"
        row += [solved, _fmt_stat(s.solved_wall_time_s, 3), _fmt_stat(s.solved_env_steps), _fmt(s.sps.mean)]
        rows.append(row)
    first = max(len(keys), 1)
    return render_table(headers, rows, right={i for i in range(first, len(headers)) if i != first + 1})


def run_table(runs: list[Run], keys: list[str]) -> str:
    """The per-run table (final values once a run ended, latest ones while it runs)."""
    with_success = any(r.final(SUCCESS_KEY) is not None for r in runs)
    headers = ["run", *keys, "seed", "status", "env steps", "eval return"]
    headers += ["eval success"] if with_success else []
    headers += ["solved time (s)", "solved env steps", "steps/s"]
    rows = []
    for r in runs:
        status = f"{r.status}: {r.error}" if r.error else r.status
        row = [r.name, *(r.params.get(k, "-") for k in keys), r.seed or "-", status, _fmt(r.env_steps),
               _fmt(r.final(RETURN_KEY))]
        row += [_fmt(r.final(SUCCESS_KEY), 3)] if with_success else []
        row += [_fmt(r.final("solved_wall_time_s"), 3), _fmt(r.final("solved_env_steps")), _fmt(r.sps)]
        rows.append(row)
    seed = len(keys) + 1
    return render_table(headers, rows, right={seed, *range(seed + 2, len(headers))})


def render_report(root: str | Path, runs: list[Run], images: dict[str, str] | None = None) -> tuple[str, str, str]:
    """``(report.md text, grouped table, per-run table)`` for ``runs`` found under ``root``.

    Args:
        root: The directory the runs were found in (named in the header).
        runs: The loaded runs.
        images: ``{caption: file name}`` of curve PNGs to embed, relative to the report.
    """
    groups = group_runs(runs)
    keys, common = varying_keys(groups)
    stats = [summarize(g) for g in groups]
    grouped, per_run = config_table(stats, keys), run_table(runs, keys)
    lines = [f"# embodirl report: `{Path(root).resolve()}`", "",
             f"{len(runs)} run{'s' if len(runs) != 1 else ''} in {len(groups)} configuration"
             f"{'s' if len(groups) != 1 else ''} ({status_tally(runs)}).", ""]
    if common:
        lines += ["Common overrides: " + " ".join(f"`{k}={v}`" for k, v in common.items()), ""]
    lines += ["## Configurations", "",
              "Over the completed runs of each configuration (seeds: completed/all runs): mean ± sample std "
              "(n-1) over seeds, no ± for one seed; solved time and env steps over the runs that solved; "
              "steps/s end to end (env steps / training wall time, evaluation included).", "", grouped, ""]
    if images:
        lines += ["## Learning curves", "",
                  "Deterministic evaluation against env steps, every run with evaluations (running ones "
                  "included). Each seed is linearly interpolated onto the union of its configuration's "
                  "evaluation steps and stops at its last evaluation; the line is the mean over the seeds "
                  f"with data at that step and the band the {BAND}.", ""]
        lines += [f"![{caption}]({name})" for caption, name in images.items()] + [""]
    lines += ["## Runs", "", "Final values once a run ended; the latest ones while it runs.", "", per_run, ""]
    return "\n".join(lines), grouped, per_run

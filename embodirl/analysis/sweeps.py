"""Held-out sweeps in a report: ``embodirl-eval ... eval.sweep.param=P`` results, per configuration and value.

Each run's latest ``eval/*/eval.json`` with a ``sweep`` of a parameter counts for that parameter (evaluation
directories are named by date and time, so the latest sorts last). Per configuration and value, the table
gives the mean success rate (the return where the env reports no success) over the seeds that have the value,
with the sample standard deviation and the number of seeds; the figure draws each configuration's mean
against the value (log x axis: multipliers are read as ratios), each seed thin.
"""

from __future__ import annotations

import io
import math
import statistics
from collections.abc import Sequence
from typing import Any

from embodirl.analysis.report import ReportError, Run, _read_json, md_code, md_text, render_table

__all__ = ["SweepKey", "find_sweeps", "plot_sweep", "sweep_metric", "sweep_section"]

SweepKey = tuple[str, str]  #: ``(param, scale)``: sweeps of one key are comparable


def find_sweeps(run: Run) -> dict[SweepKey, dict[str, Any]]:
    """``(param, scale) -> sweep`` of the run's latest ``eval.json`` that swept it."""
    found: dict[SweepKey, dict[str, Any]] = {}
    for path in sorted(run.path.glob("eval/*/eval.json")):
        data = _read_json(path, "its sweep is left out of the report")
        sweep = data.get("sweep") if data else None
        if isinstance(sweep, dict) and isinstance(sweep.get("bins"), list) and isinstance(sweep.get("param"), str):
            found[(sweep["param"], str(sweep.get("scale", "relative")))] = sweep
    return found


def sweep_metric(sweeps: Sequence[dict[str, Any]]) -> str:
    """``eval/success_rate`` when every bin reports it, else ``eval/return_mean``."""
    bins = [row for sweep in sweeps for row in sweep["bins"]]
    return "eval/success_rate" if bins and all("eval/success_rate" in row for row in bins) else "eval/return_mean"


def _per_value(runs: list[Run], key: SweepKey, metric: str) -> dict[float, list[float]]:
    """``value -> [the metric of each seed]`` of one configuration."""
    values: dict[float, list[float]] = {}
    for run in runs:
        sweep = find_sweeps(run).get(key)
        for row in sweep["bins"] if sweep else ():
            value, result = row.get("value"), row.get(metric)
            if isinstance(value, int | float) and isinstance(result, int | float) and math.isfinite(result):
                values.setdefault(float(value), []).append(float(result))
    return values


def _cell(results: list[float]) -> str:
    if not results:
        return "-"
    mean = statistics.fmean(results)
    spread = f" ± {statistics.stdev(results):.2f}" if len(results) > 1 else ""
    return f"{mean:.2f}{spread} (n={len(results)})"


def sweep_section(groups: list[list[Run]], labels: list[str], images: dict[SweepKey, str]) -> str:
    """The report's ``## Held-out sweeps`` section (empty when no run has a sweep)."""
    keys = list(dict.fromkeys(k for runs in groups for run in runs for k in find_sweeps(run)))
    if not keys:
        return ""
    lines = ["## Held-out sweeps", "", "`embodirl-eval ... eval.sweep.param=P eval.sweep.values=[...]`: each value "
             "fixed for every episode of its bin, the other parameters nominal. Mean over seeds ± sample std (n "
             "seeds), from each run's latest evaluation that swept the parameter.", ""]
    for key in keys:
        metric = sweep_metric([s for runs in groups for r in runs if (s := find_sweeps(r).get(key))])
        per_group = [_per_value(runs, key, metric) for runs in groups]
        values = sorted({v for group in per_group for v in group})
        rows = [[f"{v:g}", *(_cell(group.get(v, [])) for group in per_group)] for v in values]
        lines += [f"### {md_code(key[0])} ({md_text(key[1])}): {md_code(metric)}", "",
                  render_table(["value", *labels], rows, right=set(range(len(labels) + 1))), ""]
        if key in images:
            lines += [f"![{md_text(key[0])} sweep]({images[key]})", ""]
    return "\n".join(lines)


def plot_sweep(groups: list[list[Run]], labels: list[str], key: SweepKey) -> bytes | None:
    """PNG of each configuration's mean metric against the swept value (each seed thin); None without data.

    Raises:
        ReportError: matplotlib is not installed.
    """
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
        from matplotlib.ticker import FormatStrFormatter, NullFormatter
    except ImportError as exc:
        raise ReportError("matplotlib is not installed, so no sweep can be drawn. Fix: pip install matplotlib") from exc
    metric = sweep_metric([s for runs in groups for r in runs if (s := find_sweeps(r).get(key))])
    fig = Figure(figsize=(7, 4.5), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    ticks: set[float] = set()
    for i, (runs, label) in enumerate(zip(groups, labels, strict=True)):
        per_value = _per_value(runs, key, metric)
        if not per_value:
            continue
        xs = sorted(per_value)
        for run in runs:  # each seed thin
            own = _per_value([run], key, metric)
            ax.plot(sorted(own), [own[x][0] for x in sorted(own)], color=f"C{i % 10}", alpha=0.3, linewidth=0.8)
        ax.plot(xs, [statistics.fmean(per_value[x]) for x in xs], color=f"C{i % 10}", linewidth=2, marker="o",
                label=label)
        ticks.update(xs)
    if not ticks:
        return None
    if min(ticks) > 0:
        ax.set_xscale("log")
        ax.xaxis.set_major_formatter(FormatStrFormatter("%g"))  # 0.5, 1, 2 rather than 5 x 10^-1
        ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xticks(sorted(ticks))
    ax.set_xlabel(f"{key[0]} ({key[1]})")
    ax.set_ylabel(metric)
    ax.set_title(f"held-out sweep of {key[0]}: mean over seeds (bold), each seed (thin)", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    return buffer.getvalue()

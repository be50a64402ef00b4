"""Learning curves of a report: per-seed curves, their survivorship-free mean, and the PNG.

Averaging the seeds that still have data at each step is biased: a seed that solves the task and
stops early drops out, and the mean falls to the seeds that had not solved yet (a learning rate's curve
seems to collapse only because its best seed finished). So a seed of a
**completed** run (stopped by solving, budget or wall time) keeps its final value up to its
configuration's last evaluation; seeds of runs that are still running, preempted or failed end at
their last evaluation (their future is unknown), and the number of seeds behind the mean, ``n``, is
shown wherever it changes. The plot draws every seed as a thin line (the held part dotted) under the
bold mean, so the spread is visible without a band that hides how many seeds it rests on.
"""

from __future__ import annotations

import io
import warnings
from dataclasses import dataclass

import numpy as np

from embodirl.analysis.report import RETURN_KEY, ReportError, Run, solved_threshold
from embodirl.analysis.stats import finite
from embodirl.runtime.files import printable

__all__ = ["Curve", "SeedCurve", "draw_curves", "mean_curve", "plot_curves", "seed_curve"]

HELD_NOTE = "a completed run that stopped early keeps its final value (dotted)"
# Far beyond any return or step count; matplotlib's axis and tick maths overflow for values near the float
# limit (1.8e308) and fail to draw.
MAX_PLOTTED = 1e300


@dataclass
class SeedCurve:
    """One run's evaluations of a metric.

    Attributes:
        env_steps: Env steps of its evaluations, ascending.
        values: The metric at those steps.
        stopped: The run completed, so its final value holds after its last evaluation.
        seed: The run's seed (for the legend of a single run).
    """

    env_steps: list[float]
    values: list[float]
    stopped: bool
    seed: str | None = None


@dataclass
class Curve:
    """A configuration's mean curve on the union of its seeds' evaluation steps.

    Attributes:
        env_steps: The grid.
        mean: Mean over the seeds with a value at each step (held values included).
        num_seeds: ``n``, seeds behind the mean at each step.
        num_held: Seeds among them that contribute a held final value.
    """

    env_steps: list[float]
    mean: list[float]
    num_seeds: list[int]
    num_held: list[int]


def _plottable(value: object) -> float | None:
    """``value`` as a float if matplotlib can draw it: finite and within :data:`MAX_PLOTTED` in magnitude."""
    number = finite(value)
    return number if number is not None and abs(number) <= MAX_PLOTTED else None


def seed_curve(run: Run, key: str = RETURN_KEY) -> SeedCurve:
    """``key`` over a run's metrics, sorted by env steps (last value wins on ties); points whose steps or value
    are not finite or beyond :data:`MAX_PLOTTED` in magnitude (a corrupt or diverged run's) are left out."""
    points: dict[float, float] = {}
    for record in run.metrics:
        steps, value = _plottable(record.get("env_steps")), _plottable(record.get(key))
        if steps is not None and value is not None:
            points[steps] = value
    xs = sorted(points)
    return SeedCurve(xs, [points[x] for x in xs], stopped=run.status == "completed", seed=run.seed)


def mean_curve(seeds: list[SeedCurve]) -> Curve | None:
    """Mean of several seeds on the union of their env steps, completed seeds held to the last step.

    Each seed is linearly interpolated between its own points and contributes nothing before its
    first point; after its last point it contributes its final value if it ``stopped`` and nothing
    otherwise. None if no seed has a point.
    """
    seeds = [s for s in seeds if s.env_steps]
    if not seeds:
        return None
    grid = np.unique(np.concatenate([np.asarray(s.env_steps, float) for s in seeds]))
    values = np.full((len(seeds), grid.size), np.nan)
    held = np.zeros((len(seeds), grid.size), dtype=bool)
    for row, is_held, seed in zip(values, held, seeds, strict=True):
        x, y = np.asarray(seed.env_steps, float), np.asarray(seed.values, float)
        inside = (grid >= x[0]) & (grid <= x[-1])
        row[inside] = np.interp(grid[inside], x, y)
        if seed.stopped:
            is_held[:] = grid > x[-1]
            row[is_held] = y[-1]
    count = (~np.isnan(values)).sum(axis=0)
    return Curve(grid.tolist(), np.nanmean(values, axis=0).tolist(), count.tolist(), held.sum(axis=0).tolist())


def _plain(text: object) -> str:
    """Text from a file as a matplotlib label shown as it is: one line, ``$`` escaped (a pair of them would
    start mathtext, whose parser fails on most text)."""
    return printable(text, 200).replace("$", r"\$")


def _draw_group(ax, seeds: list[SeedCurve], label: str, color: str) -> bool:
    """Draw one configuration; returns whether a stopped seed was held (drawn dotted)."""
    label = _plain(label)
    curve = mean_curve(seeds)
    if curve is None:  # no seed has a point
        return False
    seeds = [s for s in seeds if s.env_steps]
    end = curve.env_steps[-1]
    single = len(seeds) == 1
    width, alpha = (2.0, 1.0) if single else (0.8, 0.35)
    held_any = False
    for seed in seeds:
        ax.plot(seed.env_steps, seed.values, color=color, linewidth=width, alpha=alpha,
                marker="." if single and len(seed.env_steps) < 30 else None)
        if seed.stopped and seed.env_steps[-1] < end:
            ax.plot([seed.env_steps[-1], end], [seed.values[-1]] * 2, color=color, linewidth=max(width, 1.2),
                    alpha=min(2 * alpha, 1.0), linestyle=":")
            held_any = True
    if single:
        ax.plot([], [], color=color, linewidth=width, label=f"{label}: seed {_plain(seeds[0].seed or '?')}")
        return held_any
    n = max(curve.num_seeds)
    num_early = sum(s.stopped and s.env_steps[-1] < end for s in seeds)
    note = f", {num_early} stopped early and held" if num_early else ""
    ax.plot(curve.env_steps, curve.mean, color=color, linewidth=2.0, label=f"{label}: mean of {n} seeds{note}")
    if min(curve.num_seeds) != n:  # show n where it changes (seeds starting late or still running)
        previous = None
        for x, y, count in zip(curve.env_steps, curve.mean, curve.num_seeds, strict=True):
            if count != previous:
                ax.annotate(f"n={count}", (x, y), textcoords="offset points", xytext=(2, 5), fontsize=7, color=color)
                previous = count
    return held_any


def _title(key: str, groups: list[list[SeedCurve]], held: bool) -> str:
    if all(len(g) == 1 for g in groups):
        what = "one run" if len(groups) == 1 else "one run per configuration"
    else:
        what = "mean over seeds (bold), each seed (thin)"
    return f"{key}: {what}" + (f"\n{HELD_NOTE}" if held else "")


def draw_curves(groups: list[list[Run]], labels: list[str], key: str = RETURN_KEY):
    """A matplotlib Figure of each configuration's ``key`` against env steps; None if no run has data.

    Args:
        groups: Runs per configuration.
        labels: One legend label per configuration.
        key: The metric, e.g. ``eval/return_mean``.

    Raises:
        ReportError: matplotlib is not installed.
    """
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
        from matplotlib.ticker import EngFormatter
    except ImportError as exc:
        raise ReportError("matplotlib is not installed, so no learning curves can be drawn. "
                          "Fix: pip install matplotlib") from exc
    per_group = [([s for s in (seed_curve(r, key) for r in runs) if s.env_steps], label)
                 for runs, label in zip(groups, labels, strict=True)]
    drawn = [(seeds, label, f"C{i % 10}") for i, (seeds, label) in enumerate(per_group) if seeds]
    if not drawn:
        return None
    fig = Figure(figsize=(8, 5), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    held = False
    for seeds, label, color in drawn:
        held = _draw_group(ax, seeds, label, color) or held
    threshold = solved_threshold([run for runs in groups for run in runs], key)
    if threshold is not None:
        ax.axhline(threshold, color="0.4", linestyle="--", linewidth=1, label=f"solved threshold {threshold:g}")
    ax.xaxis.set_major_formatter(EngFormatter(sep=""))
    ax.set_xlabel("env steps")
    ax.set_ylabel(_plain(key))  # a --metric key comes from metrics.jsonl
    ax.set_title(_title(_plain(key), [seeds for seeds, _, _ in drawn], held), fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    with warnings.catch_warnings(), np.errstate(all="ignore"):  # values near 1e308 overflow the tick maths
        warnings.filterwarnings("ignore", "Tight layout not applied")  # long labels: the plot is drawn anyway
        fig.tight_layout()
    return fig


def plot_curves(groups: list[list[Run]], labels: list[str], key: str = RETURN_KEY) -> bytes | None:
    """:func:`draw_curves` as PNG bytes; None if no run has data."""
    fig = draw_curves(groups, labels, key)
    if fig is None:
        return None
    buffer = io.BytesIO()
    with np.errstate(all="ignore"):  # see draw_curves
        fig.savefig(buffer, format="png")
    return buffer.getvalue()

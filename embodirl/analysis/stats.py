"""Statistics for reports: IQM and stratified-bootstrap intervals.

The aggregate follows rliable (Agarwal et al. 2021, "Deep RL at the edge of the statistical precipice"):
the interquartile mean (IQM) is the mean of the middle 50 % of the scores, robust to one outlying seed
yet less noisy than the median, and its uncertainty is a percentile interval from a *stratified*
bootstrap, which resamples runs with replacement within each task (stratum) and never across tasks.
rliable itself is not a dependency: it pulls in arch, statsmodels, pandas, seaborn and scipy (about
150 MB) for these few lines.

The report columns' number formatting (significant digits, ``mean ± spread``) is
:mod:`embodirl.runtime.formatting`'s, handed on here so that reports import one module.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import overload

import numpy as np
from numpy.typing import ArrayLike

from embodirl.runtime.formatting import format_count, format_estimate, format_interval, format_number

__all__ = ["finite", "format_count", "format_estimate", "format_interval", "format_number", "iqm",
           "stratified_bootstrap_ci"]


def finite(value: object) -> float | None:
    """``value`` as a float if it is a finite int or float (not a bool), else None (null, NaN, text, an int
    beyond the float range such as a 400-digit one from a corrupt file...)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


# --- aggregates ----------------------------------------------------------------------------------------
@overload
def iqm(values: ArrayLike, axis: None = None) -> float: ...


@overload
def iqm(values: ArrayLike, axis: int) -> np.ndarray: ...


def iqm(values: ArrayLike, axis: int | None = None) -> float | np.ndarray:
    """Interquartile mean: the mean after cutting ``floor(n / 4)`` values from each end.

    Equals ``scipy.stats.trim_mean(values, 0.25, axis)`` (and rliable's ``aggregate_iqm`` with
    ``axis=None``); for fewer than four values nothing is cut and it is the plain mean.

    Args:
        values: Scores; with ``axis=None`` all of them together (rliable flattens runs x tasks).
        axis: The axis to reduce, e.g. ``1`` for ``[num_resamples, num_runs]`` bootstrap samples.

    Returns:
        A float for ``axis=None``, else an array without ``axis``.

    Raises:
        ValueError: No values along the reduced axis.
    """
    array = np.asarray(values, dtype=float)
    if axis is None:
        array, axis = array.ravel(), 0
    n = array.shape[axis]
    if n == 0:
        raise ValueError("iqm of no values")
    cut = n // 4
    middle = np.take(np.sort(array, axis=axis), np.arange(cut, n - cut), axis=axis)
    result = middle.mean(axis=axis)
    return float(result) if result.ndim == 0 else result


def stratified_bootstrap_ci(
    strata: Sequence[ArrayLike],
    statistic: Callable[..., np.ndarray] = iqm,
    confidence: float = 0.95,
    num_resamples: int = 10_000,
    seed: int = 0,
) -> tuple[float, float, float]:
    """Point estimate and percentile bootstrap interval, resampling runs within each stratum.

    Each resample draws ``n_s`` runs with replacement from every stratum ``s`` (a task, an env) and
    joins them; the interval is the ``(1 -/+ confidence) / 2`` percentiles of the statistic over the
    resamples (numpy's linear interpolation, as rliable through arch). Seeded, so a report is
    reproducible.

    Args:
        strata: One 1-D array of run scores per stratum (a single stratum is the ordinary bootstrap).
        statistic: ``statistic(samples, axis=1)`` reduces ``[num_resamples, num_runs]`` to
            ``[num_resamples]``; the default is :func:`iqm` (``np.mean`` works too).
        confidence: Interval coverage in (0, 1).
        num_resamples: Bootstrap resamples.
        seed: Seed of the resampling generator.

    Returns:
        ``(point, low, high)``: the statistic of all runs and the interval's bounds.

    Raises:
        ValueError: A stratum is empty, or ``confidence``/``num_resamples`` is out of range.
    """
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence={confidence!r} is invalid: expected a float in (0, 1), e.g. 0.95")
    if num_resamples < 1:
        raise ValueError(f"num_resamples={num_resamples!r} is invalid: expected an int >= 1")
    arrays = [np.asarray(s, dtype=float).ravel() for s in strata]
    if not arrays or any(a.size == 0 for a in arrays):
        raise ValueError("stratified_bootstrap_ci needs at least one stratum and no empty stratum")
    rng = np.random.default_rng(seed)
    samples = np.concatenate([a[rng.integers(0, a.size, size=(num_resamples, a.size))] for a in arrays], axis=1)
    estimates = statistic(samples, axis=1)
    tail = (1.0 - confidence) / 2.0 * 100.0
    low, high = np.percentile(estimates, [tail, 100.0 - tail])
    point = statistic(np.concatenate(arrays)[None, :], axis=1)[0]
    return float(point), float(low), float(high)


# --- formatting ----------------------------------------------------------------------------------------

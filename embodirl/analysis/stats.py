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
from statistics import NormalDist
from typing import overload

import numpy as np
from numpy.typing import ArrayLike

from embodirl.runtime.formatting import format_count, format_estimate, format_interval, format_number

__all__ = ["finite", "format_count", "format_estimate", "format_interval", "format_number", "iqm",
           "mean_difference_interval", "rate_difference_interval", "stratified_bootstrap_ci", "wilson_interval"]


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


# --- two evaluations compared --------------------------------------------------------------------------
def _z(confidence: float) -> float:
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence={confidence!r} is invalid: expected a float in (0, 1), e.g. 0.95")
    return NormalDist().inv_cdf(0.5 + confidence / 2.0)


def wilson_interval(successes: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson's score interval of a success rate ``successes / n`` (Wilson 1927): unlike the normal
    approximation it stays inside [0, 1] and has width at 0 and 1 successes out of ``n``.

    Raises:
        ValueError: ``n < 1`` or ``successes`` outside ``[0, n]``.
    """
    if n < 1 or not 0 <= successes <= n:
        raise ValueError(f"wilson_interval needs 0 <= successes <= n and n >= 1, got {successes} of {n}")
    z, p = _z(confidence), successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return max(0.0, centre - half), min(1.0, centre + half)


def rate_difference_interval(successes_a: int, n_a: int, successes_b: int, n_b: int,
                             confidence: float = 0.95) -> tuple[float, float]:
    """Newcombe's hybrid score interval (1998, his method 10) of the difference of two independent success
    rates ``a - b``, from each one's :func:`wilson_interval`."""
    p_a, p_b = successes_a / n_a, successes_b / n_b
    low_a, high_a = wilson_interval(successes_a, n_a, confidence)
    low_b, high_b = wilson_interval(successes_b, n_b, confidence)
    d = p_a - p_b
    return d - math.hypot(p_a - low_a, high_b - p_b), d + math.hypot(high_a - p_a, p_b - low_b)


def mean_difference_interval(mean_a: float, std_a: float, n_a: int, mean_b: float, std_b: float, n_b: int,
                             confidence: float = 0.95) -> tuple[float, float]:
    """Welch's normal interval of the difference of two means ``a - b`` from independent samples, given each
    sample's population standard deviation (what an evaluation reports) and size: ``d +- z * se`` with
    ``se^2 = s_a^2 / (n_a - 1) + s_b^2 / (n_b - 1)`` (the sample variances over n). A normal, not a t,
    quantile: evaluations have tens to hundreds of episodes."""
    if n_a < 2 or n_b < 2:
        raise ValueError(f"mean_difference_interval needs two or more episodes per side, got {n_a} and {n_b}")
    z = _z(confidence)
    se = math.sqrt(std_a * std_a / (n_a - 1) + std_b * std_b / (n_b - 1))
    d = mean_a - mean_b
    return d - z * se, d + z * se


# --- formatting ----------------------------------------------------------------------------------------

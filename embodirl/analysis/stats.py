"""Statistics and number formatting for reports: IQM, stratified-bootstrap intervals, significant digits.

The aggregate follows rliable (Agarwal et al. 2021, "Deep RL at the edge of the statistical precipice"):
the interquartile mean (IQM) is the mean of the middle 50 % of the scores, robust to one outlying seed
yet less noisy than the median, and its uncertainty is a percentile interval from a *stratified*
bootstrap, which resamples runs with replacement within each task (stratum) and never across tasks.
rliable itself is not a dependency: it pulls in arch, statsmodels, pandas, seaborn and scipy (about
150 MB) for these few lines.

Numbers are formatted so that a column reads consistently: a value alone to ``digits`` significant
digits (integer digits are never dropped, counts keep every digit); a value with an uncertainty (a
standard deviation or an interval) to the decimal place of the uncertainty's second significant digit,
so ``499.8 ± 0.3464`` reads ``499.80 ± 0.35`` and ``260.12 ± 45.7`` reads ``260 ± 46``. A magnitude of
1e15 or more (no count or score reaches it; a diverged or corrupt run's values up to 1e308 do) is written
in scientific notation, ``1.000e+308``, instead of 309 digits.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import overload

import numpy as np
from numpy.typing import ArrayLike

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
LARGE = 1e15  # from here on numbers are written in scientific notation


def _fixed(value: float, decimals: int) -> str:
    """``value`` rounded to ``decimals`` places (negative: tens, hundreds...), thousands separated, no -0;
    from :data:`LARGE` on in scientific notation with four significant digits."""
    if abs(value) >= LARGE:
        return f"{value:.3e}"
    rounded = round(value, decimals) + 0.0  # + 0.0 turns -0.0 into 0.0
    return f"{rounded:,.{max(decimals, 0)}f}"


def _uncertainty_decimals(uncertainty: float) -> int:
    """Decimal places that keep two significant digits of ``uncertainty > 0`` (negative above 100)."""
    rounded = float(f"{uncertainty:.2g}")  # 0.0996 -> 0.1: the exponent after rounding decides
    if not math.isfinite(rounded):  # 1.79e308 rounds up beyond the float range
        rounded = uncertainty
    return 1 - math.floor(math.log10(rounded))


def format_number(value: float | None, digits: int = 4) -> str:
    """``value`` to ``digits`` significant digits, keeping every integer digit.

    ``None`` -> ``-``; ``0.0014050388998463588`` -> ``0.001405``; ``499.8`` -> ``499.8``;
    ``9.0`` -> ``9.000``; ``163840.4`` -> ``163,840``; below 1e-4 and from 1e15 on in scientific notation.
    """
    if value is None:
        return "-"
    if not math.isfinite(value):
        return str(value)
    if value == 0:
        return "0"
    if abs(value) >= LARGE:
        return f"{value:.{digits - 1}e}"
    rounded = float(f"{value:.{digits}g}")  # 9.9996 -> 10.0: count digits after rounding
    if abs(rounded) < 1e-4:
        return f"{value:.{digits - 1}e}"
    decimals = max(digits - 1 - math.floor(math.log10(abs(rounded))), 0)
    return _fixed(value, decimals)


def format_count(value: float | None) -> str:
    """A count or rate as a whole number with thousands separators (``163,840``); ``None`` -> ``-``."""
    return "-" if value is None else _fixed(value, 0)


def format_estimate(mean: float | None, spread: float | None, digits: int = 4,
                    max_decimals: int | None = None) -> str:
    """``mean ± spread``, both to the decimal place of the spread's second significant digit.

    Without a spread (one seed) the mean alone to ``digits`` significant digits; a zero spread is
    ``mean ± 0``. ``max_decimals`` caps the places (0 for counts such as env steps).

    Examples: ``(499.8, 0.3464)`` -> ``499.80 ± 0.35``; ``(260.123, 45.678)`` -> ``260 ± 46``;
    ``(1234567, 12345)`` -> ``1,235,000 ± 12,000``; ``(0.5, None)`` -> ``0.5000``.
    """
    if mean is None:
        return "-"
    if spread is None or not math.isfinite(spread):
        return format_count(mean) if max_decimals == 0 else format_number(mean, digits)
    if spread == 0:
        return f"{format_count(mean) if max_decimals == 0 else format_number(mean, digits)} ± 0"
    decimals = _uncertainty_decimals(abs(spread))
    if max_decimals is not None:
        decimals = min(decimals, max_decimals)
    return f"{_fixed(mean, decimals)} ± {_fixed(abs(spread), decimals)}"


def format_interval(point: float | None, low: float | None, high: float | None, digits: int = 4) -> str:
    """``point [low, high]`` to the decimal place of the half-width's second significant digit.

    Without an interval (``low``/``high`` None) the point alone; a zero-width interval formats all
    three to ``digits`` significant digits. ``(480.33, 455.12, 497.04)`` -> ``480 [455, 497]``.
    """
    if point is None:
        return "-"
    if low is None or high is None:
        return format_number(point, digits)
    half_width = high / 2.0 - low / 2.0  # halves first: (high - low) overflows for bounds near +-1e308
    if not half_width > 0 or not math.isfinite(half_width):
        return f"{format_number(point, digits)} [{format_number(low, digits)}, {format_number(high, digits)}]"
    decimals = _uncertainty_decimals(half_width)
    return f"{_fixed(point, decimals)} [{_fixed(low, decimals)}, {_fixed(high, decimals)}]"

"""How numbers, durations and tables read to a person, shared by the progress line (:mod:`embodirl.training`)
and the reports (:mod:`embodirl.analysis`).

Numbers are formatted so that a column reads consistently: a value alone to ``digits`` significant
digits (integer digits are never dropped, counts keep every digit); a value with an uncertainty (a
standard deviation or an interval) to the decimal place of the uncertainty's second significant digit,
so ``499.8 ± 0.3464`` reads ``499.80 ± 0.35`` and ``260.12 ± 45.7`` reads ``260 ± 46``. A magnitude of
1e15 or more (no count or score reaches it; a diverged or corrupt run's values up to 1e308 do) is written
in scientific notation, ``1.000e+308``, instead of 309 digits.
"""

from __future__ import annotations

import math
from typing import Any, TextIO

__all__ = ["UNBOUNDED_WIDTH", "format_count", "format_duration", "format_estimate", "format_interval", "format_number",
           "output_console"]

# Width of tables printed where no terminal sets one (files, pipes, CI and SLURM logs): nothing is cut, and a
# table is as wide as its content (rich's default there is 80 columns, which cut paths short).
UNBOUNDED_WIDTH = 10_000


def output_console(file: TextIO | None = None) -> Any:
    """A rich Console on ``file`` (stdout by default): the terminal's width on a terminal, no limit elsewhere."""
    from rich.console import Console

    console = Console(file=file)
    return console if console.is_terminal else Console(file=file, width=UNBOUNDED_WIDTH)


def format_duration(seconds: float | None) -> str:
    """``42s``, ``4m 02s``, ``3h 05m``; None or infinite -> ``?``."""
    if seconds is None or not math.isfinite(seconds):
        return "?"
    seconds = max(round(seconds), 0)
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m {seconds % 60:02d}s"
    return f"{seconds // 3600}h {seconds % 3600 // 60:02d}m"


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

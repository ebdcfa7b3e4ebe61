"""How the report writes numbers: durations as ``1h02m03s``, money to the cent, and
the rounding of ``report.json``'s figures."""

from __future__ import annotations

import math


def hms(seconds: float | None) -> str:
    """``seconds`` as hours, minutes and seconds (``1h02m03s``); ``-`` for None."""
    if seconds is None:
        return "-"
    s = round(seconds)
    return f"{s // 3600}h{s % 3600 // 60:02d}m{s % 60:02d}s"


def money(value: float | None) -> str:
    """``value`` to the cent with thousands separated (``1,234.50``); ``-`` for None."""
    return "-" if value is None else f"{value:,.2f}"


def rounded(value: float | None, digits: int = 3) -> float | None:
    """``value`` rounded to ``digits``; None for None or NaN."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    return round(value, digits)


def rounded_pair(pair: tuple[float, float] | None, digits: int) -> tuple[float, float] | None:
    """Both ends of an interval rounded to ``digits``; None for None."""
    return None if pair is None else (round(pair[0], digits), round(pair[1], digits))


def inside(actual: float, interval: tuple[float, float] | None) -> bool | None:
    """Whether ``actual`` fell in ``interval`` (rounding aside); None without one."""
    if interval is None:
        return None
    lo, hi = interval
    return lo - 0.01 <= actual <= hi + 0.01

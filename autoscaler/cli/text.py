"""How the command line writes times and money, and reads durations."""

from __future__ import annotations

import re
from datetime import UTC, datetime

_DURATION = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*(s|m|min|h|d)?\s*$")
_UNIT_S = {"s": 1, "m": 60, "min": 60, "h": 3600, "d": 86400}


def duration_s(text: str) -> float | None:
    """``90``, ``90s``, ``5m``, ``2h``, ``1d`` in seconds; None if ``text`` is no duration."""
    match = _DURATION.match(text)
    if match is None:
        return None
    return float(match.group(1)) * _UNIT_S[match.group(2) or "s"]


def when(epoch: float | None, now: float) -> str:
    """A wall-clock time in UTC: ``HH:MM:SS`` on the day of ``now`` (an epoch), else with
    its date, ``YYYY-MM-DD HH:MM:SS``; ``-`` for none."""
    if epoch is None:
        return "-"
    at = datetime.fromtimestamp(epoch, UTC)
    if at.date() == datetime.fromtimestamp(now, UTC).date():
        return at.strftime("%H:%M:%S")
    return at.strftime("%Y-%m-%d %H:%M:%S")


def money(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"

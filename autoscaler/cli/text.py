"""How the command line writes times and money."""

from __future__ import annotations

from datetime import UTC, datetime


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

"""How the command line writes times and money (cli.text)."""

from __future__ import annotations

from datetime import UTC, datetime

from autoscaler.cli.text import money, when

NOON = datetime(2026, 12, 2, 12, 0, tzinfo=UTC).timestamp()


def test_a_time_on_the_day_of_now_is_its_clock_time_in_utc() -> None:
    assert when(NOON + 3723.4, NOON) == "13:02:03"


def test_a_time_on_another_day_has_its_date() -> None:
    assert when(NOON + 3 * 86400, NOON) == "2026-12-05 12:00:00"
    assert when(NOON - 13 * 3600, NOON) == "2026-12-01 23:00:00"


def test_no_time_and_no_money_are_a_dash() -> None:
    assert when(None, NOON) == "-"
    assert money(None) == "-"


def test_money_is_to_the_cent_without_separators() -> None:
    assert money(1234.5) == "1234.50"
    assert money(0.005) == "0.01"

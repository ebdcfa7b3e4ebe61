"""Lease arithmetic: agents stop before their machine's paid time ends, renew before that,
and the two clocks (run time, monotonic) convert into each other."""

from __future__ import annotations

import pytest

from autoscaler.core.leases import (
    Lease,
    Timeline,
    boundary_due,
    delay_s,
    hard_end,
    lease,
    renew_at,
)

REAL = Timeline(t0=0.0, mono0=1000.0, time_scale=1.0)
FAST = Timeline(t0=500.0, mono0=1000.0, time_scale=60.0)  # a minute of run time per second


def test_the_lease_ends_before_the_paid_time_by_a_quarter_of_the_margin() -> None:
    assert hard_end(paid_until=3600.0, margin_s=60.0) == 3585.0


def test_renewal_comes_before_the_hard_end_and_the_boundary_check_before_both() -> None:
    paid, margin = 3600.0, 60.0
    assert boundary_due(paid, margin) == 3540.0
    assert renew_at(paid, margin) == 3570.0
    assert boundary_due(paid, margin) < renew_at(paid, margin) < hard_end(paid, margin) < paid


def test_a_lease_counts_from_the_request_s_arrival_in_real_seconds() -> None:
    """Paid until run time 3600 with a 60 s margin, asked at run time 100 (monotonic 1100)."""
    assert lease(REAL, paid_until=3600.0, margin_s=60.0, arrived=1100.0) == Lease(3485.0, 3470.0)


def test_a_time_scaled_lease_is_shorter_in_real_seconds() -> None:
    """At 60x, the 3085 run seconds to the hard end (3585) from run time 500 are 51.4 s."""
    got = lease(FAST, paid_until=3600.0, margin_s=60.0, arrived=1000.0)
    assert got.lease_s == pytest.approx(3085.0 / 60.0, abs=1e-4)
    assert got.renew_in_s == pytest.approx(3070.0 / 60.0, abs=1e-4)
    assert got.renew_in_s < got.lease_s


def test_a_machine_past_its_lease_gets_zero_not_a_negative_lease() -> None:
    late = REAL.mono_at(3590.0)  # past the hard end (3585), before the paid end
    assert lease(REAL, paid_until=3600.0, margin_s=60.0, arrived=late) == Lease(0.0, 0.0)


def test_between_renewal_and_hard_end_only_the_lease_is_left() -> None:
    arrived = REAL.mono_at(3580.0)
    assert lease(REAL, paid_until=3600.0, margin_s=60.0, arrived=arrived) == Lease(5.0, 0.0)


def test_leases_are_rounded_to_a_tenth_of_a_millisecond() -> None:
    got = lease(REAL, paid_until=3600.0, margin_s=60.0, arrived=1100.123456789)
    assert got.lease_s == 3484.8765


def test_run_time_and_monotonic_time_round_trip() -> None:
    for timeline in (REAL, FAST):
        for t in (0.0, 500.0, 1234.5, 86400.0):
            assert timeline.run_time(timeline.mono_at(t)) == pytest.approx(t, abs=1e-9)
        for mono in (1000.0, 1000.25, 5000.0):
            assert timeline.mono_at(timeline.run_time(mono)) == pytest.approx(mono)


def test_run_time_advances_time_scale_seconds_per_real_second() -> None:
    assert FAST.run_time(1000.0) == 500.0
    assert FAST.run_time(1002.0) == 620.0
    assert FAST.mono_at(620.0) == pytest.approx(1002.0)


def test_a_resumed_run_carries_on_its_timeline_from_the_wall_clock() -> None:
    """Started at wall time 10 000 at 60x; resumed 30 real seconds later: run time 1800."""
    timeline = Timeline.resume(start_wall=10_000.0, wall=10_030.0, mono=7.0, time_scale=60.0)
    assert timeline.run_time(7.0) == 1800.0
    assert timeline.run_time(8.0) == 1860.0


def test_a_delay_to_a_passed_time_is_zero() -> None:
    assert delay_s(REAL, t=50.0, mono=1100.0) == 0.0
    assert delay_s(REAL, t=150.0, mono=1100.0) == 50.0
    assert delay_s(FAST, t=620.0, mono=1000.0) == pytest.approx(2.0)


def test_a_time_scaled_lease_ends_no_sooner_than_its_floor_after_the_next_ask() -> None:
    """At 360x a margin of 6 minutes is a real second: the lease's quarter of it (0.25 s
    after the next ask) is raised to the floor."""
    scaled = Timeline(0.0, 0.0, 360.0)
    tight = lease(scaled, paid_until=3600.0, margin_s=360.0, arrived=9.0)
    floored = lease(scaled, paid_until=3600.0, margin_s=360.0, arrived=9.0, floor_s=2.0)
    assert tight.lease_s == pytest.approx(tight.renew_in_s + 0.25)
    assert floored.renew_in_s == tight.renew_in_s
    assert floored.lease_s == pytest.approx(floored.renew_in_s + 2.0)
    assert lease(REAL, 3600.0, 600.0, 1100.0, floor_s=2.0) == lease(REAL, 3600.0, 600.0, 1100.0)

"""The rule by which a machine's cost is charged to the jobs it ran (core.cost_shares):
each billing step to the jobs that had come when it began, by their seconds in it."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autoscaler.core.cost_shares import shares

HOUR = 3600.0


def test_a_job_that_rides_in_an_hour_paid_for_is_not_charged_for_it() -> None:
    """A ran in the first hour; B came at 30 min and ran into the second hour: A pays the
    first hour, B the second (seconds over the whole life would have charged B part of
    the first and A part of the second)."""
    runs = [(100.0, 1500.0, "A", 1.0), (1800.0, 3000.0, "B", 1.0), (3000.0, 4000.0, "B", 1.0)]
    out, owed = shares(runs, 0.0, HOUR, [1.0, 1.0], {"A": 0.0, "B": 1800.0})
    assert out == pytest.approx({"A": 1.0, "B": 1.0})
    assert owed == 0.0


def test_jobs_there_when_a_step_began_share_it_by_their_seconds() -> None:
    runs = [(0.0, 1000.0, "A", 1.0), (1000.0, 3600.0, "B", 1.0)]
    out, _ = shares(runs, 0.0, HOUR, [2.0], {"A": 0.0, "B": 0.0})
    assert out == pytest.approx({"A": 2.0 * 1000 / 3600, "B": 2.0 * 2600 / 3600})


def test_a_step_only_late_comers_ran_is_theirs_and_an_idle_one_goes_with_the_last() -> None:
    """Step 0: only B ran (A had come but ran nothing): B pays. Step 1: idle, kept for
    B: B pays. Step 2: A and B were there, only A ran: A pays."""
    runs = [(1800.0, 3000.0, "B", 1.0), (7300.0, 7400.0, "A", 1.0)]
    out, owed = shares(runs, 0.0, HOUR, [1.0, 1.0, 1.0], {"A": 0.0, "B": 900.0})
    assert out == pytest.approx({"A": 1.0, "B": 2.0})
    assert owed == 0.0


def test_boot_before_any_run_goes_to_the_first_that_run_and_no_run_to_no_one() -> None:
    out, owed = shares([(4000.0, 5000.0, "A", 2.0)], 0.0, HOUR, [1.0, 1.0], {"A": 0.0})
    assert out == pytest.approx({"A": 2.0})
    assert owed == 0.0
    assert shares([], 0.0, HOUR, [1.0, 0.5], {"A": 0.0}) == ({}, 1.5)


def test_weights_count_seconds_run_on_slots() -> None:
    """A queue of a two-slot machine is one lane whose second counts twice."""
    runs = [(0.0, 1000.0, "A", 1.0), (1000.0, 1500.0, "B", 2.0)]
    out, _ = shares(runs, 0.0, HOUR, [1.0], {"A": 0.0, "B": 0.0})
    assert out == pytest.approx({"A": 0.5, "B": 0.5})


runs_st = st.lists(
    st.tuples(
        st.floats(0, 4 * HOUR),
        st.floats(0, 2 * HOUR),
        st.sampled_from("ABC"),
        st.sampled_from([1.0, 2.0]),
    ).map(lambda r: (r[0], r[0] + r[1], r[2], r[3])),
    max_size=12,
)


@settings(max_examples=300, deadline=None)
@given(
    runs_st,
    st.lists(st.floats(0, 10), min_size=1, max_size=6),
    st.dictionaries(st.sampled_from("ABC"), st.floats(0, 4 * HOUR)),
)
def test_the_parts_and_what_no_one_bears_add_up_to_the_cost(runs, costs, arrived) -> None:
    out, owed = shares(runs, 0.0, HOUR, costs, arrived)
    assert sum(out.values()) + owed == pytest.approx(sum(costs), abs=1e-9)
    assert all(c >= 0 for c in out.values())
    assert set(out) <= {j for start, end, j, _ in runs if end > start}
    if not any(end > start for start, end, _, _ in runs):
        assert owed == pytest.approx(sum(costs))

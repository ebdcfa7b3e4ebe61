"""When the daemon could not hear its agents (``run.hearing``), and machines lost only for
silence it could have heard (``agents.lost_contact``): pure, on monotonic times given."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from autoscaler.core.model import MachineLost, MachineState, TypeSpec
from autoscaler.core.state import Machine
from autoscaler.run.agents import heard_since, lost_contact
from autoscaler.run.hearing import DEAF_AFTER_S, Hearing
from autoscaler.run.timers import HEALTH_S
from tests.conftest import make_config

CFG = make_config(daemon={"heartbeat_s": 2.0, "lost_after_s": 15.0})
SLOW = TypeSpec("slow", 1.0, 10, 60.0)


def machine(mid: str, state: MachineState = MachineState.READY) -> Machine:
    return Machine(mid, SLOW, "L1", launched_at=0.0, paid_until=3600.0, state=state)


def rounds(hearing: Hearing, listener: str, start: float, end: float) -> None:
    """``listener`` goes round every ``HEALTH_S`` from ``start`` to ``end``."""
    t = start
    while t <= end:
        hearing.note(listener, t)
        t += HEALTH_S


# --- Hearing ---------------------------------------------------------------------------------


def test_a_listener_going_round_is_never_deaf() -> None:
    hearing = Hearing()
    rounds(hearing, "main", 0.0, 100.0)
    assert hearing.deaf_s(0.0, 100.0) == 0.0
    assert hearing.intervals() == []


def test_a_gap_longer_than_the_threshold_is_deaf_time_and_a_short_one_is_not() -> None:
    hearing = Hearing()
    hearing.note("main", 10.0)
    hearing.note("main", 10.0 + DEAF_AFTER_S)  # not longer: a slow round
    hearing.note("main", 41.0)  # stopped 30 s
    assert hearing.intervals() == [(11.0, 41.0)]
    assert hearing.deaf_s(0.0, 100.0) == 30.0
    assert hearing.deaf_s(20.0, 30.0) == 10.0  # an interval inside the deafness
    assert hearing.deaf_s(5.0, 21.0) == 10.0  # overlapping its start
    assert hearing.deaf_s(31.0, 60.0) == 10.0  # overlapping its end
    assert hearing.deaf_s(41.0, 60.0) == 0.0
    assert hearing.deaf_s(0.0, 11.0) == 0.0


def test_either_listener_deaf_is_deaf_and_both_at_once_count_once() -> None:
    hearing = Hearing()
    rounds(hearing, "main", 0.0, 10.0)
    rounds(hearing, "dispatcher", 0.0, 10.0)
    hearing.note("main", 40.0)  # the whole process stopped from 10 to 40
    hearing.note("dispatcher", 40.1)
    rounds(hearing, "dispatcher", 40.1, 100.0)
    hearing.note("main", 60.0)  # then a step of 20 s: the main loop alone deaf
    assert hearing.intervals() == [(10.0, 60.0)]
    assert hearing.deaf_s(0.0, 100.0) == 50.0


def test_polls_left_unread_are_deaf_time() -> None:
    """A loop that goes round often but is behind: the oldest poll it takes waited."""
    hearing = Hearing()
    hearing.unread(10.0, 10.0 + DEAF_AFTER_S)  # not longer than the threshold
    hearing.unread(20.0, 23.0)
    assert hearing.intervals() == [(20.0, 23.0)]


def test_intervals_added_out_of_order_merge_without_counting_the_time_between() -> None:
    hearing = Hearing()
    hearing.unread(10.0, 12.0)
    hearing.unread(5.0, 7.0)  # another thread's, computed a moment before
    hearing.unread(6.0, 11.0)  # joins both
    hearing.unread(30.0, 40.0)
    assert hearing.intervals() == [(5.0, 12.0), (30.0, 40.0)]
    assert hearing.deaf_s(0.0, 100.0) == 17.0
    assert hearing.deaf_s(11.0, 35.0) == 6.0


def test_intervals_before_the_oldest_time_asked_about_are_forgotten() -> None:
    hearing = Hearing()
    for start in (10.0, 20.0, 30.0):
        hearing.unread(start, start + 2.0)
    hearing.forget_before(25.0)
    assert hearing.intervals() == [(30.0, 32.0)]
    assert hearing.deaf_s(25.0, 40.0) == 2.0
    hearing.unread(31.0, 35.0)
    assert hearing.deaf_s(0.0, 40.0) == 5.0


@given(
    st.lists(
        st.tuples(st.floats(0, 100, allow_nan=False), st.floats(0, 20, allow_nan=False)),
        max_size=20,
    ),
    st.floats(0, 120, allow_nan=False),
    st.floats(0, 120, allow_nan=False),
    st.floats(0, 50, allow_nan=False),
)
def test_deaf_time_is_the_measure_of_the_union_of_intervals(
    added: list[tuple[float, float]], a: float, b: float, forget: float
) -> None:
    """Against a plain computation: the union's length inside [a, b], whatever the order
    the intervals came in and whatever was forgotten before it."""
    hearing = Hearing(deaf_after_s=0.0)
    for start, length in added:
        hearing.unread(start, start + length + 1e-3)
    lo, hi = min(a, b), max(a, b)
    hearing.forget_before(min(forget, lo))
    union: list[list[float]] = []
    for s, e in sorted((s, s + n + 1e-3) for s, n in added):
        if union and s <= union[-1][1]:
            union[-1][1] = max(union[-1][1], e)
        else:
            union.append([s, e])
    expected = sum(max(0.0, min(e, hi) - max(s, lo)) for s, e in union)
    assert abs(hearing.deaf_s(lo, hi) - expected) < 1e-6


# --- lost_contact with stalls ----------------------------------------------------------------


def test_a_machine_silent_only_while_the_daemon_was_stopped_is_not_lost() -> None:
    """The whole process stopped 30 s: the health check queued meanwhile runs first
    thing after, with every agent's last request 30 s old. None is lost; without the
    daemon's hearing each would be."""
    hearing = Hearing()
    rounds(hearing, "dispatcher", 0.0, 50.0)
    rounds(hearing, "main", 0.0, 50.0)
    hearing.note("main", 80.0)  # the main loop's first round after the stop
    ready = [machine(f"m{i}") for i in range(3)]
    since = {m.id: 0.0 for m in ready}
    seen = {"m0": 49.0, "m1": 50.0, "m2": 45.0}
    assert lost_contact(ready, since, seen, 80.0, CFG, hearing=hearing) == []
    assert len(lost_contact(ready, since, seen, 80.0, CFG)) == 3


def test_a_machine_silent_before_a_stall_too_is_lost_for_the_heard_time_only() -> None:
    """m0 went quiet at 30 s; the daemon was deaf from 40 to 70: at 80 it was heard
    silent for 20 s (> 15) and is lost, with that silence; at 74 only for 14 s."""
    hearing = Hearing()
    hearing.note("main", 40.0)
    hearing.note("main", 70.0)
    ready = [machine("m0")]
    assert lost_contact(ready, {"m0": 0.0}, {"m0": 30.0}, 74.0, CFG, hearing=hearing) == []
    assert lost_contact(ready, {"m0": 0.0}, {"m0": 30.0}, 80.0, CFG, hearing=hearing) == [
        MachineLost("m0", "no contact for 20s")
    ]


def test_a_booting_machine_gets_its_boot_time_plus_lost_after_of_heard_time() -> None:
    """Never reported in: boot 60 s + 15 s, counted as heard time (deaf 10 s here)."""
    hearing = Hearing()
    hearing.note("dispatcher", 20.0)
    hearing.note("dispatcher", 30.0)
    booting = [machine("m0", MachineState.BOOTING)]
    since = {"m0": 0.0}
    assert lost_contact(booting, since, {}, 84.0, CFG, hearing=hearing) == []
    lost = lost_contact(booting, since, {}, 86.0, CFG, hearing=hearing)
    assert [e.machine for e in lost] == ["m0"]


def test_the_oldest_time_a_check_needs_is_the_earliest_last_contact() -> None:
    ready = [machine("m0"), machine("m1"), machine("m2", MachineState.BOOTING)]
    since = {"m0": 5.0, "m1": 5.0, "m2": 12.0}
    assert heard_since(ready, since, {"m0": 20.0, "m1": 15.0}) == 12.0
    assert heard_since(ready[:2], since, {"m0": 20.0, "m1": 15.0}) == 15.0
    assert heard_since([machine("x")], since, {}) is None

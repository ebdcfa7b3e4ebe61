"""Dynamic reassignment (paper 002 Algorithm 4): tasks move only from machines that would
miss a deadline to machines with room, never create a new violation, lose no task, and
what stays late is reported."""

from __future__ import annotations

from collections import Counter

from hypothesis import event, given, settings
from hypothesis import strategies as st

from autoscaler.deadline.reassign import Queue, finish_times, reassign, room

JOBS = ("a", "b", "c")


def test_a_hand_computed_case_moves_just_enough() -> None:
    """A: 10 tasks of x at 100 s from t=0, deadline 600: late by 400 s, so 4 tasks must
    go. B is idle, 50 s a task, paid to 1000: room for ⌊600/50⌋ = 12. The last 4 of A's
    queue move to B; nothing is late after."""
    a = Queue("A", 0.0, 3600.0, [(i, "x") for i in range(10)], {"x": 100.0})
    b = Queue("B", 0.0, 1000.0, [], {"x": 50.0})
    out = reassign([a, b], {"x": 600.0})
    assert [(m.tasks, m.source, m.target) for m in out.moves] == [((6, 7, 8, 9), "A", "B")]
    assert out.late == ()


def test_what_recipients_cannot_take_is_reported_late() -> None:
    """B has room for 2 tasks only (paid until 100 s at 50 s each); the third task over
    stays late on A: 1 task, 100 s late."""
    a = Queue("A", 0.0, 3600.0, [(i, "x") for i in range(9)], {"x": 100.0})
    b = Queue("B", 0.0, 100.0, [], {"x": 50.0})
    out = reassign([a, b], {"x": 600.0})
    assert [len(m.tasks) for m in out.moves] == [2]
    assert [(x.job, x.tasks, x.seconds) for x in out.late] == [("x", 1, 100.0)]


def test_a_machine_that_cannot_run_the_job_receives_none_of_it() -> None:
    a = Queue("A", 0.0, 3600.0, [(i, "x") for i in range(10)], {"x": 100.0})
    b = Queue("B", 0.0, 3600.0, [], {"y": 10.0})
    out = reassign([a, b], {"x": 600.0, "y": 900.0})
    assert out.moves == ()
    assert out.late[0].job == "x"


def test_room_keeps_every_job_on_the_recipient_on_time() -> None:
    """R runs a (deadline 300) then b (deadline 1000): 2 tasks of a end at 200. Tasks of a
    added there push b too: b ends at 200 + 3·100 = 500 with 500 s of slack, a has
    100 s, so one more task of a fits; tasks of b fit while b ends by 1000: 5."""
    r = Queue(
        "R",
        0.0,
        3600.0,
        [(0, "a"), (1, "a"), (2, "b"), (3, "b"), (4, "b")],
        {"a": 100.0, "b": 100.0},
    )
    deadlines = {"a": 300.0, "b": 1000.0}
    assert finish_times(r, deadlines) == {"a": 200.0, "b": 500.0}
    assert room(r, "a", 100.0, deadlines) == 1
    assert room(r, "b", 100.0, deadlines) == 5


@st.composite
def queues(draw: st.DrawFn) -> tuple[list[Queue], dict[str, float]]:
    deadlines = {j: float(draw(st.integers(100, 3000))) for j in JOBS}
    n = draw(st.integers(1, 5))
    out, next_id = [], 0
    for i in range(n):
        times = {
            j: float(draw(st.integers(20, 400)))
            for j in JOBS
            if draw(st.integers(0, 4)) > 0  # some machines cannot run some jobs
        }
        if not times:
            times = {"a": 100.0}
        k = draw(st.integers(0, 12))
        tasks = []
        for _ in range(k):
            tasks.append((next_id, draw(st.sampled_from(sorted(times)))))
            next_id += 1
        busy = float(draw(st.integers(0, 300)))
        paid = busy + float(draw(st.integers(0, 4000)))
        out.append(Queue(f"m{i}", busy, paid, tasks, times))
    return out, deadlines


def _late(q: Queue, deadlines: dict[str, float]) -> bool:
    return any(t > deadlines[j] + 1e-9 for j, t in finish_times(q, deadlines).items())


@settings(max_examples=300, deadline=None)
@given(case=queues())
def test_moves_go_from_violators_to_recipients_with_room_and_create_no_violation(
    case: tuple[list[Queue], dict[str, float]],
) -> None:
    qs, deadlines = case
    before = {q.machine: q for q in qs}
    violating = {m for m, q in before.items() if _late(q, deadlines)}
    out = reassign(qs, deadlines)
    event(f"moves: {min(len(out.moves), 2)}, late after: {bool(out.late)}")
    after = {m: list(q.tasks) for m, q in before.items()}
    received: Counter[str] = Counter()
    for move in out.moves:
        assert move.source in violating
        assert move.target not in violating
        moved = [t for t in after[move.source] if t[0] in move.tasks]
        assert len(moved) == len(move.tasks), "moved a task the source does not queue"
        assert all(before[move.target].task_s.get(j) is not None for _, j in moved)
        after[move.source] = [t for t in after[move.source] if t[0] not in move.tasks]
        after[move.target] += moved
        received[move.target] += 1
    assert max(received.values(), default=0) <= 1, "a recipient received twice"
    # Nothing lost or duplicated.
    assert sorted(t for ts in after.values() for t in ts) == sorted(t for q in qs for t in q.tasks)
    for m, q in before.items():
        moved_q = Queue(m, q.busy_until, q.paid_until, after[m], q.task_s)
        if m not in violating:
            assert not _late(moved_q, deadlines), f"{m} made late"
            if received[m]:
                end = q.busy_until + sum(q.task_s[j] for _, j in after[m])
                assert end <= q.paid_until + 1e-9, f"{m} pushed past its paid time"
        else:
            # A violator's jobs end no later than before.
            old = finish_times(q, deadlines)
            for job, t in finish_times(moved_q, deadlines).items():
                assert t <= old[job] + 1e-9
    # Reported lateness is what the queues after the moves show.
    late_jobs = {
        j
        for m, q in before.items()
        for j, t in finish_times(
            Queue(m, q.busy_until, q.paid_until, after[m], q.task_s), deadlines
        ).items()
        if t > deadlines[j] + 1e-9
    }
    assert {x.job for x in out.late} == late_jobs

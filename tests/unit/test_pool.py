"""A deadline pool: jobs added to a live deadline-mode run (``JobAdded``), and a run kept
open (``DeadlineSettings.keep_open``) until it is shut down."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from autoscaler.config.bag import expand_bag
from autoscaler.config.schema import Emulator as EmulatorModel
from autoscaler.config.schema import RunConfig
from autoscaler.core.errors import AutoscalerError
from autoscaler.core.journal import (
    JOURNAL_DB,
    JsonlJournal,
    Record,
    SqliteJournal,
    decode,
    encode,
    replay,
)
from autoscaler.core.model import (
    Action,
    Cancel,
    Event,
    JobAdded,
    JobSpec,
    JobWithdrawn,
    Launch,
    Release,
    Shutdown,
    Stop,
    TaskSpec,
    TaskState,
)
from autoscaler.core.state import RunState, StateError
from autoscaler.core.step import assignments
from autoscaler.deadline.deadline_controller import DeadlineController, DeadlineSettings
from autoscaler.providers.base import Capabilities
from autoscaler.run.assemble import added_job, new_state
from autoscaler.run.emulator import Emulator
from autoscaler.run.rundir import RunFiles, rebuild_state
from tests.conftest import make_config
from tests.unit.test_deadline_control import HOURLY, _types, _World, finish_and_late

APP = {"m": 60.0, "l": 30.0, "x": 15.0}
FIRST = JobSpec("a", 0, 40, 0.0, 1200.0, None, APP)

Steps = list[tuple[float, list[Event], list[Action]]]


def _state(*jobs: JobSpec, budget: float | None = None) -> RunState:
    n = sum(j.count for j in jobs)
    return RunState.new(_types(), HOURLY, budget, n, list(range(n)), jobs=jobs)


def _added(state: RunState, name: str, count: int, at: float, window: float) -> JobAdded:
    spec = JobSpec(name, 0, count, 0.0, at + window, None, APP)
    return added_job(spec, state.n_tasks, at, seed=7)


# --- the event, and the state it grows ------------------------------------------------------


def test_job_added_survives_both_journals_whole(tmp_path: Path) -> None:
    """The nested job, its mapping of task times, the order and its tasks' categories
    come back as they were; a record from before categories reads as none."""
    job = JobSpec("b", 40, 3, 600.0, 2100.0, 5.0, {"m": 60.0, "x": 15.0})
    event = JobAdded(job, (41, 40, 42), (1, -1, 0))
    assert decode("event", "JobAdded", encode(event)) == event
    for journal in (SqliteJournal(tmp_path / "j.sqlite"), JsonlJournal(tmp_path / "j.jsonl")):
        journal.step(600.0, [event], [])
        (record,) = list(journal.records())
        journal.close()
        assert record.item == event
        assert isinstance(record.item, JobAdded)
        assert isinstance(record.item.job, JobSpec)
    old = json.loads(encode(event))
    del old["categories"]
    assert decode("event", "JobAdded", json.dumps(old)) == JobAdded(job, (41, 40, 42))


def test_a_job_added_grows_the_bag_in_its_order_and_has_arrived() -> None:
    state = _state(FIRST)
    event = _added(state, "b", 5, 100.0, 900.0)
    assert event.job.first == 40
    assert event.job.at == 100.0
    assert sorted(event.order) == list(range(40, 45))
    state.apply(100.0, event)
    assert state.n_tasks == 45
    assert len(state.tasks.task_state) == len(state.tasks.attempts) == 45
    assert state.tasks.task_state[40:] == [TaskState.PENDING] * 5
    assert list(state.tasks.pending)[-5:] == list(event.order)
    assert "b" in state.work.arrived
    assert state.work.job_of(44).name == "b"
    assert not state.finished


def test_the_same_seed_and_name_give_the_same_order() -> None:
    """A replay or a resumed driver that makes the event again makes the same one."""
    state = _state(FIRST)
    assert _added(state, "b", 30, 5.0, 900.0) == _added(state, "b", 30, 5.0, 900.0)
    assert _added(state, "b", 30, 5.0, 900.0).order != tuple(range(40, 70))


def test_a_job_added_with_the_wrong_numbers_or_name_is_refused() -> None:
    state = _state(FIRST)
    with pytest.raises(StateError):
        state.apply(1.0, JobAdded(JobSpec("b", 41, 2, 1.0, 900.0), (41, 42)))
    with pytest.raises(StateError):
        state.apply(1.0, JobAdded(JobSpec("b", 40, 2, 1.0, 900.0), (40, 40)))
    with pytest.raises(StateError):
        state.apply(1.0, JobAdded(JobSpec("a", 40, 2, 1.0, 900.0), (40, 41)))
    assert state.n_tasks == 40


def test_the_run_budget_stays_the_jobs_sum_while_every_job_has_one() -> None:
    state = _state(JobSpec("a", 0, 4, 0.0, 900.0, 10.0, APP), budget=10.0)
    state.apply(1.0, JobAdded(JobSpec("b", 4, 2, 1.0, 900.0, 2.5, APP), (4, 5)))
    assert state.money.budget == pytest.approx(12.5)
    state.apply(2.0, JobAdded(JobSpec("c", 6, 2, 2.0, 900.0, None, APP), (6, 7)))
    assert state.money.budget is None


# --- the controller: a pool in virtual time --------------------------------------------------


def _pool(
    first: JobSpec,
    later: list[tuple[float, int, float]],
    shutdown_at: float,
    withdraw: tuple[tuple[float, str], ...] = (),
) -> tuple[RunState, Steps, list[JobAdded]]:
    """A keep-open pool with ``first`` from the start, jobs (time, tasks, window) added
    as it runs, jobs withdrawn (time, name), shut down at ``shutdown_at``."""
    state = _state(first)
    caps = Capabilities(
        billing=HOURLY,
        max_counts={t.name: t.max_count for t in _types()},
        boot_estimate_s={t.name: t.boot_s for t in _types()},
    )
    holder: list[Emulator] = []
    truth = {f"j{i}": APP for i in range(len(later))} | {first.name: dict(first.task_s)}
    world = _World(
        caps,
        EmulatorModel(),
        state.n_tasks,
        clock=lambda: holder[0].now,
        state=state,
        truth=truth,
        noise=0.1,
        seed=2,
    )
    steps: Steps = []

    def hook(now: float, events: list[Event], acts: list[Action], _: RunState) -> None:
        steps.append((now, list(events), list(acts)))

    em = Emulator(
        DeadlineController(DeadlineSettings(keep_open=True)), state, world, 60.0, on_step=hook
    )
    holder.append(em)
    added = []
    n = state.n_tasks
    for i, (at, count, window) in enumerate(later):
        event = added_job(JobSpec(f"j{i}", 0, count, 0.0, at + window, None, APP), n, at, 7)
        n += count
        added.append(event)
        em.tell(at, event)
    for at, name in withdraw:
        em.tell(at, JobWithdrawn(name, "cancelled by the user"))
    em.tell(shutdown_at, Shutdown("the service stops"))
    return em.run(), steps, added


def test_a_job_added_to_a_live_pool_fills_the_running_machines_first_and_is_on_time() -> None:
    state, steps, (added,) = _pool(FIRST, [(630.0, 30, 1500.0)], shutdown_at=8000.0)
    job = added.job
    at_add = next(i for i, (_, events, _) in enumerate(steps) if added in events)
    alive_then = {
        m.id
        for m in state.fleet.machines.values()
        if m.launched_at < 630.0 and (m.ended_at is None or m.ended_at > 630.0)
    }
    assert alive_then
    # Algorithm 1: the running machines have paid time left; the new job goes there.
    _, _, acts = steps[at_add]
    assigned = [(t, mid) for t, mid in assignments(acts) if job.owns(t)]
    assert assigned
    assert {mid for _, mid in assigned} <= alive_then
    assert not any(isinstance(a, Launch) for a in acts)
    # Both jobs on time, every task done exactly once.
    _, late = finish_and_late(state)
    assert late == {}
    done = sorted(seg.task for seg in state.tasks.segments if seg.outcome == "done")
    assert done == list(range(state.n_tasks)) == list(range(70))


def test_a_pool_stays_open_when_its_work_is_done_and_ends_on_shutdown() -> None:
    state, steps, _ = _pool(FIRST, [(630.0, 30, 1500.0)], shutdown_at=8000.0)
    finished_at = max(seg.end for seg in state.tasks.segments)
    stops = [(now, a) for now, _, acts in steps for a in acts if isinstance(a, Stop)]
    assert [(now, a.reason) for now, a in stops] == [(8000.0, "the service stops")]
    # Idle machines went at the end of their paid unit, not when the work ran out.
    releases = [
        (now, a) for now, _, acts in steps for a in acts if isinstance(a, Release) and now < 8000
    ]
    assert releases
    for now, a in releases:
        m = state.fleet.machines[a.machine]
        assert now > finished_at
        assert m.paid_until - now <= HOURLY.boundary_margin_s() + 1e-6
    assert state.over
    assert not state.fleet.any_alive()


def test_a_job_added_after_the_machines_went_buys_new_ones() -> None:
    state, steps, (added,) = _pool(FIRST, [(5030.0, 20, 1200.0)], shutdown_at=9000.0)
    first_gone = max(
        m.ended_at or 0.0 for m in state.fleet.machines.values() if m.launched_at < 5000
    )
    assert first_gone < 5000.0
    launched = [
        a
        for now, _, acts in steps
        for a in acts
        if isinstance(a, Launch)
        and now == 5030.0
        and any(added.job.owns(t) for q in a.queues for t in q)
    ]
    assert launched
    _, late = finish_and_late(state)
    assert late == {}
    assert state.tasks.done == state.n_tasks == 60


def test_a_pool_replays_from_its_first_jobs_and_its_journal() -> None:
    """The journal is the truth: the state of the config's jobs, replayed, grows the added
    jobs and ends where the live run did."""
    live, steps, _ = _pool(FIRST, [(300.0, 20, 1500.0), (900.0, 25, 1800.0)], shutdown_at=7000.0)
    records, seq = [], 0
    for now, events, acts in steps:
        for item in [*events, *acts]:
            kind = "event" if any(item is e for e in events) else "action"
            records.append(Record(seq, now, kind, item))
            seq += 1
    fresh = _state(FIRST)
    replay(fresh, records)
    assert fresh.n_tasks == live.n_tasks == 85
    assert fresh.work.jobs == live.work.jobs
    assert fresh.tasks.task_state == live.tasks.task_state
    assert fresh.money.committed == pytest.approx(live.money.committed)
    assert fresh.tasks.segments == live.tasks.segments
    assert fresh.work.forecasts == live.work.forecasts
    assert fresh.over


def _replayed(steps: Steps, first: JobSpec) -> RunState:
    records, seq = [], 0
    for now, events, acts in steps:
        for item in [*events, *acts]:
            kind = "event" if any(item is e for e in events) else "action"
            records.append(Record(seq, now, kind, item))
            seq += 1
    fresh = _state(first)
    replay(fresh, records)
    return fresh


# --- a job withdrawn from the pool (a user's cancel) ------------------------------------------


def test_job_withdrawn_survives_both_journals(tmp_path: Path) -> None:
    event = JobWithdrawn("a", "cancelled by the user")
    assert decode("event", "JobWithdrawn", encode(event)) == event
    for journal in (SqliteJournal(tmp_path / "j.sqlite"), JsonlJournal(tmp_path / "j.jsonl")):
        journal.step(400.0, [event], [])
        (record,) = list(journal.records())
        journal.close()
        assert record.item == event


def test_a_withdrawn_jobs_tasks_stop_and_the_other_job_keeps_its_deadline() -> None:
    """Job ``a`` is withdrawn at 400 s while ``j0`` (added at 300 s) shares its machines:
    none of a's tasks runs after 400 s, each of its runs then is cancelled on its agent,
    j0 finishes every task by its deadline, and the journal replays to the same state."""
    withdraw_at = 400.0
    live, steps, (added,) = _pool(
        FIRST, [(300.0, 30, 1500.0)], shutdown_at=8000.0, withdraw=((withdraw_at, "a"),)
    )
    a_tasks = range(FIRST.first, FIRST.first + FIRST.count)
    # Nothing of a starts after the withdrawal; what ran then was cut off there.
    for seg in live.tasks.segments:
        if seg.task in a_tasks and seg.end > withdraw_at:
            raise AssertionError(f"a's task {seg.task} ran after its withdrawal: {seg}")
    cut = [seg for seg in live.tasks.segments if seg.task in a_tasks and seg.outcome == "cancelled"]
    assert cut
    assert all(seg.end == withdraw_at for seg in cut)
    # Each run of a at the withdrawal got a Cancel for its agent.
    at_withdraw = next(
        acts for now, events, acts in steps if any(isinstance(e, JobWithdrawn) for e in events)
    )
    cancels = {(a.task, a.machine) for a in at_withdraw if isinstance(a, Cancel)}
    assert {(seg.task, seg.machine) for seg in cut} <= cancels
    states = [live.tasks.task_state[t] for t in a_tasks]
    assert TaskState.CANCELLED in states
    assert set(states) <= {TaskState.DONE, TaskState.CANCELLED}
    assert live.tasks.cancelled == states.count(TaskState.CANCELLED)
    assert live.work.withdrawn == {"a": withdraw_at}
    # The other job: every task done once, all by its deadline.
    job = added.job
    done = sorted(
        seg.task for seg in live.tasks.segments if seg.outcome == "done" and job.owns(seg.task)
    )
    assert done == list(range(job.first, job.first + job.count))
    finish, late = finish_and_late(live)
    assert late.get(job.name, 0) == 0
    assert finish[job.name] <= job.deadline
    assert live.finished
    # The journal is the truth.
    fresh = _replayed(steps, FIRST)
    assert fresh.tasks.task_state == live.tasks.task_state
    assert fresh.tasks.segments == live.tasks.segments
    assert fresh.work.withdrawn == live.work.withdrawn
    assert fresh.tasks.cancelled == live.tasks.cancelled
    assert fresh.money.committed == pytest.approx(live.money.committed)
    assert fresh.work.forecasts == live.work.forecasts


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    at=st.sampled_from([300.5, 360.0, 630.0, 900.0, 2000.0, 5000.0]),
    name=st.sampled_from(["a", "j0"]),
)
def test_whenever_a_job_is_withdrawn_its_tasks_stop_and_the_journal_replays(
    at: float, name: str
) -> None:
    """Either job, withdrawn at any time: none of its tasks runs after, every task of the
    other is done by its deadline, and the journal replays to the live state."""
    live, steps, (added,) = _pool(
        FIRST, [(300.0, 30, 1500.0)], shutdown_at=8000.0, withdraw=((at, name),)
    )
    job = FIRST if name == "a" else added.job
    assert not [seg for seg in live.tasks.segments if job.owns(seg.task) and seg.end > at]
    other = added.job if name == "a" else FIRST
    others = [live.tasks.task_state[t] for t in range(other.first, other.first + other.count)]
    assert set(others) == {TaskState.DONE}
    _, late = finish_and_late(live)
    assert late.get(other.name, 0) == 0
    fresh = _replayed(steps, FIRST)
    assert fresh.tasks.task_state == live.tasks.task_state
    assert fresh.tasks.segments == live.tasks.segments
    assert fresh.tasks.cancelled == live.tasks.cancelled
    assert fresh.money.committed == pytest.approx(live.money.committed)


def test_withdrawing_a_job_again_or_after_it_ended_changes_nothing() -> None:
    state = _state(FIRST)
    state.apply(10.0, JobWithdrawn("a", "cancelled"))
    assert state.tasks.cancelled == FIRST.count
    assert not state.tasks.pending
    assert state.finished
    state.apply(20.0, JobWithdrawn("a", "cancelled again"))
    assert state.tasks.cancelled == FIRST.count
    assert state.work.withdrawn == {"a": 10.0}
    with pytest.raises(StateError):
        state.apply(30.0, JobWithdrawn("nobody", "cancelled"))


# --- the run directory: the tasks file and the journal after a kill ------------------------


def _pool_config() -> RunConfig:
    return make_config(
        bag=None,
        constraint=None,
        jobs=[
            {
                "name": "a",
                "bag": {"synthetic": 4},
                "constraint": {"deadline_s": 1200},
                "task_s": {"slow": 60, "fast": 20},
            }
        ],
        deadline={"keep_open": True},
    )


def test_a_resumed_pool_knows_its_added_tasks_once_and_drops_those_never_journaled(
    tmp_path: Path,
) -> None:
    cfg = _pool_config()
    run_dir = tmp_path / "run"
    files = RunFiles.create(cfg, expand_bag(cfg), run_dir, "pool-1", seed=3)
    journal = SqliteJournal(run_dir / JOURNAL_DB)
    journal.set_meta(**files.journal_meta())
    live = new_state(cfg, len(files.tasks), files.seed)
    spec = JobSpec("b", 0, 3, 0.0, 900.0, None, {"fast": 20.0})
    event = added_job(spec, live.n_tasks, 50.0, files.seed)
    files.add_tasks("b", [TaskSpec(4 + i, f"echo {i}", {}, 30.0) for i in range(3)])
    live.apply(50.0, event)
    journal.step(50.0, [event], [])
    # Killed after writing a job's tasks, before journaling it: the journal never took it.
    files.add_tasks("c", [TaskSpec(7, "echo lost", {})])
    journal.close()

    again = RunFiles.open(run_dir)
    assert again.config_tasks == 4
    assert len(again.tasks) == 8
    journal = SqliteJournal(run_dir / JOURNAL_DB)
    try:
        rebuilt = rebuild_state(again, journal)
    finally:
        journal.close()
    assert rebuilt.n_tasks == live.n_tasks == 7
    assert rebuilt.work.jobs == live.work.jobs
    assert list(rebuilt.tasks.pending) == list(live.tasks.pending)
    assert rebuilt.tasks.task_state == live.tasks.task_state
    assert len(again.tasks) == 8  # reading changes nothing
    again.keep_tasks(rebuilt.n_tasks)  # the resuming daemon's part
    assert [t.id for t in again.tasks] == list(range(7))
    final = RunFiles.open(run_dir)
    assert [(t.id, t.command, t.timeout_s) for t in final.tasks[4:]] == [
        (4, "echo 0", 30.0),
        (5, "echo 1", 30.0),
        (6, "echo 2", 30.0),
    ]
    assert final.config_tasks == 4


def test_added_tasks_must_follow_on_from_the_last(tmp_path: Path) -> None:
    cfg = _pool_config()
    files = RunFiles.create(cfg, expand_bag(cfg), tmp_path / "run", "pool-2", seed=3)
    with pytest.raises(AutoscalerError):
        files.add_tasks("b", [TaskSpec(5, "echo", {})])
    assert len(files.tasks) == 4


def test_a_resumed_run_of_jobs_keeps_each_bag_s_timeout(tmp_path: Path) -> None:
    """A run of ``jobs:`` has no run-wide bag to fall back on: each task carries its own
    bag's ``timeout_s``. The tasks file kept it only for added jobs, so a resumed run
    of jobs (and every service pool) ran its config's tasks with no timeout."""
    cfg = make_config(
        bag=None,
        constraint=None,
        jobs=[
            {
                "name": "a",
                "bag": {"command": "sleep {i}", "sweep": {"i": [1, 2]}, "timeout_s": 7},
                "constraint": {"deadline_s": 1200},
                "task_s": {"slow": 60, "fast": 20},
            }
        ],
    )
    tasks = expand_bag(cfg)
    assert [t.timeout_s for t in tasks] == [7.0, 7.0]
    files = RunFiles.create(cfg, tasks, tmp_path / "run", "jobs-1", seed=3)
    journal = SqliteJournal(tmp_path / "run" / JOURNAL_DB)
    journal.set_meta(**files.journal_meta())
    journal.close()
    assert RunFiles.open(tmp_path / "run").tasks == tasks

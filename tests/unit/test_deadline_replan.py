"""Re-planning when a declared time proves wrong (issue 38, ``deadline.replan``): the
trigger as a pure function of the state and the notes said, and the controller's step
as state and events in, decisions out (a state rebuilt from a run's records, stepped
again with and without re-planning)."""

from __future__ import annotations

from collections.abc import Sequence

from autoscaler.core.billing import BillingModel
from autoscaler.core.model import (
    Action,
    Cancel,
    Event,
    JobArrived,
    JobSpec,
    Launch,
    Learned,
    Move,
    Tick,
    TypeSpec,
)
from autoscaler.core.state import RunState
from autoscaler.deadline.deadline_controller import DeadlineController, DeadlineSettings
from autoscaler.deadline.replan import proven_wrong
from tests.unit.test_deadline_control import HOURLY, _jobs, _types, finish_and_late, run

TIMES = {"m": 60.0, "l": 30.0}
Steps = list[tuple[float, list[Event], list[Action], float]]


def _state(jobs: Sequence[JobSpec]) -> RunState:
    types = [TypeSpec("m", 0.1, 5, 60.0), TypeSpec("l", 0.2, 5, 60.0)]
    n = sum(j.count for j in jobs)
    return RunState.new(types, BillingModel("fixed", 3600.0), None, n, list(range(n)), jobs=jobs)


def _note(job: str, tname: str = "m", learned_s: float = 80.0) -> Learned:
    return Learned(job, tname, 60.0, learned_s, 6, f"job {job!r} on {tname}: {learned_s:g} s")


def _ab_state() -> RunState:
    a1 = JobSpec("a1", 0, 10, 0.0, 900.0, None, TIMES, app="A")
    a2 = JobSpec("a2", 10, 10, 0.0, 900.0, None, TIMES, app="A")
    a3 = JobSpec("a3", 20, 10, 600.0, 1500.0, None, TIMES, app="A")
    b1 = JobSpec("b1", 30, 10, 0.0, 900.0, None, TIMES, app="B")
    state = _state([a1, a2, a3, b1])
    for name in ("a1", "a2", "b1"):
        state.apply(0.0, JobArrived(name))
    return state


def test_a_type_proved_wrong_plans_its_application_again() -> None:
    """The first note of an application on a type re-plans the application's arrived
    jobs (they blend each other's runs), not another application's nor a job still to
    arrive."""
    state = _ab_state()
    assert proven_wrong(state.work, [_note("a1")]) == {"a1", "a2"}
    assert proven_wrong(state.work, [_note("b1")]) == {"b1"}
    assert proven_wrong(state.work, []) == set()


def test_a_type_faster_than_declared_does_not_plan_again() -> None:
    """A declared time that proves pessimistic leaves the plan in force in time: no
    check before the tick."""
    state = _ab_state()
    assert proven_wrong(state.work, [_note("a1", learned_s=40.0)]) == set()
    assert proven_wrong(state.work, [_note("a1", learned_s=40.0), _note("b1")]) == {"b1"}


def test_a_type_already_learned_does_not_plan_again() -> None:
    """Once an application learned a type, its other jobs were planned on the learned
    time: their own notes on that type re-plan nothing; a note on another type does."""
    state = _ab_state()
    state.apply(10.0, _note("a1"))
    assert proven_wrong(state.work, [_note("a2")]) == set()
    assert proven_wrong(state.work, [_note("a2", "l")]) == {"a1", "a2"}
    assert proven_wrong(state.work, [_note("a2"), _note("b1")]) == {"b1"}


def _replayed(jobs: Sequence[JobSpec], steps: Steps, upto: int) -> RunState:
    """A state fed the records of ``steps[:upto]``."""
    n = sum(j.count for j in jobs)
    state = RunState.new(_types(), HOURLY, None, n, list(range(n)), jobs=jobs)
    for now, events, acts, _ in steps[:upto]:
        for e in events:
            state.apply(now, e)
        for a in acts:
            state.apply(now, a)
    return state


def _slow_run() -> tuple[list[JobSpec], RunState, Steps]:
    jobs = _jobs([(0.0, 80, 1500.0), (900.0, 80, 1500.0)])
    truth = {j.name: {**j.task_s, "m": 1.5 * j.task_s["m"]} for j in jobs}
    state, steps = run(jobs, truth=truth, noise=0.1)
    return jobs, state, steps


def test_the_step_that_learns_a_wrong_time_moves_what_it_makes_late() -> None:
    """In a run where type m takes 1.5 × what the jobs declare, the step that first says
    a job's time on m (a step between ticks) moves the queued tasks the learned time
    makes late onto machines with room, in that step, and buys nothing (purchases wait
    for the tick and its runs); the same state stepped with re-planning off only says
    it. Every deadline is met."""
    jobs, state, steps = _slow_run()
    assert not finish_and_late(state)[1]
    first = next(
        i for i, (_, _, acts, _) in enumerate(steps) if any(isinstance(a, Learned) for a in acts)
    )
    now, events, _, _ = steps[first]
    assert not any(isinstance(e, Tick) for e in events)
    decided = DeadlineController().step(_replayed(jobs, steps, first), events, now)
    assert any(isinstance(a, Learned) for a in decided)
    assert any(isinstance(a, Move) for a in decided), "nothing late was moved"
    assert not any(isinstance(a, (Launch, Cancel)) for a in decided)
    kept = DeadlineController(DeadlineSettings(replan=False)).step(
        _replayed(jobs, steps, first), events, now
    )
    assert any(isinstance(a, Learned) for a in kept)
    assert not any(isinstance(a, (Move, Launch, Cancel)) for a in kept)

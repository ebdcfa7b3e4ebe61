"""The run's state as ledgers: each record type has one handler, no state class holds
more than about 20 fields or extends another, and a runtime is recorded once, in the
observations ledger, whose views all show it."""

from __future__ import annotations

import dataclasses

import pytest

from autoscaler.core.billing import BillingModel
from autoscaler.core.capacity import Capacity
from autoscaler.core.decisions import Decisions
from autoscaler.core.job_ledger import Jobs
from autoscaler.core.machine_ledger import Fleet
from autoscaler.core.model import (
    ACTION_TYPES,
    EVENT_TYPES,
    Assign,
    JobSpec,
    Launch,
    MachineLaunched,
    MachineReady,
    TaskDone,
    TaskFailed,
    TypeSpec,
)
from autoscaler.core.money_ledger import Money
from autoscaler.core.observations import Observations
from autoscaler.core.state import FOLD, RunState, StateError
from autoscaler.core.task_ledger import Tasks

LEDGERS = (Fleet, Tasks, Money, Capacity, Jobs, Observations, Decisions)


def test_every_event_and_action_has_one_handler_and_nothing_else_does() -> None:
    assert set(FOLD) == set(EVENT_TYPES) | set(ACTION_TYPES)


def test_a_record_of_no_known_type_is_refused() -> None:
    state = RunState.new([TypeSpec("a", 1.0, 1, 60.0)], BillingModel("fixed", 3600.0), None, 1, [0])
    with pytest.raises(StateError, match="neither an event nor an action"):
        state.apply(0.0, "launch")  # type: ignore[arg-type]


@pytest.mark.parametrize("cls", [RunState, *LEDGERS], ids=lambda c: c.__name__)
def test_a_state_class_is_small_and_extends_no_other(cls: type) -> None:
    assert len(dataclasses.fields(cls)) <= 20
    assert cls.__bases__ == (object,)


def test_the_state_is_made_of_the_ledgers() -> None:
    kinds = {f.type for f in dataclasses.fields(RunState)}
    assert {c.__name__ for c in LEDGERS} <= kinds


def _run_one(jobs: bool, categories: bool, paired: int) -> RunState:
    """Two tasks on one machine of type a; task 0 done after 50 s, task 1 failed after 20 s."""
    state = RunState.new(
        [TypeSpec("a", 1.0, 2, 60.0, slots=2), TypeSpec("b", 1.0, 1, 60.0)],
        BillingModel("fixed", 3600.0),
        None,
        2,
        [0, 1],
        max_retries=0,
        paired=paired,
        jobs=[JobSpec("j", 0, 2, 0.0, 1000.0)] if jobs else (),
        categories=[7, 8] if categories else (),
    )
    for t, item in [
        (0.0, Launch("a", 1, "L0")),
        (0.0, MachineLaunched("m0", "a", "L0")),
        (10.0, MachineReady("m0")),
        (10.0, Assign(0, "m0")),
        (10.0, Assign(1, "m0")),
        (30.0, TaskFailed(1, "m0", 20.0, "boom")),
        (60.0, TaskDone(0, "m0", 50.0)),
    ]:
        state.apply(t, item)
    return state


def test_a_runtime_is_recorded_once_and_every_view_shows_it() -> None:
    seen = _run_one(jobs=True, categories=True, paired=1).observed
    stats = seen.stats["a"]
    assert stats.done_times == [50.0]
    assert stats.censored_times == [20.0]  # the failure: the task needed longer
    assert seen.job_runs == {("j", "a"): [1.0, 50.0, 2500.0]}
    assert seen.machine_job_runs == {("m0", "j"): [1.0, 50.0, 2500.0]}
    assert seen.category_runs == {(7, "a"): [1.0, 50.0, 2500.0]}
    assert seen.paired == [0]
    assert seen.paired_runs == {0: {"a": 50.0}}


def test_views_a_run_does_not_have_stay_empty() -> None:
    seen = _run_one(jobs=False, categories=False, paired=0).observed
    assert seen.stats["a"].done_times == [50.0]
    assert not seen.job_runs
    assert not seen.machine_job_runs
    assert not seen.category_runs
    assert not seen.paired
    assert not seen.paired_runs
    assert seen.stats["b"].done == 0


def test_money_commits_a_launch_and_returns_what_a_failed_one_did_not_use() -> None:
    state = _run_one(jobs=False, categories=False, paired=0)
    assert state.money.committed == 1.0
    assert state.money.spend_log == [(0.0, 0.0), (0.0, 1.0)]
    assert state.fleet.pending_launches == {}
    assert state.tasks.done == state.tasks.failed == 1
    assert state.finished
    assert state.tasks_left == 0


def test_the_time_alive_per_pool_is_the_sum_over_its_alive_machines() -> None:
    """``Fleet.pool_alive_s`` (kept as each machine comes and goes, read at each reclaim
    and plan) against the sum over the alive machines, through launches in two zones at
    different times and machines that end."""
    billing = BillingModel("fixed", 3600.0, 60.0, 300.0)
    fleet = Fleet({"a": TypeSpec("a", 1.0, 10, 0.0), "b": TypeSpec("b", 1.0, 10, 0.0)}, billing)
    for i, (kind, zone, at) in enumerate(
        [("a", "z1", 0.0), ("a", "z2", 50.0), ("a", "z1", 120.0), ("b", "", 30.0)]
    ):
        fleet.launch(f"L{i}", kind, 1)
        fleet.launched(f"m{i}", kind, f"L{i}", at, zone)

    def direct(now: float) -> dict[tuple[str, str], float]:
        out: dict[tuple[str, str], float] = {}
        for m in fleet.alive.values():
            out[m.type.name, m.zone] = out.get((m.type.name, m.zone), 0.0) + now - m.launched_at
        return out

    assert fleet.pool_alive_s(200.0) == pytest.approx(direct(200.0))
    assert fleet.pool_alive_s(200.0)["a", "z1"] == pytest.approx(200.0 + 80.0)
    fleet.gone(fleet.machines["m0"], 300.0, "taken back")
    fleet.gone(fleet.machines["m3"], 300.0, "no work left")
    assert fleet.pool_alive_s(400.0) == pytest.approx(direct(400.0))
    assert set(fleet.pool_alive_s(400.0)) == {("a", "z1"), ("a", "z2")}

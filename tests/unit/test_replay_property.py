"""The state is a pure fold of the journal, on runs hypothesis makes up.

Random runs go through the real ``Controller`` and ``RunState``: launches that succeed
in part or fail (error, capacity, limit, throttled, with or without an end), machines
that boot or are lost, tasks that finish or fail (replicas included), budgets so small
that money runs out, a hold after sampling (`autoscaler plan`) and a budget set later,
signals, and a daemon restart in the middle (the state rebuilt from
the journal, the run continued from it). After every step the state replayed from a
real ``SqliteJournal`` must equal the live one, whole.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from autoscaler.budget.controller import Controller
from autoscaler.budget.settings import ControllerSettings
from autoscaler.core.billing import BillingModel
from autoscaler.core.journal import Journal, SqliteJournal, replay
from autoscaler.core.model import (
    BoundaryNear,
    BudgetSet,
    Event,
    LaunchFailed,
    MachineLaunched,
    MachineLost,
    MachineReady,
    MachineState,
    Shutdown,
    TaskDone,
    TaskFailed,
    TaskState,
    Tick,
    TypeSpec,
)
from autoscaler.core.state import RunState
from autoscaler.core.task_files import Stored

TYPES = [TypeSpec("a", 1.0, 3, 60.0), TypeSpec("b", 3.0, 2, 120.0, slots=2)]
BILLINGS = [BillingModel("fixed", 3600.0), BillingModel("per_second", 3600.0, 60.0, 600.0)]


def _launch_events(data: st.DataObject, state: RunState, now: float) -> list[Event]:
    """Each launch in flight: started (all or some), refused, or still under way."""
    events: list[Event] = []
    for token, (tname, count) in sorted(state.fleet.pending_launches.items()):
        started = data.draw(st.integers(0, count))
        refused = data.draw(st.integers(0, count - started))
        made = sum(1 for m in state.fleet.machines.values() if m.token == token)
        events += [
            MachineLaunched(f"{tname}-{token}-{made + i}", tname, token) for i in range(started)
        ]
        if refused:
            kind = data.draw(st.sampled_from(["error", "capacity", "limit", "throttled"]))
            until = None
            if kind != "error":
                until = data.draw(st.none() | st.sampled_from([now, now + 600, now + 4000]))
            events.append(LaunchFailed(token, tname, refused, f"refused: {kind}", kind, until))
    return events


def _machine_events(data: st.DataObject, state: RunState, now: float) -> list[Event]:
    """Machines boot, are lost, finish or fail their tasks, or reach their paid end."""
    events: list[Event] = []
    margin = state.billing.boundary_margin_s()
    for m in sorted(state.fleet.alive_machines(), key=lambda m: m.id):
        if m.state is MachineState.BOOTING and data.draw(st.integers(0, 3)) > 0:
            events.append(MachineReady(m.id))
        for tid, start in sorted(m.running.items()):
            outcome = data.draw(st.sampled_from(["runs", "done", "done", "failed"]))
            if outcome == "done":
                # A task with files names the attempt that stored its outputs.
                stored = data.draw(st.none() | st.just(Stored(f"{tid}.{m.id}-1", 2, 10)))
                events.append(TaskDone(tid, m.id, now - start, stored=stored))
            elif outcome == "failed":
                events.append(TaskFailed(tid, m.id, now - start, "exit 1"))
        # An agent runs ahead of what it reported: a queued task of its group ends, or
        # one taken back from it had ended there before it heard.
        for tid in sorted(m.queue)[:2] + sorted(m.taken)[:2]:
            if data.draw(st.integers(0, 5)) == 0:
                events.append(TaskDone(tid, m.id, 1.0, stored=Stored(f"{tid}.{m.id}-2", 1, 1)))
        if data.draw(st.integers(0, 40)) == 0:
            events.append(MachineLost(m.id, "gone"))
        if now >= m.paid_until - margin:
            events.append(BoundaryNear(m.id))
    if data.draw(st.booleans()):
        events.append(Tick())
    return data.draw(st.permutations(events))


def assert_indexes_kept(state: RunState) -> None:
    """The state's indexes are what a scan of its machines finds: ``queued`` the alive
    machines with a queue, ``launch_index`` the order machines were launched in."""
    want = {m.id for m in state.fleet.alive_machines() if m.queue}
    assert set(state.fleet.queued) == want
    assert list(state.fleet.launch_index) == list(state.fleet.machines)
    assert sorted(state.fleet.launch_index.values()) == list(range(len(state.fleet.machines)))


def assert_every_task_somewhere(state: RunState) -> None:
    """No task lost: each is ended, in the bag, or held by a machine or a launch."""
    held = set(state.tasks.pending)
    for m in state.fleet.alive_machines():
        held.update(m.queue, m.running)
    for queues in state.work.launch_queues.values():
        held.update(t for q in queues for t in q)
    for tid, st_ in enumerate(state.tasks.task_state):
        if st_ in (TaskState.PENDING, TaskState.RUNNING):
            assert tid in held, f"task {tid} ({st_.value}) is nowhere"


@settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(data=st.data())
def test_the_state_replayed_from_the_journal_is_the_live_state_after_every_step(
    data: st.DataObject,
) -> None:
    n_tasks = data.draw(st.integers(1, 12), label="tasks")
    order = data.draw(st.permutations(range(n_tasks)), label="order")
    billing = data.draw(st.sampled_from(BILLINGS), label="billing")
    policy: Literal["bats", "round_robin"] = data.draw(
        st.sampled_from(["bats", "bats", "bats", "round_robin"]), label="policy"
    )
    budget = None  # as runs.new_state: round robin is oblivious of cost; bats needs a budget
    if policy == "bats":
        budget = data.draw(st.sampled_from([1.0, 2.5, 4.0, 9.0, 30.0, 80.0]), label="budget")
    sample = data.draw(st.integers(1, 3), label="sample target")
    retries = data.draw(st.integers(0, 2), label="retries")
    steps = data.draw(st.integers(1, 60), label="steps")
    resume_at = data.draw(st.none() | st.integers(0, steps - 1), label="resume at")
    signal_at = data.draw(st.integers(1, 4 * steps), label="signal at")  # mostly never
    hold = policy == "bats" and data.draw(st.booleans(), label="hold after sampling")
    budget_at = data.draw(st.integers(1, steps), label="budget set at") if hold else -1

    def fresh() -> RunState:
        return RunState.new(TYPES, billing, budget, n_tasks, order, retries, sample)

    group_s = data.draw(st.sampled_from([0.0, 600.0, 5000.0]), label="group horizon")
    controller = Controller(
        ControllerSettings(policy=policy, hold_after_sampling=hold, group_s=group_s)
    )
    journal: Journal = SqliteJournal(Path(":memory:"))
    live, replayed = fresh(), fresh()
    seen = 0
    now = 0.0
    for step in range(steps):
        if step == resume_at:  # a restart: nothing survives but the journal
            live = fresh()
            replay(live, journal.records())
        events = [] if step == 0 else _launch_events(data, live, now)
        events += [] if step == 0 else _machine_events(data, live, now)
        if step == signal_at:
            events.append(Shutdown("interrupted by SIGTERM"))
        if 0 <= budget_at <= step and live.money.awaiting_budget:
            more = data.draw(st.sampled_from([0.0, 1.0, 5.0, 50.0]), label="budget over committed")
            events.append(BudgetSet(live.money.committed + more, "test"))
            controller = Controller(ControllerSettings(policy=policy, group_s=group_s))
            budget_at = -1
        actions = controller.step(live, events, now)
        journal.step(now, events, actions)
        new = [r for r in journal.records() if r.seq > seen]
        replay(replayed, new)
        seen += len(new)
        assert replayed == live
        assert_indexes_kept(live)
        assert_indexes_kept(replayed)
        assert_every_task_somewhere(live)
        assert all(
            live.tasks.task_state[t] is TaskState.DONE for t in live.tasks.stored
        )  # outputs kept
        if live.money.budget is not None:
            assert live.money.committed <= live.money.budget + 1e-9
        if live.over:
            if not live.money.awaiting_budget or budget_at < 0:
                break
            budget_at = min(budget_at, step + 1)  # nothing runs: the budget comes now
        now += data.draw(st.sampled_from([1.0, 60.0, 300.0, 900.0, 1750.0]), label="dt")
    kinds = {type(r.item).__name__ for r in journal.records()}
    for name in (
        "AssignGroup",
        "Move",
        "Replicate",
        "Cancel",
        "Defer",
        "Mark",
        "Extend",
        "LaunchFailed",
        "TaskFailed",
        "Hold",
        "BudgetSet",
    ):
        event(f"{name} {'seen' if name in kinds else 'not seen'}")
    planned = any(c.predicted_makespan_s is not None for _, c in live.decisions.configurations)
    event(f"planned: {planned}")
    stop = live.money.stop_reason or "bag finished" if live.money.stopped else "running"
    event(f"stop: {stop[:24]}")
    from_scratch = fresh()
    replay(from_scratch, journal.records())
    assert from_scratch == live
    journal.close()

"""The state's own rules: moving queued tasks between machines, and equality by value."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from autoscaler.core.billing import BillingModel
from autoscaler.core.journal import SqliteJournal, replay
from autoscaler.core.model import (
    Action,
    Assign,
    Event,
    Launch,
    MachineLaunched,
    MachineLost,
    MachineReady,
    Move,
    Release,
    TaskDone,
    TaskState,
    TypeSpec,
)
from autoscaler.core.state import RunState, StateError


def _fresh() -> RunState:
    return RunState.new(
        [TypeSpec("a", 1.0, 4, 60.0)], BillingModel("fixed", 3600.0), None, 4, [0, 1, 2, 3]
    )


def _three_machines() -> list[tuple[float, Event | Action]]:
    """Machines m0 and m1 ready, m2 booting; m0 runs task 0 with tasks 1 and 2 queued."""
    return [
        (0.0, Launch("a", 3, "L0")),
        *((0.0, MachineLaunched(f"m{i}", "a", "L0")) for i in range(3)),
        (60.0, MachineReady("m0")),
        (60.0, MachineReady("m1")),
        (60.0, Assign(0, "m0")),
        (60.0, Assign(1, "m0")),
        (60.0, Assign(2, "m0")),
    ]


def _state(records: list[tuple[float, Event | Action]]) -> RunState:
    state = _fresh()
    for t, item in records:
        state.apply(t, item)
    return state


def test_move_takes_queued_tasks_to_another_machine_where_they_start_when_it_is_free() -> None:
    state = _state([*_three_machines(), (100.0, Move((1,), "m0", "m1"))])
    m0, m1 = state.fleet.machines["m0"], state.fleet.machines["m1"]
    assert list(m0.running) == [0]
    assert list(m0.queue) == [2]
    assert m1.running == {1: 100.0}
    assert not m1.queue
    assert state.tasks.running_on[1] == {"m1": 100.0}
    assert state.tasks.task_state[1] is TaskState.RUNNING
    state.apply(700.0, TaskDone(1, "m1", 600.0))
    assert state.tasks.done == 1
    assert [(s.task, s.machine, s.start, s.end) for s in state.tasks.segments] == [
        (1, "m1", 100.0, 700.0)
    ]


def test_tasks_moved_to_a_booting_machine_wait_until_it_is_ready() -> None:
    state = _state([*_three_machines(), (100.0, Move((2, 1), "m0", "m2"))])
    m2 = state.fleet.machines["m2"]
    assert list(m2.queue) == [2, 1]
    assert not m2.running
    assert 2 not in state.tasks.running_on
    state.apply(150.0, MachineReady("m2"))
    assert m2.running == {2: 150.0}
    assert list(m2.queue) == [1]
    assert not state.fleet.machines["m0"].queue


@pytest.mark.parametrize(
    "move",
    [Move((0,), "m0", "m1"), Move((3,), "m0", "m1"), Move((1,), "m0", "nowhere")],
    ids=["running, not queued", "not on the machine", "unknown target"],
)
def test_a_move_that_does_not_fit_the_state_is_refused(move: Move) -> None:
    state = _state(_three_machines())
    with pytest.raises(StateError, match="move from m0"):
        state.apply(100.0, move)


def test_a_move_survives_the_journal_and_replays_to_the_same_state() -> None:
    records = [*_three_machines(), (100.0, Move((2, 1), "m0", "m1"))]
    journal = SqliteJournal(Path(":memory:"))
    for t, item in records:
        if isinstance(item, Launch | Assign | Move):
            journal.step(t, [], [item])
        else:
            journal.step(t, [item], [])  # type: ignore[list-item]
    read = list(journal.records())
    journal.close()
    assert read[-1].item == Move((2, 1), "m0", "m1")
    assert read[-1].kind == "action"
    replayed = _fresh()
    replay(replayed, read)
    assert replayed == _state(records)


def test_states_compare_by_value_down_to_the_runtime_samples() -> None:
    """Replay tests compare whole states: equality must see every field's value."""
    one, other = _state(_three_machines()), _state(_three_machines())
    assert one == other
    assert one is not other
    other.observed.stats["a"].record(5.0)
    assert one != other
    other = _state(_three_machines())
    other.fleet.machines["m0"].queue.rotate(1)
    assert one != other


def test_boot_time_kept_between_machines_coming_up_is_the_mean_over_all_of_them() -> None:
    """``boot_s`` is kept until a machine is launched or comes up; on a random run of
    launches, readies (some after the machine was lost), losses and releases it is
    always the mean over every machine of the type that came up, as worked out anew."""
    rng = random.Random(5)
    types = [TypeSpec("a", 1.0, 50, 60.0), TypeSpec("b", 2.0, 50, 90.0)]
    state = RunState.new(types, BillingModel("fixed", 3600.0), None, 1, [0])

    def scratch(name: str) -> float:
        seen = [
            m.ready_at - m.launched_at
            for m in state.fleet.machines.values()
            if m.type.name == name and m.ready_at is not None
        ]
        return sum(seen) / len(seen) if seen else state.types[name].boot_s

    now, launched, booting = 0.0, 0, []
    for _ in range(400):
        now += rng.uniform(0.0, 40.0)
        roll = rng.random()
        if roll < 0.3:
            name = rng.choice("ab")
            token = f"L{launched}"
            state.apply(now, Launch(name, 1, token))
            state.apply(now, MachineLaunched(f"m{launched}", name, token))
            booting.append(f"m{launched}")
            launched += 1
        elif roll < 0.7 and booting:
            state.apply(now, MachineReady(booting.pop(rng.randrange(len(booting)))))
        elif roll < 0.85 and state.fleet.alive:
            state.apply(now, MachineLost(rng.choice(list(state.fleet.alive)), "gone"))
        elif state.fleet.alive:
            state.apply(now, Release(rng.choice(list(state.fleet.alive)), "let go"))
        for name in ("a", "b"):
            assert state.fleet.boot_s(name) == scratch(name)
    assert state.fleet.readies > 0

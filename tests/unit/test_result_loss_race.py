"""A result that arrived is counted, whatever else the step brings (issue 36 §4).

Hypothesis makes up small runs: a few machines whose agents run what they are given and
report results when they poll, machines lost (falsely: the agent goes on and its results
still come, in the step of the loss or a later one; or truly: it ran nothing more), in
every order within a step. They are folded through ``RunState.apply`` (the fold alone)
and through ``Controller.step`` (the path a daemon takes: the controller decides the
launches and assignments). After every step: each task with a journaled ``TaskDone`` is
done, and done once; no task is lost (each is done, in the bag, or on a live machine);
no task done is still running anywhere; committed money never goes down (fixed ATUs,
nothing lost past its first unit); and the journal replayed gives the same state.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from autoscaler.budget.controller import Controller
from autoscaler.budget.settings import ControllerSettings
from autoscaler.core.billing import BillingModel
from autoscaler.core.journal import Record, kind_of, replay
from autoscaler.core.model import (
    Action,
    Assign,
    AssignGroup,
    Cancel,
    Event,
    Launch,
    MachineLaunched,
    MachineLost,
    MachineReady,
    MachineState,
    Move,
    Release,
    Replicate,
    TaskDone,
    TaskState,
    TypeSpec,
)
from autoscaler.core.state import RunState

TYPES = [TypeSpec("a", 1.0, 4, 60.0), TypeSpec("b", 2.0, 2, 60.0, slots=2)]
BILLING = BillingModel("fixed", 3600.0)
SETTINGS = settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@dataclass
class World:
    """What really happens, beside what the state knows: the runs each agent was given
    and has not reported, which agents came up, and which are really gone."""

    state: RunState
    journal: list[tuple[float, Event | Action]] = field(default_factory=list)
    has: dict[str, set[int]] = field(default_factory=dict)  # agent -> runs it holds
    up: set[str] = field(default_factory=set)  # agents that reported in (a step before)
    dead: set[str] = field(default_factory=set)  # agents really gone: they report nothing
    committed: float = 0.0

    def told(self, action: Action) -> None:
        """An action reaches the agents (at the step's answer)."""
        match action:
            case Assign(task=t, machine=m) | Replicate(task=t, machine=m):
                self.has.setdefault(m, set()).add(t)
            case AssignGroup(tasks=ts, machine=m):
                self.has.setdefault(m, set()).update(ts)
            case Cancel(task=t, machine=m):
                self.has.get(m, set()).discard(t)
            case Move(tasks=ts, source=a, target=b):
                self.has.get(a, set()).difference_update(ts)
                self.has.setdefault(b, set()).update(ts)
            case Release(machine=m):
                self.dead.add(m)
            case _:
                pass

    def events(self, data: st.DataObject, now: float) -> list[Event]:
        """A step's events, in any order: machines up, results of what agents hold (a
        lost machine's too, while its agent is alive), machines lost."""
        state = self.state
        events: list[Event] = []
        for token, (tname, count) in sorted(state.fleet.pending_launches.items()):
            made = sum(1 for m in state.fleet.machines.values() if m.token == token)
            n = data.draw(st.integers(0, count))
            events += [MachineLaunched(f"{token}-{made + i}", tname, token) for i in range(n)]
        for m in sorted(state.fleet.alive_machines(), key=lambda m: m.id):
            if m.state is MachineState.BOOTING and data.draw(st.booleans()):
                events.append(MachineReady(m.id))
            if data.draw(st.integers(0, 4)) == 0:
                events.append(MachineLost(m.id, "no contact for 16s"))
        for mid in sorted(self.up - self.dead):
            for tid in sorted(self.has.get(mid, ())):
                if data.draw(st.booleans()):
                    runtime = data.draw(st.sampled_from([0.5, 5.0, 30.0]))
                    events.append(TaskDone(tid, mid, runtime))
        return data.draw(st.permutations(events))

    def happened(self, data: st.DataObject, events: list[Event]) -> None:
        for e in events:
            match e:
                case TaskDone(task=t, machine=m):
                    self.has[m].discard(t)
                case MachineLost(machine=m) if data.draw(st.booleans()):
                    self.dead.add(m)  # really gone; else a false loss: its agent goes on
                case _:
                    pass

    def came_up(self, events: list[Event]) -> None:
        self.up.update(e.machine for e in events if isinstance(e, MachineReady))

    def check(self) -> None:
        state, tasks = self.state, self.state.tasks
        journaled = {item.task for _, item in self.journal if isinstance(item, TaskDone)}
        done = {t for t, s in enumerate(tasks.task_state) if s is TaskState.DONE}
        assert done == journaled, "a result that arrived was not counted"
        assert tasks.done == len(done)
        alive = list(state.fleet.alive_machines())
        for tid, s in enumerate(tasks.task_state):
            on = [m.id for m in alive if tid in m.running or tid in m.queue]
            if s is TaskState.DONE:
                assert on == [], f"task {tid} is done and still runs on {on}"
            elif s is TaskState.PENDING:
                assert tid in tasks.pending
            else:
                held = any(tid in q for qs in state.work.launch_queues.values() for q in qs)
                assert on or held, f"task {tid} ({s.value}) is nowhere"
        assert state.money.committed >= self.committed - 1e-9
        self.committed = state.money.committed
        again = fresh(state.n_tasks)
        replay(again, [Record(i, t, kind_of(x), x) for i, (t, x) in enumerate(self.journal)])
        assert again == state


def fresh(n_tasks: int) -> RunState:
    return RunState.new(TYPES, BILLING, None, n_tasks, list(range(n_tasks)))


@SETTINGS
@given(data=st.data())
def test_the_fold_counts_every_result_in_any_interleaving(data: st.DataObject) -> None:
    """The fold alone: the test assigns the bag's tasks to the machines alive, in the
    step after the events (as a controller does)."""
    n_tasks = data.draw(st.integers(1, 6), label="tasks")
    world = World(fresh(n_tasks))
    state = world.state

    def apply(t: float, item: Event | Action) -> None:
        state.apply(t, item)
        world.journal.append((t, item))

    for tname, count in (("a", data.draw(st.integers(1, 3))), ("b", 1)):
        apply(0.0, Launch(tname, count, state.fleet.next_token()))
    for step in range(data.draw(st.integers(1, 12), label="steps")):
        now = 1.0 + 10.0 * step
        events = world.events(data, now)
        for e in events:
            apply(now, e)
        world.happened(data, events)
        world.came_up(events)
        for m in sorted(state.fleet.alive_machines(), key=lambda m: m.id):
            while state.tasks.pending and data.draw(st.booleans()):
                action = Assign(state.tasks.pending[0], m.id)
                apply(now, action)
                world.told(action)
        world.check()


@SETTINGS
@given(data=st.data())
def test_the_controller_counts_every_result_in_any_interleaving(data: st.DataObject) -> None:
    """Through ``Controller.step`` (round robin): it launches, assigns in task groups,
    and releases; the events come in any order within a step."""
    n_tasks = data.draw(st.integers(1, 8), label="tasks")
    group_s = data.draw(st.sampled_from([0.0, 600.0]), label="group horizon")
    controller = Controller(ControllerSettings(policy="round_robin", group_s=group_s))
    world = World(fresh(n_tasks))
    state = world.state
    for step in range(data.draw(st.integers(1, 15), label="steps")):
        now = 1.0 + 10.0 * step
        events = world.events(data, now) if step else []
        actions = controller.step(state, events, now)
        world.journal += [(now, e) for e in events] + [(now, a) for a in actions]
        world.happened(data, events)
        world.came_up(events)
        for a in actions:
            world.told(a)
        world.check()
        if state.over:
            break

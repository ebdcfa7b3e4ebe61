"""The virtual-time driver: feeds a ``SimProvider``'s world through ``Controller.step``.

Events sit in a heap ordered by virtual time; all events of one instant go into one
step. Actions are applied to the simulated machines, which schedule what follows from
them (a machine ready after its boot time, a task done after its runtime, the end of a
paid unit). A machine runs up to its type's slots tasks at once, from its queue in order
as slots free up (as a worker agent does). A 1000-task bag of five virtual hours runs in
about a second.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from autoscaler.budget.controller import Controller
from autoscaler.config.schema import JobMeans
from autoscaler.core.errors import AutoscalerError
from autoscaler.core.model import (
    Action,
    Assign,
    AssignGroup,
    BoundaryNear,
    BudgetSet,
    Cancel,
    DeadlineSet,
    Defer,
    Event,
    Extend,
    JobAdded,
    JobArrived,
    JobWithdrawn,
    Launch,
    LaunchFailed,
    MachineLaunched,
    MachineLost,
    MachineReady,
    Move,
    Release,
    Replicate,
    Shutdown,
    TaskDone,
    TaskFailed,
    Tick,
)
from autoscaler.core.state import RunState
from autoscaler.deadline.deadline_controller import DeadlineController
from autoscaler.providers.sim import SimProvider, share_factor
from autoscaler.run.collector import long_run
from autoscaler.run.market import MarketReader, market_of
from autoscaler.run.refusals import Holds, refusal

StepHook = Callable[[float, list[Event], list[Action], RunState], None]
Told = JobAdded | Shutdown | BudgetSet | DeadlineSet | JobWithdrawn


@dataclass(slots=True)
class _Run:
    """A task running on a simulated machine; ``live`` is False once cancelled."""

    task: int
    machine: str
    started: float
    fails: bool  # the emulated world decided at the start that this run fails
    live: bool = True


@dataclass(frozen=True)
class _Market:
    """The spot market is read, just before a tick (``run.market``)."""


@dataclass(frozen=True)
class _Wake:
    """A tick besides the periodic ones, when a deferred launch may be tried again."""


@dataclass(slots=True)
class _Box:
    """The simulated side of one machine: what it runs (up to ``slots`` at once) and
    what waits (until it is ready, or a slot is free)."""

    slots: int = 1
    running: list[_Run] = field(default_factory=list)
    queue: deque[int] = field(default_factory=deque)
    ready: bool = False
    gone: bool = False


class Emulator:
    """Runs one dry run to its end: the bag finished, the controller stopped it, or (for
    ``autoscaler plan``) it holds after sampling and its machines' paid time is over."""

    def __init__(
        self,
        controller: Controller | DeadlineController,
        state: RunState,
        sim: SimProvider,
        monitoring_interval_s: float,
        run_tag: str = "dry-run",
        on_step: StepHook | None = None,
        max_time_s: float = 10 * 365 * 86400.0,
        holds: Callable[[str], Holds] | None = None,
    ):
        """``holds``: per machine type, how long a refused launch avoids what refused
        (its provider's ``run.refusals.holds``); None: every refusal is a plain error,
        tried again when the plan asks."""
        self.controller = controller
        self.state = state
        self.sim = sim
        self.interval = monitoring_interval_s
        self.tags = {"autoscaler:run": run_tag}
        self.on_step = on_step
        self.max_time_s = max_time_s
        self.holds = holds
        self.now = 0.0
        self._heap: list[tuple[float, int, object]] = []
        self._seq = itertools.count()
        self._boxes: dict[str, _Box] = {}
        self._attempts: dict[int, int] = {}
        self._launch_seen: dict[str, int] = {}
        self._labels: dict[str, Sequence[str | None]] = {}  # an added job's, for the world
        self._means: dict[str, Sequence[JobMeans | None]] = {}  # likewise, when told
        self._begun = False
        market = market_of(sim)
        self.market = None if market is None else MarketReader(market, "trace")

    def clock(self) -> float:
        return self.now

    def _at(self, when: float, item: object) -> None:
        heapq.heappush(self._heap, (when, next(self._seq), item))

    def run(self, until: float = math.inf) -> RunState:
        """Run to the end; with ``until``, up to the last instant before it, when the owner
        tells what happens at ``until`` (a service's dry run admits a job arriving then,
        as the service does, with what it remembers by then) and runs on."""
        with long_run():
            return self._run(until)

    def _run(self, until: float) -> RunState:
        if not self._begun:
            self._begun = True
            self._tick_at(self.interval)
            for job in self.state.work.jobs:
                if job.name not in self.state.work.arrived:
                    self._at(job.at, JobArrived(job.name))
            self._step([] if self.market is None else [self.market.read(self.now)])
        heap, pop, realise, state = self._heap, heapq.heappop, self._realise, self.state
        while not state.over:
            if not heap:
                raise AutoscalerError("emulator: nothing left to happen but the run is not over")
            when = heap[0][0]
            if when >= until:
                break
            if when > self.max_time_s:
                raise AutoscalerError(f"emulator: run exceeds {self.max_time_s:.0f} virtual s")
            self.now = when
            events: list[Event] = []
            while heap and heap[0][0] == when:
                event = realise(pop(heap)[2])
                if event is not None:
                    events.append(event)
            if events:
                self._step(events)
        return self.state

    def tell(
        self,
        when: float,
        event: Told,
        labels: Sequence[str | None] | None = None,
        means: Sequence[JobMeans | None] | None = None,
    ) -> None:
        """An owner's event at virtual time ``when`` (a job added to a pool, a user's
        update, a shutdown), stepped like the world's; an added job's tasks' category
        ``labels`` (in id order) for the world's ``emulator.category_speed``, and their
        mean times as the world runs them (``means``, in id order; default: the job's
        ``task_s``, or the runtime model without them). A service's dry run plans a job
        on times it remembers while its tasks run as its file says."""
        if isinstance(event, JobAdded) and labels is not None:
            self._labels[event.job.name] = labels
        if isinstance(event, JobAdded) and means is not None:
            self._means[event.job.name] = means
        self._at(when, event)

    def _step(self, events: list[Event]) -> None:
        actions = self.controller.step(self.state, events, self.now)
        for action in actions:
            self._apply(action)
        if self.on_step is not None:
            self.on_step(self.now, events, actions, self.state)

    def _realise(self, item: object) -> Event | None:
        """Turn a scheduled item into an event, or drop it if it no longer applies."""
        if type(item) is _Run:  # the most common by far: one per run
            return self._ended(item)
        match item:
            case Tick():
                if not self.state.money.stopped:
                    self._tick_at(self.now + self.interval)
                return item
            case _Market():
                return None if self.market is None else self.market.read(self.now)
            case _Wake():
                return None if self.state.money.stopped else Tick()
            case MachineReady(machine=mid):
                box = self._boxes[mid]
                if box.gone:
                    return None
                box.ready = True
                self._start_next(mid)
                return item
            case BoundaryNear(machine=mid):
                return None if self._boxes[mid].gone else item
            case MachineLost(machine=mid):
                if self._boxes[mid].gone:
                    return None
                self.sim.terminate([mid])
                self._boxes[mid].gone = True
                return item
            case MachineLaunched(machine=mid, token=token):
                # The tasks the launch was bought for: the state queues them on the
                # machines in the order their launch events come, as here.
                queues = self.state.work.launch_queues.get(token, ())
                i = self._launch_seen.get(token, 0)
                self._launch_seen[token] = i + 1
                if i < len(queues):
                    self.state.work.enqueue(self._boxes[mid].queue, queues[i])
                return item
            case JobAdded(job=job):
                means = JobMeans(job.name, dict(job.task_s)) if job.task_s else None
                world = self._means.pop(job.name, [means] * job.count)
                labels = self._labels.pop(job.name, None)
                if labels is None:
                    self.sim.add_tasks(world)
                else:
                    self.sim.add_tasks(world, labels)
                return item
            case (
                JobArrived()
                | Shutdown()
                | BudgetSet()
                | DeadlineSet()
                | JobWithdrawn()
                | LaunchFailed()
            ):
                return item
        raise AutoscalerError(f"emulator: unknown scheduled item {item!r}")

    def _ended(self, run: _Run) -> TaskDone | TaskFailed | None:
        """A run's end: its result, unless it was cancelled or its machine is gone."""
        box = self._boxes[run.machine]
        if not run.live or box.gone:
            return None
        box.running.remove(run)
        self._start_next(run.machine)
        runtime = self.now - run.started
        if run.fails:
            self._attempts[run.task] = self._attempts.get(run.task, 0) + 1
            return TaskFailed(run.task, run.machine, runtime, "emulated task failure")
        return TaskDone(run.task, run.machine, runtime)

    def _tick_at(self, when: float) -> None:
        """The next tick at ``when``, the market read just before it (in the same step)."""
        if self.market is not None:
            self._at(when, _Market())
        self._at(when, Tick())

    def _refused(self, launch: Launch, err: AutoscalerError) -> LaunchFailed:
        if self.holds is None:
            return LaunchFailed(launch.token, launch.type, launch.count, err.message)
        caps = self.sim.capabilities
        why, code, again = err.message, err.code, err.retryable
        siblings = caps.siblings(launch.type)
        h = self.holds(launch.type)
        return refusal(launch, launch.count, why, code, again, siblings, h, self.now)

    def _apply(self, action: Action) -> None:
        if type(action) is Assign:  # the most common by far, with groups
            self._queue(action.machine, (action.task,))
            return
        if type(action) is AssignGroup:
            self._queue(action.machine, action.tasks)
            return
        match action:
            case Launch(type=tname, count=count, token=token):
                try:
                    records = self.sim.launch(tname, count, token, self.tags)
                except AutoscalerError as err:
                    self._at(self.now, self._refused(action, err))
                    return
                for rec in records:
                    self._boxes[rec.id] = _Box(slots=self.state.types[tname].slots)
                    self._at(self.now, MachineLaunched(rec.id, rec.type, token))
                    self._at(self.now + self.sim.boot_time(rec.id), MachineReady(rec.id))
                    first_end = self.now + self.state.billing.first_step_s
                    self._at(self._boundary_at(first_end), BoundaryNear(rec.id))
                    ends = self.sim.failure(rec.id)
                    if ends is not None:
                        self._at(ends.at_s, MachineLost(rec.id, ends.reason))
            case Extend(machine=mid, until=until):
                self._at(self._boundary_at(until), BoundaryNear(mid))
            case Defer(types=types) if types:  # tried again once its hold lifts
                at = self.state.capacity.launchable_at(types)
                if at > self.now:
                    self._at(at, _Wake())
            case Release(machine=mid):
                self.sim.terminate([mid])
                box = self._boxes[mid]
                box.gone = True
                for run in box.running:
                    run.live = False
            case Replicate(task=tid, machine=mid):
                self._boxes[mid].queue.append(tid)
                self._start_next(mid)
            case Cancel(task=tid, machine=mid):
                box = self._boxes[mid]
                if tid in box.queue:
                    box.queue.remove(tid)
                for run in [r for r in box.running if r.task == tid]:
                    run.live = False
                    box.running.remove(run)
                self._start_next(mid)
            case Move(tasks=tids, source=src, target=dst):
                for tid in tids:
                    self._boxes[src].queue.remove(tid)
                self._queue(dst, tids)
            case _:
                pass  # Configure and Stop change only the controller's state

    def _boundary_at(self, until: float) -> float:
        return max(self.now, until - self.state.billing.boundary_margin_s())

    def _queue(self, mid: str, tids: tuple[int, ...]) -> None:
        """Queue ``tids`` on ``mid`` (an assignment, a group, a move) and start what fits."""
        self.state.work.enqueue(self._boxes[mid].queue, tids)
        self._start_next(mid)

    def _start_next(self, mid: str) -> None:
        """Start queued tasks on ``mid`` while it has a free slot."""
        box = self._boxes[mid]
        if box.gone or not box.ready:
            return
        while box.queue and len(box.running) < box.slots:
            tid = box.queue.popleft()
            runtime = self.sim.run_time(tid, mid)
            if box.slots > 1:  # tasks sharing the machine slow each other
                runtime *= share_factor(self.sim.share_slowdown, len(box.running) + 1, box.slots)
            fail_at = self.sim.run_fails(tid, self._attempts.get(tid, 0))
            if fail_at is not None:
                runtime *= fail_at
            run = _Run(tid, mid, self.now, fails=fail_at is not None)
            box.running.append(run)
            self._at(self.now + runtime, run)

"""The state of a run: a fold over the events and actions of its journal.

``RunState`` changes only through ``RunState.apply(t, item)``: an event that happened, or
an action the controller decided, at run time ``t``. A driver journals exactly those
pairs, so replaying a journal rebuilds the state exactly (``journal.replay``). It knows
money (what is committed), machines and tasks; it decides nothing: that is the
controller's job.
"""

from __future__ import annotations

import dataclasses
import math
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field

from autoscaler.budget.estimate import RuntimeStats
from autoscaler.core.billing import BillingModel
from autoscaler.core.errors import AutoscalerError
from autoscaler.core.model import (
    ACTION_TYPES,
    EVENT_TYPES,
    Action,
    Assign,
    BoundaryNear,
    BudgetSet,
    Cancel,
    Configure,
    DeadlineSet,
    Defer,
    Event,
    Extend,
    Forecast,
    Hold,
    Interrupted,
    JobAdded,
    JobArrived,
    JobSpec,
    Late,
    Launch,
    LaunchFailed,
    MachineLaunched,
    MachineLost,
    MachineReady,
    MachineState,
    Mark,
    Move,
    Release,
    Replicate,
    Resumed,
    Shortfall,
    Shutdown,
    Stop,
    TaskDone,
    TaskFailed,
    TaskState,
    Tick,
    TypeSpec,
)


class StateError(AutoscalerError):
    """An event or action that does not fit the state (a bug or a corrupt journal)."""

    code = "StateError"


@dataclass
class Machine:
    id: str
    type: TypeSpec
    token: str
    launched_at: float
    paid_until: float  # end of the committed time; the machine is gone by then
    state: MachineState = MachineState.BOOTING
    ready_at: float | None = None
    ended_at: float | None = None
    end_reason: str | None = None
    marked: bool = False  # to be released at the end of its paid time
    running: dict[int, float] = field(default_factory=dict)  # task -> start time
    run_no: dict[int, int] = field(default_factory=dict)  # task -> which run on this machine
    starts: int = 0  # runs started here so far; numbers the next run
    queue: deque[int] = field(default_factory=deque)  # assigned, not yet started
    replicas: set[int] = field(default_factory=set)  # running copies of tasks run elsewhere
    tasks_done: int = 0
    busy_s: float = 0.0  # time spent on tasks that finished (any outcome)

    @property
    def alive(self) -> bool:
        return self.state is not MachineState.GONE

    @property
    def idle(self) -> bool:
        return self.state is MachineState.READY and not self.running and not self.queue


@dataclass
class Segment:
    """A run of one task on one machine, for the report's Gantt chart."""

    task: int
    machine: str
    start: float
    end: float
    outcome: str  # done, failed, cancelled, lost


@dataclass
class RunState:
    """Everything the controller knows, rebuilt from the journal alone."""

    types: dict[str, TypeSpec]
    billing: BillingModel
    budget: float | None
    n_tasks: int
    max_retries: int = 2
    now: float = 0.0  # run time of the last record applied
    machines: dict[str, Machine] = field(default_factory=dict)
    task_state: list[TaskState] = field(default_factory=list)
    attempts: list[int] = field(default_factory=list)
    pending: deque[int] = field(default_factory=deque)
    running_on: dict[int, dict[str, float]] = field(default_factory=dict)
    pending_launches: dict[str, tuple[str, int]] = field(default_factory=dict)
    committed: float = 0.0  # money committed: paid units plus launches in flight
    done: int = 0
    failed: int = 0
    stop_reason: str | None = None
    stopped: bool = False  # Stop was decided: nothing new is committed, machines drain
    shutdown: bool = False  # asked to end now: machines go at once, nothing is dispatched
    awaiting_budget: bool = False  # held after sampling (Hold) until a BudgetSet
    budget_set_at: float | None = None  # when the last BudgetSet came
    interrupted: bool = False  # Interrupted (the service stopped), until Resumed
    target: dict[str, int] = field(default_factory=dict)  # current configuration
    configurations: list[tuple[float, Configure]] = field(default_factory=list)
    segments: list[Segment] = field(default_factory=list)
    spend_log: list[tuple[float, float]] = field(default_factory=list)  # (time, committed)
    task_errors: dict[int, str] = field(default_factory=dict)
    stats: dict[str, RuntimeStats] = field(default_factory=dict)
    launch_seq: int = 0  # launches decided so far; names the next launch token
    unavailable: dict[str, float] = field(default_factory=dict)  # type -> avoided until
    hold_until: float | None = None  # an account limit: no scale-up before this time
    deferred: tuple[str, ...] = ()  # types whose wanted launches wait for a tick (Defer)
    shortfalls: list[tuple[float, Shortfall]] = field(default_factory=list)  # warnings given
    launch_problems: list[tuple[float, str, str, str]] = field(
        default_factory=list
    )  # (time, type, kind, reason) of refused launches, for the report
    # Compact sampling (slides 001): the first ``paired_target`` tasks assigned are run
    # on every type, each run counted on its type, none cancelled when another ends.
    paired_target: int = 0
    paired: list[int] = field(default_factory=list)  # those tasks, in assignment order
    paired_runs: dict[int, dict[str, float]] = field(default_factory=dict)  # runtime per type
    # Deadline mode (paper 002): the jobs, which have arrived, the tasks each launch in
    # flight was bought for (one tuple per machine), runtimes per job, and lateness said.
    jobs: tuple[JobSpec, ...] = ()
    arrived: set[str] = field(default_factory=set)
    launch_queues: dict[str, deque[tuple[int, ...]]] = field(default_factory=dict)
    job_runs: dict[tuple[str, str], list[float]] = field(default_factory=dict)  # (job, type)
    machine_job_runs: dict[tuple[str, str], list[float]] = field(default_factory=dict)
    forecasts: dict[str, Forecast] = field(default_factory=dict)  # the last, per job
    late: dict[str, Late] = field(default_factory=dict)  # the last lateness said, per job
    late_log: list[tuple[float, Late]] = field(default_factory=list)

    def available(self, type_name: str, now: float) -> bool:
        """Whether the provider may have capacity for ``type_name`` at ``now``."""
        return self.unavailable.get(type_name, -math.inf) <= now

    def plan(self) -> Configure | None:
        """The configuration in force that came with a prediction (the last plan), or
        None before the first plan: sampling and round robin predict nothing."""
        for _, c in reversed(self.configurations):
            if c.predicted_makespan_s is not None:
                return c
        return None

    def paired_first_run(self, task: int, type_name: str) -> bool:
        """Whether a run of ``task`` starting on ``type_name`` is the paired task's
        counted run there (compact sampling): its first on the type."""
        return task in self.paired_runs and task not in self.stats[type_name].sample

    def held(self, now: float) -> bool:
        """Whether scale-up waits at ``now`` for an account limit to lift."""
        return self.hold_until is not None and self.hold_until > now

    @classmethod
    def new(
        cls,
        types: Sequence[TypeSpec],
        billing: BillingModel,
        budget: float | None,
        n_tasks: int,
        order: Sequence[int],
        max_retries: int = 2,
        sample_target: int = 30,
        paired: int = 0,
        jobs: Sequence[JobSpec] = (),
    ) -> RunState:
        """A fresh run; ``order`` is the FCFS order tasks leave the bag in; ``paired``:
        tasks to run on every type (compact sampling; 0: plain sampling); ``jobs``: a
        deadline-mode run's jobs, owning the task ids between them."""
        if sorted(order) != list(range(n_tasks)):
            raise StateError("task order must be a permutation of the task ids")
        if jobs and sorted(t for j in jobs for t in range(j.first, j.first + j.count)) != list(
            range(n_tasks)
        ):
            raise StateError("the jobs' tasks must be the task ids, each owned by one job")
        return cls(
            jobs=tuple(jobs),
            arrived={j.name for j in jobs if j.at <= 0},
            types={t.name: t for t in types},
            billing=billing,
            budget=budget,
            n_tasks=n_tasks,
            max_retries=max_retries,
            task_state=[TaskState.PENDING] * n_tasks,
            attempts=[0] * n_tasks,
            pending=deque(order),
            spend_log=[(0.0, 0.0)],
            stats={t.name: RuntimeStats(sample_target) for t in types},
            paired_target=paired,
        )

    # --- queries ----------------------------------------------------------------------

    @property
    def deadline_mode(self) -> bool:
        return bool(self.jobs)

    def job_of(self, task: int) -> JobSpec:
        """The job that owns ``task`` (deadline mode)."""
        for job in self.jobs:
            if job.owns(task):
                return job
        raise StateError(f"task {task} belongs to no job")

    def job_named(self, name: str) -> JobSpec:
        for job in self.jobs:
            if job.name == name:
                return job
        raise StateError(f"no job named {name!r}")

    def enqueue(self, queue: deque[int], tasks: Iterable[int]) -> None:
        """Add ``tasks`` to a machine's ``queue``: at the end, or in deadline mode earliest
        deadline first (stably: after every task due no later), the order a machine runs
        its jobs in (paper 002). The emulator queues with this too, so both agree."""
        if not self.jobs:
            queue.extend(tasks)
            return
        for tid in tasks:
            due = self.job_of(tid).deadline
            i = len(queue)
            while i > 0 and self.job_of(queue[i - 1]).deadline > due:
                i -= 1
            queue.insert(i, tid)

    def alive_machines(self) -> Iterator[Machine]:
        return (m for m in self.machines.values() if m.alive)

    def any_alive(self) -> bool:
        return any(m.alive for m in self.machines.values())

    def budget_of(self, configured: float | None) -> float | None:
        """The run's budget: the last one set during the run (``BudgetSet``), else the
        config's (``configured``; round robin runs without one but is reported on it)."""
        return self.budget if self.budget_set_at is not None else configured

    @property
    def over(self) -> bool:
        """Nothing is left to drive: the run stopped, or waits for a budget, and no
        machine is alive or being launched."""
        return (
            (self.stopped or self.awaiting_budget)
            and not self.pending_launches
            and not self.any_alive()
        )

    def count_alive(self, type_name: str, *, include_marked: bool = True) -> int:
        return sum(
            1
            for m in self.alive_machines()
            if m.type.name == type_name and (include_marked or not m.marked)
        ) + sum(c for t, c in self.pending_launches.values() if t == type_name)

    @property
    def finished(self) -> bool:
        """Every task is done or failed."""
        return self.done + self.failed == self.n_tasks

    @property
    def tasks_left(self) -> int:
        return self.n_tasks - self.done - self.failed

    def actual_cost(self) -> float:
        """What the machines cost by their real lifetimes (≤ committed)."""
        total = 0.0
        for m in self.machines.values():
            end = m.ended_at if m.ended_at is not None else self.now
            total += self.billing.cost(m.type.price, end - m.launched_at)
        return total

    def _commit(self, amount: float) -> None:
        self.committed += amount
        self.spend_log.append((self.now, self.committed))

    # --- the one way the state changes ----------------------------------------------------

    def apply(self, t: float, item: Event | Action) -> None:
        """``item`` happened (an event) or was decided (an action) at run time ``t``.

        The time comes with the record, as the journal stores it, so a replay sets
        ``now`` exactly as the live run did.
        """
        self.now = t
        if isinstance(item, EVENT_TYPES):
            self._event(item)
        elif isinstance(item, ACTION_TYPES):
            self._action(item)
        else:
            raise StateError(f"neither an event nor an action: {item!r}")

    # --- events -----------------------------------------------------------------------

    def _event(self, event: Event) -> None:
        match event:
            case MachineLaunched(machine=mid, type=tname, token=token, at=at):
                ttype, count = self.pending_launches.get(token, (tname, 0))
                if count <= 0 or ttype != tname:
                    raise StateError(f"machine {mid} launched for unknown token {token}")
                if count == 1:
                    del self.pending_launches[token]
                else:
                    self.pending_launches[token] = (ttype, count - 1)
                start = self.now if at is None else min(at, self.now)
                self.machines[mid] = Machine(
                    id=mid,
                    type=self.types[tname],
                    token=token,
                    launched_at=start,
                    paid_until=start + self.billing.first_step_s,
                )
                queues = self.launch_queues.get(token)
                if queues:
                    self.enqueue(self.machines[mid].queue, queues.popleft())
                if queues is not None and (not queues or token not in self.pending_launches):
                    self._unqueue_launch(token)
            case LaunchFailed(
                token=token, count=count, type=tname, kind=kind, until=until, reason=why
            ):
                self.launch_problems.append((self.now, tname, kind, why))
                if kind == "capacity" and until is not None:
                    self.unavailable[tname] = max(until, self.unavailable.get(tname, until))
                elif kind in ("limit", "throttled") and until is not None:
                    self.hold_until = max(until, self.hold_until or until)
                ttype, left = self.pending_launches.get(token, ("", 0))
                count = min(count, left)
                if left - count <= 0:
                    self.pending_launches.pop(token, None)
                else:
                    self.pending_launches[token] = (ttype, left - count)
                if count > 0:
                    self._commit(-count * self._first_cost(ttype))
                queues = self.launch_queues.get(token)
                for _ in range(min(count, len(queues or ()))):
                    assert queues is not None
                    self._back_to_bag(queues.pop())
                if queues is not None and (not queues or token not in self.pending_launches):
                    self._unqueue_launch(token)
            case MachineReady(machine=mid):
                m = self.machines[mid]
                if m.alive:
                    m.state = MachineState.READY
                    m.ready_at = self.now
                    self._start_queued(m)
            case MachineLost(machine=mid, reason=reason):
                self._end_machine(mid, f"lost: {reason}", outcome="lost")
            case TaskDone(task=tid, machine=mid, runtime_s=runtime):
                m = self.machines[mid]
                if not self._finish_run(tid, mid, "done", runtime):
                    return
                if self.task_state[tid] is TaskState.RUNNING:
                    self.task_state[tid] = TaskState.DONE
                    self.done += 1
                    m.tasks_done += 1
                    # The first result wins: the other runs end now (the controller
                    # sends each a Cancel, which then finds nothing left to stop).
                    # A paired task's runs on other types go on: they are the pairs.
                    if tid not in self.paired_runs:
                        for other in list(self.running_on.get(tid, {})):
                            self._cancel(tid, other)
                    if not self.running_on.get(tid):
                        self.running_on.pop(tid, None)
                elif tid in self.paired_runs and not self.running_on.get(tid):
                    self.running_on.pop(tid, None)
            case TaskFailed(task=tid, machine=mid, error=error, runtime_s=runtime):
                if not self._finish_run(tid, mid, "failed", runtime):
                    return
                if self.task_state[tid] is TaskState.RUNNING and not self.running_on.get(tid):
                    self.attempts[tid] += 1
                    self.task_errors[tid] = error
                    self.running_on.pop(tid, None)
                    if self.attempts[tid] > self.max_retries:
                        self.task_state[tid] = TaskState.FAILED
                        self.failed += 1
                    else:
                        self.task_state[tid] = TaskState.PENDING
                        self.pending.appendleft(tid)
                elif tid in self.paired_runs and not self.running_on.get(tid):
                    self.running_on.pop(tid, None)
            case Shutdown():
                self.shutdown = True
            case BudgetSet(budget=budget):
                self.budget = budget
                self.budget_set_at = self.now
                self.awaiting_budget = False
            case JobArrived(job=name):
                self.arrived.add(self.job_named(name).name)
            case JobAdded(job=job, order=order):
                self._add_job(job, order)
            case DeadlineSet(job=name, deadline=deadline):
                old = self.job_named(name)
                self.jobs = tuple(
                    dataclasses.replace(j, deadline=deadline) if j is old else j for j in self.jobs
                )
            case Interrupted():
                self.shutdown = self.awaiting_budget = self.interrupted = True
            case Resumed():
                self.shutdown = self.awaiting_budget = self.interrupted = False
            case Tick() | BoundaryNear():
                pass

    def _add_job(self, job: JobSpec, order: Sequence[int]) -> None:
        """A new job's tasks join the run, arrived, at the end of the bag in ``order``.
        The run's budget stays the sum of the jobs' budgets while every job has one."""
        if job.first != self.n_tasks or job.count <= 0:
            raise StateError(
                f"job {job.name!r} adds tasks {job.first}..{job.first + job.count - 1}: "
                f"the run's next task is {self.n_tasks}"
            )
        if sorted(order) != list(range(job.first, job.first + job.count)):
            raise StateError(f"job {job.name!r}: the order must be a permutation of its tasks")
        if any(j.name == job.name for j in self.jobs):
            raise StateError(f"job {job.name!r} is in the run already")
        self.n_tasks += job.count
        self.task_state.extend([TaskState.PENDING] * job.count)
        self.attempts.extend([0] * job.count)
        self.pending.extend(order)
        self.jobs = (*self.jobs, job)
        self.arrived.add(job.name)
        if self.budget is not None:
            self.budget = None if job.budget is None else self.budget + job.budget

    def _unqueue_launch(self, token: str) -> None:
        """A launch is settled: tasks still held for machines it never made go back."""
        for queue in self.launch_queues.pop(token, deque()):
            self._back_to_bag(queue)

    def _back_to_bag(self, tasks: Sequence[int]) -> None:
        for tid in reversed(tasks):
            if self.task_state[tid] is TaskState.RUNNING and not self.running_on.get(tid):
                self.task_state[tid] = TaskState.PENDING
                self.pending.appendleft(tid)

    def _first_cost(self, type_name: str) -> float:
        return self.billing.cost(self.types[type_name].price, self.billing.first_step_s)

    def _finish_run(self, tid: int, mid: str, outcome: str, runtime_s: float) -> bool:
        """Close the run of ``tid`` on ``mid``; False if there was none (a late replica).

        A counted run (not a replica) teaches the type's runtimes: a result is an
        observed runtime, a failure a censored one (the task needed longer to succeed).
        """
        m = self.machines[mid]
        start = m.running.pop(tid, None)
        if start is None:
            return False
        self._observe(m, tid, runtime_s, ended_with_result=outcome == "done")
        m.run_no.pop(tid, None)
        runs = self.running_on.get(tid)
        if runs is not None:
            runs.pop(mid, None)
        m.busy_s += self.now - start
        self.segments.append(Segment(tid, mid, start, self.now, outcome))
        self._start_queued(m)
        return True

    def _observe(self, m: Machine, tid: int, runtime_s: float, ended_with_result: bool) -> None:
        """What a run that just ended says about its type's runtimes (replicas: nothing;
        they are chosen for being long, so they would bias the estimate)."""
        if tid in m.replicas:
            m.replicas.discard(tid)
            return
        stats = self.stats[m.type.name]
        if ended_with_result and self.jobs:
            job = self.job_of(tid).name
            for key, table in (
                ((job, m.type.name), self.job_runs),
                ((m.id, job), self.machine_job_runs),
            ):
                runs = table.setdefault(key, [0.0, 0.0, 0.0])
                runs[0] += 1
                runs[1] += runtime_s
                runs[2] += runtime_s * runtime_s
        if ended_with_result:
            stats.record(runtime_s, tid)
            if tid in self.paired_runs:
                self.paired_runs[tid][m.type.name] = runtime_s
        else:
            stats.censor(max(0.0, runtime_s), tid)

    def _start_queued(self, m: Machine) -> None:
        if m.state is not MachineState.READY:
            return  # a booting machine starts its queue when it is ready
        while m.queue and not m.running:
            tid = m.queue.popleft()
            if self.paired_first_run(tid, m.type.name):
                self.stats[m.type.name].start(tid)
            elif self.running_on.get(tid):
                m.replicas.add(tid)
            else:
                self.stats[m.type.name].start(tid)
            m.running[tid] = self.now
            m.starts += 1
            m.run_no[tid] = m.starts
            self.running_on.setdefault(tid, {})[m.id] = self.now

    def _end_machine(self, mid: str, reason: str, outcome: str) -> None:
        m = self.machines[mid]
        if not m.alive:
            return
        # A machine never outlives its paid time (it is released before, and a real
        # worker's lease ends it there even when no driver is watching), so news of its
        # end that arrives later (after a restart) dates it to the end of paid time.
        end = min(self.now, m.paid_until)
        for tid, start in list(m.running.items()):
            m.busy_s += max(0.0, end - start)
            self._observe(m, tid, end - start, ended_with_result=False)
            self.segments.append(Segment(tid, mid, start, max(start, end), outcome))
            self._drop_run(tid, mid)
        m.running.clear()
        m.run_no.clear()
        for tid in m.queue:
            self._drop_run(tid, mid)
        m.queue.clear()
        m.state = MachineState.GONE
        m.ended_at = end
        m.end_reason = reason
        # The money committed beyond the machine's real end is not spent.
        spent = self.billing.cost(m.type.price, end - m.launched_at)
        committed = self.billing.cost(m.type.price, m.paid_until - m.launched_at)
        if spent < committed:
            self._commit(spent - committed)

    def _drop_run(self, tid: int, mid: str) -> None:
        """A run of ``tid`` on ``mid`` ended without a result: re-queue if it was the last."""
        runs = self.running_on.get(tid)
        if runs is not None:
            runs.pop(mid, None)
        if runs:
            return
        self.running_on.pop(tid, None)
        if self.task_state[tid] is TaskState.RUNNING:
            self.task_state[tid] = TaskState.PENDING
            self.pending.appendleft(tid)

    # --- actions ----------------------------------------------------------------------

    def _action(self, action: Action) -> None:
        match action:
            case Launch(type=tname, count=count, token=token, queues=queues):
                self.launch_seq += 1
                self.pending_launches[token] = (tname, count)
                self._commit(count * self._first_cost(tname))
                if queues:
                    taken = {tid for q in queues for tid in q}
                    for tid in taken:
                        if self.task_state[tid] is not TaskState.PENDING:
                            raise StateError(f"launch {token}: task {tid} is not in the bag")
                        self.task_state[tid] = TaskState.RUNNING
                    self.pending = deque(t for t in self.pending if t not in taken)
                    self.launch_queues[token] = deque(tuple(q) for q in queues)
            case Extend(machine=mid, until=until):
                m = self.machines[mid]
                old = self.billing.cost(m.type.price, m.paid_until - m.launched_at)
                new = self.billing.cost(m.type.price, until - m.launched_at)
                m.paid_until = until
                self._commit(new - old)
            case Mark(machine=mid, release=release):
                self.machines[mid].marked = release
            case Release(machine=mid, reason=reason):
                self._end_machine(mid, reason, outcome="cancelled")
            case Assign(task=tid, machine=mid):
                m = self.machines[mid]
                if self.task_state[tid] is TaskState.PENDING:
                    if self.pending[0] == tid:
                        self.pending.popleft()
                    else:
                        self.pending.remove(tid)
                self.task_state[tid] = TaskState.RUNNING
                if len(self.paired) < self.paired_target and tid not in self.paired_runs:
                    self.paired.append(tid)
                    self.paired_runs[tid] = {}
                self.enqueue(m.queue, (tid,))
                self._start_queued(m)
            case Replicate(task=tid, machine=mid):
                m = self.machines[mid]
                m.queue.append(tid)
                self._start_queued(m)
            case Cancel(task=tid, machine=mid):
                self._cancel(tid, mid)
            case Move(tasks=tids, source=src, target=dst):
                self._move(tids, src, dst)
            case Defer(types=types):
                self.deferred = types
            case Configure(counts=counts):
                self.target = dict(counts)
                self.configurations.append((self.now, action))
            case Shortfall():
                self.shortfalls.append((self.now, action))
            case Forecast(job=name):
                self.forecasts[name] = action
            case Late(job=name):
                self.late[name] = action
                self.late_log.append((self.now, action))
            case Hold():
                # Nothing more is committed: the budget becomes what is committed.
                self.awaiting_budget = True
                self.budget = self.committed
            case Stop(reason=reason):
                self.stopped = True
                self.stop_reason = reason

    def _cancel(self, tid: int, mid: str) -> None:
        """End ``tid`` on ``mid`` without a result, queued or running; nothing if neither."""
        m = self.machines[mid]
        if tid in m.queue:
            m.queue.remove(tid)
            self._drop_run(tid, mid)
        start = m.running.pop(tid, None)
        if start is not None:
            self._observe(m, tid, self.now - start, ended_with_result=False)
            m.run_no.pop(tid, None)
            m.busy_s += self.now - start
            self.segments.append(Segment(tid, mid, start, self.now, "cancelled"))
            self._drop_run(tid, mid)
            self._start_queued(m)

    def _move(self, tids: Sequence[int], src: str, dst: str) -> None:
        """Queued tasks change machines; they start on ``dst`` in their order, once it is
        ready and free. A task not queued on ``src``, or a target gone, is a bug."""
        s, d = self.machines.get(src), self.machines.get(dst)
        if s is None or d is None or not d.alive:
            raise StateError(f"move from {src} to {dst}: no such live target")
        missing = [tid for tid in tids if tid not in s.queue]
        if missing:
            raise StateError(f"move from {src} to {dst}: tasks {missing} are not queued there")
        for tid in tids:
            s.queue.remove(tid)
        self.enqueue(d.queue, tids)
        self._start_queued(d)

"""The fold of a run's journal: ``apply(t, item)``, the one way a run's state changes,
for every event that happened and every action the controller decided.

It knows money (what is committed), machines and tasks; it decides nothing. The
records it folds into are ``core.records.RunRecords``; ``core.state.RunState`` is the
fold with its constructor.
"""

from __future__ import annotations

import dataclasses
from collections import deque
from collections.abc import Sequence

from autoscaler.core.files import Stored
from autoscaler.core.model import (
    ACTION_TYPES,
    EVENT_TYPES,
    GIVEN_UP_KINDS,
    Action,
    Assign,
    AssignGroup,
    BoundaryNear,
    BudgetSet,
    Cancel,
    Configure,
    DeadlineSet,
    Defer,
    Event,
    Extend,
    Forecast,
    HandedOver,
    Hold,
    Interrupted,
    JobAdded,
    JobArrived,
    JobSpec,
    JobWithdrawn,
    Late,
    Launch,
    LaunchFailed,
    Learned,
    MachineLaunched,
    MachineLost,
    MachineReady,
    MachineState,
    Mark,
    Move,
    QuotaSet,
    Release,
    Replicate,
    Resumed,
    Risk,
    Shortfall,
    Shutdown,
    Stop,
    TaskDone,
    TaskFailed,
    TaskState,
    Tick,
)
from autoscaler.core.records import Machine, Segment, StateError
from autoscaler.core.runs import Runs

# Enum members looked up once: reading ``MachineState.READY`` calls a descriptor.
_GONE = MachineState.GONE
_READY = MachineState.READY
_CANCELLED = TaskState.CANCELLED
_DONE = TaskState.DONE
_FAILED = TaskState.FAILED
_PENDING = TaskState.PENDING
_RUNNING = TaskState.RUNNING


class Fold(Runs):
    """``RunRecords`` and the one way they change (runs on machines: ``core.runs``)."""

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
        if type(item) is TaskDone and item.stored is None:  # the most common, as Assign
            self._task_done(item)
        elif type(item) is Assign:
            self._assign(self.machines[item.machine], (item.task,))
        elif isinstance(item, EVENT_TYPES):
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
                self.recovering.pop(tname, None)  # the type has capacity again
                self.machines[mid] = Machine(
                    id=mid,
                    type=self.types[tname],
                    token=token,
                    launched_at=start,
                    paid_until=start + self.billing.first_step_s,
                )
                self.alive[mid] = self.machines[mid]
                self.launch_index[mid] = len(self.launch_index)
                self.alive_slots += self.types[tname].slots
                queues = self.launch_queues.get(token)
                if queues:
                    self._queue_on(self.machines[mid], queues.popleft())
                if queues is not None and (not queues or token not in self.pending_launches):
                    self._unqueue_launch(token)
            case LaunchFailed(
                token=token, count=count, type=tname, kind=kind, until=until, reason=why
            ):
                self.launch_problems.append((self.now, tname, kind, why))
                if until is not None:
                    self._avoid(event, until)
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
                    m.state = _READY
                    m.ready_at = self.now
                    self.readies += 1
                    self._start_queued(m)
            case MachineLost(machine=mid, reason=reason):
                self._end_machine(mid, f"lost: {reason}", outcome="lost")
            case TaskDone(stored=stored):
                if stored is not None:
                    self._store(event, stored)
                    return
                self._task_done(event)
            case TaskFailed(task=tid, machine=mid, error=error, runtime_s=runtime):
                if not self._finish_run(tid, mid, "failed", runtime):
                    return
                if self.task_state[tid] is _RUNNING and not self.running_on.get(tid):
                    self.attempts[tid] += 1
                    self.task_errors[tid] = error
                    self.running_on.pop(tid, None)
                    if self.attempts[tid] > self.max_retries:
                        self.task_state[tid] = _FAILED
                        self.failed += 1
                    else:
                        self.task_state[tid] = _PENDING
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
            case JobAdded(job=job, order=order, categories=cats):
                self._add_job(job, order, cats)
            case JobWithdrawn(job=name):
                self._withdraw(name)
            case DeadlineSet(job=name, deadline=deadline):
                old = self.job_named(name)
                self.jobs = tuple(
                    dataclasses.replace(j, deadline=deadline) if j is old else j for j in self.jobs
                )
            case Interrupted():
                self.shutdown = self.awaiting_budget = self.interrupted = True
            case Resumed():
                self.shutdown = self.awaiting_budget = self.interrupted = False
            case QuotaSet():
                self.quota = event
            case Tick() | BoundaryNear() | HandedOver():
                pass

    def _task_done(self, event: TaskDone) -> None:
        """A run ended with a result (its outputs, if any, folded by the caller)."""
        tid, mid, runtime = event.task, event.machine, event.runtime_s
        m = self.machines[mid]
        if not self._finish_run(tid, mid, "done", runtime):
            self._done_after_all(m, tid, runtime)
            return
        if self.task_state[tid] is _RUNNING:
            self.task_state[tid] = _DONE
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

    def _store(self, done: TaskDone, stored: Stored) -> None:
        """``done`` folded; its outputs are the task's if it is the result that counted."""
        before = self.task_state[done.task]
        self._event(dataclasses.replace(done, stored=None))
        if before is not _DONE and self.task_state[done.task] is _DONE:
            self.stored[done.task] = stored

    def _avoid(self, failed: LaunchFailed, until: float) -> None:
        """What a refused launch avoids until ``until``: its type (``capacity``; an
        ``error`` not understood, briefly), its provider's types (``limit``), every
        scale-up (``throttled``, or a limit that names no types); the types avoided for
        capacity or a limit then recover over ``recover_s``."""
        if failed.kind == "capacity" or failed.kind in GIVEN_UP_KINDS:
            avoided: tuple[str, ...] = (failed.type,)
            table = self.unavailable
        elif failed.kind == "limit" and failed.types:
            avoided, table = failed.types, self.held_until
        elif failed.kind in ("limit", "throttled"):
            self.hold_until = max(until, self.hold_until or until)
            return
        else:  # an error not understood: the type waits a little, then is tried again
            self.unavailable[failed.type] = max(until, self.unavailable.get(failed.type, until))
            return
        for name in avoided:
            end = max(until, table.get(name, until))
            table[name] = end
            self.recovering[name] = (end, end + failed.recover_s)

    def _add_job(self, job: JobSpec, order: Sequence[int], cats: Sequence[int] = ()) -> None:
        """A new job's tasks join the run, arrived, at the end of the bag in ``order``,
        in their categories ``cats`` where the run has categories (else none: -1).
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
        if cats and len(cats) != job.count:
            raise StateError(f"job {job.name!r}: {len(cats)} categories for {job.count} tasks")
        if self.task_category:
            self.task_category = (*self.task_category, *(cats or [-1] * job.count))
        self.n_tasks += job.count
        self.task_state.extend([_PENDING] * job.count)
        self.attempts.extend([0] * job.count)
        self.pending.extend(order)
        self.jobs = (*self.jobs, job)
        self.arrived.add(job.name)
        if self.budget is not None:
            self.budget = None if job.budget is None else self.budget + job.budget

    def _withdraw(self, name: str) -> None:
        """Job ``name`` leaves the run: its tasks not ended are cancelled, taken from the
        bag, from the launches in flight and from the machines' queues, then their runs
        end. Withdrawing a job twice changes nothing."""
        job = self.job_named(name)
        if name in self.withdrawn:
            return
        self.withdrawn[name] = self.now
        ids = range(job.first, job.first + job.count)
        gone = {t for t in ids if self.task_state[t] in (_PENDING, _RUNNING)}
        for tid in gone:
            self.task_state[tid] = _CANCELLED
        self.cancelled += len(gone)
        self.pending = deque(t for t in self.pending if t not in gone)
        for token, queues in self.launch_queues.items():
            self.launch_queues[token] = deque(tuple(t for t in q if t not in gone) for q in queues)
        alive = list(self.alive_machines())
        for m in alive:  # queued first: ending a run starts the next in the queue
            for tid in [t for t in m.queue if t in gone]:
                self._cancel(tid, m.id)
        for m in alive:
            for tid in [t for t in m.running if t in gone]:
                self._cancel(tid, m.id)

    def _unqueue_launch(self, token: str) -> None:
        """A launch is settled: tasks still held for machines it never made go back."""
        for queue in self.launch_queues.pop(token, deque()):
            self._back_to_bag(queue)

    def _back_to_bag(self, tasks: Sequence[int]) -> None:
        for tid in reversed(tasks):
            if self.task_state[tid] is _RUNNING and not self.running_on.get(tid):
                self.task_state[tid] = _PENDING
                self.pending.appendleft(tid)

    def _first_cost(self, type_name: str) -> float:
        return self.billing.cost(self.types[type_name].price, self.billing.first_step_s)

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
        self.queued.pop(mid, None)
        m.state = _GONE
        if self.alive.pop(mid, None) is not None:
            self.alive_slots -= m.type.slots
        m.ended_at = end
        m.end_reason = reason
        # The money committed beyond the machine's real end is not spent.
        spent = self.billing.cost(m.type.price, end - m.launched_at)
        committed = self.billing.cost(m.type.price, m.paid_until - m.launched_at)
        if spent < committed:
            self._commit(spent - committed)

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
                        if self.task_state[tid] is not _PENDING:
                            raise StateError(f"launch {token}: task {tid} is not in the bag")
                        self.task_state[tid] = _RUNNING
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
                self._assign(self.machines[mid], (tid,))
            case AssignGroup(tasks=tids, machine=mid):
                m = self.machines[mid]
                for tid in tids:  # as one Assign each, in order (``Step.decided``)
                    self._assign(m, (tid,))
            case Replicate(task=tid, machine=mid):
                m = self.machines[mid]
                self._queue_on(m, (tid,))
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
            case Risk():
                self.risks.append((self.now, action))
            case Forecast(job=name):
                self.forecasts[name] = action
            case Late(job=name):
                self.late[name] = action
                self.late_log.append((self.now, action))
            case Learned(job=name, type=tname):
                self.learned[name, tname] = (self.now, action)
            case Hold(means=means):
                # Nothing more is committed: the budget becomes what is committed.
                self.awaiting_budget = True
                self.held_means = dict(means)
                self.budget = self.committed
            case Stop(reason=reason):
                self.stopped = True
                self.stop_reason = reason

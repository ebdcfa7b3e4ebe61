"""The state of a run: a fold over the events and actions of its journal.

``RunState`` changes only through ``RunState.apply(t, item)``: an event that happened, or
an action the controller decided, at run time ``t``. A driver journals exactly those
pairs, so replaying a journal rebuilds the state exactly (``journal.replay``). It is
composed of ledgers, each owning its fields and the records that concern it alone: the
machines (``fleet``), the tasks and their runs (``tasks``), money and the run's stop
(``money``), what may be bought (``capacity``), the jobs (``work``), the runtimes seen
(``observed``) and the configurations and warnings decided (``decisions``). ``apply``
looks a record's type up in ``FOLD``; the runs of tasks on machines concern several
ledgers (a machine's queue and runs, the task's state, what a run that ended teaches,
the money its machine commits), and are folded here: a task queued on a machine gets its
run number there (its agent is sent the whole queue, a task group), starts as the
machine's slots free up, and ends with a result, without one, or taken back from the
queue. A result that arrives counts, whatever came before it: a run taken back, or cut
short by its machine's end (lost for its silence while its agent went on), that had
ended there is the task's result if nothing else ended the task first. It decides
nothing: that is the controller's job.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from autoscaler.core.billing import BillingModel
from autoscaler.core.capacity import Capacity
from autoscaler.core.decisions import Decisions
from autoscaler.core.errors import StateError
from autoscaler.core.job_ledger import Jobs
from autoscaler.core.machine_ledger import Fleet, Machine
from autoscaler.core.model import (
    NOTICE_REASON,
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
    PricesSeen,
    ProviderLimit,
    QuotaSet,
    RebalanceRecommended,
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
    TypeSpec,
)
from autoscaler.core.money_ledger import Money
from autoscaler.core.observations import Observations
from autoscaler.core.reclaims import Loss, Pool, ReclaimPolicy, Reclaims, speed_factor
from autoscaler.core.task_files import Stored
from autoscaler.core.task_ledger import Segment, Tasks
from autoscaler.learn.stats import RuntimeStats

__all__ = ["Machine", "RunState", "Segment", "StateError"]


@dataclass
class RunState:
    """Everything the controller knows, rebuilt from the journal alone."""

    types: dict[str, TypeSpec]
    billing: BillingModel
    n_tasks: int
    fleet: Fleet
    tasks: Tasks
    money: Money
    capacity: Capacity
    work: Jobs
    observed: Observations
    decisions: Decisions
    now: float = 0.0  # run time of the last record applied

    def apply(self, t: float, item: Event | Action) -> None:
        """``item`` happened (an event) or was decided (an action) at run time ``t``.

        The time comes with the record, as the journal stores it, so a replay sets
        ``now`` exactly as the live run did.
        """
        self.now = t
        if type(item) is TaskDone and item.stored is None:  # the most common, as Assign
            _task_done(self, item)
        elif type(item) is Assign:
            _assign(self, self.fleet.machines[item.machine], (item.task,))
        else:
            handler = FOLD.get(type(item))
            if handler is None:
                raise StateError(f"neither an event nor an action: {item!r}")
            handler(self, item)

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
        limits: Sequence[ProviderLimit] = (),
        categories: Sequence[int] = (),
        launch_prefix: str = "",
        reclaims: ReclaimPolicy | None = None,
    ) -> RunState:
        """A fresh run; ``order`` is the FCFS order tasks leave the bag in; ``paired``:
        tasks to run on every type (compact sampling; 0: plain sampling); ``jobs``: a
        deadline-mode run's jobs, owning the task ids between them; ``categories``: each
        task's category id (paper 004), or none; ``launch_prefix``: what its launch
        tokens start with (``Fleet.next_token``); ``reclaims``: when repeated reclaims
        hold a type (``core.reclaims``), each type's prior its ``reclaim_per_hour``."""
        if sorted(order) != list(range(n_tasks)):
            raise StateError("task order must be a permutation of the task ids")
        if jobs and sorted(t for j in jobs for t in range(j.first, j.first + j.count)) != list(
            range(n_tasks)
        ):
            raise StateError("the jobs' tasks must be the task ids, each owned by one job")
        by_name = {t.name: t for t in types}
        return cls(
            types=by_name,
            billing=billing,
            n_tasks=n_tasks,
            fleet=Fleet(types=by_name, billing=billing, launch_prefix=launch_prefix),
            tasks=Tasks(
                task_state=[TaskState.PENDING] * n_tasks,
                attempts=[0] * n_tasks,
                pending=deque(order),
                max_retries=max_retries,
                task_category=tuple(categories),
            ),
            money=Money(budget=budget, spend_log=[(0.0, 0.0)]),
            capacity=Capacity(
                limits=tuple(limits),
                reclaims=Reclaims(
                    policy=reclaims or ReclaimPolicy(),
                    prior={t.name: t.reclaim_per_hour for t in types if t.reclaim_per_hour > 0},
                ),
            ),
            work=Jobs(jobs=tuple(jobs), arrived={j.name for j in jobs if j.at <= 0}),
            observed=Observations(
                stats={t.name: RuntimeStats(sample_target) for t in types}, paired_target=paired
            ),
            decisions=Decisions(),
        )

    # --- questions across ledgers -------------------------------------------------------

    @property
    def finished(self) -> bool:
        """Every task is done, failed, or cancelled with its job."""
        tasks = self.tasks
        return tasks.done + tasks.failed + tasks.cancelled == self.n_tasks

    @property
    def tasks_left(self) -> int:
        tasks = self.tasks
        return self.n_tasks - tasks.done - tasks.failed - tasks.cancelled

    @property
    def over(self) -> bool:
        """Nothing is left to drive: the run stopped, or waits for a budget, and no
        machine is alive or being launched."""
        return (
            (self.money.stopped or self.money.awaiting_budget)
            and not self.fleet.pending_launches
            and not self.fleet.any_alive()
        )

    def none_left(self) -> str | None:
        """Why no machine can be bought for the run any more, when every type was given
        up; None while a type is left (``Capacity.none_left``)."""
        return self.capacity.none_left(list(self.types), self.tasks_left)

    def actual_cost(self) -> float:
        """What the machines cost by their real lifetimes (≤ committed)."""
        return self.fleet.actual_cost(self.now)

    def reclaim_rate(self, type_name: str) -> float:
        """How often ``type_name``'s machines are taken back, per machine-hour, learned
        from the run so far (``Reclaims.rate``); 0 for a type never taken back and
        without a prior."""
        reclaims = self.capacity.reclaims
        if not reclaims.learns(type_name):
            return 0.0
        return reclaims.rate(type_name, _alive_s(self, type_name))

    def reclaim_factor(self, type_name: str, mean_task_s: float) -> float:
        """The share of a machine of ``type_name`` a plan counts on, for the work its
        reclaims lose (``reclaims.speed_factor``, at the type's boot time as measured):
        what both planners scale a type's speed by; exactly 1 at rate 0."""
        rate = self.reclaim_rate(type_name)
        if rate <= 0:
            return 1.0
        return speed_factor(rate, mean_task_s, self.fleet.boot_s(type_name))


# Enum members looked up once: reading ``MachineState.READY`` calls a descriptor.
_READY = MachineState.READY
_CANCELLED = TaskState.CANCELLED
_DONE = TaskState.DONE
_FAILED = TaskState.FAILED
_PENDING = TaskState.PENDING
_RUNNING = TaskState.RUNNING


# --- runs of tasks on machines -------------------------------------------------------


def _observe(s: RunState, m: Machine, tid: int, runtime_s: float, with_result: bool) -> None:
    """What a run that just ended says about its type's runtimes (replicas: nothing;
    they are chosen for being long, so they would bias the estimate): a result is an
    observed runtime, a failure a censored one (the task needed longer to succeed)."""
    if tid in m.replicas:
        m.replicas.discard(tid)
        return
    if with_result:
        work = s.work
        job = work.job_of(tid).name if work.jobs else None
        cats = s.tasks.task_category
        category = cats[tid] if tid < len(cats) else None
        s.observed.record(tid, m.type.name, m.id, job, category, runtime_s)
    else:
        s.observed.censor(tid, m.type.name, runtime_s)


def _begin(s: RunState, m: Machine, tid: int, at: float) -> None:
    """``tid``, queued on ``m`` (its run number given), starts at ``at``."""
    tasks = s.tasks
    runs = tasks.running_on.get(tid)
    if not s.observed.begin(tid, m.type.name, bool(runs)):
        m.replicas.add(tid)
    m.running[tid] = at
    if runs is None:
        runs = tasks.running_on[tid] = {}
    runs[m.id] = at
    if len(runs) == 1:
        tasks.solo_gains += 1


def _start_queued(s: RunState, m: Machine) -> None:
    if m.state is _READY:  # a booting one starts its queue when ready
        while m.queue and len(m.running) < m.type.slots:
            _begin(s, m, m.queue.popleft(), s.now)
    s.fleet.track_queue(m)


def _queue_on(s: RunState, m: Machine, tids: Sequence[int]) -> None:
    """Queue ``tids`` on ``m``, each with its run number: from here on the machine's
    agent is sent them (a task group), and runs them as its slots free up."""
    for tid in tids:
        m.starts += 1
        m.run_no[tid] = m.starts
    s.work.enqueue(m.queue, tids)
    s.fleet.track_queue(m)


def _finish_run(s: RunState, tid: int, mid: str, outcome: str, runtime_s: float) -> bool:
    """Close the run of ``tid`` on ``mid``; False if there was none (a late replica)."""
    m = s.fleet.machines[mid]
    if tid not in m.running and tid in m.queue and tid in m.run_no:
        # The agent ran it before the state expected (its local queue's order, or
        # slots freed earlier than results said): it started ``runtime_s`` ago.
        m.queue.remove(tid)
        s.fleet.track_queue(m)
        _begin(s, m, tid, max(m.ready_at or s.now, s.now - runtime_s))
    start = m.running.pop(tid, None)
    if start is None:
        return False
    _observe(s, m, tid, runtime_s, outcome == "done")
    m.run_no.pop(tid, None)
    s.tasks.run_ends(tid, mid)
    m.busy_s += s.now - start
    s.tasks.segments.append(Segment(tid, mid, start, s.now, outcome))
    _start_queued(s, m)
    return True


def _cancel(s: RunState, tid: int, mid: str) -> None:
    """End ``tid`` on ``mid`` without a result, queued or running; nothing if neither."""
    m = s.fleet.machines[mid]
    if tid in m.queue:
        m.queue.remove(tid)
        m.run_no.pop(tid, None)
        m.taken.add(tid)
        s.fleet.track_queue(m)
        s.tasks.drop_run(tid, mid)
    start = m.running.pop(tid, None)
    if start is not None:
        _observe(s, m, tid, s.now - start, False)
        m.run_no.pop(tid, None)
        m.busy_s += s.now - start
        s.tasks.segments.append(Segment(tid, mid, start, s.now, "cancelled"))
        s.tasks.drop_run(tid, mid)
        _start_queued(s, m)


def _assign(s: RunState, m: Machine, tids: Sequence[int]) -> None:
    """Tasks from the bag (or a sampling pick) queued on ``m``, started as slots allow."""
    tasks, observed = s.tasks, s.observed
    for tid in tids:
        tasks.taken(tid)
        if len(observed.paired) < observed.paired_target:
            observed.pair(tid)
    _queue_on(s, m, tids)
    _start_queued(s, m)


def _done_after_all(s: RunState, m: Machine, tid: int, runtime_s: float) -> None:
    """A task taken back from ``m`` that its agent had started (or finished) before it
    heard: taken back from its queue, or ``m`` lost while its agent went on (lost for
    its silence, say, while the result was on its way). Its result counts, whatever
    came between, and the copies queued or running elsewhere end (the first result
    wins), so it never runs to success twice. A counted run the loss ended records its
    runtime now (the loss censored it at its age then: a bound the runtime agrees
    with); a run taken back from a queue had not begun, as far as the state knew."""
    tasks = s.tasks
    if tid not in m.taken or tasks.task_state[tid] not in (_RUNNING, _PENDING):
        return
    m.taken.discard(tid)
    if tid in m.lost_runs:
        m.lost_runs.discard(tid)
        _observe(s, m, tid, runtime_s, True)
    if tasks.task_state[tid] is _PENDING:
        tasks.pending.remove(tid)
    tasks.task_state[tid] = _DONE
    tasks.done += 1
    m.tasks_done += 1
    end = s.now if m.ended_at is None else min(s.now, m.ended_at)
    tasks.segments.append(Segment(tid, m.id, max(0.0, end - runtime_s), end, "done"))
    for other in s.fleet.alive_machines():
        if tid in other.queue or tid in other.running:
            _cancel(s, tid, other.id)
    tasks.running_on.pop(tid, None)
    s.work.drop_from_launches({tid})


def _task_done(s: RunState, event: TaskDone) -> None:
    """A run ended with a result (its outputs, if any, folded by ``_stored``)."""
    tid, mid, runtime = event.task, event.machine, event.runtime_s
    m = s.fleet.machines[mid]
    if not _finish_run(s, tid, mid, "done", runtime):
        _done_after_all(s, m, tid, runtime)
        return
    tasks = s.tasks
    paired = tid in s.observed.paired_runs
    if tasks.task_state[tid] is _RUNNING:
        tasks.task_state[tid] = _DONE
        tasks.done += 1
        m.tasks_done += 1
        # The first result wins: the other runs end now (the controller
        # sends each a Cancel, which then finds nothing left to stop).
        # A paired task's runs on other types go on: they are the pairs.
        if not paired:
            for other in list(tasks.running_on.get(tid, {})):
                _cancel(s, tid, other)
        if not tasks.running_on.get(tid):
            tasks.running_on.pop(tid, None)
    elif paired and not tasks.running_on.get(tid):
        tasks.running_on.pop(tid, None)


def _done(s: RunState, event: TaskDone) -> None:
    if event.stored is None:
        _task_done(s, event)
    else:
        _stored(s, event, event.stored)


def _stored(s: RunState, done: TaskDone, stored: Stored) -> None:
    """``done`` folded; its outputs are the task's if it is the result that counted."""
    before = s.tasks.task_state[done.task]
    _task_done(s, done)
    if before is not _DONE and s.tasks.task_state[done.task] is _DONE:
        s.tasks.stored[done.task] = stored


def _failed(s: RunState, event: TaskFailed) -> None:
    tid = event.task
    if not _finish_run(s, tid, event.machine, "failed", event.runtime_s):
        return
    tasks = s.tasks
    if tasks.task_state[tid] is _RUNNING and not tasks.running_on.get(tid):
        tasks.attempts[tid] += 1
        tasks.task_errors[tid] = event.error
        tasks.running_on.pop(tid, None)
        if tasks.attempts[tid] > tasks.max_retries:
            tasks.task_state[tid] = _FAILED
            tasks.failed += 1
        else:
            tasks.task_state[tid] = _PENDING
            tasks.pending.appendleft(tid)
    elif tid in s.observed.paired_runs and not tasks.running_on.get(tid):
        tasks.running_on.pop(tid, None)


def _move(s: RunState, action: Move) -> None:
    """Queued tasks change machines; they start on the target in their order, once it is
    ready and free. A task not queued on the source, or a target gone, is a bug."""
    tids, src, dst = action.tasks, action.source, action.target
    machines = s.fleet.machines
    a, b = machines.get(src), machines.get(dst)
    if a is None or b is None or not b.alive:
        raise StateError(f"move from {src} to {dst}: no such live target")
    missing = [tid for tid in tids if tid not in a.queue]
    if missing:
        raise StateError(f"move from {src} to {dst}: tasks {missing} are not queued there")
    for tid in tids:
        a.queue.remove(tid)
        a.run_no.pop(tid, None)
        a.taken.add(tid)
    s.fleet.track_queue(a)
    _queue_on(s, b, tids)
    _start_queued(s, b)


# --- machines ------------------------------------------------------------------------


def _launch(s: RunState, action: Launch) -> None:
    token = action.token
    s.fleet.launch(token, action.type, action.count)
    s.money.commit(s.now, action.count * s.fleet.first_cost(action.type))
    if action.queues:
        tasks = s.tasks
        taken = {tid for q in action.queues for tid in q}
        for tid in taken:
            if tasks.task_state[tid] is not _PENDING:
                raise StateError(f"launch {token}: task {tid} is not in the bag")
            tasks.task_state[tid] = _RUNNING
        tasks.pending = deque(t for t in tasks.pending if t not in taken)
        s.work.launch_queues[token] = deque(tuple(q) for q in action.queues)


def _launched(s: RunState, event: MachineLaunched) -> None:
    token = event.token
    start = s.now if event.at is None else min(event.at, s.now)
    m = s.fleet.launched(event.machine, event.type, token, start, event.zone)
    s.capacity.launched(event.type)
    queues = s.work.launch_queues.get(token)
    if queues:
        _queue_on(s, m, queues.popleft())
    if queues is not None and (not queues or token not in s.fleet.pending_launches):
        _unqueue_launch(s, token)


def _launch_failed(s: RunState, event: LaunchFailed) -> None:
    s.capacity.refused(s.now, event)
    ttype = s.fleet.pending_launches.get(event.token, ("", 0))[0]
    count = s.fleet.settle(event.token, event.count)
    if count > 0:
        s.money.commit(s.now, -count * s.fleet.first_cost(ttype))
    queues = s.work.launch_queues.get(event.token)
    for _ in range(min(count, len(queues or ()))):
        assert queues is not None
        s.tasks.back_to_bag(queues.pop())
    if queues is not None and (not queues or event.token not in s.fleet.pending_launches):
        _unqueue_launch(s, event.token)


def _unqueue_launch(s: RunState, token: str) -> None:
    """A launch is settled: tasks still held for machines it never made go back."""
    for queue in s.work.launch_queues.pop(token, deque()):
        s.tasks.back_to_bag(queue)


def _ready(s: RunState, event: MachineReady) -> None:
    m = s.fleet.ready(event.machine, s.now)
    if m is not None:
        _start_queued(s, m)


def _end_machine(s: RunState, mid: str, reason: str, outcome: str) -> None:
    m = s.fleet.machines[mid]
    if not m.alive:
        return
    # A machine never outlives its paid time (it is released before, and a real
    # worker's lease ends it there even when no driver is watching), so news of its
    # end that arrives later (after a restart) dates it to the end of paid time.
    end = min(s.now, m.paid_until)
    reclaimed = NOTICE_REASON in reason
    pools = _pool_alive_s(s) if reclaimed else {}
    loss = _loss(s, m, end, pools) if reclaimed else None
    tasks = s.tasks
    for tid, start in list(m.running.items()):
        m.busy_s += max(0.0, end - start)
        if tid not in m.replicas:
            m.lost_runs.add(tid)
        _observe(s, m, tid, end - start, False)
        tasks.segments.append(Segment(tid, mid, start, max(start, end), outcome))
        tasks.drop_run(tid, mid)
    # Its agent may have run them, and its result may yet come (``_done_after_all``).
    m.taken.update(m.running, m.queue)
    m.running.clear()
    m.run_no.clear()
    for tid in m.queue:
        tasks.drop_run(tid, mid)
    zones = {z for t, z in pools if t == m.type.name} if m.zone else ()
    s.capacity.machine_ended(m.type.name, end - m.launched_at, reclaimed, end, loss, m.zone, zones)
    # The money committed beyond the machine's real end is not spent.
    unspent = s.fleet.gone(m, end, reason)
    if unspent < 0:
        s.money.commit(s.now, unspent)


def _loss(s: RunState, m: Machine, end: float, pools: Mapping[Pool, float]) -> Loss:
    """What taking ``m`` back at ``end`` cuts short: its runs' time (a share of one
    machine's work: divided among its slots), the boot a replacement pays, and the
    type's other machines' time alive (``pools``: ``_pool_alive_s``)."""
    cut = sum(max(0.0, end - start) for start in m.running.values())
    own = max(0.0, s.now - m.launched_at)
    others = _alive_s(s, m.type.name, pools) - own
    in_zone = pools.get((m.type.name, m.zone), 0.0) - own
    return Loss(
        cut / max(1, m.type.slots), s.fleet.boot_s(m.type.name), max(0.0, others), max(0.0, in_zone)
    )


def _pool_alive_s(s: RunState) -> dict[Pool, float]:
    """Per pool (type, zone), the time its machines alive now have lived."""
    return s.fleet.pool_alive_s(s.now)


def _alive_s(s: RunState, type_name: str, pools: Mapping[Pool, float] | None = None) -> float:
    """The time ``type_name``'s machines alive now have lived, in all its zones."""
    pools = _pool_alive_s(s) if pools is None else pools
    return sum(v for (t, _), v in pools.items() if t == type_name)


def _tick(s: RunState, _: Tick) -> None:
    """A monitoring tick: a type held after repeated reclaims comes back once its
    learned rate fell below its return rate (``Reclaims.returning``)."""
    capacity = s.capacity
    if any(True for _ in capacity.reclaims.active(s.now)):
        capacity.reclaim_returns(s.now, _pool_alive_s(s))


def _prices_seen(s: RunState, event: PricesSeen) -> None:
    """Market prices: the machines' time known since is priced by them (committed money
    comes back where they are below the caps), and each market-priced type's last price
    is the one the planners see from now on. A type without a cap keeps its price."""
    delta = s.fleet.reprice(s.now, event)
    if delta:
        s.money.commit(s.now, delta)
    for name in dict.fromkeys(event.types):
        t = s.types.get(name)
        last = s.fleet.market.last(name)
        if t is not None and t.cap is not None and last is not None:
            price = min(last, t.cap)  # never billed above its cap
            if price != t.price:
                s.types[name] = replace(t, price=price)


def _rebalance(s: RunState, event: RebalanceRecommended) -> None:
    """The machine drains: marked to go at the end of its paid time, for good (the
    controller gives it nothing new and takes its queue back)."""
    m = s.fleet.machines[event.machine]
    if m.alive:
        m.draining = True
        s.fleet.mark(m.id, True)


def _extend(s: RunState, action: Extend) -> None:
    s.money.commit(s.now, s.fleet.extend(action.machine, action.until))


# --- jobs ----------------------------------------------------------------------------


def _add_job(s: RunState, event: JobAdded) -> None:
    """A new job's tasks join the run, arrived, at the end of the bag in its order, in
    its categories where the run has categories (else none: -1). The run's budget stays
    the sum of the jobs' budgets while every job has one."""
    job: JobSpec = event.job
    order: Sequence[int] = event.order
    cats: Sequence[int] = event.categories
    if job.first != s.n_tasks or job.count <= 0:
        raise StateError(
            f"job {job.name!r} adds tasks {job.first}..{job.first + job.count - 1}: "
            f"the run's next task is {s.n_tasks}"
        )
    if sorted(order) != list(range(job.first, job.first + job.count)):
        raise StateError(f"job {job.name!r}: the order must be a permutation of its tasks")
    if any(j.name == job.name for j in s.work.jobs):
        raise StateError(f"job {job.name!r} is in the run already")
    if cats and len(cats) != job.count:
        raise StateError(f"job {job.name!r}: {len(cats)} categories for {job.count} tasks")
    tasks = s.tasks
    if tasks.task_category:
        tasks.task_category = (*tasks.task_category, *(cats or [-1] * job.count))
    s.n_tasks += job.count
    tasks.task_state.extend([_PENDING] * job.count)
    tasks.attempts.extend([0] * job.count)
    tasks.pending.extend(order)
    s.work.add(job)
    s.money.add_budget(job.budget)


def _withdraw(s: RunState, event: JobWithdrawn) -> None:
    """The job leaves the run: its tasks not ended are cancelled, taken from the bag,
    from the launches in flight and from the machines' queues, then their runs end.
    Withdrawing a job twice changes nothing."""
    name = event.job
    job = s.work.job_named(name)
    if name in s.work.withdrawn:
        return
    s.work.withdrawn[name] = s.now
    tasks = s.tasks
    ids = range(job.first, job.first + job.count)
    gone = {t for t in ids if tasks.task_state[t] in (_PENDING, _RUNNING)}
    for tid in gone:
        tasks.task_state[tid] = _CANCELLED
    tasks.cancelled += len(gone)
    tasks.pending = deque(t for t in tasks.pending if t not in gone)
    s.work.drop_from_launches(gone)
    alive = list(s.fleet.alive_machines())
    for m in alive:  # queued first: ending a run starts the next in the queue
        for tid in [t for t in m.queue if t in gone]:
            _cancel(s, tid, m.id)
    for m in alive:
        for tid in [t for t in m.running if t in gone]:
            _cancel(s, tid, m.id)


# --- the table -----------------------------------------------------------------------


def _assign_group(s: RunState, action: AssignGroup) -> None:
    m = s.fleet.machines[action.machine]
    for tid in action.tasks:  # as one Assign each, in order (``Step.decided``)
        _assign(s, m, (tid,))


def _replicate(s: RunState, action: Replicate) -> None:
    m = s.fleet.machines[action.machine]
    _queue_on(s, m, (action.task,))
    _start_queued(s, m)


def _shutdown(s: RunState, _: Shutdown) -> None:
    s.money.shutdown = True


def _nothing(s: RunState, _: object) -> None:
    pass


Handler = Callable[["RunState", Any], None]

FOLD: dict[type, Handler] = {
    # events
    MachineLaunched: _launched,
    LaunchFailed: _launch_failed,
    MachineReady: _ready,
    MachineLost: lambda s, e: _end_machine(s, e.machine, f"lost: {e.reason}", "lost"),
    TaskDone: _done,
    TaskFailed: _failed,
    Shutdown: _shutdown,
    BudgetSet: lambda s, e: s.money.budget_set(s.now, e),
    JobArrived: lambda s, e: s.work.arrive(e.job),
    JobAdded: _add_job,
    JobWithdrawn: _withdraw,
    DeadlineSet: lambda s, e: s.work.deadline_set(e),
    Interrupted: lambda s, e: s.money.interrupt(True),
    Resumed: lambda s, e: s.money.interrupt(False),
    QuotaSet: lambda s, e: s.capacity.quota_set(e),
    PricesSeen: _prices_seen,
    RebalanceRecommended: _rebalance,
    Tick: _tick,
    BoundaryNear: _nothing,
    HandedOver: _nothing,
    # actions
    Launch: _launch,
    Extend: _extend,
    Mark: lambda s, a: s.fleet.mark(a.machine, a.release),
    Release: lambda s, a: _end_machine(s, a.machine, a.reason, "cancelled"),
    Assign: lambda s, a: _assign(s, s.fleet.machines[a.machine], (a.task,)),
    AssignGroup: _assign_group,
    Replicate: _replicate,
    Cancel: lambda s, a: _cancel(s, a.task, a.machine),
    Move: _move,
    Defer: lambda s, a: s.decisions.defer(a),
    Configure: lambda s, a: s.decisions.configure(s.now, a),
    Shortfall: lambda s, a: s.decisions.shortfall(s.now, a),
    Risk: lambda s, a: s.decisions.risk(s.now, a),
    Forecast: lambda s, a: s.work.forecast(a),
    Late: lambda s, a: s.work.said_late(s.now, a),
    Learned: lambda s, a: s.work.learn(s.now, a),
    Hold: lambda s, a: s.money.hold(a),
    Stop: lambda s, a: s.money.stop(a),
}
"""Each record type (``model.EVENT_TYPES``, ``model.ACTION_TYPES``) -> its handler."""

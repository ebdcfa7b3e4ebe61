"""The records of a run's state: its machines, the runs of tasks on them (for the
report's Gantt chart), and ``RunRecords``, every field the fold (``core.fold``) keeps
and the questions the controllers ask of them. ``core.state.RunState`` is the whole."""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field

from autoscaler.core.billing import BillingModel
from autoscaler.core.errors import AutoscalerError
from autoscaler.core.files import Stored
from autoscaler.core.model import (
    GIVEN_UP_KINDS,
    NEVER,
    Configure,
    Forecast,
    JobSpec,
    Late,
    Learned,
    MachineState,
    ProviderLimit,
    QuotaSet,
    Risk,
    Shortfall,
    TaskState,
    TypeSpec,
)
from autoscaler.learn.stats import RuntimeStats

# Enum members looked up once: reading ``MachineState.READY`` calls a descriptor.
_GONE = MachineState.GONE
_READY = MachineState.READY
_CANCELLED = TaskState.CANCELLED

RECOVERING_WEIGHT = 0.5
"""What a type counts in a plan the moment its avoidance after a refused launch ends."""


class StateError(AutoscalerError):
    """An event or action that does not fit the state (a bug or a corrupt journal)."""

    code = "StateError"


@dataclass(slots=True)
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
    taken: set[int] = field(default_factory=set)  # queued here, taken back: may still end here
    tasks_done: int = 0
    busy_s: float = 0.0  # time spent on tasks that finished (any outcome)

    @property
    def alive(self) -> bool:
        return self.state is not _GONE

    @property
    def idle(self) -> bool:
        return self.state is _READY and not self.running and not self.queue


@dataclass(slots=True)
class Segment:
    """A run of one task on one machine, for the report's Gantt chart."""

    task: int
    machine: str
    start: float
    end: float
    outcome: str  # done, failed, cancelled, lost


@dataclass
class RunRecords:
    """Everything the controller knows, rebuilt from the journal alone."""

    types: dict[str, TypeSpec]
    billing: BillingModel
    budget: float | None
    n_tasks: int
    limits: tuple[ProviderLimit, ...] = ()  # per provider: machines at once, machine time
    max_retries: int = 2
    now: float = 0.0  # run time of the last record applied
    machines: dict[str, Machine] = field(default_factory=dict)
    # Of them, those not gone (in launch order) and their slots: the per-event work of
    # a dispatch does not grow with the machines a long run has had.
    alive: dict[str, Machine] = field(default_factory=dict, compare=False, repr=False)
    alive_slots: int = field(default=0, compare=False)
    # Of the alive ones, those with tasks queued (in no order; ``launch_index`` orders
    # them): the tail's take-back looks at these, not at every machine, per idle one.
    queued: dict[str, Machine] = field(default_factory=dict, compare=False, repr=False)
    launch_index: dict[str, int] = field(default_factory=dict, compare=False, repr=False)
    readies: int = field(default=0, compare=False)  # machines that came up (MachineReady)
    # ``boot_s`` per type, with the (machines, readies) it was worked out at
    _boots: dict[str, tuple[tuple[int, int], float | None]] = field(
        default_factory=dict, compare=False, repr=False
    )
    task_state: list[TaskState] = field(default_factory=list)
    attempts: list[int] = field(default_factory=list)
    pending: deque[int] = field(default_factory=deque)
    running_on: dict[int, dict[str, float]] = field(default_factory=dict)
    # Times a task came to have exactly one run (its first began, or its other ended),
    # and what a controller worked out from ``running_on`` with the count it was at: the
    # tail's candidates (``budget.tail``) hold until a task joins them. Not records.
    solo_gains: int = field(default=0, compare=False)
    memo: dict[str, object] = field(default_factory=dict, compare=False, repr=False)
    pending_launches: dict[str, tuple[str, int]] = field(default_factory=dict)
    committed: float = 0.0  # money committed: paid units plus launches in flight
    done: int = 0
    failed: int = 0
    stop_reason: str | None = None
    stopped: bool = False  # Stop was decided: nothing new is committed, machines drain
    shutdown: bool = False  # asked to end now: machines go at once, nothing is dispatched
    awaiting_budget: bool = False  # held after sampling (Hold) until a BudgetSet
    held_means: dict[str, float] = field(default_factory=dict)  # the Hold's estimated means
    budget_set_at: float | None = None  # when the last BudgetSet came
    interrupted: bool = False  # Interrupted (the service stopped), until Resumed
    target: dict[str, int] = field(default_factory=dict)  # current configuration
    configurations: list[tuple[float, Configure]] = field(default_factory=list)
    segments: list[Segment] = field(default_factory=list)
    spend_log: list[tuple[float, float]] = field(default_factory=list)  # (time, committed)
    task_errors: dict[int, str] = field(default_factory=dict)
    stored: dict[int, Stored] = field(default_factory=dict)  # task -> its outputs committed
    stats: dict[str, RuntimeStats] = field(default_factory=dict)
    launch_seq: int = 0  # launches decided so far; names the next launch token
    launch_prefix: str = ""  # launch tokens (and so machine names) start with it
    unavailable: dict[str, float] = field(default_factory=dict)  # type -> avoided until
    hold_until: float | None = None  # throttled (or a limit of no named types): no scale-up
    held_until: dict[str, float] = field(default_factory=dict)  # type -> its provider's limit
    quota: QuotaSet | None = None  # the last a service set (its jobs share the limits)
    recovering: dict[str, tuple[float, float]] = field(
        default_factory=dict
    )  # type -> (avoidance ended, full weight again): ``weight``
    deferred: tuple[str, ...] = ()  # types whose wanted launches wait for a tick (Defer)
    shortfalls: list[tuple[float, Shortfall]] = field(default_factory=list)  # warnings given
    risks: list[tuple[float, Risk]] = field(default_factory=list)  # "budget at risk" said
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
    # Categories (paper 004): each task's category id (empty: none), and per (category,
    # type) the runs that ended with a result: [count, sum, sum of squares].
    task_category: tuple[int, ...] = ()
    category_runs: dict[tuple[int, str], list[float]] = field(default_factory=dict)
    forecasts: dict[str, Forecast] = field(default_factory=dict)  # the last, per job
    late: dict[str, Late] = field(default_factory=dict)  # the last lateness said, per job
    late_log: list[tuple[float, Late]] = field(default_factory=list)
    learned: dict[tuple[str, str], tuple[float, Learned]] = field(default_factory=dict)
    withdrawn: dict[str, float] = field(default_factory=dict)  # job -> when (JobWithdrawn)
    cancelled: int = 0  # tasks of withdrawn jobs that had not ended (TaskState.CANCELLED)

    def next_token(self) -> str:
        """The token of the next launch: ``L<n>``, after the run's prefix if it has one
        (machine names are made from it: unique across runs side by side)."""
        seq = f"L{self.launch_seq}"
        return f"{self.launch_prefix}_{seq}" if self.launch_prefix else seq

    def available(self, type_name: str, now: float) -> bool:
        """Whether the provider may have capacity for ``type_name`` at ``now``."""
        return self.unavailable.get(type_name, -math.inf) <= now

    def given_up(self, type_name: str) -> bool:
        """Whether ``type_name`` is not bought again (``GIVEN_UP_KINDS``)."""
        return self.unavailable.get(type_name, -math.inf) >= NEVER

    def none_left(self) -> str | None:
        """Why no machine can be bought for the run any more, when every type was given
        up (the last reason given for each); None while a type is left."""
        if not self.types or not all(self.given_up(name) for name in self.types):
            return None
        why = {t: reason for _, t, kind, reason in self.launch_problems if kind in GIVEN_UP_KINDS}
        said = "; ".join(f"{t}: {why[t]}" if t in why else t for t in self.types)
        return f"every machine type was given up, {self.tasks_left} tasks left ({said})"

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

    def held(self, now: float, type_name: str | None = None) -> bool:
        """Whether scale-up waits at ``now`` for a limit or throttling to lift: of every
        type, or (``type_name``) of that type's provider."""
        if self.hold_until is not None and self.hold_until > now:
            return True
        return type_name is not None and self.held_until.get(type_name, -math.inf) > now

    def launchable(self, type_name: str, now: float) -> bool:
        """Whether a new machine of ``type_name`` may be asked for at ``now``: its type
        has capacity and its provider is not held."""
        return self.available(type_name, now) and not self.held(now, type_name)

    def launchable_at(self, types: Sequence[str]) -> float:
        """When the first of ``types`` may be asked for again (its capacity back and its
        provider's hold lifted): when a deferred launch should be tried."""
        common = self.hold_until if self.hold_until is not None else -math.inf
        return min(
            max(common, self.unavailable.get(t, -math.inf), self.held_until.get(t, -math.inf))
            for t in types
        )

    def weight(self, type_name: str, now: float) -> float:
        """How much ``type_name`` counts in a plan at ``now``, in [0, 1].

        0 while it is avoided (no capacity, or its provider held by a limit). When the
        avoidance ends it comes back at ``RECOVERING_WEIGHT`` and regains full weight
        linearly over the ``recover_s`` its refusal gave; a machine of the type
        launched meanwhile proves the capacity back (full weight at once). This is
        Ray's recovery score for a node type whose allocation failed (autoscaler v2,
        ``CloudResourceMonitor.get_recoverable_resource_availabilities``: 0 within a
        safety floor, then min(1, elapsed / RAY_AUTOSCALER_AVAILABILITY_RECOVERY_S),
        the record dropped on a successful launch), with the floor being the avoidance.
        The planners say what a weight does to a type (``budget.plans``,
        ``deadline.planning``).
        """
        if not self.launchable(type_name, now):
            return 0.0
        span = self.recovering.get(type_name)
        if span is None or now >= span[1]:
            return 1.0
        start, end = span
        gained = (now - start) / (end - start) if end > start else 1.0
        return RECOVERING_WEIGHT + (1.0 - RECOVERING_WEIGHT) * max(0.0, gained)

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
        return iter([m for m in self.alive.values() if m.state is not _GONE])

    def any_alive(self) -> bool:
        return bool(self.alive)

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

    def boot_s(self, type_name: str) -> float:
        """β of a type: launch to ready (its set-up included), the mean over its machines
        that came up; the declared ``boot_s`` until one has."""
        key = (len(self.machines), self.readies)  # what the mean is over: kept until it moves
        kept = self._boots.get(type_name)
        if kept is None or kept[0] != key:
            seen = [
                m.ready_at - m.launched_at
                for m in self.machines.values()
                if m.type.name == type_name and m.ready_at is not None
            ]
            kept = (key, sum(seen) / len(seen) if seen else None)
            self._boots[type_name] = kept
        return self.types[type_name].boot_s if kept[1] is None else kept[1]

    def alive_counts(self, *, include_marked: bool = True) -> dict[str, int]:
        """``count_alive`` of every type, in one pass over the machines alive."""
        counts = dict.fromkeys(self.types, 0)
        for m in self.alive_machines():
            if include_marked or not m.marked:
                counts[m.type.name] = counts.get(m.type.name, 0) + 1
        for t, c in self.pending_launches.values():
            counts[t] = counts.get(t, 0) + c
        return counts

    def count_alive(self, type_name: str, *, include_marked: bool = True) -> int:
        return sum(
            1
            for m in self.alive_machines()
            if m.type.name == type_name and (include_marked or not m.marked)
        ) + sum(c for t, c in self.pending_launches.values() if t == type_name)

    @property
    def finished(self) -> bool:
        """Every task is done, failed, or cancelled with its job."""
        return self.done + self.failed + self.cancelled == self.n_tasks

    @property
    def tasks_left(self) -> int:
        return self.n_tasks - self.done - self.failed - self.cancelled

    def actual_cost(self) -> float:
        """What the machines cost by their real lifetimes (≤ committed)."""
        total = 0.0
        for m in self.machines.values():
            end = m.ended_at if m.ended_at is not None else self.now
            total += self.billing.cost(m.type.price, end - m.launched_at)
        return total

    def by_provider(self) -> dict[str, tuple[int, float]]:
        """Provider name -> (machines alive, money committed to its machines so far)."""
        out: dict[str, tuple[int, float]] = {}
        for m in self.machines.values():
            alive, money = out.get(m.type.provider, (0, 0.0))
            paid = self.billing.cost(m.type.price, m.paid_until - m.launched_at)
            out[m.type.provider] = (alive + (m.ended_at is None), money + paid)
        return out

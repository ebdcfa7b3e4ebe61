"""The cost report of a run: ``report.json`` for programs, ``report.md`` for people,
and the plots of ``autoscaler.report.plots`` (``gantt.png``, ``spend.png``).

Costs are recomputed from each machine's launch and end under the billing model, so
the report checks the controller's bookkeeping rather than repeating it.

``Report`` is the typed record; ``report.json`` is its ``to_json()``, and
``config/report.schema.json`` (``report_json_schema()``, ``autoscaler schema --report``)
is generated from the same dataclasses, so the three cannot drift apart. A deadline-mode
run's report is a ``DeadlineReport``: the same record (``mode`` ``deadline``) with a
section per job after the others (``jobs``); ``mode`` tells the two apart.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar, dataclass_transform

from pydantic import ConfigDict, Discriminator, Tag, TypeAdapter, ValidationError

from autoscaler.config.schema import RunConfig
from autoscaler.core.errors import AutoscalerError
from autoscaler.core.model import JobSpec, Late, TaskSpec, TaskState
from autoscaler.core.state import Machine, RunState

REPORT_JSON = "report.json"
REPORT_MD = "report.md"
GANTT_PNG = "gantt.png"
SPEND_PNG = "spend.png"
UNFINISHED_TXT = "unfinished.txt"
"""The commands of the tasks not done, one a line: a bag file (``bag: {file: ...}``)."""
_EPS = 1e-6

_T = TypeVar("_T")


@dataclass_transform(frozen_default=True)
def _record(cls: type[_T]) -> type[_T]:
    """A frozen dataclass that is part of report.json: its attribute docstrings become
    the schema's descriptions, and a key it does not name is an error when read back,
    so report.json and its schema cannot drift apart unnoticed."""
    cls.__pydantic_config__ = ConfigDict(  # type: ignore[attr-defined]
        extra="forbid", use_attribute_docstrings=True
    )
    return dataclass(frozen=True)(cls)


@_record
class Prediction:
    """What BaTS's first plan after sampling said the run would cost and take."""

    cost: float | None
    """The plan's predicted cost."""
    makespan_s: float | None
    """The plan's predicted makespan, from the run's start, in seconds."""
    at_s: float | None
    """When the plan was made, in seconds from the run's start."""
    cost_interval: tuple[float, float] | None = None
    """The interval the plan gave its cost (the ends of the runtimes' intervals)."""
    makespan_interval_s: tuple[float, float] | None = None
    """The interval the plan gave its makespan, in seconds from the run's start."""
    cost_inside: bool | None = None
    """Whether the actual cost fell inside the cost interval."""
    makespan_inside: bool | None = None
    """Whether the actual makespan fell inside its interval (null: the bag did not finish)."""


@_record
class ShortfallNote:
    """The first time the run said its budget was unlikely to finish the bag."""

    at_s: float
    """When, in seconds from the run's start."""
    tasks_left: int
    """Tasks not yet done then."""
    needed_budget: float | None
    """The budget the estimates said the whole run needed (null: none the planner found)."""
    message: str
    """What was said (in the log, status, metrics and here)."""


@_record
class BillingTerms:
    """How machines were paid (the config's ``billing``)."""

    mode: Literal["fixed", "per_second"]
    """fixed: whole ATUs; per_second: by the second after a minimum charge."""
    atu_s: float
    """The accountable time unit, in seconds: prices are per ATU."""
    min_charge_s: float | None
    """The minimum charge of a machine under per-second billing (null under fixed)."""


@_record
class ConfigurationChoice:
    """A configuration the controller chose: how many machines of each type to run."""

    t_s: float
    """When, in seconds from the run's start."""
    counts: Mapping[str, int]
    """Machines wanted per machine type."""
    reason: str
    """Why (sampling, a plan, a re-plan, round robin)."""
    predicted_cost: float | None
    """The plan's predicted cost (null for sampling and round robin)."""
    predicted_makespan_s: float | None
    """The plan's predicted makespan in seconds (null for sampling and round robin)."""
    cost_interval: tuple[float, float] | None = None
    """The interval of the predicted cost (null without a prediction)."""
    makespan_interval_s: tuple[float, float] | None = None
    """The interval of the predicted makespan (null without a prediction)."""


@_record
class TypeSummary:
    """What one machine type did and cost over the run."""

    machines: int
    """Machines of the type launched."""
    units_paid: float
    """ATUs paid for them (fractions under per-second billing)."""
    cost: float
    """What they cost under the billing model."""
    tasks_run: int
    """Tasks they finished."""
    busy_s: float
    """Seconds they spent running tasks."""
    idle_s: float
    """Seconds they were ready but ran nothing."""
    boot_s: float
    """Seconds from their launches to their being ready."""


@_record
class MachineSummary:
    """One machine's life and cost."""

    id: str
    """The machine's id."""
    type: str
    """Its machine type."""
    start_s: float
    """Launched, in seconds from the run's start."""
    ready_s: float | None
    """Ready for tasks (null if it never was)."""
    end_s: float
    """Ended (or the report's time, if it was still alive)."""
    units_paid: float
    """ATUs paid for it (a fraction under per-second billing)."""
    cost: float
    """What it cost under the billing model."""
    tasks_run: int
    """Tasks it finished."""
    busy_s: float
    """Seconds it spent running tasks."""
    idle_s: float
    """Seconds it was ready but ran nothing."""
    end_reason: str | None
    """Why it ended (null if it was still alive)."""


@_record
class FailedTask:
    """A task that failed on every attempt."""

    task: int
    """The task's id (its index in the bag)."""
    attempts: int
    """How many times it ran."""
    error: str
    """The last attempt's error."""


UnfinishedWhy = Literal["not_started", "cut_off", "failed"]


@_record
class UnfinishedTask:
    """A task the run did not do, and why: what ``unfinished.txt`` runs again."""

    task: int
    """The task's id (its index in the bag)."""
    command: str | None
    """Its command (null for a synthetic task, which has none)."""
    why: UnfinishedWhy
    """not_started: it never ran; cut_off: it ran, but the run ended before a run of it
    finished (a retry after a failed attempt that never came included); failed: it failed
    on every attempt."""
    error: str | None
    """The last failed attempt's error (null if no attempt failed)."""


@_record
class LaunchProblem:
    """A launch the provider refused, and what the controller made of it."""

    t_s: float
    """When, in seconds from the run's start."""
    type: str
    """The machine type asked for."""
    kind: str
    """capacity, limit, throttled or error."""
    reason: str
    """What the provider said."""


@_record
class LateNote:
    """A lateness the run said of a job (deadline mode, ``Late``)."""

    at_s: float
    """When it was said, in seconds from the run's start."""
    tasks: int
    """The job's tasks then expected to end after its deadline."""
    seconds: float
    """By how much the last of them was expected to be late, in seconds."""
    cause: str
    """What gave way: deadline (no machines the provider allows finish the job in time)
    or budget (the budget cannot pay for those that would)."""
    message: str
    """What was said (in the log, status, metrics and here)."""


GaveWay = Literal["none", "deadline", "budget", "both"]


@_record
class JobOutcome:
    """One job of a deadline-mode run: its deadline and budget against what happened."""

    name: str
    """The job's name."""
    at_s: float
    """When it arrived, in seconds from the run's start."""
    deadline_s: float
    """When it was due, in seconds from the run's start."""
    budget: float | None
    """Its own budget (null if it has none)."""
    tasks: int
    """Its tasks."""
    done: int
    """Its tasks done."""
    failed: int
    """Its tasks that failed on every attempt."""
    finish_s: float | None
    """The end of its last task done (null if none was done)."""
    tasks_late: int
    """Tasks done after the deadline, and tasks not done once the deadline had passed."""
    seconds_late: float
    """How late it finished (finish minus deadline, at least 0); a job not finished by
    the report's time is late by at least that time minus its deadline."""
    met_deadline: bool
    """Whether every task was done by the deadline."""
    cost: float
    """Its share of the machines' cost: each machine's cost shared by the jobs in
    proportion to the seconds the machine ran each job's tasks (idle time shared alike)."""
    predicted_cost: float | None
    """The last plan's forecast of its cost (null if it was never planned)."""
    predicted_finish_s: float | None
    """The last plan's forecast of its finish, in seconds from the run's start."""
    first_warning: LateNote | None
    """The first time it was said to be late (null: never)."""
    warnings: int
    """How many times a lateness was said of it (each a change of the expectation)."""
    gave_way: GaveWay | None
    """A job with a budget: what gave way, the deadline (tasks late), the budget (its
    cost above it), both, or none (null: the job has no budget)."""


@_record
class Report:
    """The outcome of one run against its budget, and its predictions against the actual."""

    run_id: str
    """The run's id (also the tag on its machines)."""
    mode: Literal["budget"]
    """The constraint: finish as fast as possible within a budget."""
    policy: str
    """The config's policy (bats or round_robin; deadline mode: its planner)."""
    provider: str
    """The config's provider (sim for a dry run's config, local, sge, ec2)."""
    seed: int
    """The emulator's seed."""
    budget: float | None
    """The budget (null if the config has none)."""
    cost: float
    """What the machines cost by their lives under the billing model."""
    committed: float
    """What the controller committed (paid units, launches in flight included)."""
    within_budget: bool
    """Whether ``cost`` is within the budget."""
    makespan_s: float
    """Seconds from the start to the last task done (to the stop if the bag is unfinished)."""
    tasks_total: int
    """Tasks in the bag."""
    tasks_done: int
    """Tasks done."""
    tasks_failed: int
    """Tasks that failed on every attempt."""
    stop_reason: str | None
    """Why the run stopped before the bag was finished (null if it finished)."""
    predicted: Prediction | None
    """BaTS's first plan after sampling (null if no plan was made)."""
    billing: BillingTerms
    """How machines were paid."""
    configurations: tuple[ConfigurationChoice, ...]
    """Every configuration the controller chose, in time order."""
    machine_types: Mapping[str, TypeSummary]
    """Per machine type, in the config's order."""
    machines: tuple[MachineSummary, ...]
    """Every machine launched."""
    failed_tasks: tuple[FailedTask, ...]
    """The failed tasks."""
    launch_problems: tuple[LaunchProblem, ...]
    """The launches the provider refused."""
    wall_s: float | None
    """Real seconds the run took (for a dry run, the emulation's)."""
    shortfall: ShortfallNote | None = None
    """The first warning that the budget was unlikely to finish the bag (null: none)."""
    unfinished_tasks: tuple[UnfinishedTask, ...] = ()
    """Every task not done (failed ones included), by id; empty when every task was done.
    Their commands are in ``unfinished.txt`` in the run directory."""
    time_scale: float | None = None
    """A real run only: emulated seconds per real second (absent from a dry run's report)."""
    refused_agents: int | None = None
    """A real run only: agent requests refused (wrong token or run; absent from a dry run's)."""

    def to_json(self) -> dict[str, Any]:
        """The ``report.json`` document: the fields in order, a real run's extras only there."""
        data: dict[str, Any] = _REPORT.dump_python(self, mode="json")
        for key in _REAL_RUN_ONLY:
            if data[key] is None:
                del data[key]
        return data


@_record
class DeadlineReport(Report):
    """The outcome of a deadline-mode run (paper 002): the run's record, then each job
    against its deadline. ``predicted`` is null: each job has its own forecast."""

    mode: Literal["deadline"]  # type: ignore[assignment]  # the tag: a Report of another mode
    """The constraint: each job by its deadline, as cheaply as possible."""
    jobs: tuple[JobOutcome, ...] = dataclasses.field(kw_only=True)
    """Every job, in the order given."""
    jobs_met_deadline: int = dataclasses.field(kw_only=True)
    """Jobs whose every task was done by the deadline."""
    unattributed_cost: float = dataclasses.field(kw_only=True)
    """The cost of machines that ran no task, which no job is charged."""


_REAL_RUN_ONLY = ("time_scale", "refused_agents")


def _mode(report: Any) -> str:
    """Which record a report is: a deadline run's says so; anything else is read as a
    budget run's (one without ``mode`` is then refused for that)."""
    mode = report.get("mode") if isinstance(report, dict) else getattr(report, "mode", None)
    return "deadline" if mode == "deadline" else "budget"


_REPORT: TypeAdapter[Report] = TypeAdapter(
    Annotated[
        Annotated[Report, Tag("budget")] | Annotated[DeadlineReport, Tag("deadline")],
        Discriminator(_mode),
    ]
)
_TAGS = ("budget", "deadline")


def report_json_schema() -> dict[str, Any]:
    """The JSON Schema of ``report.json`` (what ``config/report.schema.json`` holds)."""
    return _REPORT.json_schema()


def _r(value: float | None, digits: int = 3) -> float | None:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    return round(value, digits)


def makespan_s(state: RunState) -> float:
    """The last task's end if the bag is finished, else the run's time so far."""
    if not state.finished:
        return state.now
    return max((seg.end for seg in state.segments if seg.outcome == "done"), default=0.0)


def unfinished_tasks(state: RunState, tasks: Sequence[TaskSpec]) -> tuple[UnfinishedTask, ...]:
    """The tasks of ``state`` not done, by id, with their commands from ``tasks``.

    A task that ran at least once (a Gantt segment, of any outcome) and is neither done
    nor failed for good was cut off; one that never ran was not started.
    """
    commands = {t.id: t.command for t in tasks}
    ran = {seg.task for seg in state.segments}
    out = []
    for tid, st in enumerate(state.task_state):
        if st is TaskState.DONE:
            continue
        why: UnfinishedWhy
        if st is TaskState.FAILED:
            why = "failed"
        elif st is TaskState.RUNNING or tid in ran:
            why = "cut_off"
        else:
            why = "not_started"
        out.append(
            UnfinishedTask(
                task=tid, command=commands.get(tid), why=why, error=state.task_errors.get(tid)
            )
        )
    return tuple(out)


def _pair(pair: tuple[float, float] | None, digits: int) -> tuple[float, float] | None:
    return None if pair is None else (round(pair[0], digits), round(pair[1], digits))


def _inside(actual: float, interval: tuple[float, float] | None) -> bool | None:
    """Whether ``actual`` fell in ``interval`` (rounding aside); None without one."""
    if interval is None:
        return None
    lo, hi = interval
    return lo - 0.01 <= actual <= hi + 0.01


HELD = (
    "the samples are in and the run waits for a budget (`autoscaler plan`); carry it on "
    "with `autoscaler run --plan PLAN_DIR --option N`, or `--resume RUN_DIR --budget B`"
)


def build_report(
    cfg: RunConfig,
    state: RunState,
    *,
    tasks: Sequence[TaskSpec],
    run_id: str,
    seed: int,
    wall_s: float | None = None,
    time_scale: float | None = None,
    refused_agents: int | None = None,
) -> Report:
    """The report of ``state`` run under ``cfg`` on the bag ``tasks``; ``time_scale`` and
    ``refused_agents`` are a real run's (the daemon's) and left out of a dry run's report."""
    billing = state.billing
    budget = state.budget_of(cfg.constraint.budget)
    machines = []
    totals = {t.name: _TypeTotals() for t in cfg.machine_types}
    for m in state.machines.values():
        end = m.ended_at if m.ended_at is not None else state.now
        life = end - m.launched_at
        boot = (m.ready_at if m.ready_at is not None else end) - m.launched_at
        cost = billing.cost(m.type.price, life)
        units = billing.paid_units(life)
        idle = max(0.0, life - boot - m.busy_s)
        machines.append(
            MachineSummary(
                id=m.id,
                type=m.type.name,
                start_s=round(m.launched_at, 3),
                ready_s=_r(m.ready_at),
                end_s=round(end, 3),
                units_paid=round(units, 3),
                cost=round(cost, 4),
                tasks_run=m.tasks_done,
                busy_s=round(m.busy_s, 3),
                idle_s=round(idle, 3),
                end_reason=m.end_reason,
            )
        )
        totals[m.type.name].add(units, cost, m.tasks_done, m.busy_s, idle, boot)
    cost = sum(t.cost for t in totals.values())
    configurations = tuple(
        ConfigurationChoice(
            t_s=round(t, 3),
            counts=dict(c.counts),
            reason=c.reason,
            predicted_cost=_r(c.predicted_cost, 2),
            predicted_makespan_s=_r(c.predicted_makespan_s),
            cost_interval=_pair(c.cost_interval, 2),
            makespan_interval_s=_pair(c.makespan_interval_s, 3),
        )
        for t, c in state.configurations
    )
    makespan = round(makespan_s(state), 3)
    shortfall = (
        None
        if not state.shortfalls
        else ShortfallNote(
            at_s=round(state.shortfalls[0][0], 3),
            tasks_left=state.shortfalls[0][1].tasks_left,
            needed_budget=_r(state.shortfalls[0][1].needed_budget, 2),
            message=state.shortfalls[0][1].message,
        )
    )
    # Sampling and round robin configurations predict nothing; the first that does is
    # the first plan after sampling.
    first_plan = next((c for c in configurations if c.predicted_cost is not None), None)
    if state.deadline_mode:
        first_plan = None
    report = Report(
        run_id=run_id,
        mode="budget",
        policy=f"deadline ({cfg.deadline.planner}-job planner)"
        if cfg.deadline_mode
        else cfg.policy,
        provider=cfg.provider,
        seed=seed,
        budget=budget,
        cost=round(cost, 4),
        committed=round(state.committed, 4),
        within_budget=budget is None or cost <= budget + _EPS,
        makespan_s=makespan,
        tasks_total=state.n_tasks,
        tasks_done=state.done,
        tasks_failed=state.failed,
        stop_reason=HELD if state.awaiting_budget and not state.finished else state.stop_reason,
        predicted=None
        if first_plan is None
        else Prediction(
            cost=first_plan.predicted_cost,
            makespan_s=first_plan.predicted_makespan_s,
            at_s=first_plan.t_s,
            cost_interval=first_plan.cost_interval,
            makespan_interval_s=first_plan.makespan_interval_s,
            cost_inside=_inside(cost, first_plan.cost_interval),
            makespan_inside=None
            if not state.finished
            else _inside(makespan, first_plan.makespan_interval_s),
        ),
        shortfall=shortfall,
        billing=BillingTerms(
            mode=billing.mode,
            atu_s=billing.atu_s,
            min_charge_s=billing.min_charge_s if billing.mode == "per_second" else None,
        ),
        configurations=configurations,
        machine_types={name: t.summary() for name, t in totals.items()},
        machines=tuple(machines),
        failed_tasks=tuple(
            FailedTask(task=tid, attempts=state.attempts[tid], error=state.task_errors.get(tid, ""))
            for tid, st in enumerate(state.task_state)
            if st.value == "failed"
        ),
        launch_problems=tuple(
            LaunchProblem(t_s=round(t, 3), type=tname, kind=kind, reason=reason)
            for t, tname, kind, reason in state.launch_problems
        ),
        wall_s=_r(wall_s),
        unfinished_tasks=unfinished_tasks(state, tasks),
        time_scale=time_scale,
        refused_agents=refused_agents,
    )
    if not state.deadline_mode:
        return report
    jobs, unattributed = job_outcomes(state)
    fields = {f.name: getattr(report, f.name) for f in dataclasses.fields(report)}
    fields["mode"] = "deadline"
    return DeadlineReport(
        **fields,
        jobs=jobs,
        jobs_met_deadline=sum(j.met_deadline for j in jobs),
        unattributed_cost=round(unattributed, 4),
    )


def machine_cost(state: RunState, machine: Machine) -> float:
    """What ``machine`` cost under the billing model: its life, to ``state.now`` while it
    is alive (as ``RunState.actual_cost``)."""
    end = machine.ended_at if machine.ended_at is not None else state.now
    return state.billing.cost(machine.type.price, end - machine.launched_at)


def job_shares(state: RunState) -> dict[str, dict[str, float]]:
    """Per machine id, the share of the machine each job bears (deadline mode): the
    seconds it ran the job's tasks (runs of any outcome) over the seconds it ran any
    task. The shares of a machine sum to 1; a machine that ran no task has none."""
    seconds: dict[str, dict[str, float]] = {}
    for seg in state.segments:
        per_job = seconds.setdefault(seg.machine, {})
        name = state.job_of(seg.task).name
        per_job[name] = per_job.get(name, 0.0) + (seg.end - seg.start)
    shares: dict[str, dict[str, float]] = {}
    for machine, per_job in seconds.items():
        busy = sum(per_job.values())
        if busy > 0:
            shares[machine] = {name: sec / busy for name, sec in per_job.items()}
    return shares


def job_costs(state: RunState) -> tuple[dict[str, float], float]:
    """Each job's share of the machines' actual cost, and the cost no job is charged.

    A machine's cost (``machine_cost``) is shared by the jobs by ``job_shares``: in
    proportion to the seconds it ran each job's tasks; its idle and boot time is shared
    the same way. A machine that ran no task is charged to no job.
    """
    shares = job_shares(state)
    costs = {j.name: 0.0 for j in state.jobs}
    unattributed = 0.0
    for m in state.machines.values():
        cost = machine_cost(state, m)
        if m.id not in shares:
            unattributed += cost
            continue
        for name, share in shares[m.id].items():
            costs[name] += cost * share
    return costs, unattributed


def job_outcomes(state: RunState) -> tuple[tuple[JobOutcome, ...], float]:
    """Each job of a deadline-mode run against its deadline, and the unattributed cost."""
    done_at: dict[int, float] = {}
    for seg in state.segments:
        if seg.outcome == "done":
            done_at[seg.task] = min(seg.end, done_at.get(seg.task, math.inf))
    costs, unattributed = job_costs(state)
    firsts: dict[str, tuple[float, Late]] = {}
    said: dict[str, int] = {}
    for t, note in state.late_log:
        if note.tasks > 0:
            firsts.setdefault(note.job, (t, note))
            said[note.job] = said.get(note.job, 0) + 1
    out = []
    for job in state.jobs:
        ids = range(job.first, job.first + job.count)
        ends = [done_at[t] for t in ids if t in done_at]
        states = [state.task_state[t] for t in ids]
        done = sum(s is TaskState.DONE for s in states)
        failed = sum(s is TaskState.FAILED for s in states)
        finish = max(ends, default=None)
        late = sum(e > job.deadline + _EPS for e in ends)
        if state.now > job.deadline + _EPS:
            late += job.count - len(ends)
        end = finish if len(ends) == job.count else max(state.now, finish or 0.0)
        forecast = state.forecasts.get(job.name)
        first = firsts.get(job.name)
        out.append(
            JobOutcome(
                name=job.name,
                at_s=round(job.at, 3),
                deadline_s=round(job.deadline, 3),
                budget=job.budget,
                tasks=job.count,
                done=done,
                failed=failed,
                finish_s=_r(finish),
                tasks_late=late,
                seconds_late=round(max(0.0, (end or 0.0) - job.deadline), 3),
                met_deadline=late == 0 and len(ends) == job.count,
                cost=round(costs[job.name], 4),
                predicted_cost=None if forecast is None else round(forecast.cost, 4),
                predicted_finish_s=None if forecast is None else round(forecast.finish, 3),
                first_warning=None
                if first is None
                else LateNote(
                    at_s=round(first[0], 3),
                    tasks=first[1].tasks,
                    seconds=round(first[1].seconds, 3),
                    cause=first[1].cause,
                    message=first[1].message,
                ),
                warnings=said.get(job.name, 0),
                gave_way=_gave_way(job, late, costs[job.name]),
            )
        )
    return tuple(out), unattributed


def _gave_way(job: JobSpec, tasks_late: int, cost: float) -> GaveWay | None:
    if job.budget is None:
        return None
    over = cost > job.budget + _EPS
    if tasks_late and over:
        return "both"
    if tasks_late:
        return "deadline"
    return "budget" if over else "none"


@dataclass
class _TypeTotals:
    """One machine type's sums while the report is built (rounded once, at the end)."""

    machines: int = 0
    units_paid: float = 0.0
    cost: float = 0.0
    tasks_run: int = 0
    busy_s: float = 0.0
    idle_s: float = 0.0
    boot_s: float = 0.0

    def add(
        self, units: float, cost: float, tasks: int, busy_s: float, idle_s: float, boot_s: float
    ) -> None:
        self.machines += 1
        self.units_paid += units
        self.cost += cost
        self.tasks_run += tasks
        self.busy_s += busy_s
        self.idle_s += idle_s
        self.boot_s += boot_s

    def summary(self) -> TypeSummary:
        return TypeSummary(
            machines=self.machines,
            units_paid=round(self.units_paid, 4),
            cost=round(self.cost, 4),
            tasks_run=self.tasks_run,
            busy_s=round(self.busy_s, 4),
            idle_s=round(self.idle_s, 4),
            boot_s=round(self.boot_s, 4),
        )


# --- for people -----------------------------------------------------------------------


def hms(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    s = round(seconds)
    return f"{s // 3600}h{s % 3600 // 60:02d}m{s % 60:02d}s"


def _money(value: float | None) -> str:
    return "-" if value is None else f"{value:,.2f}"


_LAUNCH_PROBLEM_MEANING = {
    "capacity": "type avoided for a while, re-planned without it",
    "limit": "account limit: scale-up held for a while",
    "throttled": "throttled: scale-up paused briefly",
    "error": "launch failed",
}
_ROWS_SHOWN = 50
_UNFINISHED_SHOWN = 20
_WHY_WORDS: dict[str, str] = {
    "not_started": "not started",
    "cut_off": "cut off",
    "failed": "failed",
}
_WRONG_KEYS_SHOWN = 3
HEAD_END = "## Machine types"
"""The heading after the report's head (outcome and predicted against actual), which is
what ``autoscaler run`` and ``autoscaler report`` print; the rest is in ``report.md``."""


def render_markdown(report: Report) -> str:
    lines = [
        f"# Run {report.run_id}",
        "",
        f"Policy **{report.policy}** on provider **{report.provider}**, "
        f"mode {report.mode}, seed {report.seed}.",
        "",
    ]
    if report.stop_reason is None:
        lines.append(
            f"The bag finished: {report.tasks_done} of {report.tasks_total} tasks done"
            + (f", {report.tasks_failed} failed." if report.tasks_failed else ".")
        )
    else:
        lines.append(
            f"**The run stopped early:** {report.stop_reason}. "
            f"{report.tasks_done} of {report.tasks_total} tasks done, "
            f"{report.tasks_failed} failed."
        )
    if report.unfinished_tasks:
        lines += ["", _unfinished_sentence(report.unfinished_tasks)]
    within = "within budget" if report.within_budget else "**OVER BUDGET**"
    if isinstance(report, DeadlineReport):
        lines += ["", *_deadline_head(report, within)]
        lines += ["", HEAD_END, *_types_table(report), *_jobs_section(report)]
        return _tail(report, lines)
    predicted = report.predicted or Prediction(None, None, None)
    ci, mi = predicted.cost_interval, predicted.makespan_interval_s
    lines += [
        "",
        "| | predicted | interval | actual | inside |",
        "| --- | ---: | ---: | ---: | :---: |",
        f"| cost | {_money(predicted.cost)} | "
        f"{'-' if ci is None else f'{_money(ci[0])} – {_money(ci[1])}'} | "
        f"{_money(report.cost)} | {_yes(predicted.cost_inside)} |",
        f"| makespan | {hms(predicted.makespan_s)} | "
        f"{'-' if mi is None else f'{hms(mi[0])} – {hms(mi[1])}'} | "
        f"{hms(report.makespan_s)} | {_yes(predicted.makespan_inside)} |",
        "",
        f"Budget {_money(report.budget)}; spent {_money(report.cost)} ({within}).",
    ]
    if report.predicted is not None:
        lines.append(f"Prediction made at {hms(predicted.at_s)}, the first plan after sampling.")
    if report.shortfall is not None:
        sf = report.shortfall
        lines += [
            "",
            f"**Warning at {hms(sf.at_s)}** ({sf.tasks_left} tasks left): {sf.message}.",
        ]
    lines += ["", HEAD_END, *_types_table(report)]
    return _tail(report, lines)


def _types_table(report: Report) -> list[str]:
    lines = [
        "",
        "| type | machines | units paid | cost | tasks run | busy | idle |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name, t in report.machine_types.items():
        lines.append(
            f"| {name} | {t.machines} | {t.units_paid:g} | {_money(t.cost)} | "
            f"{t.tasks_run} | {hms(t.busy_s)} | {hms(t.idle_s)} |"
        )
    return lines


def _deadline_head(report: DeadlineReport, within: str) -> list[str]:
    """How many jobs met their deadline, and the warnings given before they passed."""
    late = [j for j in report.jobs if not j.met_deadline]
    lines = [
        f"**{report.jobs_met_deadline} of {len(report.jobs)} jobs met their deadline**"
        + (
            f"; {', '.join(j.name for j in late)} "
            f"{'was' if len(late) == 1 else 'were'} late by "
            f"{sum(j.tasks_late for j in late)} tasks in all."
            if late
            else "."
        ),
        "",
        f"Budget {_money(report.budget)}; spent {_money(report.cost)} ({within}), "
        f"{_money(report.unattributed_cost)} of it on machines that ran no task.",
    ]
    warned = [j for j in report.jobs if j.first_warning is not None]
    for j in warned:
        w = j.first_warning
        assert w is not None
        ahead = j.deadline_s - w.at_s
        lines += [
            "",
            f"**Warning at {hms(w.at_s)}** "
            + (f"({hms(ahead)} before its deadline)" if ahead > 0 else "(after its deadline)")
            + f": {w.message}.",
        ]
    return lines


def _jobs_section(report: DeadlineReport) -> list[str]:
    lines = [
        "",
        "## Jobs",
        "",
        "| job | arrived | deadline | tasks | done | failed | finish | late tasks | "
        "late by | cost | predicted cost | predicted finish | first warning | gave way |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: "
        "| --- | --- |",
    ]
    for j in report.jobs:
        w = j.first_warning
        warning = (
            "-" if w is None else f"{hms(w.at_s)}: {w.tasks} tasks, {w.seconds:.0f} s ({w.cause})"
        )
        late = f"**{j.tasks_late}**" if j.tasks_late else "0"
        lines.append(
            f"| {j.name} | {hms(j.at_s)} | {hms(j.deadline_s)} | {j.tasks} | {j.done} | "
            f"{j.failed} | {hms(j.finish_s)} | {late} | {hms(j.seconds_late)} | "
            f"{_money(j.cost)} | {_money(j.predicted_cost)} | {hms(j.predicted_finish_s)} | "
            f"{warning} | {j.gave_way or '-'} |"
        )
    return lines


def _tail(report: Report, lines: list[str]) -> str:
    """The report after the machine types: configurations, tasks not done, machines."""
    lines += ["", "## Configurations", "", "| at | machines | why |", "| --- | --- | --- |"]
    for c in report.configurations:
        counts = ", ".join(f"{k}: {v}" for k, v in c.counts.items())
        lines.append(f"| {hms(c.t_s)} | {counts} | {c.reason} |")
    lines += _unfinished_section(report)
    if report.failed_tasks:
        lines += [
            "",
            "## Failed tasks",
            "",
            "| task | attempts | last error |",
            "| --- | ---: | --- |",
        ]
        for f in report.failed_tasks[:_ROWS_SHOWN]:
            lines.append(f"| {f.task} | {f.attempts} | {f.error} |")
        if len(report.failed_tasks) > _ROWS_SHOWN:
            lines.append(
                f"| ... | | {len(report.failed_tasks) - _ROWS_SHOWN} more in {REPORT_JSON} |"
            )
    if report.launch_problems:
        lines += [
            "",
            "## Launches the provider refused",
            "",
            "| at | type | what it meant | provider said |",
            "| ---: | --- | --- | --- |",
        ]
        for p in report.launch_problems[:_ROWS_SHOWN]:
            meaning = _LAUNCH_PROBLEM_MEANING.get(p.kind, p.kind)
            lines.append(f"| {hms(p.t_s)} | {p.type} | {meaning} | {p.reason} |")
    lines += [
        "",
        "## Machines",
        "",
        "| machine | type | start | end | units paid | tasks run | ended because |",
        "| --- | --- | ---: | ---: | ---: | ---: | --- |",
    ]
    for m in report.machines:
        lines.append(
            f"| {m.id} | {m.type} | {hms(m.start_s)} | {hms(m.end_s)} | "
            f"{m.units_paid:g} | {m.tasks_run} | {m.end_reason or '-'} |"
        )
    return "\n".join(lines) + "\n"


def _unfinished_sentence(tasks: Sequence[UnfinishedTask]) -> str:
    if all(t.command is None for t in tasks):
        return (
            f"The {len(tasks)} tasks not done are synthetic: `{UNFINISHED_TXT}` lists their ids, "
            "but they cannot be re-run as commands."
        )
    runnable = sum(_bag_line(t.command) is not None for t in tasks)
    which = "the" if runnable == len(tasks) else f"{runnable} of the"
    return (
        f"The commands of {which} {len(tasks)} tasks not done are in `{UNFINISHED_TXT}`, "
        "a bag file for a new run."
    )


def _unfinished_section(report: Report) -> list[str]:
    """The tasks not done: counts by why, then the first few (the rest are in the file)."""
    tasks = report.unfinished_tasks
    if not tasks:
        return []
    lines = [
        "",
        "## Tasks not done",
        "",
        f"{len(tasks)} of {report.tasks_total}: {_why_counts(tasks)}.",
    ]
    lines += ["", "| task | why | command | last error |", "| ---: | --- | --- | --- |"]
    # Failed and cut-off tasks first: they say more than the many never started.
    order = list(_WHY_WORDS)
    shown = sorted(tasks, key=lambda t: (-order.index(t.why), t.task))[:_UNFINISHED_SHOWN]
    for t in shown:
        lines.append(f"| {t.task} | {_WHY_WORDS[t.why]} | {_cell(t.command)} | {_cell(t.error)} |")
    if len(tasks) > _UNFINISHED_SHOWN:
        lines += ["", f"… and {len(tasks) - _UNFINISHED_SHOWN} more; see {UNFINISHED_TXT}."]
    return lines


def _why_counts(tasks: Sequence[UnfinishedTask]) -> str:
    counts = {why: sum(t.why == why for t in tasks) for why in _WHY_WORDS}
    return ", ".join(f"{n} {_WHY_WORDS[why]}" for why, n in counts.items() if n)


def _cell(text: str | None) -> str:
    """``text`` as one Markdown table cell: one line, its pipes escaped."""
    if text is None:
        return "-"
    return " ".join(text.split()).replace("|", "\\|")


def unfinished_text(report: Report) -> str | None:
    """What ``unfinished.txt`` holds: ``#`` lines saying whose tasks and why, then one
    command per line, so the file is a bag (``bag: {file: unfinished.txt}``); None when
    every task was done.

    A synthetic task has no command: it gets a comment line with its id instead. So
    does a command that spans lines, which a bag file cannot hold.
    """
    tasks = report.unfinished_tasks
    if not tasks:
        return None
    header = [f"Tasks not done in run {report.run_id}: {len(tasks)} of {report.tasks_total}."]
    if report.stop_reason is not None:
        header.append(f"The run stopped early: {report.stop_reason.rstrip('.')}.")
    if report.tasks_failed:
        header.append(f"{report.tasks_failed} failed on every attempt (see {REPORT_MD}).")
    header.append(f"By why: {_why_counts(tasks)}.")
    lines = {t.task: _bag_line(t.command) for t in tasks}
    commands = [line for line in lines.values() if line is not None]
    left_out = [t for t in tasks if lines[t.task] is None]
    if commands:
        header.append(
            f"One command per line: a bag for a new config, bag: {{file: {UNFINISHED_TXT}}}"
        )
        header.append("(give it the original bag's env, max_retries and timeout_s).")
    if all(t.command is None for t in tasks):
        header.append("The tasks are synthetic (bag.synthetic): they have no commands and")
        header.append("cannot be re-run as commands. Their ids follow.")
    elif left_out:
        header.append(f"{len(left_out)} have no command a bag file can hold on one line:")
        header.append("their ids follow, commented out.")
    text = [f"# {' '.join(line.split())}" for line in header]
    text += [f"# task {t.task}: {_WHY_WORDS[t.why]}" for t in left_out]
    return "\n".join(text + commands) + "\n"


def _bag_line(command: str | None) -> str | None:
    """``command`` as a line a bag file gives back (a shell ignores blanks at its ends);
    None for what no line can hold: no command, several lines, or a ``#`` comment."""
    if command is None:
        return None
    line = command.strip()
    if not line or line.startswith("#") or len(line.splitlines()) != 1:
        return None
    return line


def _yes(flag: bool | None) -> str:
    return "-" if flag is None else ("yes" if flag else "**no**")


def render_head(report: Report) -> str:
    """The report's head in Markdown: the outcome, and predicted against actual."""
    return render_markdown(report).split(HEAD_END)[0]


def write_report(
    report: Report, state: RunState | None, out_dir: Path, *, plots: bool = True
) -> None:
    (out_dir / REPORT_JSON).write_text(
        json.dumps(report.to_json(), indent=2) + "\n", encoding="utf-8"
    )
    (out_dir / REPORT_MD).write_text(render_markdown(report), encoding="utf-8")
    unfinished = unfinished_text(report)
    if unfinished is None:
        (out_dir / UNFINISHED_TXT).unlink(missing_ok=True)  # a resumed run that finished
    else:
        (out_dir / UNFINISHED_TXT).write_text(unfinished, encoding="utf-8")
    if plots and state is not None:
        from autoscaler.report.plots import gantt_figure, spend_figure

        gantt_figure(state).savefig(out_dir / GANTT_PNG, dpi=100)
        spend_figure(state, report.budget).savefig(out_dir / SPEND_PNG, dpi=100)


def read_report(run_dir: Path) -> Report:
    """The report in ``run_dir``; ``AutoscalerError`` naming the first wrong keys if the
    file cannot be read or is not a report this version writes."""
    path = run_dir / REPORT_JSON
    try:
        return _REPORT.validate_json(path.read_bytes())
    except OSError as exc:
        raise AutoscalerError(f"{path}: cannot read it ({exc.strerror or exc})") from None
    except ValidationError as exc:
        wrong = [
            f"{'.'.join(str(p) for p in _untagged(e['loc'])) or 'the document'}: {e['msg']}"
            for e in exc.errors()[:_WRONG_KEYS_SHOWN]
        ]
        more = exc.error_count() - len(wrong)
        raise AutoscalerError(
            f"{path}: not a report this version writes ({'; '.join(wrong)}"
            + (f"; {more} more" if more else "")
            + ")"
        ) from None


def _untagged(loc: tuple[int | str, ...]) -> tuple[int | str, ...]:
    """An error's place in the document, without the mode's tag pydantic puts first."""
    return loc[1:] if loc and loc[0] in _TAGS else loc

"""A service job's view: what ``jobs``, the API, the status page and metrics show.

``JobView`` is one typed record, made by ``job_view`` from a job's row and what its run
shows (``Progress``); ``to_json`` is the API's JSON for it. ``Progress`` is made from a
run's state by ``progress`` (a job on its own machines: the whole run; a job in the
deadline pool: its own tasks, the machines working on them and the cost attributed to
it), or by ``queued`` for a job not started. Times are wall-clock epoch seconds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from autoscaler.config.schema import RunConfig
from autoscaler.config.work import DEFAULT_PROJECT
from autoscaler.core.model import JobSpec, TaskState
from autoscaler.core.state import RunState
from autoscaler.service.job_states import JobState
from autoscaler.service.store import FIRST_USER, JobRow

HistoryPoint = tuple[float, int, float]
"""A point of a job's history: (wall-clock time, tasks done, money committed)."""


@dataclass(frozen=True)
class MachineView:
    """A machine working for a job."""

    id: str
    type: str
    state: str  # MachineState's value: booting, idle, busy, ...
    provider: str = ""  # the name of the provider it comes from

    def to_json(self) -> dict[str, str]:
        return {"id": self.id, "type": self.type, "state": self.state, "provider": self.provider}


@dataclass(frozen=True)
class Progress:
    """Where a job's run stands (what the store keeps as a job's final word)."""

    mode: str  # "budget" or "deadline"
    tasks: int
    done: int
    failed: int
    running: int
    spend: float  # money committed (paid units, and the units live machines are in)
    cost: float  # what its machines cost so far
    budget: float | None
    deadline_at: float | None
    predicted_finish_at: float | None
    machines: tuple[MachineView, ...]
    stop_reason: str | None
    late_tasks: int
    met_deadline: bool | None = None  # once ended, in deadline mode
    pool: str | None = None  # the deadline pool's run directory, for a job in it

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "mode": self.mode,
            "tasks": self.tasks,
            "done": self.done,
            "failed": self.failed,
            "running": self.running,
            "spend": self.spend,
            "cost": self.cost,
            "budget": self.budget,
            "deadline_at": self.deadline_at,
            "predicted_finish_at": self.predicted_finish_at,
            "machines": [m.to_json() for m in self.machines],
            "stop_reason": self.stop_reason,
            "late_tasks": self.late_tasks,
            "met_deadline": self.met_deadline,
        }
        if self.pool is not None:
            out["pool"] = self.pool
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Progress:
        """The record ``to_json`` wrote (a store's ``final``)."""
        return cls(
            mode=data["mode"],
            tasks=data["tasks"],
            done=data["done"],
            failed=data["failed"],
            running=data["running"],
            spend=data["spend"],
            cost=data["cost"],
            budget=data["budget"],
            deadline_at=data["deadline_at"],
            predicted_finish_at=data["predicted_finish_at"],
            machines=tuple(
                MachineView(m["id"], m["type"], m["state"], m.get("provider", ""))
                for m in data["machines"]
            ),
            stop_reason=data["stop_reason"],
            late_tasks=data.get("late_tasks", 0),
            met_deadline=data.get("met_deadline"),
            pool=data.get("pool"),
        )

    def stopped(self, reason: str) -> Progress:
        return replace(self, stop_reason=reason)


@dataclass(frozen=True)
class Clock:
    """A run's time on the wall: run time ``t`` is ``start_wall + t / time_scale``."""

    start_wall: float
    time_scale: float

    def wall(self, t: float | None) -> float | None:
        return None if t is None else round(self.start_wall + t / self.time_scale, 3)


def queued(row: JobRow) -> Progress:
    """A job that has not started: its tasks, its constraint, nothing done."""
    cfg = row.config
    return Progress(
        mode="deadline" if cfg.deadline_mode else "budget",
        tasks=row.n_tasks,
        done=0,
        failed=0,
        running=0,
        spend=0.0,
        cost=0.0,
        budget=cfg.constraint.budget if cfg.constraint is not None else None,
        deadline_at=None,
        predicted_finish_at=None,
        machines=(),
        stop_reason=None,
        late_tasks=0,
    )


def progress(
    state: RunState,
    cfg: RunConfig,
    clock: Clock,
    estimate: float | None = None,
    *,
    job: JobSpec | None = None,
    cost: float | None = None,
    pool: str | None = None,
) -> Progress:
    """What a run's state shows of a job: of the whole run (a job on its own machines;
    ``estimate``: the budget planner's finish, run time), or of ``job`` in a shared run
    (its tasks, the machines that hold them, ``cost`` attributed to it)."""
    if job is None:
        states = list(state.tasks.task_state)
        machines = list(state.fleet.alive_machines())
        finish: float | None = estimate
        deadline: float | None = None
        if state.work.jobs:
            deadline = max(j.deadline for j in state.work.jobs)
            forecasts = [f.finish for f in state.work.forecasts.values()]
            finish = max(forecasts) if forecasts else None
        spend = round(state.money.committed, 4)
        money = round(state.actual_cost(), 4)
        late = sum(n.tasks for n in state.work.late.values())
        budget = state.money.budget_of(cfg.constraint.budget)
        mode = "deadline" if state.work.deadline_mode else "budget"
    else:
        states = [state.tasks.task_state[t] for t in range(job.first, job.first + job.count)]
        machines = [
            m
            for m in state.fleet.alive_machines()
            if any(job.owns(t) for t in (*m.queue, *m.running))
        ]
        forecast = state.work.forecasts.get(job.name)
        finish = forecast.finish if forecast else None
        deadline = job.deadline
        spend = money = round(cost or 0.0, 4)
        late = state.work.late[job.name].tasks if job.name in state.work.late else 0
        budget = None
        mode = "deadline"
    return Progress(
        mode=mode,
        tasks=state.n_tasks if job is None else job.count,
        done=sum(s is TaskState.DONE for s in states),
        failed=sum(s is TaskState.FAILED for s in states),
        running=sum(s is TaskState.RUNNING for s in states),
        spend=spend,
        cost=money,
        budget=budget,
        deadline_at=clock.wall(deadline),
        predicted_finish_at=clock.wall(finish),
        machines=tuple(
            MachineView(m.id, m.type.name, m.state.value, m.type.provider) for m in machines
        ),
        stop_reason=state.money.stop_reason if job is None else None,
        late_tasks=late,
        pool=pool,
    )


@dataclass(frozen=True)
class JobView:
    """A service job: its row's facts and where its run stands."""

    id: str
    name: str
    state: JobState
    submitted_at: float
    started_at: float | None
    ended_at: float | None
    run_dir: str
    progress: Progress
    history: tuple[HistoryPoint, ...] | None  # None: not asked for
    task_times: dict[str, Any] | None = None  # task_s from the service's memory (note)
    waiting: str | None = None  # what machines it waits for, held by which jobs
    project: str = DEFAULT_PROJECT  # the project its money is charged to
    user: str = FIRST_USER  # who submitted it

    def to_json(self) -> dict[str, Any]:
        """The API's JSON for the job (``history`` only when it was asked for)."""
        out: dict[str, Any] = {
            "id": self.id,
            "name": self.name,
            "user": self.user,
            "state": self.state.value,
            "submitted_at": self.submitted_at,
            "started_at": self.started_at,
            "ended_at": self.ended_at,
            "run_dir": self.run_dir,
            "project": self.project,
            **self.progress.to_json(),
        }
        if self.history is not None:
            out["history"] = [list(p) for p in self.history]
        if self.task_times is not None:
            out["task_times_from"] = self.task_times
        if self.waiting is not None:
            out["waiting"] = self.waiting
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> JobView:
        """The record ``to_json`` wrote (what the API answers)."""
        history = data.get("history")
        return cls(
            id=data["id"],
            name=data["name"],
            state=JobState(data["state"]),
            submitted_at=data["submitted_at"],
            started_at=data["started_at"],
            ended_at=data["ended_at"],
            run_dir=data["run_dir"],
            progress=Progress.from_json(data),
            history=None if history is None else tuple(_point(p) for p in history),
            task_times=data.get("task_times_from"),
            waiting=data.get("waiting"),
            project=data.get("project", DEFAULT_PROJECT),
            user=data.get("user", FIRST_USER),
        )


def job_view(
    row: JobRow, live: Progress | None, history: Sequence[Sequence[float]] | None
) -> JobView:
    """The one place a job's view is made: its final word once it ended, else what its
    run shows (``live``), else its queued view. ``history``: None leaves it out."""
    if row.final is not None:
        body = Progress.from_json(row.final)
    else:
        body = live if live is not None else queued(row)
    return JobView(
        id=row.id,
        name=row.name,
        state=row.state,
        submitted_at=row.submitted_at,
        started_at=row.started_at,
        ended_at=row.ended_at,
        run_dir=str(row.run_dir),
        progress=body,
        history=None if history is None else tuple(_point(p) for p in history),
        task_times=row.task_times,
        project=row.project,
        user=row.user,
    )


def service_summary(views: Sequence[JobView]) -> dict[str, Any]:
    """The service's figures over its jobs: jobs by state, machines alive, spend."""
    by_state: dict[str, int] = {}
    for v in views:
        by_state[v.state] = by_state.get(v.state, 0) + 1
    running = [v for v in views if v.state is JobState.RUNNING]
    return {
        "jobs_by_state": by_state,
        "machines_alive": sum(len(v.progress.machines) for v in running),
        "spend": round(sum(v.progress.spend for v in views), 4),
    }


def final_json(body: Progress, history: Sequence[Sequence[float]]) -> dict[str, Any]:
    """What the store keeps of an ended job: its last progress and its history."""
    return {**body.to_json(), "history": [list(p) for p in history]}


def _point(p: Sequence[float]) -> HistoryPoint:
    return (float(p[0]), int(p[1]), float(p[2]))

"""The bodies the service's API takes and gives, as pydantic models: its OpenAPI document
is generated from them (``GET /openapi.json``)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

Number = Annotated[float, Field(strict=True, allow_inf_nan=False)]
"""A JSON number (not a string, not a boolean), finite."""


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _Answer(BaseModel):
    model_config = ConfigDict(extra="allow")


class SubmitRequest(_Request):
    """A job file's content, and where its relative paths start."""

    job: dict[str, Any] = Field(
        description="the job file as JSON: name, app, bag, constraint, task_s, emulator_task_s "
        "or jobs (checked field by field: 400 names each bad one)",
        examples=[{"name": "demo", "bag": {"synthetic": 4}, "constraint": {"budget": 5}}],
    )
    base_dir: str | None = Field(
        default=None,
        pattern=r"^/[^\x00]*$",
        description="the absolute directory the job file's relative paths start from "
        "(default: the service's working directory)",
    )
    source: str | None = Field(default=None, description="the job file's name, for messages")


class Submitted(BaseModel):
    """A journaled job."""

    id: str = Field(description="the job's id (j1, j2, ...)")


class UpdateRequest(_Request):
    """A new budget or deadline for a running or queued job: exactly one of them."""

    budget: Number | None = Field(default=None, description="the job's new budget (> 0)")
    deadline_s: Number | None = Field(
        default=None,
        description="the new deadline in run seconds from now (emulated seconds in a "
        "time-scaled run, as in a job file)",
    )
    deadline_at: Number | None = Field(
        default=None, description="the new deadline as a wall-clock time (epoch seconds)"
    )


class MachineView(_Answer):
    id: str
    type: str
    state: str
    provider: str = Field(default="", description="the name of the provider it comes from")


class JobView(_Answer):
    """Where a job stands; times are wall-clock epoch seconds."""

    id: str
    name: str
    user: str = Field(description="who submitted it (a job from before users: admin)")
    state: str = Field(description="queued, running, done, failed, cancelled or interrupted")
    submitted_at: float
    started_at: float | None
    ended_at: float | None
    run_dir: str
    project: str = Field(default="default", description="the project its money is charged to")
    mode: str = Field(description="budget or deadline")
    tasks: int
    done: int
    failed: int
    running: int
    spend: float = Field(description="committed: what the machines cost up to now")
    cost: float
    budget: float | None
    deadline_at: float | None
    predicted_finish_at: float | None
    machines: list[MachineView]
    stop_reason: str | None
    late_tasks: int
    history: list[list[float]] | None = Field(
        default=None,
        description="[time, done, spend] points, in the views that carry them (one job, status)",
    )
    task_times_from: dict[str, Any] | None = Field(
        default=None,
        description="a deadline job without task_s that started from the task times the "
        "service remembers of its application (app, task_s, runs per type) instead of "
        "sampling; absent otherwise",
    )
    waiting: str | None = Field(
        default=None,
        description="what machines a running job waits for because other jobs hold the "
        "service's quota, and which jobs: `waiting for 2 small machines held by j1, j3`; "
        "or what money a queued job waits for (its project's `when_over: queue`); "
        "absent otherwise",
    )


class Jobs(BaseModel):
    jobs: list[JobView]


class QuotaUse(BaseModel):
    """A machine limit shared by every job: a type's max_count, a provider's
    max_machines."""

    kind: str = Field(description="type or provider")
    name: str
    held: int = Field(description="machines alive or being launched, all jobs")
    max: int
    by: dict[str, int] = Field(description="machines held per job (the pool: `pool`)")


class ProjectView(BaseModel):
    """A project's money in the current period (``service.projects``)."""

    project: str
    budget: float | None = Field(description="per period; null: no limit")
    period: str = Field(description="month, week or day (UTC)")
    period_label: str = Field(description="`2026-12`, `2026-W49`, `2026-12-02`")
    spent: float = Field(description="what its jobs' machines cost in the period")
    held: float = Field(description="what its live jobs may still commit in the period")
    left: float | None = Field(description="budget - spent - held; null: no limit")
    days: dict[str, float] = Field(description="its spend per UTC day of the period")


class UserSpendView(BaseModel):
    """What one user's jobs spent this calendar month (UTC)."""

    user: str
    month: str = Field(description="`2026-12`")
    spent: float = Field(description="what the user's jobs' machines cost this month")
    days: dict[str, float] = Field(description="per UTC day of the month")


class ServiceView(_Answer):
    started_at: float
    now: float
    provider: str
    state_dir: str
    pid: int
    jobs_by_state: dict[str, int]
    machines_alive: int
    spend: float
    quota: list[QuotaUse] = Field(default_factory=list)
    projects: list[ProjectView] = Field(default_factory=list)
    users: list[UserSpendView] = Field(default_factory=list, description="spend per user")


class UserView(BaseModel):
    """Who a token acts as."""

    name: str
    role: str = Field(description="admin, submit or read")


class Status(BaseModel):
    service: ServiceView
    jobs: list[JobView] = Field(description="every job, with its history")
    user: UserView = Field(description="the user of the request's token")


class ErrorBody(BaseModel):
    """Every 4xx answer."""

    error: str = Field(description="what is wrong, naming the field or value")
    problems: list[str] | None = Field(
        default=None, description="one line per bad field: `field.path: what is wrong`"
    )

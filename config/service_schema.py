"""A service's config and the jobs submitted to it.

A service config (``autoscaler serve SERVICE.yaml``) is a platform (``config.schema``:
machine types, billing, provider and its section, dispatcher, emulator, sampling and
monitoring settings) plus a ``service:`` section. A job file gives the work: a bag and
its constraint (a budget, or a deadline), or several deadline ``jobs`` that share
machines. A job becomes a run config by laying the job over the service's, so every
check of a run config applies to it, and its problems name the job file's fields.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import AwareDatetime, Field, NaiveDatetime, PositiveInt, ValidationError

from autoscaler.config.bag import expand_bag
from autoscaler.config.load import (
    check_files,
    read_yaml,
    resolve_paths,
    top_mapping,
    validation_problems,
)
from autoscaler.config.schema import Name, Platform, RunConfig, Work
from autoscaler.config.size import check_job_size
from autoscaler.config.strict import ConfigModel
from autoscaler.core.errors import ConfigError
from autoscaler.core.model import TaskSpec

WORK_FIELDS = tuple(f for f in Work.model_fields if f != "name")
"""What a run config has and a service config has not: the work, given by jobs."""

JOB_FIELDS = ("name", "app", "bag", "constraint", "task_s", "emulator_task_s", "jobs")
"""What a job file may give."""


class ServiceSettings(ConfigModel):
    """The ``service:`` section: how many jobs run at once, and where the API listens."""

    max_running_jobs: PositiveInt = Field(
        default=4, description="jobs running at once; later ones wait in the queue"
    )
    host: str = Field(default="127.0.0.1", description="the API's address (loopback)")
    port: int = Field(default=0, ge=0, le=65535, description="0: any free port")
    share_deadline_jobs: bool = Field(
        default=True,
        description="deadline jobs without a budget of their own share machines in one "
        "pool run (paper 002's multi-job planning); off: each job has its own machines",
    )
    plots: bool = Field(
        default=True,
        description="each job's report with its plots (Gantt, spend); off: "
        "report.json and report.md only, for many small jobs",
    )
    max_job_tasks: PositiveInt = Field(
        default=1_000_000,
        description="the most tasks one job may have (counted before its bag is expanded): "
        "a bigger job is refused at once; each task takes a few hundred bytes of memory",
    )


class ServiceFile(Platform):
    """A service config file as written: a platform plus ``service:``."""

    service: ServiceSettings = Field(default_factory=ServiceSettings)


@dataclass(frozen=True)
class ServiceConfig:
    """A validated service config: the platform every job runs on, and the settings."""

    platform: Platform  # paths resolved
    settings: ServiceSettings
    source: str

    @property
    def provider(self) -> str:
        return self.platform.provider

    @property
    def name(self) -> str:
        return self.platform.name

    @property
    def time_scale(self) -> float:
        """Emulated seconds per real second (1 but for a time-scaled local service)."""
        return self.platform.time_scale


def load_yaml(path: Path, what: str) -> dict[str, Any]:
    """A YAML file's top-level mapping, or a ``ConfigError`` naming the file."""
    return read_yaml(path, what)


def service_config(data: object, *, source: str, base_dir: Path) -> ServiceConfig:
    """Validate a service config (a mapping, as read from YAML)."""
    data = dict(top_mapping(data, source, "service fields (machine_types, provider, ...)"))
    work = [f for f in WORK_FIELDS if f in data]
    if work:
        raise ConfigError(
            source,
            [
                "plots: a service sets its jobs' plots under `service:` (`service: {plots: false}`)"
                if f == "plots"
                else f"{f}: a service config holds no work; give it in a job file "
                "(`autoscaler submit JOB.yaml`)"
                for f in work
            ],
        )
    if data.get("service", {}) is None:
        data["service"] = {}  # `service:` with nothing under it: the defaults
    try:
        cfg = ServiceFile.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(source, validation_problems(exc, data)) from None
    platform = resolve_paths(cfg.platform(), base_dir)
    check_files(platform, source)
    return ServiceConfig(platform, cfg.service, source)


def load_service_config(path: Path) -> ServiceConfig:
    return service_config(
        load_yaml(path, "service fields"), source=str(path), base_dir=path.absolute().parent
    )


class JobFile(ConfigModel):
    """What a job file may hold (checked before it is laid over the service's config)."""

    name: Name | None = None
    app: Name | None = None
    bag: dict[str, Any] | None = None
    constraint: dict[str, Any] | None = None
    task_s: dict[str, Any] | None = None
    emulator_task_s: dict[str, Any] | None = None
    jobs: list[Any] | None = None


def _deadline_at(constraint: dict[str, Any], now_wall: float, scale: float) -> dict[str, Any]:
    """``constraint.deadline_at`` (a date and time, UTC unless it says) to ``deadline_s``
    from now, in run seconds (``scale`` per real second); a time past is refused."""
    if "deadline_at" not in constraint:
        return constraint
    constraint = dict(constraint)
    raw = constraint.pop("deadline_at")
    if "deadline_s" in constraint:
        raise ValueError("constraint: give deadline_s or deadline_at, not both")
    when = _Stamp.model_validate({"at": raw}).at
    stamp = (when if when.tzinfo is not None else when.replace(tzinfo=UTC)).timestamp()
    left = stamp - now_wall
    if left <= 0:
        now = datetime.fromtimestamp(now_wall, UTC).isoformat(timespec="seconds")
        raise ValueError(f"constraint.deadline_at: {raw} is in the past (now {now})")
    constraint["deadline_s"] = left * scale
    return constraint


class _Stamp(ConfigModel):
    at: AwareDatetime | NaiveDatetime


def job_config(
    service: ServiceConfig,
    data: object,
    *,
    source: str,
    base_dir: Path,
    now_wall: float,
) -> tuple[RunConfig, list[TaskSpec]]:
    """Lay job file ``data`` over ``service``: the job's run config and its tasks, or a
    ``ConfigError`` that names each bad field of the job."""
    data = top_mapping(data, source, f"job fields ({', '.join(JOB_FIELDS)})")
    try:
        job = JobFile.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(source, validation_problems(exc, data)) from None
    name = job.name or "job"
    merged: dict[str, Any] = {**service.platform.model_dump(mode="json"), "name": name}
    try:
        scale = service.time_scale
        constraint = _deadline_at(job.constraint, now_wall, scale) if job.constraint else None
    except ValidationError as exc:  # not a date and time
        problems = validation_problems(exc, {"at": (job.constraint or {}).get("deadline_at")})
        raise ConfigError(source, [f"constraint.deadline_{p}" for p in problems]) from None
    except ValueError as exc:
        raise ConfigError(source, [str(exc)]) from None
    if job.jobs is not None:
        merged["jobs"] = job.jobs
        for f in ("app", "bag", "constraint", "task_s", "emulator_task_s"):
            if getattr(job, f) is not None:
                raise ConfigError(source, [f"{f}: give it in each of jobs, not beside them"])
    elif job.app and not job.task_s and "deadline_s" not in (constraint or {}):
        raise ConfigError(
            source, ["app: names a deadline job's application; give constraint.deadline_s"]
        )
    elif job.task_s or job.emulator_task_s or job.app:
        # Known task times or an application: a deadline job of the jobs form.
        merged["jobs"] = [
            {
                "name": name,
                **({"app": job.app} if job.app else {}),
                "bag": job.bag,
                "constraint": constraint,
                **({"task_s": job.task_s} if job.task_s else {}),
                **({"emulator_task_s": job.emulator_task_s} if job.emulator_task_s else {}),
            }
        ]
    else:
        merged["bag"] = job.bag
        merged["constraint"] = constraint
    try:
        cfg = RunConfig.model_validate(merged)
    except ValidationError as exc:
        problems = validation_problems(exc, merged)
        if job.jobs is None and (job.task_s or job.emulator_task_s or job.app):
            problems = [p.removeprefix("jobs[0].") for p in problems]
        raise ConfigError(source, problems) from None
    cfg = resolve_paths(cfg, base_dir)
    check_files(cfg, source)
    check_job_size(cfg, service.settings.max_job_tasks, source)
    return cfg, expand_bag(cfg, source=source)

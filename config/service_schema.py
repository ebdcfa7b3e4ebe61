"""A service's config and the jobs submitted to it.

A service config (``autoscaler serve SERVICE.yaml``) is a platform (``config.schema``:
machine types, billing, provider and its section, dispatcher, emulator, sampling and
monitoring settings) plus a ``service:`` section. A job file gives the work: a bag and
its constraint (a budget, or a deadline), or several deadline ``jobs`` that share
machines. A job becomes a run config by laying the job over the service's, so every
check of a run config applies to it, and its problems name the job file's fields.
"""

from __future__ import annotations

import itertools
import stat
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import (
    AwareDatetime,
    Field,
    NaiveDatetime,
    NonNegativeFloat,
    PositiveFloat,
    PositiveInt,
    ValidationError,
    field_validator,
    model_validator,
)

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
from autoscaler.config.work import DEFAULT_PROJECT
from autoscaler.core.errors import ConfigError
from autoscaler.core.model import TaskSpec

WORK_FIELDS = tuple(f for f in Work.model_fields if f != "name")
"""What a run config has and a service config has not: the work, given by jobs."""

JOB_FIELDS = ("name", "app", "bag", "constraint", "task_s", "emulator_task_s", "jobs", "project")
"""What a job file may give."""


class ServiceTls(ConfigModel):
    """HTTPS for the API: a certificate and its key, or neither (one made at the first
    start, self-signed, kept in the state directory; the command line pins it)."""

    cert_file: Path | None = Field(default=None, description="PEM certificate (chain)")
    key_file: Path | None = Field(default=None, description="its PEM private key")

    @model_validator(mode="after")
    def _both(self) -> ServiceTls:
        if (self.cert_file is None) != (self.key_file is None):
            raise ValueError("give cert_file and key_file together, or neither (self-signed)")
        return self


class AlertRetry(ConfigModel):
    """How a webhook delivery the receiver did not take (refused, timed out, a 5xx or
    429 answer) is tried again: after ``first_delay_s``, then twice as long each time, at
    most ``max_delay_s`` apart, ``attempts`` times in all; then it is dropped, logged and
    counted (``autoscaler_alerts_failed_total``)."""

    attempts: int = Field(default=8, ge=1, le=100, description="tries in all, the first included")
    first_delay_s: PositiveFloat = Field(
        default=2.0, le=3600, description="seconds before the second try"
    )
    max_delay_s: PositiveFloat = Field(
        default=300.0, le=86400, description="the longest wait between two tries"
    )
    timeout_s: PositiveFloat = Field(
        default=10.0, le=300, description="seconds one try waits for the receiver's answer"
    )


class AlertSettings(ConfigModel):
    """The ``service.alerts:`` section: where the service posts its alerts (a budget's
    spend crossing a threshold, a deadline job forecast to miss its deadline), signed
    with a secret read from a file. No section: no alert is sent (the Prometheus gauges
    are there all the same)."""

    webhook: str = Field(description="the receiver's URL (http or https)")
    secret_file: Path = Field(
        description="a file holding the shared secret the body is signed with "
        "(HMAC-SHA256); readable by its owner alone (chmod 600)"
    )
    thresholds: list[float] = Field(
        default=[0.5, 0.8, 1.0],
        min_length=1,
        description="fractions of a budget whose crossing is alerted, each once per "
        "subject; increasing, each in (0, 1.5]",
    )
    deadline_recovered: bool = Field(
        default=True,
        description="also alert when a job forecast to miss its deadline is expected on time again",
    )
    check_every_s: PositiveFloat = Field(
        default=5.0, le=3600, description="seconds between two looks at the jobs' figures"
    )
    retry: AlertRetry = Field(default_factory=AlertRetry)

    @field_validator("webhook")
    @classmethod
    def _http_url(cls, url: str) -> str:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"{url!r} is not an http:// or https:// URL with a host")
        return url

    @field_validator("thresholds")
    @classmethod
    def _fractions(cls, thresholds: list[float]) -> list[float]:
        for t in thresholds:
            if not 0 < t <= 1.5:
                raise ValueError(f"{t:g} is not a fraction of a budget in (0, 1.5]")
        if any(b <= a for a, b in itertools.pairwise(thresholds)):
            raise ValueError(f"{thresholds} is not increasing (each threshold once, in order)")
        return thresholds


def read_secret(path: Path, source: str) -> bytes:
    """The shared secret in ``path`` (its last line end left out), or a ``ConfigError``
    of config ``source`` when the file is missing, empty, or open to its group or
    others: whoever reads it can sign alerts the receiver believes."""
    field = "service.alerts.secret_file"
    try:
        mode = path.stat().st_mode
        secret = path.read_bytes().rstrip(b"\r\n")
    except OSError as exc:
        raise ConfigError(source, [f"{field}: cannot read {path}: {exc.strerror}"]) from None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise ConfigError(
            source,
            [
                f"{field}: {path} is open to its group or others "
                f"(mode {stat.S_IMODE(mode):04o}): chmod 600 it"
            ],
        )
    if not secret:
        raise ConfigError(source, [f"{field}: {path} is empty"])
    return secret


Period = Literal["month", "week", "day"]
"""A project budget's period: a calendar month, an ISO week (from Monday), or a day; UTC."""


class Project(ConfigModel):
    """A project the service's jobs are charged to, with its money per period."""

    name: Name = Field(description="what a job's `project:` names")
    budget: NonNegativeFloat = Field(
        description="the money the project's jobs may commit in one period, all together"
    )
    period: Period = Field(
        default="month",
        description="month: a calendar month; week: Monday to Sunday; day (all UTC); the "
        "budget is whole again as each begins",
    )
    when_over: Literal["refuse", "queue"] = Field(
        default="refuse",
        description="a job whose budget the project's money left cannot pay: refuse: "
        "refused at submission; queue: it waits until money frees up or a period begins",
    )


ADMIN_USER = "admin"
"""The state directory's own token's user (``autoscaler.service.users``): only an admin."""


class ServiceUser(ConfigModel):
    """A user of the service and its role (its tokens: ``autoscaler token create``)."""

    name: Name = Field(description="the user's name, as jobs and the audit log show it")
    role: Literal["admin", "submit", "read"] = Field(
        description="admin: everything; submit: submit jobs, update and cancel its own, "
        "read all; read: read only"
    )

    @model_validator(mode="after")
    def _admin_is_an_admin(self) -> ServiceUser:
        if self.name == ADMIN_USER and self.role != "admin":
            raise ValueError(
                f"{ADMIN_USER} is the state directory's own token's user: its role is admin"
            )
        return self


def _one_each(users: list[ServiceUser]) -> list[ServiceUser]:
    seen: set[str] = set()
    for user in users:
        if user.name in seen:
            raise ValueError(f"{user.name} is listed twice")
        seen.add(user.name)
    return users


class UsersFile(ConfigModel):
    """A file of users (``service.users_file``)."""

    users: list[ServiceUser] = Field(default_factory=list)

    _unique = field_validator("users")(_one_each)


class ServiceSettings(ConfigModel):
    """The ``service:`` section: how many jobs run at once, where the API listens, and
    who may use it."""

    max_running_jobs: PositiveInt = Field(
        default=4, description="jobs running at once; later ones wait in the queue"
    )
    host: str = Field(default="127.0.0.1", description="the API's address (loopback)")
    port: int = Field(default=0, ge=0, le=65535, description="0: any free port")
    tls: ServiceTls | None = Field(
        default=None,
        description="serve the API over HTTPS ({} for a self-signed certificate made at the "
        "first start); none: plain HTTP, for loopback",
    )
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
    alerts: AlertSettings | None = Field(
        default=None,
        description="webhook alerts at budget thresholds and forecast deadline misses "
        "(none: no alert is sent)",
    )
    projects: list[Project] = Field(
        default_factory=list,
        description="the projects jobs are charged to, each with a budget per period; "
        "none: every job is the `default` project's, without a limit",
    )
    users: list[ServiceUser] = Field(
        default_factory=list,
        description="the service's users and their roles (tokens are not here: "
        "`autoscaler token create NAME`); a user the list names has its role here, "
        "whatever its token was made with",
    )
    users_file: Path | None = Field(
        default=None,
        description="a YAML file of users instead (`users: [{name, role}, ...]`), relative "
        "to this config",
    )

    @field_validator("projects")
    @classmethod
    def _names_once(cls, projects: list[Project]) -> list[Project]:
        names = [p.name for p in projects]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"a project is named twice: {', '.join(twice)}")
        return projects

    def project(self, name: str) -> Project | None:
        """The project ``name`` (None: the service has no projects, so no limit)."""
        return next((p for p in self.projects if p.name == name), None)

    _unique = field_validator("users")(_one_each)

    @model_validator(mode="after")
    def _users_once(self) -> ServiceSettings:
        if self.users and self.users_file is not None:
            raise ValueError("users, users_file: give the users or a file of them, not both")
        return self


class ServiceFile(Platform):
    """A service config file as written: a platform plus ``service:``."""

    service: ServiceSettings = Field(default_factory=ServiceSettings)


@dataclass(frozen=True)
class ServiceConfig:
    """A validated service config: the platform every job runs on, and the settings."""

    platform: Platform  # paths resolved
    settings: ServiceSettings
    source: str
    users: tuple[ServiceUser, ...] = ()  # service.users, or those of service.users_file

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
    settings = cfg.service
    tls = settings.tls
    if tls is not None and tls.cert_file is not None and tls.key_file is not None:
        files = {"cert_file": base_dir / tls.cert_file, "key_file": base_dir / tls.key_file}
        for field, path in files.items():
            if not path.is_file():
                raise ConfigError(source, [f"service.tls.{field}: no such file {path}"])
        settings = settings.model_copy(update={"tls": tls.model_copy(update=files)})
    if settings.alerts is not None:
        secret_file = settings.alerts.secret_file.expanduser()
        if not secret_file.is_absolute():
            secret_file = Path(base_dir) / secret_file
        alerts = settings.alerts.model_copy(update={"secret_file": secret_file})
        settings = settings.model_copy(update={"alerts": alerts})
        read_secret(secret_file, source)
    return ServiceConfig(platform, settings, source, _users(settings, base_dir))


def _users(settings: ServiceSettings, base_dir: Path) -> tuple[ServiceUser, ...]:
    """The users ``settings`` names, or reads from its ``users_file``."""
    if settings.users_file is None:
        return tuple(settings.users)
    path = settings.users_file.expanduser()
    path = path if path.is_absolute() else base_dir / path
    data = read_yaml(path, "users (users: [{name, role}, ...])")
    try:
        return tuple(UsersFile.model_validate(data).users)
    except ValidationError as exc:
        raise ConfigError(str(path), validation_problems(exc, data)) from None


def load_service_config(path: Path) -> ServiceConfig:
    return service_config(
        load_yaml(path, "service fields"), source=str(path), base_dir=path.absolute().parent
    )


class JobFile(ConfigModel):
    """What a job file may hold (checked before it is laid over the service's config)."""

    name: Name | None = None
    project: Name | None = None
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
    merged: dict[str, Any] = {
        **service.platform.model_dump(mode="json"),
        "name": name,
        **({"project": job.project} if job.project else {}),
    }
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
    check_project(service.settings, cfg.project_name, source)
    cfg = resolve_paths(cfg, base_dir)
    check_files(cfg, source)
    check_job_size(cfg, service.settings.max_job_tasks, source)
    return cfg, expand_bag(cfg, source=source)


def check_project(settings: ServiceSettings, name: str, source: str) -> None:
    """A ``ConfigError`` unless the service knows project ``name`` (any name does when
    it lists no projects)."""
    if not settings.projects or settings.project(name) is not None:
        return
    known = ", ".join(p.name for p in settings.projects)
    said = (
        f"'{name}' is not a project of this service"
        if name != DEFAULT_PROJECT
        else ("the job names no project")
    )
    raise ConfigError(source, [f"project: {said}; give one of: {known}"])

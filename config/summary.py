"""What a config file is and what it holds, in one line: how ``autoscaler validate``
answers for a run config, a service config or a job file, so a user sees what was read
(tasks, machine types, budget, billing) before anything runs."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from autoscaler.config.load import config_warnings
from autoscaler.config.platform import Billing, MachineType
from autoscaler.config.schema import RunConfig
from autoscaler.config.service_schema import (
    JOB_FIELDS,
    WORK_FIELDS,
    ServiceConfig,
    job_config,
    load_service_config,
    load_yaml,
)
from autoscaler.core.errors import AutoscalerError, ConfigError
from autoscaler.core.model import TaskSpec
from autoscaler.core.words import counted

Kind = Literal["run", "service", "job"]


def config_kind(path: Path) -> Kind:
    """What ``path`` holds: a service config (a ``service:`` section, or machine types and
    no work), a job file (work and no machine types), else a run config."""
    data = load_yaml(path, "fields")
    has_work = any(k in data for k in WORK_FIELDS)
    if "service" in data or ("machine_types" in data and not has_work):
        return "service"
    if has_work and "machine_types" not in data:
        return "job"
    return "run"


@dataclass(frozen=True)
class Checked:
    """A config file that can be used: its one line, and what in it is likely not meant."""

    line: str
    warnings: tuple[str, ...] = ()


def check_file(
    path: Path,
    service: Path | None,
    now_wall: float,
    load_run: Callable[[Path], tuple[RunConfig, list[TaskSpec]]],
) -> Checked:
    """``path`` checked as what it holds: a service config, a job file (against the
    service config ``service`` when given, as it would run at ``now_wall``), or a run
    config, read by ``load_run`` (which may look prices up) and its bag expanded. A file
    that cannot be used raises ``ConfigError``."""
    kind = config_kind(path)
    if service is not None and kind != "job":
        raise AutoscalerError(f"--service SERVICE checks a job file; {path} is a {kind} config")
    if kind == "service":
        return Checked(service_summary(load_service_config(path)))
    if kind == "job":
        return Checked(job_summary(path, service, now_wall))
    cfg, tasks = load_run(path)
    return Checked(run_summary(cfg, len(tasks)), tuple(config_warnings(cfg)))


def run_summary(cfg: RunConfig, n_tasks: int) -> str:
    """The run's name, its tasks, machine types, budget and billing."""
    budget = cfg.constraint.budget
    limit = "no budget" if budget is None else f"budget {budget:g}"
    return (
        f"ok {cfg.name}: {counted(n_tasks, 'task')}; types {_types(cfg.machine_types)}; "
        f"{limit}; billing {_billing(cfg.billing)}"
    )


def service_summary(svc: ServiceConfig) -> str:
    """The service's name, provider, machine types, billing and how many jobs it runs at
    once."""
    return (
        f"ok service {svc.name}: provider {svc.platform.provider_label()}; "
        f"types {_types(svc.platform.machine_types)}; "
        f"billing {_billing(svc.platform.billing)}; "
        f"{counted(svc.settings.max_running_jobs, 'job')} at once"
    )


def job_summary(path: Path, service: Path | None, now_wall: float) -> str:
    """A job file checked against the service config ``service`` (as that service would
    run it at ``now_wall``), or on its own: only its fields' names, since its machine
    types, bag and constraint mean something only with a service."""
    data = load_yaml(path, f"job fields ({', '.join(JOB_FIELDS)})")
    if service is None:
        unknown = [k for k in data if k not in JOB_FIELDS]
        if unknown:
            raise ConfigError(
                str(path),
                [f"{k}: unknown field of a job file ({', '.join(JOB_FIELDS)})" for k in unknown],
            )
        return (
            f"ok job {data.get('name', 'job')}: a job file ({', '.join(data)}); give "
            "--service SERVICE.yaml to check it against the service that runs it "
            "(machine types, bag, budget or deadline)"
        )
    svc = load_service_config(service)
    cfg, tasks = job_config(
        svc, data, source=str(path), base_dir=path.absolute().parent, now_wall=now_wall
    )
    return f"ok job for service {svc.name}: " + run_summary(cfg, len(tasks)).removeprefix("ok ")


def _types(types: Sequence[MachineType]) -> str:
    return ", ".join(
        f"{t.name} ({t.price:g}/ATU, max {t.max_count}{_slots(t.slots)})" for t in types
    )


def _billing(billing: Billing) -> str:
    atu = duration(billing.atu_s)
    if billing.mode == "fixed":
        return f"fixed, ATU {atu}"
    return f"per second, ATU {atu}, minimum {duration(billing.min_charge_s)}"


def duration(seconds: float) -> str:
    """``seconds`` in the largest whole unit of hours or minutes (``1h``, ``90m``), else
    in seconds (``90.5s``)."""
    for unit, size in (("h", 3600.0), ("m", 60.0)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds / size:g}{unit}"
    return f"{seconds:g}s"


def _slots(slots: int | None) -> str:
    """What a type's summary adds for machines that run several tasks at once."""
    return "" if slots is None or slots <= 1 else f", {slots} slots"

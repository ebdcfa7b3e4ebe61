"""What a config file is and whether it can be used: ``validate`` (run, service and job
files) and ``schema``."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal

import typer

from autoscaler.cli.app import app, console, err_console, file_to_write, load
from autoscaler.core.errors import AutoscalerError
from autoscaler.core.words import counted

if TYPE_CHECKING:
    from autoscaler.config.schema import Billing, RunConfig

Kind = Literal["run", "service", "job"]


def config_kind(path: Path) -> Kind:
    """What ``path`` holds: a service config (a ``service:`` section, or machine types and
    no work), a job file (work and no machine types), else a run config."""
    from autoscaler.config.service import WORK_FIELDS, load_yaml

    data = load_yaml(path, "fields")
    has_work = any(k in data for k in WORK_FIELDS)
    if "service" in data or ("machine_types" in data and not has_work):
        return "service"
    if has_work and "machine_types" not in data:
        return "job"
    return "run"


@app.command()
def validate(
    config: Annotated[Path, typer.Argument(help="a run config, a service config or a job file")],
    service: Annotated[
        Path | None,
        typer.Option("--service", help="with a job file: the service config it is checked against"),
    ] = None,
) -> None:
    """Check a config file and expand its bag, without running anything: a run config,
    a service config (`autoscaler serve`), or a job file (`autoscaler submit`; checked
    against the service config given with --service).

    Problems are errors (exit code 2); what is valid but likely not meant, such as a
    machine type without an emulator speed, is a warning (exit code 0).
    """
    kind = config_kind(config)
    if service is not None and kind != "job":
        raise AutoscalerError(f"--service SERVICE checks a job file; {config} is a {kind} config")
    if kind == "service":
        console.print(_service_summary(config), markup=False, soft_wrap=True)
        return
    if kind == "job":
        console.print(_job_summary(config, service), markup=False, soft_wrap=True)
        return
    from autoscaler.config.load import config_warnings

    cfg, tasks = load(config)
    for warning in config_warnings(cfg):
        err_console.print(f"warning: {warning}", markup=False, soft_wrap=True)
    console.print(_summary(cfg, len(tasks)), markup=False, soft_wrap=True)


def _service_summary(path: Path) -> str:
    from autoscaler.config.service import load_service_config

    svc = load_service_config(path)
    types = ", ".join(
        f"{t.name} ({t.price:g}/ATU, max {t.max_count}{_slots(t.slots)})"
        for t in svc.platform.machine_types
    )
    billing = _billing(svc.platform.billing)
    return (
        f"ok service {svc.name}: provider {svc.platform.provider_label()}; types {types}; "
        f"billing {billing}; "
        f"{counted(svc.settings.max_running_jobs, 'job')} at once"
    )


def _job_summary(path: Path, service: Path | None) -> str:
    from autoscaler.config.service import JOB_FIELDS, job_config, load_service_config, load_yaml

    data = load_yaml(path, f"job fields ({', '.join(JOB_FIELDS)})")
    if service is None:
        unknown = [k for k in data if k not in JOB_FIELDS]
        if unknown:
            from autoscaler.core.errors import ConfigError

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
        svc, data, source=str(path), base_dir=path.absolute().parent, now_wall=time.time()
    )
    return f"ok job for service {svc.name}: " + _summary(cfg, len(tasks)).removeprefix("ok ")


@app.command()
def schema(
    report: Annotated[
        bool, typer.Option("--report", help="the schema of report.json instead")
    ] = False,
    out: Annotated[
        Path | None,
        typer.Option("--out", help="write the schema to this file", callback=file_to_write),
    ] = None,
    markdown: Annotated[
        bool,
        typer.Option("--markdown", help="the configuration reference (docs/config.md) instead"),
    ] = False,
) -> None:
    """Print the JSON Schema of config files, or of report.json (or write it to a file).
    With --markdown, the configuration reference: every field's type, default and
    description, as docs/config.md holds it."""
    if markdown and report:
        raise AutoscalerError("give --markdown or --report, not both")
    text = _schema_text(report=report, markdown=markdown)
    if out is None:
        typer.echo(text, nl=False)
    else:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text, encoding="utf-8")
        what = (
            "the configuration reference"
            if markdown
            else "report.json's schema"
            if report
            else "the config schema"
        )
        console.print(f"written: {out} ({what})", markup=False, soft_wrap=True)


def _schema_text(*, report: bool, markdown: bool) -> str:
    if markdown:
        from autoscaler.config.reference import config_markdown

        return config_markdown()
    if report:
        from autoscaler.report.records import report_json_schema

        document = report_json_schema()
    else:
        from autoscaler.config.load import config_json_schema

        document = config_json_schema()
    return json.dumps(document, indent=2, sort_keys=True) + "\n"


def _summary(cfg: RunConfig, n_tasks: int) -> str:
    """One line: the run's name, its tasks, machine types, budget and billing."""
    types = ", ".join(
        f"{t.name} ({t.price:g}/ATU, max {t.max_count}{_slots(t.slots)})" for t in cfg.machine_types
    )
    budget = cfg.constraint.budget
    limit = "no budget" if budget is None else f"budget {budget:g}"
    return (
        f"ok {cfg.name}: {counted(n_tasks, 'task')}; types {types}; {limit}; "
        f"billing {_billing(cfg.billing)}"
    )


def _billing(billing: Billing) -> str:
    atu = _duration(billing.atu_s)
    if billing.mode == "fixed":
        return f"fixed, ATU {atu}"
    return f"per second, ATU {atu}, minimum {_duration(billing.min_charge_s)}"


def _duration(seconds: float) -> str:
    for unit, size in (("h", 3600.0), ("m", 60.0)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds / size:g}{unit}"
    return f"{seconds:g}s"


def _slots(slots: int | None) -> str:
    """What a type's summary adds for machines that run several tasks at once."""
    return "" if slots is None or slots <= 1 else f", {slots} slots"

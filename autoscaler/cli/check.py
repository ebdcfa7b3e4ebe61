"""What a config file is and whether it can be used: ``validate`` (run, service and job
files) and ``schema``."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from autoscaler.cli.app import app, console, err_console, file_to_write, load
from autoscaler.core.errors import AutoscalerError

if TYPE_CHECKING:
    pass


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
    # The config models load here, not with the command group (start-up of `jobs`, `wait`).
    from autoscaler.config.summary import check_file

    checked = check_file(config, service, time.time(), load)
    for warning in checked.warnings:
        err_console.print(f"warning: {warning}", markup=False, soft_wrap=True)
    console.print(checked.line, markup=False, soft_wrap=True)


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
    # Each document loads its models (pydantic) when asked, not with the command group.
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

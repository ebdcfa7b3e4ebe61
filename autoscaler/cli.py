"""The ``autoscaler`` command line.

Each command is a thin shell over library calls. ``_load_or_exit`` is the one way a
command reads a config: it prints a bad config's problems and exits with code 2, so
every command reports config errors alike and never with a traceback.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, NoReturn

import typer
from rich.console import Console

from autoscaler.errors import AutoscalerError, ConfigError
from autoscaler.model import TaskSpec
from config.load import config_json_schema, expand_bag, load_config
from config.schema import Billing, RunConfig

EXIT_CONFIG = 2
"""Exit code for a config that cannot be used (and other errors we raise on purpose)."""

app = typer.Typer(no_args_is_help=True, add_completion=False)
_out = Console(highlight=False)
_err = Console(stderr=True, highlight=False)


@app.callback()
def _root() -> None:
    """Run a bag of independent tasks on rented machines within a money budget."""


def main() -> None:
    """Entry point of the ``autoscaler`` console script."""
    app()


def _load_or_exit(path: Path) -> tuple[RunConfig, list[TaskSpec]]:
    """Load ``path`` and expand its bag; on a problem, print it and exit with code 2."""
    try:
        cfg = load_config(path)
        return cfg, expand_bag(cfg, source=str(path))
    except AutoscalerError as exc:
        _exit_with(exc)


def _exit_with(exc: AutoscalerError) -> NoReturn:
    if isinstance(exc, ConfigError):
        _err.print(f"error: {exc.source}", markup=False, soft_wrap=True)
        for problem in exc.problems:
            _err.print(f"  {problem}", markup=False, soft_wrap=True)
    else:
        _err.print(f"error: {exc.message}", markup=False, soft_wrap=True)
    raise typer.Exit(EXIT_CONFIG)


@app.command()
def validate(
    config: Annotated[Path, typer.Argument(help="the run's YAML file")],
) -> None:
    """Check a config file and expand its bag, without running anything."""
    cfg, tasks = _load_or_exit(config)
    _out.print(_summary(cfg, len(tasks)), markup=False, soft_wrap=True)


@app.command()
def schema(
    out: Annotated[Path | None, typer.Option("--out", help="write the schema to this file")] = None,
) -> None:
    """Print the JSON Schema of config files (or write it to a file)."""
    text = json.dumps(config_json_schema(), indent=2, sort_keys=True) + "\n"
    if out is None:
        typer.echo(text, nl=False)
    else:
        out.write_text(text, encoding="utf-8")


def _summary(cfg: RunConfig, n_tasks: int) -> str:
    """One line: the run's name, its tasks, machine types, budget and billing."""
    types = ", ".join(f"{t.name} ({t.price:g}/ATU, max {t.max_count})" for t in cfg.machine_types)
    budget = cfg.constraint.budget
    limit = "no budget" if budget is None else f"budget {budget:g}"
    return (
        f"ok {cfg.name}: {n_tasks} tasks; types {types}; {limit}; billing {_billing(cfg.billing)}"
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

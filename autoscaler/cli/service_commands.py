"""The service's commands: ``serve``, ``submit``, ``jobs``, ``cancel``, ``update``,
``wait`` and ``page``.

Every command finds its service through a state directory: ``--state-dir``, else the
``AUTOSCALER_STATE_DIR`` environment variable, else a per-user default
(``$XDG_STATE_HOME/autoscaler`` or ``~/.local/state/autoscaler``). It acts as the user of
its token: ``--token-file``, else ``AUTOSCALER_TOKEN``, else the state directory's own
(``admin``'s; ``autoscaler.service.client``).

Each command imports ``autoscaler.service.control`` (or the service itself) when it
runs: those load the config models and the HTTP client (urllib, ssl), which would slow
the start of every command if the command group loaded them.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console

from autoscaler.cli.app import app, console
from autoscaler.cli.service_run import attach_daily_reports
from autoscaler.cli.text import money, when
from autoscaler.core.words import counted
from autoscaler.run.live_runs import state_dir

if TYPE_CHECKING:
    from autoscaler.service.control import JobLine

StateDir = Annotated[
    Path | None,
    typer.Option(
        "--state-dir",
        help="the service's state directory (default: $AUTOSCALER_STATE_DIR, else "
        "~/.local/state/autoscaler)",
    ),
]


TokenFile = Annotated[
    Path | None,
    typer.Option(
        "--token-file",
        help="a file holding the token to act with (default: $AUTOSCALER_TOKEN, else the "
        "state directory's own token, admin's)",
    ),
]


def _state_dir(given: Path | None) -> Path:
    return given.expanduser().absolute() if given is not None else state_dir()


# --- serve ------------------------------------------------------------------------------


@app.command()
def serve(
    config: Annotated[Path, typer.Argument(help="the service's YAML file (no bag: jobs come)")],
    state_dir: StateDir = None,
    release_on_exit: Annotated[
        bool,
        typer.Option(
            "--release-on-exit",
            help="on SIGTERM or Ctrl-C, release every running job's machines instead of "
            "handing them over to the next serve",
        ),
    ] = False,
) -> None:
    """Run the service until stopped: it takes jobs (`autoscaler submit`), runs them on
    the configured provider, and serves the API and a status page on loopback.

    SIGTERM or Ctrl-C stops it (a restart: systemd, an upgrade). Running jobs dispatch
    nothing more and hand their machines over: each machine keeps the paid time it has
    and its agent its lease, the jobs are kept as interrupted, and the next `serve` on
    the same state directory adopts the machines still running and carries the jobs on,
    as after a crash. A machine no service adopts ends with its lease, at the end of its
    paid time (or when its agent has not reached a service for `daemon.orphan_after_s`);
    `autoscaler cleanup` ends those of a stopped service at once. With --release-on-exit
    the jobs release every machine instead (the paid time left is lost) and resume on
    new machines.
    """
    # FastAPI, uvicorn and the service's run machinery load for `serve` only.
    from autoscaler.config.service_schema import load_service_config
    from autoscaler.service.service import Service
    from autoscaler.service.serving import StopSignals, serving, stop

    cfg = load_service_config(config)
    where = _state_dir(state_dir)
    service = Service(cfg, where)
    attach_daily_reports(service)
    settings = cfg.settings
    with (
        StopSignals() as signals,
        serving(service, settings.host, settings.port, settings.tls) as api,
    ):
        console.print(
            f"service {cfg.name} ({cfg.platform.provider_label()}): state directory {where}, "
            f"API {api.url} "
            f"(pid {os.getpid()})",
            markup=False,
            soft_wrap=True,
        )
        console.print(
            f"status page: `autoscaler page --state-dir {where}` prints its address",
            markup=False,
            soft_wrap=True,
        )
        signals.wait()
        if release_on_exit:
            console.print(
                "stopping: running jobs release their machines and are kept", markup=False
            )
        else:
            console.print(
                "stopping: running jobs hand their machines over to the next serve on "
                f"{where} (a machine none adopts ends with its lease)",
                markup=False,
                soft_wrap=True,
            )
        stop(service, api, release=release_on_exit)


# --- submit, jobs, cancel, update, wait, page -------------------------------------------


@app.command()
def submit(
    job: Annotated[Path, typer.Argument(help="the job's YAML file: bag and constraint")],
    state_dir: StateDir = None,
    name: Annotated[str | None, typer.Option(help="the job's name (default: the file's)")] = None,
    token_file: TokenFile = None,
) -> None:
    """Submit a job to the running service; prints its id once it is journaled."""
    from autoscaler.service.control import submit

    console.print(submit(_state_dir(state_dir), job, name, token_file), markup=False)


@app.command()
def jobs(
    state_dir: StateDir = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the jobs as JSON")] = False,
    token_file: TokenFile = None,
) -> None:
    """List the service's jobs: state, tasks done, spend against budget, predicted finish
    against deadline (times UTC; with the date when not today).

    When no service runs on the state directory, its jobs are read from its store
    (`service.db`, read-only) and where the runs of those that had not ended stand from
    their journals: the tasks done and the money committed up to the stop.
    """
    from autoscaler.service.control import job_line, list_jobs

    where = _state_dir(state_dir)
    listing = list_jobs(where, token_file)
    if as_json:
        console.print(json.dumps(listing.views, indent=2), markup=False, soft_wrap=True)
        return
    if not listing.running:
        console.print(
            f"the service of {where} is not running: its jobs as it kept them",
            markup=False,
            soft_wrap=True,
        )
    _jobs_table([job_line(v) for v in listing.views], time.time())


def _jobs_table(lines: list[JobLine], now: float) -> None:
    from rich.table import Table  # only `jobs` draws a table

    table = Table(box=None, header_style="bold")
    for col in ("id", "name", "state", "tasks done", "spend / budget", "finish / deadline", "user"):
        table.add_column(col, no_wrap=True)
    table.add_column("waits for / stopped", overflow="ellipsis", no_wrap=True, max_width=60)
    for line in lines:
        table.add_row(
            line.id,
            line.name,
            line.state,
            f"{line.done}/{line.tasks}" + (f" ({line.failed} failed)" if line.failed else ""),
            f"{money(line.spend)} / {money(line.budget)}",
            f"{when(line.finish_at, now)} / {when(line.deadline_at, now)}"
            + (" LATE" if line.late else ""),
            line.user,
            line.note,
        )
    # A pipe gets whole lines.
    wide = console if console.is_terminal else Console(highlight=False, width=200)
    wide.print(table)


@app.command()
def cancel(
    job_id: Annotated[str, typer.Argument(help="the job's id")],
    state_dir: StateDir = None,
    token_file: TokenFile = None,
) -> None:
    """Cancel a job: its running tasks stop, its machines are released, its report is
    written; a queued job never starts.

    Exit code 0 when the cancel is asked; 2 when the job has ended already (nothing to
    cancel: its report stands) or cannot be cancelled.
    """
    from autoscaler.service.control import cancel

    view = cancel(_state_dir(state_dir), job_id, token_file)
    console.print(f"{view['id']}: cancel asked ({view['state']})", markup=False)


@app.command()
def update(
    job_id: Annotated[str, typer.Argument(help="the job's id")],
    state_dir: StateDir = None,
    budget: Annotated[
        float | None, typer.Option(help="a budget job's whole budget from now on")
    ] = None,
    deadline: Annotated[
        str | None,
        typer.Option(
            help="a deadline job's new deadline: a duration counted from now, the moment of "
            "the update (2h; run time), or a date and time (2026-12-01T09:00:00Z)"
        ),
    ] = None,
    token_file: TokenFile = None,
) -> None:
    """Change a job's budget (a budget job) or deadline (a deadline job); it is journaled
    and re-planned at once. Prints the new value."""
    from autoscaler.service.control import change, update

    asked = change(budget, deadline, time.time())
    view = update(_state_dir(state_dir), job_id, asked, token_file)
    console.print(f"{view['id']}: {asked.shown} ({view['state']})", markup=False, soft_wrap=True)


@app.command()
def wait(
    job_id: Annotated[str, typer.Argument(help="the job's id")],
    state_dir: StateDir = None,
    timeout: Annotated[
        float | None, typer.Option(help="give up after this many seconds (exit 124)")
    ] = None,
    token_file: TokenFile = None,
) -> None:
    """Block until the job ends. Exit code: 0 done, 3 stopped (its report says why),
    4 done but a deadline missed, 5 cancelled, 6 interrupted, 7 failed, 124 timed out."""
    from autoscaler.service.control import exit_code, outcome, wait

    waited = wait(_state_dir(state_dir), job_id, timeout, token_file=token_file)
    view = waited.view
    if not waited.ended:
        console.print(f"{job_id}: {view['state']}, {view['done']}/{view['tasks']}", markup=False)
        raise typer.Exit(124)
    console.print(
        f"{job_id}: {outcome(view)}, {view['done']}/{counted(view['tasks'], 'task')}, "
        f"cost {money(view['cost'])}"
        + (f" ({view['stop_reason']})" if view.get("stop_reason") else "")
        + f"; report: {view['run_dir']}/report.md",
        markup=False,
        soft_wrap=True,
    )
    raise typer.Exit(exit_code(view))


@app.command()
def page(state_dir: StateDir = None, token_file: TokenFile = None) -> None:
    """Print the status page's address, with the token that logs a browser in."""
    from autoscaler.service.client import Client  # urllib and ssl: see the module's note

    client = Client(_state_dir(state_dir), token_file)
    console.print(f"{client.url}/login?token={client.token}", markup=False, soft_wrap=True)

"""The service's commands: ``serve``, ``submit``, ``jobs``, ``cancel``, ``update``,
``wait`` and ``page``.

Every command finds its service through a state directory: ``--state-dir``, else the
``AUTOSCALER_STATE_DIR`` environment variable, else a per-user default
(``$XDG_STATE_HOME/autoscaler`` or ``~/.local/state/autoscaler``).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import typer

from autoscaler.cli.app import app, console
from autoscaler.cli.text import money, when
from autoscaler.core.errors import AutoscalerError, ConfigError
from autoscaler.core.words import counted

StateDir = Annotated[
    Path | None,
    typer.Option(
        "--state-dir",
        help="the service's state directory (default: $AUTOSCALER_STATE_DIR, else "
        "~/.local/state/autoscaler)",
    ),
]


def _state_dir(given: Path | None) -> Path:
    from autoscaler.run.registry import state_dir

    return given.expanduser().absolute() if given is not None else state_dir()


def _client(given: Path | None) -> Any:
    from autoscaler.service.client import Client

    return Client(_state_dir(given))


def _call(client: Any, method: str, path: str, body: object = None, timeout: float = 30.0) -> Any:
    """The service's answer; a refusal naming fields is a ``ConfigError`` listing them."""
    from autoscaler.service.client import ApiError

    try:
        return client.call(method, path, body, timeout=timeout)
    except ApiError as exc:
        if exc.problems:
            raise ConfigError("the service refused it:", [f"- {p}" for p in exc.problems]) from None
        raise


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
    from autoscaler.config.service import load_service_config
    from autoscaler.service.api import serve_api
    from autoscaler.service.client import API_FILE
    from autoscaler.service.service import Service

    cfg = load_service_config(config)
    where = _state_dir(state_dir)
    service = Service(cfg, where)
    from autoscaler.cli.service_run import attach_daily_reports

    attach_daily_reports(service)
    stop = threading.Event()
    signals = [0]

    def handler(signum: int, frame: object) -> None:
        signals[0] += 1
        stop.set()

    old = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        service.open()
        server = serve_api(service, cfg.settings.host, cfg.settings.port)
    except AutoscalerError:
        service.close()  # safe on a service opened in part, or not at all
        raise
    console.print(
        f"service {cfg.name} ({cfg.platform.provider_label()}): state directory {where}, "
        f"API {server.url} "
        f"(pid {os.getpid()})",
        markup=False,
        soft_wrap=True,
    )
    console.print(
        f"status page: `autoscaler page --state-dir {where}` prints its address",
        markup=False,
        soft_wrap=True,
    )
    try:
        while not stop.wait(0.5):
            pass
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
        server.shutdown()
        service.close(jobs="release" if release_on_exit else "hand_over")
    finally:
        for s, h in old.items():
            signal.signal(s, h)
        with contextlib.suppress(FileNotFoundError):
            (where / API_FILE).unlink()
        server.server_close()


# --- submit, jobs, cancel, update, wait, page -------------------------------------------


@app.command()
def submit(
    job: Annotated[Path, typer.Argument(help="the job's YAML file: bag and constraint")],
    state_dir: StateDir = None,
    name: Annotated[str | None, typer.Option(help="the job's name (default: the file's)")] = None,
) -> None:
    """Submit a job to the running service; prints its id once it is journaled."""
    from autoscaler.config.service import load_yaml

    data = load_yaml(job, "job fields (bag, constraint, ...)")
    if name is not None:
        data["name"] = name
    client = _client(state_dir)
    body = {"job": data, "base_dir": str(job.absolute().parent), "source": str(job)}
    answer = _call(client, "POST", "/api/v1/jobs", body)
    console.print(answer["id"], markup=False)


@app.command()
def jobs(
    state_dir: StateDir = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the jobs as JSON")] = False,
) -> None:
    """List the service's jobs: state, tasks done, spend against budget, predicted finish
    against deadline (times UTC; with the date when not today).

    When no service runs on the state directory, its jobs are read from its store
    (`service.db`, read-only) and where the runs of those that had not ended stand from
    their journals: the tasks done and the money committed up to the stop.
    """
    from autoscaler.service.client import ApiError

    where = _state_dir(state_dir)
    try:
        views = _call(_client(where), "GET", "/api/v1/jobs")["jobs"]
        running = True
    except ApiError as exc:
        if exc.status or not (where / _DB_FILE).is_file():
            raise  # the service answered with an error, or there is no service here at all
        views = _stored_views(where / _DB_FILE)
        running = False
    if as_json:
        console.print(json.dumps(views, indent=2), markup=False, soft_wrap=True)
        return
    if not running:
        console.print(
            f"the service of {where} is not running: its jobs as it kept them",
            markup=False,
            soft_wrap=True,
        )
    _jobs_table(views, time.time())


def _jobs_table(views: list[dict[str, Any]], now: float) -> None:
    from rich.console import Console
    from rich.table import Table

    from autoscaler.service.store import ENDED

    table = Table(box=None, header_style="bold")
    for col in ("id", "name", "state", "tasks done", "spend / budget", "finish / deadline"):
        table.add_column(col, no_wrap=True)
    table.add_column("waits for / stopped", overflow="ellipsis", no_wrap=True, max_width=60)
    for j in views:
        # An ended job's finish is when it ended; a running one's, its forecast, if any.
        ended = j["state"] in ENDED
        finish_at = j.get("ended_at") if ended else j.get("predicted_finish_at")
        finish = when(finish_at, now)
        deadline = j.get("deadline_at")
        if ended:
            missed = j.get("met_deadline") is False
        else:
            missed = deadline is not None and (finish_at or 0) > deadline
        late = " LATE" if missed else ""
        table.add_row(
            j["id"],
            j["name"],
            j["state"],
            f"{j['done']}/{j['tasks']}" + (f" ({j['failed']} failed)" if j["failed"] else ""),
            f"{money(j['spend'])} / {money(j.get('budget'))}",
            f"{finish} / {when(deadline, now)}{late}",
            j.get("stop_reason") or j.get("waiting") or "",
        )
    # A pipe gets whole lines.
    wide = console if console.is_terminal else Console(highlight=False, width=200)
    wide.print(table)


_DB_FILE = "service.db"
"""The service's store in its state directory (``autoscaler.service``'s ``DB_FILE``)."""


def _stored_views(db: Path) -> list[dict[str, Any]]:
    """The jobs a stopped service keeps, read-only from its store, as the service shows
    them: an ended job's final view; a job that was running (or kept to resume) as its
    run's journal has it."""
    from autoscaler.service.pool import POOL_DIR
    from autoscaler.service.runners import journal_progress
    from autoscaler.service.store import Store
    from autoscaler.service.view import job_view

    try:
        store = Store(db, read_only=True)
        try:
            rows = store.rows()
        finally:
            store.close()
        live = journal_progress(rows, db.parent / POOL_DIR)
    except sqlite3.Error as exc:
        raise AutoscalerError(f"{db}: cannot read the service's jobs ({exc})") from None
    return [job_view(row, live.get(row.id), None).to_json() for row in rows]


@app.command()
def cancel(
    job_id: Annotated[str, typer.Argument(help="the job's id")],
    state_dir: StateDir = None,
) -> None:
    """Cancel a job: its running tasks stop, its machines are released, its report is
    written; a queued job never starts.

    Exit code 0 when the cancel is asked; 2 when the job has ended already (nothing to
    cancel: its report stands) or cannot be cancelled.
    """
    from autoscaler.service.store import ENDED

    client = _client(state_dir)
    view = _call(client, "GET", f"/api/v1/jobs/{job_id}")
    if view["state"] in ENDED:
        raise AutoscalerError(f"{job_id} has ended ({view['state']}): nothing to cancel")
    view = _call(client, "POST", f"/api/v1/jobs/{job_id}/cancel")
    if view["state"] in ENDED and view["state"] != "cancelled":
        raise AutoscalerError(f"{job_id} ended ({view['state']}) before the cancel reached it")
    console.print(f"{view['id']}: cancel asked ({view['state']})", markup=False)


def _deadline(text: str) -> tuple[dict[str, float], str]:
    """``--deadline`` as the API takes it, and as the user reads it back: a duration
    counts from now, the moment of the update (run time: emulated seconds in a time-scaled
    service, as a job file's ``deadline_s``); or a date and time (ISO 8601, UTC unless it
    says)."""
    from autoscaler.config.durations import seconds_in

    seconds = seconds_in(text)
    if seconds is not None:
        return {"deadline_s": seconds}, f"{text.strip()} from now (run time)"
    try:
        at = datetime.fromisoformat(text)
    except ValueError:
        raise AutoscalerError(
            f"--deadline {text!r}: give a duration from now (90m, 2h) or a date and time "
            "(2026-12-01T09:00:00Z)"
        ) from None
    if at.tzinfo is None:
        at = at.replace(tzinfo=UTC)
    if at.timestamp() <= time.time():
        raise AutoscalerError(f"--deadline {text}: that is in the past")
    shown = at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")
    return {"deadline_at": at.timestamp()}, f"{shown} UTC"


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
) -> None:
    """Change a job's budget (a budget job) or deadline (a deadline job); it is journaled
    and re-planned at once. Prints the new value."""
    if (budget is None) == (deadline is None):
        raise AutoscalerError("give --budget B or --deadline D")
    if budget is not None:
        body: dict[str, float] = {"budget": budget}
        shown = f"budget set to {money(budget)}"
    else:
        body, at = _deadline(str(deadline))
        shown = f"deadline set to {at}"
    view = _call(_client(state_dir), "POST", f"/api/v1/jobs/{job_id}/update", body)
    console.print(f"{view['id']}: {shown} ({view['state']})", markup=False, soft_wrap=True)


@app.command()
def wait(
    job_id: Annotated[str, typer.Argument(help="the job's id")],
    state_dir: StateDir = None,
    timeout: Annotated[
        float | None, typer.Option(help="give up after this many seconds (exit 124)")
    ] = None,
) -> None:
    """Block until the job ends. Exit code: 0 done, 3 stopped (its report says why),
    4 done but a deadline missed, 5 cancelled, 6 interrupted, 7 failed, 124 timed out."""
    from autoscaler.service.store import ENDED, EXIT_CODES

    client = _client(state_dir)
    end = None if timeout is None else time.monotonic() + timeout
    while True:
        left = 60.0 if end is None else max(0.0, min(60.0, end - time.monotonic()))
        view = _call(client, "GET", f"/api/v1/jobs/{job_id}/wait?timeout={left}", timeout=left + 30)
        if view["state"] in ENDED:
            break
        if end is not None and time.monotonic() >= end:
            console.print(
                f"{job_id}: {view['state']}, {view['done']}/{view['tasks']}", markup=False
            )
            raise typer.Exit(124)
    outcome = view["state"]
    if outcome == "done" and view.get("met_deadline") is False:
        outcome = "late"
    console.print(
        f"{job_id}: {outcome}, {view['done']}/{counted(view['tasks'], 'task')}, "
        f"cost {money(view['cost'])}"
        + (f" ({view['stop_reason']})" if view.get("stop_reason") else "")
        + f"; report: {view['run_dir']}/report.md",
        markup=False,
        soft_wrap=True,
    )
    raise typer.Exit(EXIT_CODES[outcome])


@app.command()
def page(state_dir: StateDir = None) -> None:
    """Print the status page's address, with the token that logs a browser in."""
    client = _client(state_dir)
    console.print(f"{client.url}/login?token={client.token}", markup=False, soft_wrap=True)

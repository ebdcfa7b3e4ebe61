"""What a user asks of a service from outside it (``submit``, ``jobs``, ``cancel``,
``update``, ``wait``) and what the answers mean: the requests made through its API
client, and what a stopped service's store and journals still tell.

A view here is the API's JSON for a job (``JobView.to_json``), as the service answers
it, so ``jobs --json`` prints exactly what the API gives. Talking to a running service
needs neither the config models nor the run's state: what reads a job file or a stopped
service's store loads them when it is called, so ``wait`` or ``jobs`` starts fast.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from autoscaler.config.durations import seconds_in
from autoscaler.core.errors import AutoscalerError, ConfigError
from autoscaler.service.client import ApiError, Client
from autoscaler.service.job_states import ENDED, EXIT_CODES

View = dict[str, Any]
"""A job as the API shows it (``JobView.to_json``)."""


def ask(client: Client, method: str, path: str, body: object = None, timeout: float = 30.0) -> Any:
    """The service's answer; a refusal naming fields is a ``ConfigError`` listing them."""
    try:
        return client.call(method, path, body, timeout=timeout)
    except ApiError as exc:
        if exc.problems:
            raise ConfigError("the service refused it:", [f"- {p}" for p in exc.problems]) from None
        raise


def submit(where: Path, path: Path, name: str | None = None, token_file: Path | None = None) -> str:
    """Submit to the service of ``where`` the job file ``path`` (its relative paths are
    the file's; ``name``: the job's name instead of the file's); its id, once the service
    journaled it. The service checks the job: a bad one is refused naming its fields."""
    from autoscaler.config.service_schema import load_yaml  # the config models: see the module

    job = load_yaml(path, "job fields (bag, constraint, ...)")
    if name is not None:
        job["name"] = name
    body = {"job": job, "base_dir": str(path.absolute().parent), "source": str(path)}
    return str(ask(Client(where, token_file), "POST", "/api/v1/jobs", body)["id"])


@dataclass(frozen=True)
class Listing:
    """A service's jobs: from the running service, or as a stopped one kept them."""

    views: list[View]
    running: bool


def list_jobs(where: Path, token_file: Path | None = None) -> Listing:
    """The jobs of the service of ``where``: as it answers, or, when none runs there, as
    its store (read-only) and its runs' journals keep them."""
    try:
        return Listing(ask(Client(where, token_file), "GET", "/api/v1/jobs")["jobs"], running=True)
    except ApiError as exc:
        from autoscaler.service.store import DB_FILE  # the config models: see the module

        if exc.status or not (where / DB_FILE).is_file():
            raise  # the service answered with an error, or there is no service here at all
        return Listing(stored_views(where / DB_FILE), running=False)


def stored_views(db: Path) -> list[View]:
    """The jobs a stopped service keeps, read-only from its store, as the service shows
    them: an ended job's final view; a job that was running (or kept to resume) as its
    run's journal has it."""
    # The run's state and the store: see the module.
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


@dataclass(frozen=True)
class JobLine:
    """A job's line in the ``jobs`` table: its progress, spend and when it finishes."""

    id: str
    name: str
    user: str  # who submitted it
    state: str
    done: int
    tasks: int
    failed: int
    spend: float
    budget: float | None
    finish_at: float | None  # an ended job's end; a running one's forecast, if any
    deadline_at: float | None
    late: bool  # the deadline was missed, or the forecast misses it
    note: str  # why it stopped, or what machines it waits for


def job_line(view: View) -> JobLine:
    """What the ``jobs`` table shows of ``view``."""
    ended = view["state"] in ENDED
    finish_at = view.get("ended_at") if ended else view.get("predicted_finish_at")
    deadline = view.get("deadline_at")
    if ended:
        late = view.get("met_deadline") is False
    else:
        late = deadline is not None and (finish_at or 0) > deadline
    return JobLine(
        id=view["id"],
        name=view["name"],
        user=view.get("user", "admin"),
        state=view["state"],
        done=view["done"],
        tasks=view["tasks"],
        failed=view["failed"],
        spend=view["spend"],
        budget=view.get("budget"),
        finish_at=finish_at,
        deadline_at=deadline,
        late=late,
        note=view.get("stop_reason") or view.get("waiting") or "",
    )


def cancel(where: Path, job_id: str, token_file: Path | None = None) -> View:
    """Cancel the job ``job_id`` of the service of ``where``; its view once the cancel
    is asked. A job that has ended (before, or before the cancel reached it) is an error:
    there is nothing to cancel. The service answers both, after what the user's role
    may do: a user who may not cancel the job hears that, whatever its state."""
    client = Client(where, token_file)
    view = ask(client, "POST", f"/api/v1/jobs/{job_id}/cancel")
    if view["state"] in ENDED and view["state"] != "cancelled":
        raise AutoscalerError(f"{job_id} ended ({view['state']}) before the cancel reached it")
    return dict(view)


@dataclass(frozen=True)
class Change:
    """A change of a job's constraint: the API's request body, and how a user reads it."""

    body: dict[str, float]
    shown: str


def change(budget: float | None, deadline: str | None, now: float) -> Change:
    """The change ``update --budget`` or ``update --deadline`` asks for, at ``now``."""
    if (budget is None) == (deadline is None):
        raise AutoscalerError("give --budget B or --deadline D")
    if budget is not None:
        return Change({"budget": budget}, f"budget set to {budget:.2f}")
    return new_deadline(str(deadline), now)


def new_deadline(text: str, now: float) -> Change:
    """``--deadline`` as the API takes it, and as the user reads it back: a duration
    counts from now, the moment of the update (run time: emulated seconds in a time-scaled
    service, as a job file's ``deadline_s``); or a date and time (ISO 8601, UTC unless it
    says), which must be after ``now``."""
    seconds = seconds_in(text)
    if seconds is not None:
        return Change(
            {"deadline_s": seconds}, f"deadline set to {text.strip()} from now (run time)"
        )
    try:
        at = datetime.fromisoformat(text)
    except ValueError:
        raise AutoscalerError(
            f"--deadline {text!r}: give a duration from now (90m, 2h) or a date and time "
            "(2026-12-01T09:00:00Z)"
        ) from None
    if at.tzinfo is None:
        at = at.replace(tzinfo=UTC)
    if at.timestamp() <= now:
        raise AutoscalerError(f"--deadline {text}: that is in the past")
    shown = at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")
    return Change({"deadline_at": at.timestamp()}, f"deadline set to {shown} UTC")


def update(where: Path, job_id: str, to: Change, token_file: Path | None = None) -> View:
    """Ask the service of ``where`` to apply ``to`` to the job ``job_id``; the job's view
    after it."""
    return dict(ask(Client(where, token_file), "POST", f"/api/v1/jobs/{job_id}/update", to.body))


@dataclass(frozen=True)
class Waited:
    """What waiting for a job gave: its last view, and whether it ended in time."""

    view: View
    ended: bool


def wait(
    where: Path,
    job_id: str,
    timeout: float | None,
    clock: Callable[[], float] = time.monotonic,
    token_file: Path | None = None,
) -> Waited:
    """The job ``job_id`` of the service of ``where`` once it ends, or once ``timeout``
    seconds (None: no limit) have passed: the service holds each request up to a
    minute, so a lost answer costs little."""
    client = Client(where, token_file)
    end = None if timeout is None else clock() + timeout
    while True:
        left = 60.0 if end is None else max(0.0, min(60.0, end - clock()))
        view = ask(client, "GET", f"/api/v1/jobs/{job_id}/wait?timeout={left}", timeout=left + 30)
        if view["state"] in ENDED:
            return Waited(dict(view), ended=True)
        if end is not None and clock() >= end:
            return Waited(dict(view), ended=False)


def outcome(view: View) -> str:
    """How an ended job ended: its state, or ``late`` when it was done but missed its
    deadline."""
    if view["state"] == "done" and view.get("met_deadline") is False:
        return "late"
    return str(view["state"])


def exit_code(view: View) -> int:
    """``autoscaler wait``'s exit code for the ended job ``view`` (``EXIT_CODES``)."""
    return EXIT_CODES[outcome(view)]

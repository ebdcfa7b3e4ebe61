"""The service's commands: ``serve``, ``submit``, ``jobs``, ``cancel``, ``update``,
``wait`` and ``page``; and ``run``'s real runs, which go through an in-process service.

Every command finds its service through a state directory: ``--state-dir``, else the
``AUTOSCALER_STATE_DIR`` environment variable, else a per-user default
(``$XDG_STATE_HOME/autoscaler`` or ``~/.local/state/autoscaler``).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import typer

from autoscaler.cli.main import EXIT_CONFIG, _err, _exit_with, _out, app
from autoscaler.config.schema import RunConfig
from autoscaler.core.errors import AutoscalerError, ConfigError
from autoscaler.core.model import TaskSpec

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

    try:
        return Client(_state_dir(given))
    except AutoscalerError as exc:
        _exit_with(exc)


def _call(client: Any, method: str, path: str, body: object = None, timeout: float = 30.0) -> Any:
    from autoscaler.service.client import ApiError

    try:
        return client.call(method, path, body, timeout=timeout)
    except ApiError as exc:
        if exc.problems:
            _err.print("error: the service refused it:", markup=False, soft_wrap=True)
            for p in exc.problems:
                _err.print(f"  - {p}", markup=False, soft_wrap=True)
            raise typer.Exit(EXIT_CONFIG) from None
        _exit_with(exc)


# --- serve ------------------------------------------------------------------------------


@app.command()
def serve(
    config: Annotated[Path, typer.Argument(help="the service's YAML file (no bag: jobs come)")],
    state_dir: StateDir = None,
) -> None:
    """Run the service until stopped: it takes jobs (`autoscaler submit`), runs them on
    the configured provider, and serves the API and a status page on loopback.

    SIGTERM or Ctrl-C stops it: running jobs release every machine and are kept as
    interrupted; the next `serve` on the same state directory resumes them, as it
    resumes jobs of a service that was killed.
    """
    from autoscaler.config.service import load_service_config
    from autoscaler.service.api import serve_api
    from autoscaler.service.client import API_FILE
    from autoscaler.service.service import Service

    try:
        cfg = load_service_config(config)
    except ConfigError as exc:
        _exit_with(exc)
    where = _state_dir(state_dir)
    service = Service(cfg, where)
    _attach_daily_reports(service)
    stop = threading.Event()
    signals = [0]

    def handler(signum: int, frame: object) -> None:
        signals[0] += 1
        stop.set()

    old = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        service.open()
        server = serve_api(service, cfg.settings.host, cfg.settings.port)
    except AutoscalerError as exc:
        with contextlib.suppress(Exception):
            service.close()
        _exit_with(exc)
    _out.print(
        f"service {cfg.name} ({cfg.provider}): state directory {where}, API {server.url} "
        f"(pid {os.getpid()})",
        markup=False,
        soft_wrap=True,
    )
    _out.print(
        f"status page: `autoscaler page --state-dir {where}` prints its address",
        markup=False,
        soft_wrap=True,
    )
    try:
        while not stop.wait(0.5):
            pass
        _out.print("stopping: running jobs release their machines and are kept", markup=False)
        server.shutdown()
        service.close(interrupt=True)
    finally:
        for s, h in old.items():
            signal.signal(s, h)
        with contextlib.suppress(FileNotFoundError):
            (where / API_FILE).unlink()
        server.server_close()


def _attach_daily_reports(service: Any) -> None:
    """The per-day cost reports are written again as each job ends."""
    service.on_job_end = lambda svc, job_id: _write_daily(svc)


def _write_daily(service: Any) -> None:
    try:
        service.write_daily_reports()
    except Exception as exc:  # a report that cannot be written does not stop the service
        _err.print(f"warning: the daily cost reports: {exc!r}", markup=False, soft_wrap=True)


# --- submit, jobs, cancel, update, wait, page -------------------------------------------


@app.command()
def submit(
    job: Annotated[Path, typer.Argument(help="the job's YAML file: bag and constraint")],
    state_dir: StateDir = None,
    name: Annotated[str | None, typer.Option(help="the job's name (default: the file's)")] = None,
) -> None:
    """Submit a job to the running service; prints its id once it is journaled."""
    from autoscaler.config.service import load_yaml

    try:
        data = load_yaml(job, "job fields (bag, constraint, ...)")
    except ConfigError as exc:
        _exit_with(exc)
    if name is not None:
        data["name"] = name
    client = _client(state_dir)
    body = {"job": data, "base_dir": str(job.absolute().parent), "source": str(job)}
    answer = _call(client, "POST", "/api/v1/jobs", body)
    _out.print(answer["id"], markup=False)


def _when(epoch: float | None) -> str:
    if epoch is None:
        return "-"
    return datetime.fromtimestamp(epoch, UTC).strftime("%H:%M:%S")


def _money(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


@app.command()
def jobs(
    state_dir: StateDir = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the jobs as JSON")] = False,
) -> None:
    """List the service's jobs: state, tasks done, spend against budget, predicted finish
    against deadline (times UTC)."""
    from rich.table import Table

    answer = _call(_client(state_dir), "GET", "/api/v1/jobs")
    if as_json:
        _out.print(json.dumps(answer["jobs"], indent=2), markup=False, soft_wrap=True)
        return
    table = Table(box=None, header_style="bold")
    for col in ("id", "name", "state", "tasks done", "spend / budget", "finish / deadline"):
        table.add_column(col, no_wrap=True)
    table.add_column("why it stopped", overflow="ellipsis", no_wrap=True, max_width=48)
    for j in answer["jobs"]:
        finish = _when(j.get("predicted_finish_at"))
        deadline = j.get("deadline_at")
        late = (
            " LATE"
            if deadline is not None and (j.get("predicted_finish_at") or 0) > deadline
            else ""
        )
        table.add_row(
            j["id"],
            j["name"],
            j["state"],
            f"{j['done']}/{j['tasks']}" + (f" ({j['failed']} failed)" if j["failed"] else ""),
            f"{_money(j['spend'])} / {_money(j.get('budget'))}",
            f"{finish} / {_when(deadline)}{late}",
            j.get("stop_reason") or "",
        )
    from rich.console import Console

    wide = _out if _out.is_terminal else Console(highlight=False, width=200)  # a pipe: whole lines
    wide.print(table)


@app.command()
def cancel(
    job_id: Annotated[str, typer.Argument(help="the job's id")],
    state_dir: StateDir = None,
) -> None:
    """Cancel a job: its running tasks stop, its machines are released, its report is
    written; a queued job never starts."""
    view = _call(_client(state_dir), "POST", f"/api/v1/jobs/{job_id}/cancel")
    _out.print(f"{view['id']}: cancel asked ({view['state']})", markup=False)


_DURATION = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*(s|m|min|h|d)?\s*$")


def _deadline(text: str) -> dict[str, float]:
    """``--deadline``: a duration from now in run time (``90m``, ``2h``, seconds;
    emulated time in a time-scaled run, as a job file's ``deadline_s``), or a date and
    time (ISO 8601, UTC unless it says)."""
    match = _DURATION.match(text)
    if match is not None:
        unit = {"s": 1, "m": 60, "min": 60, "h": 3600, "d": 86400}[match.group(2) or "s"]
        return {"deadline_s": float(match.group(1)) * unit}
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        _exit_with(
            AutoscalerError(
                f"--deadline {text!r}: give a duration from now (90m, 2h) or a date and time "
                "(2026-12-01T09:00:00Z)"
            )
        )
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    if when.timestamp() <= time.time():
        _exit_with(AutoscalerError(f"--deadline {text}: that is in the past"))
    return {"deadline_at": when.timestamp()}


@app.command()
def update(
    job_id: Annotated[str, typer.Argument(help="the job's id")],
    state_dir: StateDir = None,
    budget: Annotated[float | None, typer.Option(help="the job's whole budget from now on")] = None,
    deadline: Annotated[
        str | None, typer.Option(help="a new deadline: a duration from now (2h) or a date")
    ] = None,
) -> None:
    """Change a job's budget or deadline; it is journaled and re-planned at once."""
    if (budget is None) == (deadline is None):
        _exit_with(AutoscalerError("give --budget B or --deadline D"))
    body = {"budget": budget} if budget is not None else _deadline(str(deadline))
    view = _call(_client(state_dir), "POST", f"/api/v1/jobs/{job_id}/update", body)
    _out.print(
        f"{view['id']}: budget {_money(view.get('budget'))}, deadline "
        f"{_when(view.get('deadline_at'))} ({view['state']})",
        markup=False,
    )


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
    from autoscaler.service.service import ENDED, EXIT_CODES

    client = _client(state_dir)
    end = None if timeout is None else time.monotonic() + timeout
    while True:
        left = 60.0 if end is None else max(0.0, min(60.0, end - time.monotonic()))
        view = _call(client, "GET", f"/api/v1/jobs/{job_id}/wait?timeout={left}", timeout=left + 30)
        if view["state"] in ENDED:
            break
        if end is not None and time.monotonic() >= end:
            _out.print(f"{job_id}: {view['state']}, {view['done']}/{view['tasks']}", markup=False)
            raise typer.Exit(124)
    outcome = view["state"]
    if outcome == "done" and view.get("met_deadline") is False:
        outcome = "late"
    _out.print(
        f"{job_id}: {outcome}, {view['done']}/{view['tasks']} tasks, cost {_money(view['cost'])}"
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
    _out.print(f"{client.url}/login?token={client.token}", markup=False, soft_wrap=True)


# --- `autoscaler run`: serve, submit, wait and stop, in one process ------------------------


def run_as_service(
    cfg: RunConfig, tasks: list[TaskSpec], run_dir: Path, run_id: str, seed: int | None
) -> Any:
    """A real run of ``cfg`` through a service of its own: the job's ``Outcome``.

    The service's store lives in a temporary directory; the run directory is the run's,
    so ``run --resume RUN_DIR`` carries on a run as before. SIGINT and SIGTERM reach the
    job's daemon as they would a lone daemon's: the first releases every machine, a
    second kills them.
    """
    from autoscaler.config.service import WORK_FIELDS, ServiceConfig, ServiceSettings
    from autoscaler.run.live import live_view
    from autoscaler.service.service import Service

    fields = {k: v for k, v in cfg.model_dump(mode="json").items() if k not in WORK_FIELDS}
    service_cfg = ServiceConfig(fields, ServiceSettings(max_running_jobs=1), "run")
    _out.print(
        f"run {run_id}: {len(tasks)} tasks, directory {run_dir}", markup=False, soft_wrap=True
    )
    with (
        tempfile.TemporaryDirectory(prefix="autoscaler-run-") as tmp,
        live_view(_err, cfg, len(tasks)) as view,
    ):
        service = Service(service_cfg, Path(tmp), progress=view, shared=False)
        service.open()
        job_id = service.submit_config(cfg, tasks, run_dir=run_dir, run_id=run_id, seed=seed)

        def handler(signum: int, frame: object) -> None:
            daemon = service.daemon_of(job_id)
            if daemon is not None:
                daemon.signal(signum)

        old = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            service.wait(job_id)
            final = service.view(job_id, history=False)
        finally:
            for s, h in old.items():
                signal.signal(s, h)
            service.close(interrupt=False)
        outcome = service.outcomes.get(job_id)
        if outcome is None:
            reason = str(final.get("stop_reason") or f"see {run_dir / 'log.jsonl'}")
            raise AutoscalerError(reason.removeprefix("cannot start: "))
        return outcome


# --- `autoscaler run SERVICE --job FILE[@AT] ...`: jobs arriving over time ----------------


def _job_arg(text: str) -> tuple[Path, float]:
    """``FILE`` or ``FILE@AT``: a job file and its arrival, run seconds from the start."""
    path, sep, at = text.rpartition("@")
    if not sep:
        return Path(text), 0.0
    match = _DURATION.match(at)
    if match is None:
        raise AutoscalerError(f"--job {text}: the arrival after @ must be a duration (300, 5m)")
    unit = {"s": 1, "m": 60, "min": 60, "h": 3600, "d": 86400}[match.group(2) or "s"]
    return Path(path), float(match.group(1)) * unit


def run_service_jobs(
    config: Path, jobs: list[str], *, dry_run: bool, seed: int | None, out: Path
) -> int:
    """Run a service config's jobs, each arriving at its time: in the emulator (one dry
    run per job, as the service runs each job on its own machines), or for real through
    an in-process service whose state directory is ``out/service``. The exit code: 0
    when every job is done (and on time), else the first job's `wait` code."""
    from rich.table import Table

    from autoscaler.config.service import job_config, load_service_config, load_yaml
    from autoscaler.service.service import EXIT_CODES, Service

    svc = load_service_config(config)
    given = [_job_arg(j) for j in jobs]
    loaded = []
    for path, at in given:
        data = load_yaml(path, "job fields (bag, constraint, ...)")
        cfg, tasks = job_config(
            svc, data, source=str(path), base_dir=path.absolute().parent, now_wall=time.time()
        )
        loaded.append((path, at, data, cfg, tasks))
    loaded.sort(key=lambda item: item[1])
    table = Table(box=None, header_style="bold")
    for col in ("job", "arrives", "mode", "tasks", "done", "cost", "budget", "finish", "outcome"):
        table.add_column(col)
    codes: list[int] = []
    if dry_run:
        from autoscaler.run.start import dry_run as do_dry_run
        from autoscaler.service.pool import pool_config, shares_the_pool

        pooled = [item for item in loaded if shares_the_pool(item[3])]
        if pooled and svc.settings.share_deadline_jobs:
            # As the service runs them: one pool run, each job arriving at its time.
            first = pooled[0][3]
            data = pool_config(first, first.name).model_dump(mode="json")
            data["deadline"]["keep_open"] = False
            data["jobs"] = [
                {**pool_config(cfg, cfg.name).model_dump(mode="json")["jobs"][0], "at": at}
                for _path, at, _data, cfg, _tasks in pooled
            ]
            pool_cfg = RunConfig.model_validate(data)
            pool_tasks = [t for item in pooled for t in item[4]]
            pool_tasks = [TaskSpec(i, t.command, t.env) for i, t in enumerate(pool_tasks)]
            result = do_dry_run(pool_cfg, pool_tasks, seed=seed, out_dir=out / "pool")
            for (_path, at, _data, cfg, _tasks), j in zip(
                pooled, getattr(result.report, "jobs", ()), strict=True
            ):
                outcome = "done" if j.met_deadline else ("late" if j.done == j.tasks else "stopped")
                codes.append(EXIT_CODES[outcome])
                table.add_row(
                    cfg.name + " (pool)",
                    f"{at:g} s",
                    "deadline",
                    str(j.tasks),
                    str(j.done),
                    f"{j.cost:.2f}",
                    "-",
                    f"{j.finish_s or 0:.0f} s",
                    outcome,
                )
            loaded = [item for item in loaded if item not in pooled]
        for i, (_path, at, _data, cfg, tasks) in enumerate(loaded, 1):
            result = do_dry_run(cfg, tasks, seed=seed, out_dir=out / f"{i}-{cfg.name}")
            r = result.report
            met = all(j.met_deadline for j in getattr(r, "jobs", ()))
            outcome = "done" if r.stop_reason is None else "stopped"
            if outcome == "done" and not met:
                outcome = "late"
            codes.append(EXIT_CODES[outcome])
            table.add_row(
                cfg.name,
                f"{at:g} s",
                "deadline" if cfg.deadline_mode else "budget",
                str(r.tasks_total),
                str(r.tasks_done),
                f"{r.cost:.2f}",
                _money(r.budget),
                f"{at + r.makespan_s:.0f} s",
                outcome + (f" ({r.stop_reason})" if r.stop_reason else ""),
            )
        _out.print(table)
        _out.print(
            f"run directories: {out}/<n>-<job> (and {out}/pool for deadline jobs that share)",
            markup=False,
            soft_wrap=True,
        )
        return next((c for c in codes if c), 0)
    service = Service(svc, out / "service")
    _attach_daily_reports(service)
    service.open()
    started = time.monotonic()
    ids = []
    try:
        for _path, at, data, _cfg, _tasks in loaded:
            delay = at / svc.time_scale - (time.monotonic() - started)
            if delay > 0:
                time.sleep(delay)
            ids.append(service.submit(data, source=str(_path), base_dir=_path.absolute().parent))
            _out.print(f"submitted {ids[-1]} ({data.get('name', 'job')})", markup=False)
        views = [service.wait(job_id) for job_id in ids]
    finally:
        service.close(interrupt=True)
    for (_path, at, _data, _cfg, _tasks), v in zip(loaded, views, strict=True):
        outcome = v["state"]
        if outcome == "done" and v.get("met_deadline") is False:
            outcome = "late"
        codes.append(EXIT_CODES.get(outcome, 1))
        table.add_row(
            f"{v['id']} {v['name']}",
            f"{at:g} s",
            v["mode"],
            str(v["tasks"]),
            str(v["done"]),
            f"{v['cost']:.2f}",
            _money(v.get("budget")),
            _when(v.get("ended_at")),
            outcome + (f" ({v['stop_reason']})" if v.get("stop_reason") else ""),
        )
    _out.print(table)
    _out.print(f"state directory: {out / 'service'}", markup=False, soft_wrap=True)
    return next((c for c in codes if c), 0)

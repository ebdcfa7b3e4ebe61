"""``autoscaler run SERVICE --job FILE[@AT] ...``: a service config's jobs arriving over
time, in the emulator or for real (``service.arrivals``); and the warning a service
gives when its daily cost reports cannot be written."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autoscaler.cli.app import console, err_console
from autoscaler.cli.text import money, when
from autoscaler.core.errors import AutoscalerError

if TYPE_CHECKING:
    from autoscaler.service.arrivals import GivenJob


def attach_daily_reports(service: Any) -> None:
    """The per-day cost reports are written again as each job ends."""
    service.on_job_end = _write_daily


def _write_daily(service: Any, job_id: str = "") -> None:
    """The service's daily cost reports written again (a job ended); a failure is a
    warning."""
    try:
        service.write_daily_reports()
    except Exception as exc:  # a report that cannot be written does not stop the service
        err_console.print(f"warning: the daily cost reports: {exc!r}", markup=False, soft_wrap=True)


def _job_arg(text: str) -> tuple[Path, float]:
    """``FILE`` or ``FILE@AT``: a job file and its arrival, run seconds from the start."""
    path, sep, at = text.rpartition("@")
    if not sep:
        return Path(text), 0.0
    from autoscaler.config.durations import seconds_in

    seconds = seconds_in(at)
    if seconds is None:
        raise AutoscalerError(f"--job {text}: the arrival after @ must be a duration (300, 5m)")
    return Path(path), seconds


def run_service_jobs(
    config: Path,
    jobs: list[str],
    *,
    dry_run: bool,
    seed: int | None,
    out: Path,
    memory: Path | None = None,
) -> int:
    """Run a service config's jobs, each arriving at its time, and print how each ended:
    in the emulator (run directories under ``out``, its memory of applications started
    from ``memory``'s, a state directory), or for real through a service whose state
    directory is ``out/service``. The exit code: 0 when every job is done (and on time),
    else the first other job's `wait` code."""
    # Imported here: the command group starts without the config models (start-up time).
    from rich.table import Table

    from autoscaler.config.service_schema import load_service_config
    from autoscaler.service.arrivals import dry_run_jobs, exit_code, load_jobs, serve_jobs
    from autoscaler.service.memory import said

    svc = load_service_config(config)
    given = load_jobs(svc, [_job_arg(j) for j in jobs])
    if dry_run:
        lines = dry_run_jobs(svc, given, seed=seed, out=out, memory_from=memory)
    else:

        def submitted(job_id: str, job: GivenJob) -> None:
            console.print(f"submitted {job_id} ({job.data.get('name', 'job')})", markup=False)

        lines = serve_jobs(
            svc, given, out / "service", submitted=submitted, on_job_end=_write_daily
        )
    table = Table(box=None, header_style="bold")
    for col in ("job", "arrives", "mode", "tasks", "done", "cost", "budget", "finish", "outcome"):
        table.add_column(col)
    now = time.time()
    for line in lines:
        finish = f"{line.finish_s:.0f} s" if line.finish_s is not None else when(line.ended_at, now)
        table.add_row(
            line.name,
            f"{line.at:g} s",
            line.mode,
            str(line.tasks),
            str(line.done),
            f"{line.cost:.2f}",
            money(line.budget),
            finish,
            line.outcome + (f" ({line.stop_reason})" if line.stop_reason else ""),
        )
    console.print(table)
    for line in lines:
        if line.task_times is not None:
            console.print(f"{line.name}: {said(line.task_times)}", markup=False, soft_wrap=True)
    if dry_run:
        console.print(
            f"run directories: {out}/<n>-<job> (and {out}/pool for deadline jobs that share); "
            f"what it remembers of applications: {out}/memory.db",
            markup=False,
            soft_wrap=True,
        )
    else:
        console.print(f"state directory: {out / 'service'}", markup=False, soft_wrap=True)
    return exit_code(lines)

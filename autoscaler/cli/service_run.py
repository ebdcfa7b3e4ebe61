"""``autoscaler run`` through a service: a real run in a service of its own, and a
service config's jobs arriving over time (``run SERVICE --job FILE[@AT]``), in the
emulator or for real."""

from __future__ import annotations

import signal
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autoscaler.cli.app import console, err_console
from autoscaler.cli.text import money, when
from autoscaler.core.errors import AutoscalerError
from autoscaler.core.words import counted

if TYPE_CHECKING:
    from autoscaler.config.schema import RunConfig
    from autoscaler.core.model import TaskSpec


def attach_daily_reports(service: Any) -> None:
    """The per-day cost reports are written again as each job ends."""
    service.on_job_end = lambda svc, job_id: _write_daily(svc)


def _write_daily(service: Any) -> None:
    try:
        service.write_daily_reports()
    except Exception as exc:  # a report that cannot be written does not stop the service
        err_console.print(f"warning: the daily cost reports: {exc!r}", markup=False, soft_wrap=True)


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
    from autoscaler.config.service import ServiceConfig, ServiceSettings
    from autoscaler.run.live import live_view
    from autoscaler.service.service import Service

    service_cfg = ServiceConfig(cfg.platform(), ServiceSettings(max_running_jobs=1), "run")
    console.print(
        f"run {run_id}: {counted(len(tasks), 'task')}, directory {run_dir}",
        markup=False,
        soft_wrap=True,
    )
    with (
        tempfile.TemporaryDirectory(prefix="autoscaler-run-") as tmp,
        live_view(err_console, cfg, len(tasks)) as view,
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
            service.close(jobs="finish")
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
    from autoscaler.config.durations import seconds_in

    seconds = seconds_in(at)
    if seconds is None:
        raise AutoscalerError(f"--job {text}: the arrival after @ must be a duration (300, 5m)")
    return Path(path), seconds


def _pool_names(names: list[str]) -> list[str]:
    """Each job's name in a dry run's pool, in order of arrival: its own, or for a name
    given before, the name with the id the service gives the job (``dl-a-j2``), as the
    service takes the same job file twice."""
    seen: set[str] = set()
    out = []
    for i, name in enumerate(names, 1):
        out.append(name if name not in seen else f"{name}-j{i}")
        seen.add(name)
    return out


def run_service_jobs(
    config: Path, jobs: list[str], *, dry_run: bool, seed: int | None, out: Path
) -> int:
    """Run a service config's jobs, each arriving at its time: in the emulator (one dry
    run per job, as the service runs each job on its own machines), or for real through
    an in-process service whose state directory is ``out/service``. The exit code: 0
    when every job is done (and on time), else the first job's `wait` code."""
    from rich.table import Table

    from autoscaler.config.service import job_config, load_service_config, load_yaml
    from autoscaler.service.service import Service
    from autoscaler.service.store import EXIT_CODES

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
        from autoscaler.config.schema import RunConfig
        from autoscaler.core.model import TaskSpec
        from autoscaler.run.start import start_run
        from autoscaler.service.pool import pool_config, shares_the_pool

        pooled = [item for item in loaded if shares_the_pool(item[3])]
        if pooled and svc.settings.share_deadline_jobs:
            # As the service runs them: one pool run, each job arriving at its time.
            names = _pool_names([item[3].name for item in loaded])
            pool_names = [names[loaded.index(item)] for item in pooled]
            first = pooled[0][3]
            data = pool_config(first, pool_names[0]).model_dump(mode="json")
            data["deadline"]["keep_open"] = False
            data["jobs"] = [
                {**pool_config(cfg, name).model_dump(mode="json")["jobs"][0], "at": at}
                for (_path, at, _data, cfg, _tasks), name in zip(pooled, pool_names, strict=True)
            ]
            pool_cfg = RunConfig.model_validate(data)
            pool_tasks = [t for item in pooled for t in item[4]]
            pool_tasks = [TaskSpec(i, t.command, t.env) for i, t in enumerate(pool_tasks)]
            result = start_run("dry", out / "pool", pool_cfg, pool_tasks, seed=seed).run()
            for (_path, at, _data, _cfg, _tasks), j in zip(
                pooled, getattr(result.report, "jobs", ()), strict=True
            ):
                outcome = "done" if j.met_deadline else ("late" if j.done == j.tasks else "stopped")
                codes.append(EXIT_CODES[outcome])
                table.add_row(
                    j.name + " (pool)",
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
            result = start_run("dry", out / f"{i}-{cfg.name}", cfg, tasks, seed=seed).run()
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
                money(r.budget),
                f"{at + r.makespan_s:.0f} s",
                outcome + (f" ({r.stop_reason})" if r.stop_reason else ""),
            )
        console.print(table)
        console.print(
            f"run directories: {out}/<n>-<job> (and {out}/pool for deadline jobs that share)",
            markup=False,
            soft_wrap=True,
        )
        return next((c for c in codes if c), 0)
    service = Service(svc, out / "service")
    attach_daily_reports(service)
    service.open()
    started = time.monotonic()
    ids = []
    try:
        for _path, at, data, _cfg, _tasks in loaded:
            delay = at / svc.time_scale - (time.monotonic() - started)
            if delay > 0:
                time.sleep(delay)
            ids.append(service.submit(data, source=str(_path), base_dir=_path.absolute().parent))
            console.print(f"submitted {ids[-1]} ({data.get('name', 'job')})", markup=False)
        views = [service.wait(job_id) for job_id in ids]
    finally:
        service.close(jobs="release")  # a Ctrl-C: nobody restarts it
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
            money(v.get("budget")),
            when(v.get("ended_at"), time.time()),
            outcome + (f" ({v['stop_reason']})" if v.get("stop_reason") else ""),
        )
    console.print(table)
    console.print(f"state directory: {out / 'service'}", markup=False, soft_wrap=True)
    return next((c for c in codes if c), 0)

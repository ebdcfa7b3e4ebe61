"""A service config's jobs run from the command line (``autoscaler run SERVICE --job
FILE[@AT]``), each arriving at its time: in the emulator as the service would run them
(a dry run per job on its own machines, one pool run for the deadline jobs that share
it), or for real through a service in this process. Each job ends as a ``JobLine``: what
the command's table shows of it, and its exit code as ``autoscaler wait`` gives it."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autoscaler.config.schema import RunConfig
from autoscaler.config.service_schema import ServiceConfig, job_config, load_yaml
from autoscaler.core.model import TaskSpec
from autoscaler.report.records import DeadlineReport
from autoscaler.run.start import start_run
from autoscaler.service import control
from autoscaler.service.job_states import EXIT_CODES
from autoscaler.service.pool import pool_config, shares_the_pool
from autoscaler.service.service import JobEndHook, Service


@dataclass(frozen=True)
class GivenJob:
    """A job file given on the command line, loaded against its service config."""

    path: Path
    at: float  # run seconds after the start
    data: dict[str, Any]
    cfg: RunConfig
    tasks: list[TaskSpec]


@dataclass(frozen=True)
class JobLine:
    """How a job ended: ``finish_s`` in run seconds (a dry run), or ``ended_at`` on the
    wall clock (a real one)."""

    name: str
    at: float
    mode: str
    tasks: int
    done: int
    cost: float
    budget: float | None
    outcome: str  # done, late, stopped, ... (``EXIT_CODES``)
    stop_reason: str | None = None
    finish_s: float | None = None
    ended_at: float | None = None

    @property
    def code(self) -> int:
        return EXIT_CODES.get(self.outcome, 1)


def exit_code(lines: list[JobLine]) -> int:
    """0 when every job is done (and on time), else the first other job's code."""
    return next((line.code for line in lines if line.code), 0)


def load_jobs(svc: ServiceConfig, given: list[tuple[Path, float]]) -> list[GivenJob]:
    """Each job file of ``given`` (with its arrival) loaded and checked against ``svc``, in
    order of arrival."""
    jobs = []
    for path, at in given:
        data = load_yaml(path, "job fields (bag, constraint, ...)")
        cfg, tasks = job_config(
            svc, data, source=str(path), base_dir=path.absolute().parent, now_wall=time.time()
        )
        jobs.append(GivenJob(path, at, data, cfg, tasks))
    return sorted(jobs, key=lambda job: job.at)


def pool_names(names: list[str]) -> list[str]:
    """Each job's name in a dry run's pool, in order of arrival: its own, or for a name
    given before, the name with the id the service gives the job (``dl-a-j2``), as the
    service takes the same job file twice."""
    seen: set[str] = set()
    out = []
    for i, name in enumerate(names, 1):
        out.append(name if name not in seen else f"{name}-j{i}")
        seen.add(name)
    return out


def pool_run(jobs: list[GivenJob], names: list[str]) -> tuple[RunConfig, list[TaskSpec]]:
    """The one keep-closed pool run of deadline ``jobs`` (named ``names``), each arriving
    at its time, as the service's pool would run them: its config and tasks."""
    data = pool_config(jobs[0].cfg, names[0]).model_dump(mode="json")
    data["deadline"]["keep_open"] = False
    data["jobs"] = [
        {**pool_config(job.cfg, name).model_dump(mode="json")["jobs"][0], "at": job.at}
        for job, name in zip(jobs, names, strict=True)
    ]
    tasks = [t for job in jobs for t in job.tasks]
    return RunConfig.model_validate(data), [
        TaskSpec(i, t.command, t.env) for i, t in enumerate(tasks)
    ]


def dry_run_jobs(
    svc: ServiceConfig, jobs: list[GivenJob], *, seed: int | None, out: Path
) -> list[JobLine]:
    """The jobs in the emulator: the deadline jobs that share the pool in one run
    (``out/pool``), every other job in a run of its own (``out/<n>-<name>``)."""
    lines: list[JobLine] = []
    pooled = [job for job in jobs if shares_the_pool(job.cfg)]
    if pooled and svc.settings.share_deadline_jobs:
        names = pool_names([job.cfg.name for job in jobs])
        cfg, tasks = pool_run(pooled, [names[jobs.index(job)] for job in pooled])
        report = start_run("dry", out / "pool", cfg, tasks, seed=seed).run().report
        pool_jobs = report.jobs if isinstance(report, DeadlineReport) else []
        for job, j in zip(pooled, pool_jobs, strict=True):
            outcome = "done" if j.met_deadline else ("late" if j.done == j.tasks else "stopped")
            lines.append(
                JobLine(
                    j.name + " (pool)",
                    job.at,
                    "deadline",
                    j.tasks,
                    j.done,
                    j.cost,
                    None,
                    outcome,
                    finish_s=j.finish_s or 0,
                )
            )
        jobs = [job for job in jobs if job not in pooled]
    for i, job in enumerate(jobs, 1):
        cfg = job.cfg
        r = start_run("dry", out / f"{i}-{cfg.name}", cfg, job.tasks, seed=seed).run().report
        met = all(j.met_deadline for j in r.jobs) if isinstance(r, DeadlineReport) else True
        outcome = "done" if r.stop_reason is None else "stopped"
        if outcome == "done" and not met:
            outcome = "late"
        lines.append(
            JobLine(
                cfg.name,
                job.at,
                "deadline" if cfg.deadline_mode else "budget",
                r.tasks_total,
                r.tasks_done,
                r.cost,
                r.budget,
                outcome,
                r.stop_reason,
                finish_s=job.at + r.makespan_s,
            )
        )
    return lines


def serve_jobs(
    svc: ServiceConfig,
    jobs: list[GivenJob],
    state_dir: Path,
    *,
    submitted: Callable[[str, GivenJob], None],
    on_job_end: JobEndHook | None = None,
) -> list[JobLine]:
    """The jobs for real, through a service in this process whose state directory is
    ``state_dir``: each submitted at its arrival (``submitted``: told its id), then each
    waited for. Interrupted (Ctrl-C), the service releases every machine: nobody
    restarts it."""
    service = Service(svc, state_dir)
    service.on_job_end = on_job_end
    service.open()
    started = time.monotonic()
    ids = []
    try:
        for job in jobs:
            delay = job.at / svc.time_scale - (time.monotonic() - started)
            if delay > 0:
                time.sleep(delay)
            base_dir = job.path.absolute().parent
            ids.append(service.submit(job.data, source=str(job.path), base_dir=base_dir))
            submitted(ids[-1], job)
        views = [service.wait(job_id) for job_id in ids]
    finally:
        service.close(jobs="release")
    lines = []
    for job, v in zip(jobs, views, strict=True):
        outcome = control.outcome(v)
        lines.append(
            JobLine(
                f"{v['id']} {v['name']}",
                job.at,
                v["mode"],
                v["tasks"],
                v["done"],
                v["cost"],
                v.get("budget"),
                outcome,
                v.get("stop_reason") or None,
                ended_at=v.get("ended_at"),
            )
        )
    return lines

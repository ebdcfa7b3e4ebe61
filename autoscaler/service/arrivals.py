"""A service config's jobs run from the command line (``autoscaler run SERVICE --job
FILE[@AT]``), each arriving at its time: in the emulator as the service would run them
(a dry run per job on its own machines, one pool run for the deadline jobs that share
it), or for real through a service in this process. Each job ends as a ``JobLine``: what
the command's table shows of it, and its exit code as ``autoscaler wait`` gives it."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autoscaler.config.bag import task_means
from autoscaler.config.schema import RunConfig
from autoscaler.config.service_schema import ServiceConfig, job_config, load_yaml
from autoscaler.core.errors import AutoscalerError
from autoscaler.core.model import JobSpec, TaskSpec, TaskState
from autoscaler.core.state import RunState
from autoscaler.deadline.deadline_controller import DeadlineController
from autoscaler.report.records import DeadlineReport, JobOutcome, Report
from autoscaler.run.emulator import Emulator
from autoscaler.run.inbox import AddJob
from autoscaler.run.owner import pool_job
from autoscaler.run.start import Owner, start_run
from autoscaler.service import control
from autoscaler.service.job_states import EXIT_CODES
from autoscaler.service.memory import admitted, job_runs
from autoscaler.service.pool import POOL_DIR, pool_config, pool_spec, shares_the_pool
from autoscaler.service.service import JobEndHook, Service
from autoscaler.service.store import DB_FILE, Store, deadline_s_of


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
    task_times: dict[str, Any] | None = None  # its task_s from memory (``memory.said``)

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


MEMORY_FILE = "memory.db"
"""A service's dry run's own memory of applications (``service.memory``): a store in its
directory (a service's state directory holds ``service.db`` instead)."""


def dry_memory(out: Path, memory_from: Path | None) -> Store:
    """The dry run's memory, ``out/memory.db``: empty, or what the service whose state
    directory is ``memory_from`` remembers (or an earlier dry run, its directory), read
    and never written."""
    seed: dict[str, dict[str, list[float]]] = {}
    if memory_from is not None:
        found = [memory_from / n for n in (DB_FILE, MEMORY_FILE) if (memory_from / n).is_file()]
        if not found:
            raise AutoscalerError(
                f"--memory {memory_from}: no service state there ({DB_FILE}), nor a service "
                f"dry run's memory ({MEMORY_FILE})"
            )
        source = Store(found[0], read_only=True, untouched=True)
        try:
            seed = source.memory()
        finally:
            source.close()
    for path in (out / MEMORY_FILE, *(out / f"{MEMORY_FILE}-{x}" for x in ("wal", "shm"))):
        path.unlink(missing_ok=True)
    out.mkdir(parents=True, exist_ok=True)
    memory = Store(out / MEMORY_FILE)
    for app, runs in seed.items():
        memory.remember(app, runs)
    return memory


@dataclass
class _Admissions:
    """The jobs of a service's dry run admitted in order of arrival, as the service admits
    them: each with what its memory holds by then (``memory.admitted``), and each run's
    tasks remembered as it ends (``memory.job_runs``), in run time. Jobs on their own
    machines are each emulated whole at their arrival; their runs count from their end."""

    memory: Store
    ends: list[tuple[float, str, dict[str, list[float]]]] = field(default_factory=list)
    notes: dict[int, dict[str, Any]] = field(default_factory=dict)  # by job index

    def admit(self, i: int, job: GivenJob) -> RunConfig:
        """Job ``i``'s config as the service starts it at its arrival."""
        for end in sorted(e for e in self.ends if e[0] <= job.at):
            self.ends.remove(end)
            self.memory.remember(end[1], end[2])
        found = admitted(job.cfg, self.memory.remembered)
        if found is None:
            return job.cfg
        cfg, self.notes[i] = found
        return cfg

    def ended(self, at: float, state: RunState) -> None:
        """A run of its own ended at run time ``at``: its jobs' runs, remembered from then."""
        for job in state.work.jobs:
            self.ends.append((at, *job_runs(state, job.name)))

    def flush(self) -> None:
        for _, app, runs in sorted(self.ends):
            self.memory.remember(app, runs)
        self.ends.clear()


@dataclass
class _DryPool:
    """The deadline pool of a service's dry run: the first pooled job's run, kept open as
    the service's pool is, each later pooled job added at its arrival (``pool_job``, as
    ``Daemon.add_job`` adds it). A job's runs are remembered when its last task ends, as
    ``Pool`` remembers them. Once the last job has arrived the pool is closed: it ends
    when its work is done, as a run of those jobs would."""

    cfg: RunConfig
    seed: int
    admissions: _Admissions
    names: dict[str, int]  # pool job name -> job index
    added: list[TaskSpec] = field(default_factory=list)
    open_jobs: set[str] = field(default_factory=set)
    _counted: int = -1

    def progress(self, state: RunState) -> None:
        """After each step: the jobs whose every task has ended are remembered."""
        ended = state.tasks.done + state.tasks.failed + state.tasks.cancelled
        if ended == self._counted:
            return
        self._counted = ended
        for name in sorted(self.open_jobs):
            job = state.work.job_named(name)
            states = state.tasks.task_state[job.first : job.first + job.count]
            if all(st in _OVER for st in states):
                self.open_jobs.discard(name)
                self.admissions.memory.remember(*job_runs(state, name))

    def drive(
        self, arrivals: list[tuple[int, GivenJob, str | None]], own: OwnRun
    ) -> Callable[[Emulator], RunState]:
        """The owner's part of the pool's run: each later job admitted at its arrival
        (pooled: added; else run on its own machines), then the run to its end."""

        def run(emulator: Emulator) -> RunState:
            self.open_jobs = {j.name for j in emulator.state.work.jobs}
            batch: list[JobSpec] = []
            for i, job, name in arrivals:
                emulator.run(until=job.at)
                batch = [b for b in batch if b.at == job.at]
                if name is None:
                    own(i, job)
                    continue
                batch.append(self._add(emulator, i, job, name, batch))
            controller = emulator.controller
            assert isinstance(controller, DeadlineController)
            closed = dataclasses.replace(controller.settings, keep_open=False)
            emulator.controller = DeadlineController(closed)
            return emulator.run()

        return run

    def _add(
        self, emulator: Emulator, i: int, job: GivenJob, name: str, batch: list[JobSpec]
    ) -> JobSpec:
        cfg = self.admissions.admit(i, job)
        deadline_s = deadline_s_of(cfg)
        assert deadline_s is not None, "a pool job has a deadline"
        spec = pool_spec(cfg, name, len(job.tasks), job.at + deadline_s)
        item = AddJob(spec, tuple(job.tasks), Future())
        state = emulator.state
        event = pool_job(self.cfg, state, emulator.controller, item, batch, [], job.at, self.seed)
        if event is None:
            raise AutoscalerError(f"job {name!r}: the pool refused it: {item.answer.exception()}")
        first = event.job.first
        self.added += [TaskSpec(first + k, t.command, t.env) for k, t in enumerate(job.tasks)]
        labels = [t.category for t in job.tasks] if self.cfg.emulator.category_speed else None
        emulator.tell(job.at, event, labels, task_means(job.cfg, len(job.tasks)))
        self.open_jobs.add(name)
        return event.job


OwnRun = Callable[[int, GivenJob], None]

_OVER = frozenset({TaskState.DONE, TaskState.FAILED, TaskState.CANCELLED})


def dry_run_jobs(
    svc: ServiceConfig,
    jobs: list[GivenJob],
    *,
    seed: int | None,
    out: Path,
    memory_from: Path | None = None,
) -> list[JobLine]:
    """The jobs in the emulator, in order of arrival, as the service runs them: the
    deadline jobs that share the pool in one run (``out/pool``), every other job in a run
    of its own (``out/<n>-<name>``). Each is admitted with the dry run's own memory of
    applications (``out/memory.db``; from ``memory_from``'s, a service state directory,
    if given), which each job's runs join as it ends: a recurring job is planned on its
    application's times without sampling, as the service plans it."""
    memory = dry_memory(out, memory_from)
    try:
        return _dry_run_jobs(svc, jobs, seed, out, _Admissions(memory))
    finally:
        memory.close()


def _dry_run_jobs(
    svc: ServiceConfig, jobs: list[GivenJob], seed: int | None, out: Path, admissions: _Admissions
) -> list[JobLine]:
    sharing = svc.settings.share_deadline_jobs
    in_pool = [sharing and shares_the_pool(job.cfg) for job in jobs]
    names = pool_names([job.cfg.name for job in jobs])
    own_lines: dict[int, JobLine] = {}

    def own(i: int, job: GivenJob) -> None:
        cfg = admissions.admit(i, job)
        world = task_means(job.cfg, len(job.tasks))
        run_dir = out / f"{sum(not p for p in in_pool[: i + 1])}-{cfg.name}"
        d = start_run("dry", run_dir, cfg, job.tasks, seed=seed, world=world).run()
        admissions.ended(job.at + d.report.makespan_s, d.state)
        own_lines[i] = _own_line(job, d.report, admissions.notes.get(i))

    order = list(enumerate(jobs))
    while order and not in_pool[order[0][0]]:
        own(*order.pop(0))
    pool_lines: list[JobLine] = []
    if order:
        (i, first), later = order[0], order[1:]
        cfg = admissions.admit(i, first)
        pool_cfg = _first_in_pool(cfg, names[i], first.at)
        run_seed = pool_cfg.emulator.seed if seed is None else seed
        pooled = {names[k]: k for k, _ in order if in_pool[k]}
        pool = _DryPool(pool_cfg, run_seed, admissions, pooled)
        arrivals = [(k, job, names[k] if in_pool[k] else None) for k, job in later]
        world = task_means(_first_in_pool(first.cfg, names[i], first.at), len(first.tasks))
        owner = Owner(pool.added, pool.drive(arrivals, own))
        tasks = [TaskSpec(k, t.command, t.env) for k, t in enumerate(first.tasks)]
        report = (
            start_run(
                "dry",
                out / POOL_DIR,
                pool_cfg,
                tasks,
                seed=run_seed,
                progress=lambda state, _: pool.progress(state),
                world=world,
                owner=owner,
            )
            .run()
            .report
        )
        pool_jobs = report.jobs if isinstance(report, DeadlineReport) else ()
        for j in pool_jobs:
            k = pool.names[j.name]
            pool_lines.append(_pool_line(jobs[k], j, admissions.notes.get(k)))
    admissions.flush()
    return pool_lines + [own_lines[i] for i in sorted(own_lines)]


def _first_in_pool(cfg: RunConfig, name: str, at: float) -> RunConfig:
    """The pool's config made from its first job's (``pool_config``), the job arriving
    at ``at`` in the dry run's time."""
    data = pool_config(cfg, name).model_dump(mode="json")
    data["jobs"][0]["at"] = at
    return RunConfig.model_validate(data)


def _pool_line(job: GivenJob, j: JobOutcome, note: dict[str, Any] | None) -> JobLine:
    outcome = "done" if j.met_deadline else ("late" if j.done == j.tasks else "stopped")
    return JobLine(
        j.name + " (pool)",
        job.at,
        "deadline",
        j.tasks,
        j.done,
        j.cost,
        None,
        outcome,
        finish_s=j.finish_s or 0,
        task_times=note,
    )


def _own_line(job: GivenJob, r: Report, note: dict[str, Any] | None) -> JobLine:
    met = all(j.met_deadline for j in r.jobs) if isinstance(r, DeadlineReport) else True
    outcome = "done" if r.stop_reason is None else "stopped"
    if outcome == "done" and not met:
        outcome = "late"
    return JobLine(
        job.cfg.name,
        job.at,
        "deadline" if job.cfg.deadline_mode else "budget",
        r.tasks_total,
        r.tasks_done,
        r.cost,
        r.budget,
        outcome,
        r.stop_reason,
        finish_s=job.at + r.makespan_s,
        task_times=note,
    )


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

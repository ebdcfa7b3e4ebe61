"""How the service runs a job: on its own machines (one ``Daemon`` of its own, on a
thread), or in the deadline pool (one shared keep-open run, ``service.pool``).

This module makes and runs the daemons; the ``Service`` keeps the store and the locks.
A job's deadline is an absolute wall-clock time fixed when it was submitted
(``JobRow.deadline_at``); it becomes run seconds here, once, when its run starts.
"""

from __future__ import annotations

import shutil
import threading
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import date
from pathlib import Path
from typing import TYPE_CHECKING

from autoscaler.config.budgets import check_budget
from autoscaler.config.schema import RunConfig
from autoscaler.core.errors import AutoscalerError
from autoscaler.core.model import BudgetSet, DeadlineSet, TaskSpec
from autoscaler.core.state import RunState
from autoscaler.service.job_states import ENDED, JobState
from autoscaler.service.job_tags import job_cost_tags, pool_cost_tags
from autoscaler.service.pool import (
    POOL_DIR,
    POOL_HOLDER,
    JobEnded,
    Pool,
    job_views,
    pool_config,
)
from autoscaler.service.store import DeadlinePassed, JobRow, deadline_at_of
from autoscaler.service.view import Clock, HistoryPoint, Progress, progress

if TYPE_CHECKING:
    from autoscaler.run.daemon import Daemon, Outcome
    from autoscaler.run.rundir import RunFiles
    from autoscaler.run.session import Session
    from autoscaler.service.daily import JobRun

# The drivers (daemon, run directory, reports) are imported where a run starts: the
# service's clients (`autoscaler jobs`, `wait`, ...) import this room and start fast.

HISTORY_POINTS = 600
"""At most this many points of a job's history are kept (thinned when full)."""

ProgressHook = Callable[[RunState, float | None], None]


@dataclass
class Runner:
    """A running job: its daemon (its own, or the pool's) and what it last showed."""

    job_id: str
    daemon: Daemon
    files: RunFiles
    pool: Pool | None = None  # the deadline pool the job shares, if it does
    thread: threading.Thread | None = None
    view: Progress | None = None  # None: its daemon has not stepped yet
    last_state: RunState | None = None
    history: list[HistoryPoint] = field(default_factory=list)
    told: list[str] = field(default_factory=list)  # "cancel", "interrupt"
    last_point: float = 0.0
    days: dict[date, float] = field(default_factory=dict)  # its cost per UTC day, as of then

    def live(self) -> Progress | None:
        """What the job's run shows now (None: nothing yet)."""
        return self.view if self.pool is None else self.pool.views.get(self.job_id)

    def points(self) -> list[HistoryPoint]:
        if self.pool is None:
            return self.history
        return self.pool.histories.get(self.job_id, [])

    def check_change(self, budget: float | None) -> None:
        """Raise if the job's run cannot take a change now (a new ``budget``, or else a
        deadline)."""
        if self.pool is not None and budget is not None:
            raise AutoscalerError(
                f"job {self.job_id} has no budget of its own: it shares the deadline "
                "pool's machines (submit a job with a budget to hold one)"
            )
        view = self.live()
        if view is None:
            raise AutoscalerError(f"job {self.job_id} is starting: update it in a moment")
        if budget is not None:
            check_budget(budget, committed=view.spend, holder=f"job {self.job_id}")

    def change(self, budget: float | None, deadline_s: float | None) -> None:
        """Tell the job's daemon its new budget, or its deadline ``deadline_s`` run
        seconds from now (checked first with ``check_change``)."""
        if budget is not None:
            self.daemon.tell(BudgetSet(budget, "updated by the user"))
            return
        assert deadline_s is not None
        at = self.daemon.now() + deadline_s
        names = (
            [self.job_id]
            if self.pool is not None
            else [j.name for j in self.daemon.state.work.jobs]
        )
        for name in names:
            self.daemon.tell(DeadlineSet(name, at, "updated by the user"))

    def record(self, state: RunState, estimate: float | None, now: float) -> None:
        clock = Clock(self.files.start_wall, self.files.cfg.time_scale)
        self.last_state = state
        self.view = view = progress(state, self.files.cfg, clock, estimate)
        if now - self.last_point >= 1.0:
            self.last_point = now
            self.history.append((round(now, 3), view.done, view.spend))
            if len(self.history) > HISTORY_POINTS:
                self.history = self.history[::2]
            self.days = self._days(state)

    def _days(self, state: RunState) -> dict[date, float]:
        """The run's cost per UTC day (``daily``), made on the daemon's thread, which
        alone may read its state while it runs."""
        from autoscaler.service.daily import JobRun, daily_costs

        run = JobRun(self.job_id, "", state, self.files.start_wall, self.files.cfg.time_scale)
        return {date.fromisoformat(d.day): d.cost for d in daily_costs([run])}


@dataclass(frozen=True)
class Ending:
    """How a job's own run ended: its state, last view, and the daemon's outcome."""

    state: JobState
    progress: Progress
    outcome: Outcome | None


def check_change(row: JobRow, budget: float | None, deadline_s: float | None) -> None:
    """Raise if job ``row`` cannot take a new ``budget`` or ``deadline_s`` (run seconds
    from now)."""
    if row.state in ENDED:
        raise AutoscalerError(f"job {row.id} has ended ({row.state}): nothing to update")
    if budget is not None:
        check_budget(budget)
    if deadline_s is not None and not deadline_s > 0:
        raise AutoscalerError(f"deadline: must be in the future (got {deadline_s:g} s from now)")
    if deadline_s is not None and not row.config.deadline_mode:
        raise AutoscalerError(
            f"job {row.id} runs under a budget, not a deadline: update its --budget"
        )


def for_the_service(cfg: RunConfig, max_running: int, holder: str) -> RunConfig:
    """A job's config as the service runs it: its metrics are the service's, its
    machines are named by ``holder`` (the job's id, or the pool's name) so that no two
    jobs' machines share a name, and with jobs side by side each dispatcher takes a free
    port."""
    daemon = cfg.daemon.model_copy(
        update={
            "metrics_port": None,
            "machine_prefix": holder,
            **({"port": 0} if max_running > 1 else {}),
        }
    )
    return cfg.model_copy(update={"daemon": daemon})


def with_constraint(cfg: RunConfig, budget: float | None, deadline_s: float | None) -> RunConfig:
    """A config with a new budget or deadline (``deadline_s``: after each job arrives)."""
    new = {k: v for k, v in (("budget", budget), ("deadline_s", deadline_s)) if v is not None}
    data = cfg.model_dump(mode="json")
    if cfg.jobs:
        for job in data["jobs"]:
            job["constraint"].update(new)
    else:
        data["constraint"].update(new)
    return RunConfig.model_validate(data)


def deadline_at(row: JobRow) -> float | None:
    """A job's deadline on the wall clock (a store older than the column: from when it
    was submitted)."""
    return (
        row.deadline_at
        if row.deadline_at is not None
        else deadline_at_of(row.config, row.submitted_at)
    )


def starting_now(cfg: RunConfig, deadline_wall: float | None, now: float) -> RunConfig:
    """A job's config for a run that starts at wall time ``now``: its one deadline in run
    seconds from then, as the user fixed it when submitting."""
    if deadline_wall is None:
        return cfg
    left = (deadline_wall - now) * cfg.time_scale - (cfg.jobs[0].at if cfg.jobs else 0.0)
    if left <= 0:
        raise DeadlinePassed("its deadline passed while it was queued")
    return with_constraint(cfg, None, left)


def start_own_run(
    row: JobRow,
    tasks: Callable[[], list[TaskSpec]],
    *,
    jobs_dir: Path,
    max_running: int,
    now: float,
    progress: Callable[[RunState, float | None], None],
    plots: bool,
) -> Session:
    """The session of a job on its own machines (made, not run): resumed from its
    journal, or its run directory made afresh."""
    from autoscaler.run.rundir import made
    from autoscaler.run.session import Session

    run_dir = row.run_dir
    if made(run_dir):
        resumed = "the service started again" if row.state is JobState.INTERRUPTED else None
        return Session.start(
            "resume", run_dir, progress=progress, plots=plots, foreground=False, resumed=resumed
        )
    if run_dir.exists() and run_dir.parent == jobs_dir:
        shutil.rmtree(run_dir)  # a start cut short before its tasks file: begin again
    cfg = starting_now(row.config, deadline_at(row), now)
    cfg = for_the_service(cfg, max_running, row.id)
    if not plots:  # the run directory's config says what its report holds
        cfg = cfg.model_copy(update={"plots": False})
    return Session.start(
        "new",
        run_dir,
        cfg,
        tasks(),
        run_id=row.run_id,
        seed=row.seed,
        progress=progress,
        plots=plots,
        foreground=False,
        cost_tags=job_cost_tags(row),
    )


def run_own(runner: Runner, fallback: Progress) -> Ending:
    """Run a job's own session to its end (on the job's thread): how the job ended.
    ``fallback``: its view if the daemon broke before it showed any."""
    from autoscaler.report.records import DeadlineReport
    from autoscaler.run.session import Ending as RunEnding
    from autoscaler.run.session import Session, error_of

    files = runner.files
    clock = Clock(files.start_wall, files.cfg.time_scale)
    try:
        ended = Session(runner.daemon).run()
    except Exception as exc:  # a daemon that breaks fails its job, not the service
        state_now = runner.last_state
        last = progress(state_now, files.cfg, clock) if state_now is not None else None
        view = last or runner.view or fallback
        return Ending(JobState.FAILED, view.stopped(f"daemon error: {error_of(exc)}"), None)
    state = ended.state
    report = ended.report
    met = all(j.met_deadline for j in report.jobs) if isinstance(report, DeadlineReport) else True
    view = replace(
        progress(state, files.cfg, clock),
        met_deadline=met if state.work.deadline_mode else None,
    )
    kept = ended.ending in (RunEnding.HANDED_OVER, RunEnding.INTERRUPTED)
    if "interrupt" in runner.told and kept:
        job_state = JobState.INTERRUPTED
    elif "cancel" in runner.told:
        job_state = JobState.CANCELLED
    elif ended.ending is RunEnding.DONE:
        job_state = JobState.DONE
    else:
        job_state = JobState.STOPPED
    return Ending(job_state, view, ended.outcome)


def open_pool(
    row: JobRow,
    tasks: Callable[[str], list[TaskSpec]],
    *,
    state_dir: Path,
    max_running: int,
    plots: bool,
    clock: Callable[[], float],
    row_of: Callable[[str], JobRow],
    ended: JobEnded,
) -> tuple[Pool, bool]:
    """The deadline pool, resumed from its directory or made with ``row`` as its first
    job (its deadline as fixed at submission); and whether ``row`` is in it already.
    Its daemon is made, not started."""
    from autoscaler.run.rundir import made
    from autoscaler.run.session import Session

    pool_dir = state_dir / POOL_DIR
    pool: Pool | None = None

    def pool_progress(state: RunState, estimate: float | None) -> None:
        assert pool is not None
        pool.progress(state, estimate)

    if made(pool_dir):
        daemon = Session.start(
            "resume",
            pool_dir,
            progress=pool_progress,
            plots=plots,
            foreground=False,
            resumed="the service started again",
        ).daemon
        joined = row.in_pool
    else:
        if pool_dir.exists():
            shutil.rmtree(pool_dir)  # a start cut short before its tasks file
        cfg = starting_now(row.config, deadline_at(row), clock())
        cfg = for_the_service(pool_config(cfg, row.id), max_running, POOL_HOLDER)
        if not plots:
            cfg = cfg.model_copy(update={"plots": False})
        daemon = Session.start(
            "new",
            pool_dir,
            cfg,
            tasks(row.id),
            progress=pool_progress,
            plots=plots,
            foreground=False,
            resumed="the service started again",
            cost_tags=pool_cost_tags([row]),
        ).daemon
        joined = True
    pool = Pool(daemon.files, clock, row_of, ended, daemon)
    return pool, joined


def run_pool(pool: Pool) -> tuple[bool, str | None]:
    """Run the pool's session until the service stops it (on the pool's thread): whether
    it was interrupted or handed over (its jobs resume with the next service), and the
    error it broke with (None: it did not)."""
    from autoscaler.run.session import Ending as RunEnding
    from autoscaler.run.session import Session, error_of

    assert pool.daemon is not None
    try:
        ended = Session(pool.daemon).run()
    except Exception as exc:  # a pool that breaks fails its jobs, not the service
        return False, error_of(exc)
    return ended.ending in (RunEnding.HANDED_OVER, RunEnding.INTERRUPTED), None


class RunStates:
    """Runs' states as their journals have them (a live run's too, read only), for the
    daily cost reports; an ended job's is kept once known."""

    def __init__(self) -> None:
        self._ended: dict[str, JobRun] = {}

    def keep(self, job_id: str, state: RunState, files: RunFiles) -> None:
        """An ended job's final state."""
        from autoscaler.service.daily import JobRun

        self._ended[job_id] = JobRun(job_id, "", state, files.start_wall, files.cfg.time_scale)

    def job_runs(
        self,
        pooled: list[JobRow],
        own: list[JobRow],
        pool_dir: Path,
        unread: list[JobRow] | None = None,
    ) -> list[JobRun]:
        """The records of ``pooled`` jobs (one shared run: each job's share of each
        machine, by its tasks' seconds) and of jobs on their ``own`` machines. A run that
        cannot be read raises, or, given ``unread``, its jobs are put there and the
        others read (their cost is then the caller's to find)."""
        records = []
        if pooled:
            run = _read_or(pool_dir, pooled, unread)
            if run is not None:
                records += [replace(run, id=row.id, name=row.name, job=row.id) for row in pooled]
        for row in own:
            run = self._ended.get(row.id) or _read_or(row.run_dir, [row], unread)
            if run is not None:
                if row.state in ENDED:
                    self._ended[row.id] = run
                records.append(replace(run, id=row.id, name=row.name))
        return records


def journal_progress(rows: list[JobRow], pool_dir: Path) -> dict[str, Progress]:
    """Where the jobs of ``rows`` that started and have not ended stand, as their runs'
    journals say (job id -> its view): what a service that is not running shows of
    them. A job in the deadline pool (``pool_dir``) shows its own tasks and the cost
    attributed to it, as the running pool shows it (``job_views``)."""
    from autoscaler.run.live import planned_finish
    from autoscaler.run.rundir import made, read_run

    out: dict[str, Progress] = {}
    pooled = [r.id for r in rows if r.in_pool and r.final is None]
    if pooled and made(pool_dir):
        files, state = read_run(pool_dir)
        clock = Clock(files.start_wall, files.cfg.time_scale)
        out.update(job_views(state, files.cfg, clock, pool_dir, pooled))
    for row in rows:
        if row.in_pool or row.final is not None or not made(row.run_dir):
            continue
        try:
            files, state = read_run(row.run_dir)
        except AutoscalerError:
            continue  # shown as the service's store has it; its start says why
        clock = Clock(files.start_wall, files.cfg.time_scale)
        out[row.id] = progress(state, files.cfg, clock, planned_finish(state))
    return out


def _read_or(run_dir: Path, rows: list[JobRow], unread: list[JobRow] | None) -> JobRun | None:
    """``_read``; given ``unread``, a run that cannot be read, or is not there (its
    directory deleted), puts ``rows`` there (None)."""
    if unread is None:
        return _read(run_dir)
    try:
        run = _read(run_dir)
    except AutoscalerError:
        run = None
    if run is None:
        unread += rows
    return run


def _read(run_dir: Path) -> JobRun | None:
    from autoscaler.run.rundir import made, read_run
    from autoscaler.service.daily import JobRun

    if not made(run_dir):
        return None
    files, state = read_run(run_dir)
    return JobRun("", "", state, files.start_wall, files.cfg.time_scale)

"""The long-running service: jobs submitted while it runs, each run by the daemon.

``autoscaler serve`` holds a service config (provider, machine types, billing) and a
state directory. A submitted job is laid over the service's config, validated, and
written to the service's store (SQLite, synchronous) before its id is returned: a job
acknowledged is never lost. The service starts queued jobs in order while fewer than
``service.max_running_jobs`` run (its ``Pump``); each job is one run session
(``run.session``: its own run directory, journal, dispatcher, machines and budget) on a
thread of its own, so a job runs exactly as ``autoscaler run`` runs it.

Across a restart: a job that was running when the service stopped (SIGTERM: its daemon
handed its machines over, ``HandedOver``) or died (kill -9) is resumed from its journal:
the next daemon adopts its machines that still run and loses no task. A job the service
interrupted with every machine released (``serve --release-on-exit``: ``Interrupted``)
is resumed with ``Resumed``. Queued jobs start as before.

Updates (a budget, a deadline) and cancellations reach a running job's daemon as events
(``Daemon.tell``), so they are journaled with the run and the controller re-plans at
once. The store also keeps a log of every update.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

from autoscaler.config.schema import RunConfig
from autoscaler.config.service_schema import ServiceConfig, job_config
from autoscaler.core.errors import AutoscalerError, ConfigError
from autoscaler.core.model import Shutdown, TaskSpec
from autoscaler.providers import registry
from autoscaler.service.alerting import Alerting
from autoscaler.service.alerts import BudgetFigure
from autoscaler.service.daily import daily_costs
from autoscaler.service.job_states import ENDED, JobState
from autoscaler.service.pool import POOL_DIR, POOL_HOLDER
from autoscaler.service.project_money import ProjectMoney
from autoscaler.service.projects import Charge, Standing, days_by_job, span_at, standings
from autoscaler.service.pump import JOBS_DIR, Closing, Pump
from autoscaler.service.quota_ledger import QuotaLedger
from autoscaler.service.runners import Runner, check_change, with_constraint
from autoscaler.service.store import (
    DB_FILE,
    FIRST_USER,
    JobNotFound,
    JobRow,
    Store,
    lock_state_dir,
)
from autoscaler.service.view import (
    HistoryPoint,
    JobView,
    final_json,
    job_view,
    queued,
    service_summary,
)

LOCK_FILE = "service.lock"
LOG_FILE = "service.log.jsonl"
STARTING_WAIT_S = 10.0
"""How long an update waits for a job that is starting (its run shows nothing yet)."""

JobEndHook = Callable[["Service", str], None]
"""Told as each job ends (and with ``""`` as the service closes); must not raise."""


def service_of(run_dir: Path) -> Path | None:
    """The state directory of the service whose job's run (``jobs/<id>``) or deadline pool
    (``pool``) ``run_dir`` is; None if it is no service's."""
    run_dir = run_dir.absolute()
    if run_dir.name == POOL_DIR and (run_dir.parent / DB_FILE).is_file():
        return run_dir.parent
    state_dir = run_dir.parent.parent
    if run_dir.parent.name != JOBS_DIR or not (state_dir / DB_FILE).is_file():
        return None
    store = Store(state_dir / DB_FILE, read_only=True)
    try:
        store.row(run_dir.name)
    except JobNotFound:  # a directory that only looks like a job's
        return None
    finally:
        store.close()
    return state_dir


Month = tuple[list[JobRow], dict[str, dict[date, float]]]
"""The jobs that can have spent this month and their cost per day (``Service._this_month``)."""


class Service:
    """Jobs in, runs out. Thread-safe: the API's threads call ``submit``, ``views``,
    ``cancel``, ``update`` and ``wait`` while its ``Pump`` starts and reaps the jobs."""

    def __init__(
        self,
        config: ServiceConfig,
        state_dir: Path,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.config = config
        self.state_dir = state_dir
        self.clock = clock
        self.started_at = clock()
        self._cond = threading.Condition()
        self.quota = QuotaLedger.of(config.platform)  # the machine limits all jobs share
        self._pump: Pump | None = None
        self._lock_fd: int | None = None
        self.store: Store | None = None
        self.log: Any = None
        self._log_file: Any = None
        self.on_job_end: JobEndHook | None = None
        self.alerting = Alerting(
            config.settings.alerts,
            state_dir=state_dir,
            source=config.source,
            service=config.name,
            views=self.job_views,
            clock=clock,
            log=None,
        )
        self.money: ProjectMoney | None = None  # once open, if it has projects

    @property
    def _store(self) -> Store:
        if self.store is None:
            raise AutoscalerError("the service is not open")
        return self.store

    @property
    def _runners(self) -> dict[str, Runner]:
        """The running jobs (none before the service opens)."""
        return {} if self._pump is None else self._pump.runners

    # --- open and close ---------------------------------------------------------------

    def open(self) -> None:
        """Take the state directory (one service each), open the store, start the pump;
        jobs left running or interrupted by the last service carry on."""
        self.state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.chmod(self.state_dir, 0o700)
        self._lock_fd = lock_state_dir(self.state_dir / LOCK_FILE)
        (self.state_dir / JOBS_DIR).mkdir(exist_ok=True)
        from autoscaler.run.assemble import json_logger  # lazy: a client's import stays light

        self._log_file = (self.state_dir / LOG_FILE).open("a", encoding="utf-8")
        self.log = json_logger(self._log_file).bind(service=self.config.name)
        self.store = Store(self.state_dir / DB_FILE)
        label = self.config.platform.provider_label()
        self.log.info("service start", pid=os.getpid(), provider=label)
        self._count_held()
        self.alerting.log = self.log
        self.alerting.start()  # a secret that cannot be read stops the service before a job starts
        if self.config.settings.projects:
            self.money = ProjectMoney(self.config.settings, self.store, self._job_days, self.clock)
            self.alerting.add_source(self._project_figures)
        self._pump = Pump(
            self.config,
            self.state_dir,
            self.store,
            self.quota,
            self._cond,
            self.clock,
            self.log,
            self._job_ended,
        )
        self._pump.money = self.money
        self._pump.start()

    def close(self, *, jobs: Closing = "hand_over") -> None:
        """Stop, and with the running jobs do as ``jobs`` says (``Closing``); a job handed
        over or interrupted resumes with the next service on the state directory. Safe
        to call on a service that did not open, or opened only in part."""
        kept = self._pump.stop(jobs) if self._pump is not None else []
        if self.store is not None:
            self.alerting.stop()
            self._job_ended("")  # the last word on the day's costs
            self.store.close()
        if self.log is not None:
            self.log.info("service stop", jobs=jobs, kept=kept)
            self._log_file.close()
            self.log = None
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def _job_ended(self, job_id: str) -> None:
        """Tell ``on_job_end``; what it cannot write is logged, and the service goes on."""
        if self.on_job_end is None:
            return
        try:
            self.on_job_end(self, job_id)
        except (AutoscalerError, OSError, sqlite3.Error, ValueError) as exc:
            if self.log is not None:
                self.log.warning("job end hook failed", job=job_id, error=repr(exc))

    def _count_held(self) -> None:
        """The machines the jobs a dead service left running still hold, from their
        runs' journals, counted against the quota before any job may launch."""
        from autoscaler.run.rundir import made, read_run

        rows = self._store.rows("WHERE state IN (?, ?)", (JobState.RUNNING, JobState.INTERRUPTED))
        dirs = {POOL_HOLDER if r.in_pool else r.id: r.run_dir for r in rows}
        if POOL_HOLDER in dirs:
            dirs[POOL_HOLDER] = self.state_dir / POOL_DIR
        for holder, run_dir in dirs.items():
            if not made(run_dir):
                continue
            try:
                _, state = read_run(run_dir)
            except AutoscalerError as exc:
                # That job alone cannot go on (its start fails it, saying why); the
                # service and its other jobs do.
                if self.log is not None:
                    self.log.error("a job's run cannot be read", job=holder, error=exc.message)
                continue
            self.quota.hold(holder, state.fleet.alive_counts())

    # --- jobs in ----------------------------------------------------------------------

    def submit(
        self,
        data: object,
        *,
        source: str = "job",
        base_dir: Path | None = None,
        run_dir: Path | None = None,
        user: str = FIRST_USER,
    ) -> str:
        """Validate a job file's content and journal the job, ``user``'s; its id. A
        ``ConfigError`` names each bad field; nothing is journaled then."""
        now = self.clock()
        cfg, tasks = job_config(
            self.config, data, source=source, base_dir=base_dir or Path.cwd(), now_wall=now
        )
        if registry.emulated(cfg) and not registry.emulated(self.config.platform):
            raise AutoscalerError("provider 'sim' only emulates machines")

        return self.submit_config(cfg, tasks, run_dir=run_dir, user=user)

    def submit_config(
        self,
        cfg: RunConfig,
        tasks: list[TaskSpec],
        *,
        run_dir: Path | None = None,
        run_id: str | None = None,
        seed: int | None = None,
        user: str = FIRST_USER,
    ) -> str:
        """Journal a job given as a validated run config and its tasks, ``user``'s; its
        id. Its deadline, if it has one, is fixed now; ``run_id`` and ``seed`` are its
        run's."""

        def where(job_id: str) -> Path:
            return run_dir if run_dir is not None else self.state_dir / JOBS_DIR / job_id

        def add() -> str:
            return self._store.add(cfg.name, cfg, tasks, self.clock(), where, run_id, seed, user)

        waits: str | None = None
        if self.money is None:  # the store is safe across threads: the lock is for money
            job_id = add()
        else:
            with self._cond:  # two admissions never spend the same money
                waits = self.money.admit(cfg)
                job_id = add()
                self.money.submitted(job_id, waits)
        if self.log is not None:
            self.log.info(
                "job submitted",
                job=job_id,
                name=cfg.name,
                project=cfg.project_name,
                waits=waits,
                user=user,
                tasks=len(tasks),
                mode="deadline" if cfg.deadline_mode else "budget",
                budget=cfg.constraint.budget,
                deadline_s=cfg.constraint.deadline_s,
            )
        with self._cond:
            self._cond.notify_all()
        return job_id

    def cancel(self, job_id: str) -> dict[str, Any]:
        """Cancel a job: a queued one never starts; a running one stops its tasks,
        releases its machines and writes its report. A job that has ended is an error:
        there is nothing to cancel."""
        row = self._store.row(job_id)  # the job exists
        if row.state in ENDED and job_id not in self._runners:
            raise AutoscalerError(f"{job_id} has ended ({row.state.value}): nothing to cancel")
        self._store.log_update(job_id, self.clock(), "cancel", {})
        if self.log is not None:
            self.log.info("job cancel", job=job_id)
        with self._cond:
            row = self._store.row(job_id)
            runner = self._runners.get(job_id)
            if runner is None:
                if row.state in (JobState.QUEUED, JobState.INTERRUPTED):
                    final = final_json(queued(row).stopped("cancelled by the user"), [])
                    self._store.set_state(
                        job_id, JobState.CANCELLED, ended_at=self.clock(), final=final
                    )
                    self._cond.notify_all()
                return self.view(job_id)
            runner.told.append("cancel")
            if runner.pool is not None:  # its tasks leave the shared run; the others stay
                runner.pool.withdraw(job_id)
                return self.view(job_id)
        runner.daemon.tell(Shutdown("cancelled by the user"))
        return self.view(job_id)

    def update(
        self,
        job_id: str,
        *,
        budget: float | None = None,
        deadline_s: float | None = None,
        deadline_at: float | None = None,
    ) -> dict[str, Any]:
        """Change a running or queued job's budget or deadline: ``deadline_s`` run seconds
        from now (emulated seconds in a time-scaled run, as in a job file), or
        ``deadline_at`` a wall-clock time (epoch seconds)."""
        given = [
            name
            for name, value in (
                ("budget", budget),
                ("deadline_s", deadline_s),
                ("deadline_at", deadline_at),
            )
            if value is not None
        ]
        if not given:
            raise ConfigError("update", ["budget, deadline_s, deadline_at: give one of them"])
        if len(given) > 1:
            both = " and ".join(given)
            raise ConfigError("update", [f"{both}: give a budget or a deadline, not both"])
        now = self.clock()
        if deadline_at is not None:
            deadline_s = (deadline_at - now) * self.config.time_scale
        row = self._store.row(job_id)
        check_change(row, budget, deadline_s)
        cfg = row.config
        change = {"budget": budget, "deadline_s": deadline_s}
        with self._cond:
            runner = self._starting_waited(job_id)
            # Checked after the wait, which lets go of the lock: a job admitted meanwhile
            # could take the money this check saw left.
            if budget is not None and self.money is not None:
                self.money.check_update(self._store.row(job_id), budget)
            if runner is not None:
                runner.check_change(budget)
                self._store.log_update(job_id, now, "update", change)
                if self.log is not None:
                    self.log.info("job update", job=job_id, **change)
                runner.change(budget, deadline_s)
                if budget is not None and self.money is not None:
                    self.money.updated(job_id, budget)
                return self.view(job_id)
            # Not started yet: the journaled config (and deadline) change.
            self._store.log_update(job_id, now, "update", change)
            if self.log is not None:
                self.log.info("job update", job=job_id, **change)
            new_at = row.deadline_at
            if deadline_s is not None and row.deadline_at is not None:
                new_at = now + deadline_s / cfg.time_scale
            self._store.set_config(job_id, with_constraint(cfg, budget, deadline_s), new_at)
            if budget is not None and self.money is not None:
                self.money.updated(job_id, budget)
        return self.view(job_id)

    def _starting_waited(self, job_id: str) -> Runner | None:
        """The job's runner, once its run shows something, or None for a job still
        queued. A job submitted a moment ago may be starting: picked by the pump (which
        starts it with its row as read then) or with a run that shows nothing yet. An
        update sent then waits for it, up to ``STARTING_WAIT_S``, instead of being lost
        or refused. Called holding ``_cond``."""
        until = time.monotonic() + STARTING_WAIT_S

        def starting() -> bool:
            runner = self._runners.get(job_id)
            if runner is not None:
                return runner.live() is None
            return self._pump is not None and self._pump.starting(job_id)

        while starting() and time.monotonic() < until:
            self._cond.wait(timeout=0.1)
        if self._pump is not None and self._pump.starting(job_id):
            raise AutoscalerError(f"job {job_id} is starting: update it in a moment")
        return self._runners.get(job_id)

    # --- jobs out ---------------------------------------------------------------------

    def owner(self, job_id: str) -> str:
        """Who submitted the job ``job_id`` (``JobNotFound`` if there is none)."""
        return self._store.row(job_id).user

    def job_view(self, job_id: str, *, history: bool = True) -> JobView:
        """Where a job stands."""
        return self._view(self._store.row(job_id), history)

    def job_views(self, *, history: bool = False) -> list[JobView]:
        """Every job the store holds, in the order submitted."""
        return [self._view(row, history) for row in self._store.rows()]

    def view(self, job_id: str, *, history: bool = True) -> dict[str, Any]:
        """``job_view``'s JSON."""
        return self.job_view(job_id, history=history).to_json()

    def views(self, *, history: bool = False) -> list[dict[str, Any]]:
        """``job_views``' JSON."""
        return [v.to_json() for v in self.job_views(history=history)]

    def _view(self, row: JobRow, history: bool) -> JobView:
        runner = self._runners.get(row.id)
        live = runner.live() if runner is not None else None
        points: list[HistoryPoint] | list[list[float]] | None = None
        if history:
            if runner is not None:
                points = runner.points()
            elif row.final is not None:
                points = row.final.get("history") or []
            else:
                points = []
        view = job_view(row, live, points)
        money = self.money.waiting.get(row.id) if self.money is not None else None
        if money and row.state is JobState.QUEUED:
            return replace(view, waiting=money)
        if runner is not None and not view.progress.stop_reason:
            waits = self.quota.waits(POOL_HOLDER if runner.pool is not None else row.id)
            if waits:
                return replace(view, waiting="waiting for " + "; ".join(w.said() for w in waits))
        return view

    def service_view(self) -> dict[str, Any]:
        month = self._this_month()  # read once, for the projects (without money) and users
        users = {r.user for r in month[0]}
        return {
            "started_at": self.started_at,
            "now": self.clock(),
            "provider": self.config.platform.provider_label(),
            "state_dir": str(self.state_dir),
            "pid": os.getpid(),
            **service_summary(self.job_views()),
            "quota": [u.to_json() for u in self.quota.usage()],
            "projects": [s.to_json() for s in self.project_standings(month)],
            "users": [
                {
                    "user": s.project,
                    "month": s.span.label,
                    "spent": round(s.spent, 4),
                    "days": {d: round(c, 4) for d, c in s.days.items()},
                }
                for s in self.spend_by(lambda row: row.user, month)
                if s.spent or s.project in users
            ],
        }

    def _project_figures(self) -> list[BudgetFigure]:
        """Each project's budget this period and what it spent, for the alerts (subject
        ``project:<name>:<period>``: each period's thresholds are alerted anew)."""
        return [
            BudgetFigure(f"project:{p.project}:{p.span.label}", p.budget, p.spent)
            for p in self.project_standings()
            if p.budget
        ]

    def project_standings(self, month: Month | None = None) -> list[Standing]:
        """Each project's money this period (a service without projects: each project's
        spend this month, without a limit; ``month``: ``_this_month``, read already)."""
        if self.money is not None:
            return list(self.money.standings().values())
        return self.spend_by(lambda row: row.project, month)

    def spend_by(
        self, group_of: Callable[[JobRow], str], month: Month | None = None
    ) -> list[Standing]:
        """What the jobs of each group (``group_of`` a job) spent this month, per day."""
        rows, days = month if month is not None else self._this_month()
        charges = [Charge(r.id, group_of(r), days.get(r.id, {})) for r in rows]
        return list(standings([], charges, self.clock()).values())

    def _this_month(self) -> Month:
        """The jobs that can have spent this month (started, and not ended before it)
        and each one's cost per day: not every job the store ever had."""
        start = span_at("month", self.clock()).start
        rows = self._store.rows(
            "WHERE started_at IS NOT NULL AND (ended_at IS NULL OR ended_at >= ?)", (start,)
        )
        return rows, self._job_days(rows)

    def _groupings(self, rows: list[JobRow]) -> dict[str, dict[str, str]]:
        """How the daily reports sum the jobs of ``rows`` besides by job: per grouping,
        each job's group."""
        return {"project": {r.id: r.project for r in rows}, "user": {r.id: r.user for r in rows}}

    def _job_days(self, rows: list[JobRow]) -> dict[str, dict[date, float]]:
        """The cost per UTC day of each job of ``rows`` that started, as the daily reports
        split it: a running job on its own machines as its daemon last reckoned it
        (``Runner.days``), the others from their runs' journals."""
        if self._pump is None:
            return {}
        out: dict[str, dict[date, float]] = {}
        read: list[JobRow] = []
        for row in rows:
            runner = self._runners.get(row.id)
            if runner is not None and runner.pool is None:
                out[row.id] = runner.days
            elif row.started_at is not None:
                read.append(row)
        pooled = [r for r in read if r.in_pool]
        own = [r for r in read if not r.in_pool]
        unread: list[JobRow] = []
        records = self._pump.run_states.job_runs(pooled, own, self.state_dir / POOL_DIR, unread)
        for row in unread:  # its cost as it showed when it ended (a live one holds its budget)
            cost = float((row.final or {}).get("cost") or 0.0)
            at = row.ended_at if row.ended_at is not None else row.started_at
            if cost > 0 and at is not None:
                out[row.id] = {datetime.fromtimestamp(at, UTC).date(): cost}
        if unread and self.log is not None:
            self.log.warning(
                "runs cannot be read for the projects' money: their stored cost counts",
                jobs=[r.id for r in unread],
            )
        return {**days_by_job(daily_costs(records)), **out}

    def wait(self, job_id: str, timeout: float | None = None) -> dict[str, Any]:
        """Block until the job has ended (or ``timeout`` real seconds); its view."""
        end = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while True:
                row = self._store.row(job_id)
                closing = self._pump is not None and self._pump.closing
                if row.state in ENDED or (closing and row.state is JobState.INTERRUPTED):
                    break
                left = None if end is None else end - time.monotonic()
                if left is not None and left <= 0:
                    break
                self._cond.wait(timeout=1.0 if left is None else min(left, 1.0))
        return self._view(row, history=False).to_json()

    def write_daily_reports(self) -> list[Path]:
        """The cost per UTC day, per job and per machine type, of every job that ran
        (``reports/daily/YYYY-MM-DD.json`` and ``.md``); the files written."""
        from autoscaler.service.daily import write_daily_reports

        if self._pump is None:
            raise AutoscalerError("the service is not open")
        pooled = self._store.rows("WHERE in_pool = 1")
        own = self._store.rows("WHERE started_at IS NOT NULL AND in_pool = 0")
        records = self._pump.run_states.job_runs(pooled, own, self.state_dir / POOL_DIR)
        groups = self._groupings([*pooled, *own])
        out = self.state_dir / "reports" / "daily"
        out.mkdir(parents=True, exist_ok=True)
        return write_daily_reports(daily_costs(records, groups), out)

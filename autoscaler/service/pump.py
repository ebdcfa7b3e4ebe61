"""The half of the service that starts queued jobs while slots are free and records
how each ends: on its own machines (a thread and a daemon each) or in the deadline pool.
``Service`` (``service.service``) is the other half: jobs in, views out."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autoscaler.config.service import ServiceConfig
from autoscaler.core.errors import AutoscalerError
from autoscaler.core.state import RunState
from autoscaler.service.memory import application, job_runs, said, with_memory
from autoscaler.service.pool import POOL_HOLDER, Pool, shares_the_pool
from autoscaler.service.quota import QuotaLedger
from autoscaler.service.runners import (
    Runner,
    RunStates,
    open_pool,
    run_own,
    run_pool,
    start_own_run,
)
from autoscaler.service.store import ENDED, DeadlinePassed, JobRow, JobState, Store
from autoscaler.service.view import HistoryPoint, Progress, final_json, queued

if TYPE_CHECKING:
    from autoscaler.run.daemon import Outcome

JOBS_DIR = "jobs"

ProgressHook = Callable[[RunState, float | None], None]
JobEndHook = Callable[["Pump", str], None]
"""Told as each job ends (and with ``""`` as the service closes); must not raise."""


class Pump:
    """Starts and reaps the jobs of a ``Service`` (whose state this names), on the
    pump's thread and the jobs' own."""

    config: ServiceConfig
    state_dir: Path
    progress: ProgressHook | None
    clock: Callable[[], float]
    shared: bool
    outcomes: dict[str, Outcome]
    log: Any
    _cond: threading.Condition
    _runners: dict[str, Runner]
    _pool: Pool | None
    _starting: set[str]
    _run_states: RunStates
    _closing: bool
    quota: QuotaLedger

    store: Store | None
    on_job_end: JobEndHook | None

    @property
    def _store(self) -> Store:
        if self.store is None:
            raise AutoscalerError("the service is not open")
        return self.store

    def _job_ended(self, job_id: str) -> None:
        """Tell ``on_job_end``; what it cannot write is logged, and the service goes on."""
        if self.on_job_end is None:
            return
        try:
            self.on_job_end(self, job_id)
        except (AutoscalerError, OSError, sqlite3.Error, ValueError) as exc:
            if self.log is not None:
                self.log.warning("job end hook failed", job=job_id, error=repr(exc))

    def _pump_loop(self) -> None:
        """Start queued jobs while slots are free. The slow part of a start (the run
        directory, the daemon) is done outside the lock, so submissions never wait on it."""
        store = self._store
        first = True
        while True:
            with self._cond:
                if self._closing:
                    return
                rows: list[JobRow] = []
                if first:  # jobs a dead service left running or interrupted carry on
                    rows = store.rows(
                        "WHERE state IN (?, ?)", (JobState.RUNNING, JobState.INTERRUPTED)
                    )
                    first = False
                busy = len(self._runners) + len(self._starting)
                slots = self.config.settings.max_running_jobs - busy - len(rows)
                if slots > 0:
                    rows += [
                        r
                        for r in store.rows(
                            "WHERE state = ?", (JobState.QUEUED,), slots + len(self._starting)
                        )
                        if r.id not in self._starting
                    ][:slots]
                self._starting.update(r.id for r in rows)
                if not rows:
                    self._cond.wait(timeout=1.0)
                    continue
            for row in rows:
                self._try_start(row)

    def _try_start(self, row: JobRow) -> None:
        """Start a job; one that cannot start ends, failed, with the reason (stopped, if
        its deadline passed while it was queued)."""
        try:
            self._start(row)
        except DeadlinePassed as exc:
            self._end_unstarted(row, JobState.STOPPED, str(exc))
        except Exception as exc:  # whatever breaks a start fails that job alone
            if self.log is not None:
                self.log.exception("job cannot start", job=row.id)
            message = str(exc) if isinstance(exc, AutoscalerError) else repr(exc)
            self._end_unstarted(row, JobState.FAILED, f"cannot start: {message}")
        finally:
            with self._cond:
                self._starting.discard(row.id)
                self._cond.notify_all()

    def _end_unstarted(self, row: JobRow, state: JobState, reason: str) -> None:
        final = final_json(queued(row).stopped(reason), [])
        self._store.set_state(row.id, state, ended_at=self.clock(), final=final)

    def _start(self, row: JobRow) -> None:
        row = self._from_memory(row)
        sharing = self.shared and self.config.settings.share_deadline_jobs
        if sharing and (row.in_pool or shares_the_pool(row.config)):
            self._start_in_pool(row)
            return
        store = self._store

        def progress(state: RunState, estimate: float | None) -> None:
            runner.record(state, estimate, self.clock())
            if self.progress is not None:
                self.progress(state, estimate)

        daemon = start_own_run(
            row,
            lambda: store.tasks(row.id),
            jobs_dir=self.state_dir / JOBS_DIR,
            shared=self.shared,
            max_running=self.config.settings.max_running_jobs,
            now=self.clock(),
            progress=progress,
            plots=self.config.settings.plots,
        )
        if self.shared:
            daemon.quota, daemon.holder = self.quota, row.id
        runner = Runner(row.id, daemon, daemon.files)
        runner.thread = threading.Thread(
            target=self._run, args=(runner, row), name=f"job-{row.id}", daemon=True
        )
        with self._cond:
            if store.row(row.id).state in ENDED or self._closing:
                return  # cancelled (or the service stops) while it was being started
            store.set_state(row.id, JobState.RUNNING, started_at=row.started_at or self.clock())
            if self.log is not None:
                self.log.info(
                    "job start", job=row.id, run_dir=str(row.run_dir), resume=daemon.resume
                )
            self._runners[row.id] = runner
            runner.thread.start()

    def _from_memory(self, row: JobRow) -> JobRow:
        """A deadline job without ``task_s``, starting: its application's remembered task
        times instead of sampling, when the service has them (``service.memory``)."""
        app = application(row.config)
        if row.started_at is not None or row.task_times is not None or app is None:
            return row
        store = self._store
        found = with_memory(row.config, store.remembered(app), row.config.deadline.sample)
        if found is None:
            return row
        cfg, note = found
        store.set_task_times(row.id, cfg, note)
        store.log_update(row.id, self.clock(), "task_times", note)
        if self.log is not None:
            self.log.info("task times from memory", job=row.id, message=said(note), **note)
        return store.row(row.id)

    def _remember(self, app: str, runs: dict[str, list[float]]) -> None:
        """What a job's tasks took, for later jobs of its application."""
        self._store.remember(app, runs)

    def _run(self, runner: Runner, row: JobRow) -> None:
        """A job's thread: its daemon from start to end, then its outcome in the store."""
        ending = run_own(runner, queued(row))
        self.quota.leave(runner.job_id)
        files = runner.files
        if ending.outcome is not None:
            state = ending.outcome.state
            self._run_states.keep(runner.job_id, state, files)
            self.outcomes[runner.job_id] = ending.outcome
            if ending.state is not JobState.INTERRUPTED:
                for job in state.work.jobs:
                    self._remember(*job_runs(state, job.name))
        view = ending.progress
        with self._cond:
            if self.log is not None:
                self.log.info(
                    "job " + ending.state,
                    job=runner.job_id,
                    done=view.done,
                    tasks=view.tasks,
                    cost=view.cost,
                    stop_reason=view.stop_reason,
                )
            if ending.state is JobState.INTERRUPTED:
                self._store.set_state(runner.job_id, JobState.INTERRUPTED)
            else:
                self._store.set_state(
                    runner.job_id,
                    ending.state,
                    ended_at=self.clock(),
                    final=final_json(view, runner.history),
                )
            del self._runners[runner.job_id]
            self._cond.notify_all()
        if ending.state is not JobState.INTERRUPTED:
            self._job_ended(runner.job_id)

    # --- the deadline pool: deadline jobs without a budget share its machines ----------

    def _start_in_pool(self, row: JobRow) -> None:
        """Join the deadline pool (making or resuming it first if need be)."""
        pool = self._pool
        joined = row.in_pool
        if pool is None:
            pool, joined = open_pool(
                row,
                self._store.tasks,
                state_dir=self.state_dir,
                max_running=self.config.settings.max_running_jobs,
                plots=self.config.settings.plots,
                clock=self.clock,
                row_of=self._store.row,
                ended=self._pool_job_ended,
            )
            pool.remember = self._remember
            assert pool.daemon is not None
            pool.daemon.quota, pool.daemon.holder = self.quota, POOL_HOLDER
            pool.thread = threading.Thread(
                target=self._run_pool, args=(pool,), name="deadline-pool", daemon=True
            )
            self._pool = pool
            pool.thread.start()
        if not joined:
            pool.add(row, self._store.tasks(row.id))
        assert pool.daemon is not None
        with self._cond:
            if self._store.row(row.id).state in ENDED or self._closing:
                return
            self._store.set_state(
                row.id, JobState.RUNNING, started_at=row.started_at or self.clock(), in_pool=1
            )
            if self.log is not None:
                self.log.info("job start", job=row.id, pool=str(pool.run_dir), joined=not joined)
            pool.jobs.add(row.id)
            self._runners[row.id] = Runner(row.id, pool.daemon, pool.files, pool=pool)

    def _pool_job_ended(
        self, job_id: str, view: Progress, history: list[HistoryPoint], cancelled: bool
    ) -> None:
        """A pool job's every task is done or failed, or it was withdrawn (``cancelled``),
        from the pool daemon's thread."""
        ended = JobState.CANCELLED if cancelled else JobState.DONE
        with self._cond:
            self._store.set_state(
                job_id, ended, ended_at=self.clock(), final=final_json(view, history)
            )
            self._runners.pop(job_id, None)
            if self.log is not None:
                self.log.info(f"job {ended}", job=job_id, done=view.done, cost=view.cost)
            self._cond.notify_all()
        self._job_ended(job_id)

    def _run_pool(self, pool: Pool) -> None:
        """The pool's thread: its daemon until the service stops it (or it breaks)."""
        interrupted, error = run_pool(pool)
        self.quota.leave(POOL_HOLDER)
        with self._cond:
            for job_id in sorted(pool.jobs):
                if interrupted:
                    self._store.set_state(job_id, JobState.INTERRUPTED)
                else:
                    last = pool.views.get(job_id) or queued(self._store.row(job_id))
                    reason = f"the deadline pool ended: {error or 'stopped'}"
                    self._store.set_state(
                        job_id,
                        JobState.FAILED,
                        ended_at=self.clock(),
                        final=final_json(last.stopped(reason), []),
                    )
                self._runners.pop(job_id, None)
            self._pool = None
            self._cond.notify_all()

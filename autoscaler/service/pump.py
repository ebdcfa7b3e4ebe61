"""The running jobs of a service: the pump starts queued jobs while slots are free, on
its own thread, runs each on its own machines (a thread and a session each) or in the
deadline pool, and records how each ends. The ``Service`` (``service.service``) holds
one: jobs in and views out are the service's, the runs the pump's; both take the
service's one lock (``cond``) to change what the other reads."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from autoscaler.config.service_schema import ServiceConfig
from autoscaler.core.errors import AutoscalerError
from autoscaler.core.model import Interrupted
from autoscaler.core.state import RunState
from autoscaler.service.job_states import ENDED, JobState
from autoscaler.service.memory import admitted, job_runs, said
from autoscaler.service.pool import POOL_HOLDER, Pool, shares_the_pool
from autoscaler.service.project_money import ProjectMoney, ProjectRefused
from autoscaler.service.quota_ledger import QuotaLedger
from autoscaler.service.runners import (
    Runner,
    RunStates,
    open_pool,
    run_own,
    run_pool,
    start_own_run,
)
from autoscaler.service.store import DeadlinePassed, JobRow, Store
from autoscaler.service.view import HistoryPoint, Progress, final_json, queued

if TYPE_CHECKING:
    from autoscaler.run.daemon import Daemon

JOBS_DIR = "jobs"

Closing = Literal["hand_over", "release", "finish"]
"""What a closing service does with its running jobs: ``hand_over``, each job's daemon
ends and leaves its machines, paid and leased, to the next service (a restart);
``release``, every machine is released and the jobs are kept to resume; ``finish``,
the jobs run to their end first."""


class Pump:
    """Starts and reaps a service's jobs, on the pump's thread and the jobs' own.
    ``job_ended``: told each job id as the job ends (its outcome is in the store then)."""

    def __init__(
        self,
        config: ServiceConfig,
        state_dir: Path,
        store: Store,
        quota: QuotaLedger,
        cond: threading.Condition,
        clock: Callable[[], float],
        log: Any,
        job_ended: Callable[[str], None],
    ) -> None:
        self.config = config
        self.state_dir = state_dir
        self.store = store
        self.quota = quota
        self.cond = cond
        self.clock = clock
        self.log = log
        self._job_ended = job_ended
        self.runners: dict[str, Runner] = {}  # job id -> its run, while it runs
        self.pool: Pool | None = None  # once a deadline job shares it
        self.closing = False
        self.run_states = RunStates()  # for the daily cost reports
        self._starting: set[str] = set()  # picked, being started
        self._thread: threading.Thread | None = None
        self.money: ProjectMoney | None = None  # the projects' budgets, if the service has any

    def starting(self, job_id: str) -> bool:
        """Whether the job was picked and is being started: its row as read then is what
        it starts with, so a change to the stored row would be lost. Hold ``cond``."""
        return job_id in self._starting

    def start(self) -> None:
        self._thread = threading.Thread(target=self._pump_loop, name="service-pump", daemon=True)
        self._thread.start()

    def stop(self, jobs: Closing) -> list[str]:
        """Start no more jobs, and with the running ones do as ``jobs`` says; when every
        job's thread has ended, the ids of the jobs kept to resume."""
        with self.cond:
            self.closing = True
            runners = list(self.runners.values())
            self.cond.notify_all()
        told: set[int] = set()

        def tell(daemon: Daemon) -> None:
            if jobs == "finish" or id(daemon) in told:  # the pool's jobs share one daemon
                return
            told.add(id(daemon))
            if jobs == "hand_over":
                daemon.hand_over("the service stops")
            else:
                daemon.tell(Interrupted("the service stops"))

        for r in runners:
            if jobs != "finish":
                r.told.append("interrupt")
            tell(r.daemon)
        for r in runners:
            if r.thread is not None:
                r.thread.join()
        pool = self.pool
        if pool is not None and pool.daemon is not None:
            tell(pool.daemon)
            if pool.thread is not None:
                pool.thread.join()
        if self._thread is not None:
            self._thread.join()
        return [r.job_id for r in runners] if jobs != "finish" else []

    def _pump_loop(self) -> None:
        """Start queued jobs while slots are free. The slow part of a start (the run
        directory, the daemon) is done outside the lock, so submissions never wait on it."""
        store = self.store
        first = True
        while True:
            with self.cond:
                if self.closing:
                    return
                rows: list[JobRow] = []
                if first:  # jobs a dead service left running or interrupted carry on
                    rows = store.rows(
                        "WHERE state IN (?, ?)", (JobState.RUNNING, JobState.INTERRUPTED)
                    )
                    first = False
                busy = len(self.runners) + len(self._starting)
                slots = self.config.settings.max_running_jobs - busy - len(rows)
                money = self.money
                if slots > 0:
                    waiting = len(money.waiting) if money is not None else 0
                    rows += [
                        r
                        for r in store.rows(
                            "WHERE state = ?",
                            (JobState.QUEUED,),
                            slots + len(self._starting) + waiting,
                        )
                        if r.id not in self._starting and (money is None or money.passes(r))
                    ][:slots]
                self._starting.update(r.id for r in rows)
                if not rows:
                    self.cond.wait(timeout=1.0)
                    continue
            for row in rows:
                self._try_start(row)

    def _try_start(self, row: JobRow) -> None:
        """Start a job; one that cannot start ends, failed, with the reason (stopped, if
        its deadline passed while it was queued)."""
        try:
            self._start(row)
        except (DeadlinePassed, ProjectRefused) as exc:
            self._end_unstarted(row, JobState.STOPPED, str(exc))
        except Exception as exc:  # whatever breaks a start fails that job alone
            if self.log is not None:
                self.log.exception("job cannot start", job=row.id)
            message = str(exc) if isinstance(exc, AutoscalerError) else repr(exc)
            self._end_unstarted(row, JobState.FAILED, f"cannot start: {message}")
        finally:
            with self.cond:
                self._starting.discard(row.id)
                self.cond.notify_all()

    def _end_unstarted(self, row: JobRow, state: JobState, reason: str) -> None:
        final = final_json(queued(row).stopped(reason), [])
        self.store.set_state(row.id, state, ended_at=self.clock(), final=final)

    def _start(self, row: JobRow) -> None:
        row = self._from_memory(row)
        if self.money is not None:
            with self.cond:
                capped = self.money.capped(row)
            if capped is None:
                return  # waits for its project's money
            row = capped
        sharing = self.config.settings.share_deadline_jobs
        if sharing and (row.in_pool or shares_the_pool(row.config)):
            self._start_in_pool(row)
            return
        store = self.store

        def progress(state: RunState, estimate: float | None) -> None:
            runner.record(state, estimate, self.clock())

        daemon = start_own_run(
            row,
            lambda: store.tasks(row.id),
            jobs_dir=self.state_dir / JOBS_DIR,
            max_running=self.config.settings.max_running_jobs,
            now=self.clock(),
            progress=progress,
            plots=self.config.settings.plots,
        ).daemon
        daemon.quota, daemon.holder = self.quota, row.id
        runner = Runner(row.id, daemon, daemon.files)
        runner.thread = threading.Thread(
            target=self._run, args=(runner, row), name=f"job-{row.id}", daemon=True
        )
        with self.cond:
            if store.row(row.id).state in ENDED or self.closing:
                return  # cancelled (or the service stops) while it was being started
            store.set_state(row.id, JobState.RUNNING, started_at=row.started_at or self.clock())
            if self.log is not None:
                self.log.info(
                    "job start", job=row.id, run_dir=str(row.run_dir), resume=daemon.resume
                )
            self.runners[row.id] = runner
            runner.thread.start()

    def _from_memory(self, row: JobRow) -> JobRow:
        """A deadline job without ``task_s``, starting: its application's remembered task
        times instead of sampling, when the service has them (``service.memory``)."""
        if row.started_at is not None or row.task_times is not None:
            return row
        store = self.store
        found = admitted(row.config, store.remembered)
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
        self.store.remember(app, runs)

    def _run(self, runner: Runner, row: JobRow) -> None:
        """A job's thread: its daemon from start to end, then its outcome in the store."""
        ending = run_own(runner, queued(row))
        self.quota.leave(runner.job_id)
        files = runner.files
        if ending.outcome is not None:
            state = ending.outcome.state
            self.run_states.keep(runner.job_id, state, files)
            if ending.state is not JobState.INTERRUPTED:
                for job in state.work.jobs:
                    self._remember(*job_runs(state, job.name))
        view = ending.progress
        if ending.state is JobState.STOPPED and self.money is not None:
            view = self.money.stopped(runner.job_id, view)
        with self.cond:
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
                self.store.set_state(runner.job_id, JobState.INTERRUPTED)
            else:
                self.store.set_state(
                    runner.job_id,
                    ending.state,
                    ended_at=self.clock(),
                    final=final_json(view, runner.history),
                )
            del self.runners[runner.job_id]
            self.cond.notify_all()
        if ending.state is not JobState.INTERRUPTED:
            self._job_ended(runner.job_id)

    # --- the deadline pool: deadline jobs without a budget share its machines ----------

    def _start_in_pool(self, row: JobRow) -> None:
        """Join the deadline pool (making or resuming it first if need be)."""
        pool = self.pool
        joined = row.in_pool
        if pool is None:
            pool, joined = open_pool(
                row,
                self.store.tasks,
                state_dir=self.state_dir,
                max_running=self.config.settings.max_running_jobs,
                plots=self.config.settings.plots,
                clock=self.clock,
                row_of=self.store.row,
                ended=self._pool_job_ended,
            )
            pool.remember = self._remember
            assert pool.daemon is not None
            pool.daemon.quota, pool.daemon.holder = self.quota, POOL_HOLDER
            pool.thread = threading.Thread(
                target=self._run_pool, args=(pool,), name="deadline-pool", daemon=True
            )
            self.pool = pool
            pool.thread.start()
        if not joined:
            pool.add(row, self.store.tasks(row.id))
        assert pool.daemon is not None
        with self.cond:
            if self.store.row(row.id).state in ENDED or self.closing:
                return
            self.store.set_state(
                row.id, JobState.RUNNING, started_at=row.started_at or self.clock(), in_pool=1
            )
            if self.log is not None:
                self.log.info("job start", job=row.id, pool=str(pool.run_dir), joined=not joined)
            pool.jobs.add(row.id)
            pool.retag()
            self.runners[row.id] = Runner(row.id, pool.daemon, pool.files, pool=pool)

    def _pool_job_ended(
        self, job_id: str, view: Progress, history: list[HistoryPoint], cancelled: bool
    ) -> None:
        """A pool job's every task is done or failed, or it was withdrawn (``cancelled``),
        from the pool daemon's thread."""
        ended = JobState.CANCELLED if cancelled else JobState.DONE
        with self.cond:
            self.store.set_state(
                job_id, ended, ended_at=self.clock(), final=final_json(view, history)
            )
            self.runners.pop(job_id, None)
            if self.log is not None:
                self.log.info(f"job {ended}", job=job_id, done=view.done, cost=view.cost)
            self.cond.notify_all()
        self._job_ended(job_id)

    def _run_pool(self, pool: Pool) -> None:
        """The pool's thread: its daemon until the service stops it (or it breaks)."""
        interrupted, error = run_pool(pool)
        self.quota.leave(POOL_HOLDER)
        with self.cond:
            for job_id in sorted(pool.jobs):
                if interrupted:
                    self.store.set_state(job_id, JobState.INTERRUPTED)
                else:
                    last = pool.views.get(job_id) or queued(self.store.row(job_id))
                    reason = f"the deadline pool ended: {error or 'stopped'}"
                    self.store.set_state(
                        job_id,
                        JobState.FAILED,
                        ended_at=self.clock(),
                        final=final_json(last.stopped(reason), []),
                    )
                self.runners.pop(job_id, None)
            self.pool = None
            self.cond.notify_all()

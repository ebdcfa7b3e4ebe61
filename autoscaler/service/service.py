"""The long-running service: jobs submitted while it runs, each run by the daemon.

``autoscaler serve`` holds a service config (provider, machine types, billing) and a
state directory. A submitted job is laid over the service's config, validated, and
written to the service's store (SQLite, synchronous) before its id is returned: a job
acknowledged is never lost. The service starts queued jobs in order while fewer than
``service.max_running_jobs`` run; each job is one run of the real-time ``Daemon`` (its
own run directory, journal, dispatcher, machines and budget) on a thread of its own, so
a job runs exactly as ``autoscaler run`` runs it.

Across a restart: a job that was running when the service died (kill -9) is resumed
from its journal (the daemon adopts its machines and loses no task); a job the service
interrupted (SIGTERM) released its machines and is resumed with ``Resumed``; queued
jobs start as before.

Updates (a budget, a deadline) and cancellations reach a running job's daemon as events
(``Daemon.tell``), so they are journaled with the run and the controller re-plans at
once. The store also keeps a log of every update.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autoscaler.config.schema import RunConfig
from autoscaler.config.service import ServiceConfig, job_config
from autoscaler.core.errors import AutoscalerError
from autoscaler.core.model import BudgetSet, DeadlineSet, Interrupted, Shutdown, TaskSpec, TaskState
from autoscaler.core.state import RunState
from autoscaler.providers import registry

DB_FILE = "service.db"
LOCK_FILE = "service.lock"
LOG_FILE = "service.log.jsonl"
JOBS_DIR = "jobs"
HISTORY_POINTS = 600
"""At most this many points of a job's history are kept (thinned when full)."""

# What a job can be. A job ends done, stopped (its constraint gave way, or an error),
# cancelled, or failed (the daemon broke); interrupted jobs resume with the service.
QUEUED, RUNNING, DONE, STOPPED, CANCELLED, FAILED, INTERRUPTED = (
    "queued",
    "running",
    "done",
    "stopped",
    "cancelled",
    "failed",
    "interrupted",
)
ENDED = (DONE, STOPPED, CANCELLED, FAILED)

EXIT_CODES = {DONE: 0, STOPPED: 3, "late": 4, CANCELLED: 5, INTERRUPTED: 6, FAILED: 7}
"""``autoscaler wait``'s exit code per outcome (``late``: done, but a deadline missed)."""


class JobNotFound(AutoscalerError):
    code = "JobNotFound"


# --- the store: jobs, journaled before they are acknowledged ---------------------------


_SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    seq INTEGER PRIMARY KEY,
    id TEXT UNIQUE NOT NULL,
    name TEXT NOT NULL,
    submitted_at REAL NOT NULL,
    state TEXT NOT NULL,
    config TEXT NOT NULL,
    tasks TEXT NOT NULL,
    n_tasks INTEGER NOT NULL,
    run_dir TEXT NOT NULL,
    run_id TEXT,
    seed INTEGER,
    in_pool INTEGER NOT NULL DEFAULT 0,
    started_at REAL,
    ended_at REAL,
    final TEXT
);
CREATE TABLE IF NOT EXISTS updates (
    seq INTEGER PRIMARY KEY,
    job TEXT NOT NULL,
    t REAL NOT NULL,
    kind TEXT NOT NULL,
    data TEXT NOT NULL
);
"""


@dataclass
class JobRow:
    id: str
    name: str
    submitted_at: float
    state: str
    config: RunConfig
    n_tasks: int
    run_dir: Path
    started_at: float | None
    ended_at: float | None
    final: dict[str, Any] | None
    run_id: str | None
    seed: int | None
    in_pool: bool


class Store:
    """The service's jobs in SQLite (WAL, synchronous FULL): a write returns once it is
    on disk. One connection, used under a lock by every thread."""

    def __init__(self, path: Path) -> None:
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._lock = threading.Lock()
        with self._lock:
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
            self._db.executescript(_SCHEMA)

    def close(self) -> None:
        with self._lock:
            self._db.close()

    @contextlib.contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def add(
        self,
        name: str,
        cfg: RunConfig,
        tasks: list[TaskSpec],
        now: float,
        run_dir: Callable[[str], Path],
        run_id: str | None = None,
        seed: int | None = None,
    ) -> str:
        """Journal a new job; its id (``j1``, ``j2``, ...)."""
        config = cfg.model_dump_json()
        task_json = json.dumps([[t.command, dict(t.env)] if t.env else t.command for t in tasks])
        with self._tx() as db:
            (seq,) = db.execute("SELECT COALESCE(MAX(seq), 0) + 1 FROM jobs").fetchone()
            job_id = f"j{seq}"
            db.execute(
                "INSERT INTO jobs (seq, id, name, submitted_at, state, config, tasks, n_tasks, "
                "run_dir) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    seq,
                    job_id,
                    name,
                    now,
                    QUEUED,
                    config,
                    task_json,
                    len(tasks),
                    str(run_dir(job_id)),
                ),
            )
        return job_id

    def set_state(self, job_id: str, state: str, **fields: Any) -> None:
        cols = ", ".join(f"{k} = ?" for k in fields)
        values = [json.dumps(v) if k == "final" else v for k, v in fields.items()]
        with self._tx() as db:
            db.execute(
                f"UPDATE jobs SET state = ?{', ' + cols if cols else ''} WHERE id = ?",
                (state, *values, job_id),
            )

    def log_update(self, job_id: str, now: float, kind: str, data: dict[str, Any]) -> None:
        with self._tx() as db:
            db.execute(
                "INSERT INTO updates (job, t, kind, data) VALUES (?, ?, ?, ?)",
                (job_id, now, kind, json.dumps(data)),
            )

    def rows(self, where: str = "", args: tuple[Any, ...] = (), limit: int = -1) -> list[JobRow]:
        with self._lock:
            cur = self._db.execute(
                "SELECT id, name, submitted_at, state, config, n_tasks, run_dir, started_at, "
                f"ended_at, final, run_id, seed, in_pool FROM jobs {where} ORDER BY seq LIMIT ?",
                (*args, limit),
            )
            raw = cur.fetchall()
        return [
            JobRow(
                r[0],
                r[1],
                r[2],
                r[3],
                RunConfig.model_validate_json(r[4]),
                r[5],
                Path(r[6]),
                r[7],
                r[8],
                None if r[9] is None else json.loads(r[9]),
                r[10],
                r[11],
                bool(r[12]),
            )
            for r in raw
        ]

    def row(self, job_id: str) -> JobRow:
        rows = self.rows("WHERE id = ?", (job_id,))
        if not rows:
            raise JobNotFound(f"no job {job_id!r}")
        return rows[0]

    def tasks(self, job_id: str) -> list[TaskSpec]:
        with self._lock:
            (text,) = self._db.execute("SELECT tasks FROM jobs WHERE id = ?", (job_id,)).fetchone()
        out = []
        for i, item in enumerate(json.loads(text)):
            command, env = (item[0], item[1]) if isinstance(item, list) else (item, {})
            out.append(TaskSpec(i, command, env))
        return out


# --- a job's view: what `jobs`, the API and the status page show -----------------------


def live_view(
    state: RunState, cfg: RunConfig, start_wall: float, estimate: float | None
) -> dict[str, Any]:
    """Where a running job stands, from its run's state (times as wall-clock epochs)."""
    ts = cfg.time_scale

    def wall(t: float | None) -> float | None:
        return None if t is None else round(start_wall + t / ts, 3)

    running = sum(1 for s in state.task_state if s is TaskState.RUNNING)
    finish: float | None = estimate
    deadline: float | None = None
    if state.jobs:
        deadline = max(j.deadline for j in state.jobs)
        forecasts = [f.finish for f in state.forecasts.values()]
        finish = max(forecasts) if forecasts else None
    return {
        "mode": "deadline" if state.deadline_mode else "budget",
        "tasks": state.n_tasks,
        "done": state.done,
        "failed": state.failed,
        "running": running,
        "spend": round(state.committed, 4),
        "cost": round(state.actual_cost(), 4),
        "budget": state.budget_of(cfg.constraint.budget),
        "deadline_at": wall(deadline),
        "predicted_finish_at": wall(finish),
        "machines": [
            {"id": m.id, "type": m.type.name, "state": m.state.value}
            for m in state.alive_machines()
        ],
        "stop_reason": state.stop_reason,
        "late_tasks": sum(n.tasks for n in state.late.values()),
    }


def _queued_view(row: JobRow) -> dict[str, Any]:
    cfg = row.config
    return {
        "mode": "deadline" if cfg.deadline_mode else "budget",
        "tasks": row.n_tasks,
        "done": 0,
        "failed": 0,
        "running": 0,
        "spend": 0.0,
        "cost": 0.0,
        "budget": cfg.constraint.budget,
        "deadline_at": None,
        "predicted_finish_at": None,
        "machines": [],
        "stop_reason": None,
        "late_tasks": 0,
    }


# --- running one job -------------------------------------------------------------------


@dataclass
class _Runner:
    """One job's daemon on its own thread, and what it last showed."""

    job_id: str
    daemon: Any  # autoscaler.run.daemon.Daemon
    thread: threading.Thread | None = None
    view: dict[str, Any] = field(default_factory=dict)
    history: list[list[float]] = field(default_factory=list)
    told: list[str] = field(default_factory=list)  # "cancel", "interrupt"
    last_point: float = 0.0
    pool: Any = None  # the deadline pool the job shares (service_pool.Pool), if it does

    def record(self, view: dict[str, Any], now: float) -> None:
        self.view = view
        if now - self.last_point >= 1.0:
            self.last_point = now
            self.history.append([round(now, 3), view["done"], view["spend"]])
            if len(self.history) > HISTORY_POINTS:
                self.history = self.history[::2]


ProgressHook = Callable[[RunState, float | None], None]


class Service:
    """Jobs in, runs out. Thread-safe: the API's threads call ``submit``, ``views``,
    ``cancel``, ``update`` and ``wait`` while the pump starts and reaps the jobs."""

    def __init__(
        self,
        config: ServiceConfig,
        state_dir: Path,
        *,
        progress: ProgressHook | None = None,
        clock: Callable[[], float] = time.time,
        shared: bool = True,
    ) -> None:
        self.config = config
        self.state_dir = state_dir
        self.progress = progress  # `autoscaler run`: the live view of its one job
        self.clock = clock
        self.shared = shared  # False: `autoscaler run`, one job with the config's ports
        self.outcomes: dict[str, Any] = {}  # job id -> the daemon's Outcome, once ended
        self.started_at = clock()
        self._cond = threading.Condition()
        self._runners: dict[str, _Runner] = {}
        self._pool: Any = None  # service_pool.Pool, once a deadline job shares it
        self._starting: set[str] = set()  # picked by the pump, being started
        self._ended_states: dict[str, tuple[RunState, float, float]] = {}
        self._closing = False
        self._pump: threading.Thread | None = None
        self._lock_fd: int | None = None
        self.store: Store | None = None
        self.log: Any = None
        self._log_file: Any = None
        self.on_job_end: Callable[[Service, str], None] | None = None

    # --- open and close ---------------------------------------------------------------

    def open(self) -> None:
        """Take the state directory (one service each), open the store, start the pump;
        jobs left running or interrupted by the last service carry on."""
        self.state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.chmod(self.state_dir, 0o700)
        fd = os.open(self.state_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            other = os.pread(fd, 32, 0).decode(errors="replace").strip()
            os.close(fd)
            raise AutoscalerError(
                f"{self.state_dir}: another service runs here (pid {other or '?'})"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._lock_fd = fd
        (self.state_dir / JOBS_DIR).mkdir(exist_ok=True)
        from autoscaler.run.start import json_logger

        self._log_file = (self.state_dir / LOG_FILE).open("a", encoding="utf-8")
        self.log = json_logger(self._log_file).bind(service=self.config.name)
        self.store = Store(self.state_dir / DB_FILE)
        self.log.info("service start", pid=os.getpid(), provider=self.config.provider)
        self._pump = threading.Thread(target=self._pump_loop, name="service-pump", daemon=True)
        self._pump.start()

    def close(self, *, interrupt: bool = True) -> None:
        """Stop: running jobs are interrupted (every machine released; they resume with
        the next service) or, with ``interrupt=False``, left to finish first."""
        with self._cond:
            self._closing = True
            runners = list(self._runners.values())
            self._cond.notify_all()
        told: set[int] = set()
        for r in runners:
            if interrupt:
                r.told.append("interrupt")
                if id(r.daemon) not in told:  # the pool's jobs share one daemon
                    told.add(id(r.daemon))
                    r.daemon.tell(Interrupted("the service stops"))
        for r in runners:
            if r.thread is not None:
                r.thread.join()
        pool = self._pool
        if pool is not None:
            if interrupt and id(pool.daemon) not in told:
                pool.daemon.tell(Interrupted("the service stops"))
            if pool.thread is not None:
                pool.thread.join()
        if self._pump is not None:
            self._pump.join()
        if self.on_job_end is not None and self.store is not None:
            with contextlib.suppress(Exception):  # the last word on the day's costs
                self.on_job_end(self, "")
        if self.store is not None:
            self.store.close()
        if self.log is not None:
            self.log.info(
                "service stop", interrupted=[r.job_id for r in runners] if interrupt else []
            )
            self._log_file.close()
            self.log = None
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    @property
    def _store(self) -> Store:
        if self.store is None:
            raise AutoscalerError("the service is not open")
        return self.store

    # --- jobs in ----------------------------------------------------------------------

    def submit(
        self,
        data: object,
        *,
        source: str = "job",
        base_dir: Path | None = None,
        run_dir: Path | None = None,
    ) -> str:
        """Validate a job file's content and journal the job; its id. A ``ConfigError``
        names each bad field; nothing is journaled then."""
        now = self.clock()
        cfg, tasks = job_config(
            self.config, data, source=source, base_dir=base_dir or Path.cwd(), now_wall=now
        )
        if registry.is_emulated(cfg.provider) and not registry.is_emulated(self.config.provider):
            raise AutoscalerError("provider 'sim' only emulates machines")

        return self.submit_config(cfg, tasks, run_dir=run_dir)

    def submit_config(
        self,
        cfg: RunConfig,
        tasks: list[TaskSpec],
        *,
        run_dir: Path | None = None,
        run_id: str | None = None,
        seed: int | None = None,
    ) -> str:
        """Journal a job given as a validated run config and its tasks; its id."""

        def where(job_id: str) -> Path:
            return run_dir if run_dir is not None else self.state_dir / JOBS_DIR / job_id

        job_id = self._store.add(cfg.name, cfg, tasks, self.clock(), where, run_id, seed)
        if self.log is not None:
            self.log.info(
                "job submitted",
                job=job_id,
                name=cfg.name,
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
        releases its machines and writes its report."""
        self._store.row(job_id)  # the job exists
        self._store.log_update(job_id, self.clock(), "cancel", {})
        if self.log is not None:
            self.log.info("job cancel", job=job_id)
        with self._cond:
            row = self._store.row(job_id)
            runner = self._runners.get(job_id)
            if runner is None:
                if row.state in (QUEUED, INTERRUPTED):
                    final = {**_queued_view(row), "stop_reason": "cancelled by the user"}
                    self._store.set_state(job_id, CANCELLED, ended_at=self.clock(), final=final)
                    self._cond.notify_all()
                return self.view(job_id)
            if runner.pool is not None:
                raise AutoscalerError(
                    f"job {job_id} shares the deadline pool's machines with other jobs: "
                    "cancelling one shared job is not supported yet; it runs to its end"
                )
            runner.told.append("cancel")
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
        if deadline_at is not None:
            if deadline_s is not None:
                raise AutoscalerError("give deadline_s or deadline_at, not both")
            deadline_s = (deadline_at - self.clock()) * self.config.time_scale
        if (budget is None) == (deadline_s is None):
            raise AutoscalerError("give a budget or a deadline to update, one of them")
        row = self._store.row(job_id)
        if row.state in ENDED:
            raise AutoscalerError(f"job {job_id} has ended ({row.state}): nothing to update")
        if budget is not None and not budget > 0:
            raise AutoscalerError(f"budget: must be positive (got {budget:g})")
        if deadline_s is not None and not deadline_s > 0:
            raise AutoscalerError(
                f"deadline: must be in the future (got {deadline_s:g} s from now)"
            )
        cfg = row.config
        if deadline_s is not None and not cfg.deadline_mode:
            raise AutoscalerError(
                f"job {job_id} runs under a budget, not a deadline: update its --budget"
            )
        change = {"budget": budget, "deadline_s": deadline_s}
        with self._cond:
            runner = self._runners.get(job_id)
            if runner is not None:
                view = runner.view
                if budget is not None and budget < view.get("spend", 0.0) - 1e-9:
                    raise AutoscalerError(
                        f"budget {budget:.2f} is below the {view['spend']:.2f} job {job_id} "
                        "has committed already"
                    )
                daemon = runner.daemon
                if runner.pool is not None:
                    view = runner.pool.views.get(job_id, {})
                    if budget is not None:
                        raise AutoscalerError(
                            f"job {job_id} has no budget of its own: it shares the deadline "
                            "pool's machines (submit a job with a budget to hold one)"
                        )
                if getattr(daemon, "timeline", None) is None or not view:
                    raise AutoscalerError(f"job {job_id} is starting: update it in a moment")
                self._store.log_update(job_id, self.clock(), "update", change)
                if self.log is not None:
                    self.log.info("job update", job=job_id, **change)
                if budget is not None:
                    daemon.tell(BudgetSet(budget, "updated by the user"))
                else:
                    assert deadline_s is not None
                    at = daemon.now() + deadline_s
                    names = (
                        [job_id] if runner.pool is not None else [j.name for j in daemon.state.jobs]
                    )
                    for name in names:
                        daemon.tell(DeadlineSet(name, at, "updated by the user"))
                return self.view(job_id)
            # Not started yet: the journaled config changes.
            self._store.log_update(job_id, self.clock(), "update", change)
            if self.log is not None:
                self.log.info("job update", job=job_id, **change)
            cfg = _with_constraint(cfg, budget, deadline_s)
            with self._store._tx() as db:
                db.execute(
                    "UPDATE jobs SET config = ? WHERE id = ?", (cfg.model_dump_json(), job_id)
                )
        return self.view(job_id)

    # --- jobs out ---------------------------------------------------------------------

    def view(self, job_id: str, *, history: bool = True) -> dict[str, Any]:
        return self._view(self._store.row(job_id), history)

    def views(self, *, history: bool = False) -> list[dict[str, Any]]:
        return [self._view(row, history) for row in self._store.rows()]

    def _view(self, row: JobRow, history: bool) -> dict[str, Any]:
        runner = self._runners.get(row.id)
        live = runner.view if runner is not None else None
        if runner is not None and runner.pool is not None:
            live = runner.pool.views.get(row.id)
        if row.final is not None:
            body = dict(row.final)
        elif live:
            body = dict(live)
        else:
            body = _queued_view(row)
        hist = body.pop("history", None)
        if runner is not None:
            hist = runner.history if runner.pool is None else runner.pool.histories.get(row.id)
        out: dict[str, Any] = {
            "id": row.id,
            "name": row.name,
            "state": row.state,
            "submitted_at": row.submitted_at,
            "started_at": row.started_at,
            "ended_at": row.ended_at,
            "run_dir": str(row.run_dir),
            **body,
        }
        if history:
            out["history"] = list(hist or [])
        return out

    def service_view(self) -> dict[str, Any]:
        views = self.views()
        by_state: dict[str, int] = {}
        for v in views:
            by_state[v["state"]] = by_state.get(v["state"], 0) + 1
        return {
            "started_at": self.started_at,
            "now": self.clock(),
            "provider": self.config.provider,
            "state_dir": str(self.state_dir),
            "pid": os.getpid(),
            "jobs_by_state": by_state,
            "machines_alive": sum(len(v["machines"]) for v in views if v["state"] == RUNNING),
            "spend": round(sum(v["spend"] for v in views), 4),
        }

    def wait(self, job_id: str, timeout: float | None = None) -> dict[str, Any]:
        """Block until the job has ended (or ``timeout`` real seconds); its view."""
        end = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while True:
                row = self._store.row(job_id)
                if row.state in ENDED or (self._closing and row.state == INTERRUPTED):
                    break
                left = None if end is None else end - time.monotonic()
                if left is not None and left <= 0:
                    break
                self._cond.wait(timeout=1.0 if left is None else min(left, 1.0))
        return self._view(row, history=False)

    def daemon_of(self, job_id: str) -> Any:
        """The daemon running ``job_id`` (None: not running)."""
        with self._cond:
            runner = self._runners.get(job_id)
        return None if runner is None else runner.daemon

    def write_daily_reports(self) -> list[Path]:
        """The cost per UTC day, per job and per machine type, of every job that ran
        (``reports/daily/YYYY-MM-DD.json`` and ``.md``); the files written."""
        from autoscaler.service.daily import JobRun, daily_costs, write_daily_reports
        from autoscaler.service.pool import POOL_DIR

        records = []
        pooled = self._store.rows("WHERE in_pool = 1")
        if pooled:  # one shared run: each job's share of each machine, by its tasks' seconds
            got = self._run_dir_state(self.state_dir / POOL_DIR)
            if got is not None:
                state, start_wall, ts = got
                records += [
                    JobRun(row.id, row.name, state, start_wall, ts, job=row.id) for row in pooled
                ]
        for row in self._store.rows("WHERE started_at IS NOT NULL AND in_pool = 0"):
            got = self._report_state(row)
            if got is not None:
                state, start_wall, ts = got
                records.append(JobRun(row.id, row.name, state, start_wall, ts))
        out = self.state_dir / "reports" / "daily"
        out.mkdir(parents=True, exist_ok=True)
        return write_daily_reports(daily_costs(records), out)

    def _report_state(self, row: JobRow) -> tuple[RunState, float, float] | None:
        """A job's state for the cost reports: its final one, else read from its journal
        (a running job's, as far as it is written)."""
        if row.id in self._ended_states:
            return self._ended_states[row.id]
        got = self._run_dir_state(row.run_dir)
        if got is not None and row.state in ENDED:
            self._ended_states[row.id] = got
        return got

    @staticmethod
    def _run_dir_state(run_dir: Path) -> tuple[RunState, float, float] | None:
        """A run's state as its journal has it (a live run's too: read only)."""
        from autoscaler.core.journal import JOURNAL_DB
        from autoscaler.run.rundir import read_run

        if not (run_dir / JOURNAL_DB).is_file():
            return None
        files, state = read_run(run_dir)
        return state, files.start_wall, files.cfg.time_scale

    # --- the pump: start what can start, reap what ended -----------------------------

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
                    rows = store.rows("WHERE state IN (?, ?)", (RUNNING, INTERRUPTED))
                    first = False
                busy = len(self._runners) + len(self._starting)
                slots = self.config.settings.max_running_jobs - busy - len(rows)
                if slots > 0:
                    rows += [
                        r
                        for r in store.rows(
                            "WHERE state = ?", (QUEUED,), slots + len(self._starting)
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
        """Start a job; one that cannot start ends failed, with the reason."""
        try:
            self._start(row)
        except Exception as exc:
            self._store.set_state(
                row.id,
                FAILED,
                ended_at=self.clock(),
                final={**_queued_view(row), "stop_reason": f"cannot start: {exc}"},
            )
        finally:
            with self._cond:
                self._starting.discard(row.id)
                self._cond.notify_all()

    def _start(self, row: JobRow) -> None:
        from autoscaler.core.journal import JOURNAL_DB
        from autoscaler.run.daemon import Daemon
        from autoscaler.run.rundir import RunFiles
        from autoscaler.run.start import new_run_id
        from autoscaler.service.pool import shares_the_pool

        sharing = self.shared and self.config.settings.share_deadline_jobs
        if sharing and (row.in_pool or shares_the_pool(row.config)):
            self._start_in_pool(row)
            return
        store = self._store
        run_dir = row.run_dir
        resumed: str | None = None
        if (run_dir / JOURNAL_DB).is_file():
            files = RunFiles.open(run_dir)
            resume = True
            if row.state == INTERRUPTED:
                resumed = "the service started again"
        else:
            if run_dir.exists() and run_dir.parent == self.state_dir / JOBS_DIR:
                shutil.rmtree(run_dir)  # a start cut short before its journal: begin again
            cfg = row.config
            if self.shared:
                cfg = _for_the_service(cfg, self.config.settings.max_running_jobs)
            seed = cfg.emulator.seed if row.seed is None else row.seed
            run_id = row.run_id or new_run_id(cfg)
            files = RunFiles.create(cfg, store.tasks(row.id), run_dir, run_id, seed)
            resume = False
        runner = _Runner(row.id, None)

        def progress(state: RunState, estimate: float | None) -> None:
            runner.record(live_view(state, files.cfg, files.start_wall, estimate), self.clock())
            if self.progress is not None:
                self.progress(state, estimate)

        runner.daemon = Daemon(
            files,
            resume=resume,
            progress=progress,
            install_signals=False,
            resumed=resumed,
            plots=self.config.settings.plots,
        )
        runner.thread = threading.Thread(
            target=self._run, args=(runner, files), name=f"job-{row.id}", daemon=True
        )
        with self._cond:
            if store.row(row.id).state in ENDED or self._closing:
                return  # cancelled (or the service stops) while it was being started
            store.set_state(row.id, RUNNING, started_at=row.started_at or self.clock())
            if self.log is not None:
                self.log.info("job start", job=row.id, run_dir=str(run_dir), resume=resume)
            self._runners[row.id] = runner
            runner.thread.start()

    # --- the deadline pool: deadline jobs without a budget share its machines ----------

    def store_row(self, job_id: str) -> JobRow:
        return self._store.row(job_id)

    def _start_in_pool(self, row: JobRow) -> None:
        """Join the deadline pool (making or resuming it first if need be)."""
        pool = self._pool
        joined = row.in_pool
        if pool is None:
            pool, joined = self._open_pool(row)
        if not joined:
            pool.add(row, self._store.tasks(row.id))
        with self._cond:
            if self._store.row(row.id).state in ENDED or self._closing:
                return
            self._store.set_state(
                row.id, RUNNING, started_at=row.started_at or self.clock(), in_pool=1
            )
            if self.log is not None:
                self.log.info("job start", job=row.id, pool=str(pool.run_dir), joined=not joined)
            pool.jobs.add(row.id)
            self._runners[row.id] = _Runner(row.id, pool.daemon, pool=pool)

    def _open_pool(self, row: JobRow) -> tuple[Any, bool]:
        """The pool, resumed from its directory or made with ``row`` as its first job;
        and whether ``row`` is in it already."""
        from autoscaler.core.journal import JOURNAL_DB
        from autoscaler.run.daemon import Daemon
        from autoscaler.run.rundir import RunFiles
        from autoscaler.run.start import new_run_id
        from autoscaler.service.pool import POOL_DIR, Pool, pool_config

        pool_dir = self.state_dir / POOL_DIR
        if (pool_dir / JOURNAL_DB).is_file():
            files = RunFiles.open(pool_dir)
            resume, joined = True, row.in_pool
        else:
            if pool_dir.exists():
                shutil.rmtree(pool_dir)  # a start cut short before its journal
            cfg = _for_the_service(
                pool_config(row.config, row.id), self.config.settings.max_running_jobs
            )
            seed = cfg.emulator.seed
            files = RunFiles.create(cfg, self._store.tasks(row.id), pool_dir, new_run_id(cfg), seed)
            resume, joined = False, True
        pool = Pool(self, files, None)
        pool.daemon = Daemon(
            files,
            resume=resume,
            progress=pool.progress,
            install_signals=False,
            resumed="the service started again",
            plots=self.config.settings.plots,
        )
        pool.thread = threading.Thread(
            target=self._run_pool, args=(pool,), name="deadline-pool", daemon=True
        )
        self._pool = pool
        pool.thread.start()
        return pool, joined

    def pool_job_ended(self, job_id: str, view: dict[str, Any]) -> None:
        """A pool job's every task is done or failed (from the pool daemon's thread)."""
        ended = DONE
        with self._cond:
            self._store.set_state(job_id, ended, ended_at=self.clock(), final=view)
            self._runners.pop(job_id, None)
            if self.log is not None:
                self.log.info("job done", job=job_id, done=view["done"], cost=view["cost"])
            self._cond.notify_all()
        if self.on_job_end is not None:
            with contextlib.suppress(Exception):
                self.on_job_end(self, job_id)

    def _run_pool(self, pool: Any) -> None:
        """The pool's thread: its daemon until the service stops it (or it breaks)."""
        error = None
        try:
            outcome = pool.daemon.run()
            interrupted = outcome.state.interrupted
        except Exception as exc:
            error = str(exc) if isinstance(exc, AutoscalerError) else repr(exc)
            interrupted = False
        with self._cond:
            for job_id in sorted(pool.jobs):
                if interrupted:
                    self._store.set_state(job_id, INTERRUPTED)
                else:
                    view = {**pool.views.get(job_id, {}), "history": []}
                    view["stop_reason"] = f"the deadline pool ended: {error or 'stopped'}"
                    self._store.set_state(job_id, FAILED, ended_at=self.clock(), final=view)
                self._runners.pop(job_id, None)
            self._pool = None
            self._cond.notify_all()

    def _run(self, runner: _Runner, files: Any) -> None:
        """A job's thread: its daemon from start to end, then its outcome in the store."""
        outcome = None
        error: str | None = None
        try:
            outcome = runner.daemon.run()
        except Exception as exc:
            error = str(exc) if isinstance(exc, AutoscalerError) else repr(exc)
        state_now = getattr(runner.daemon, "state", None)
        if outcome is not None:
            state: RunState = outcome.state
            view = live_view(state, files.cfg, files.start_wall, None)
            met = True
            report = outcome.report
            if getattr(report, "jobs", None):
                met = all(j.met_deadline for j in report.jobs)
            view["met_deadline"] = met if state.deadline_mode else None
            if "interrupt" in runner.told and state.interrupted:
                ended = INTERRUPTED
            elif "cancel" in runner.told:
                ended = CANCELLED
            elif report.stop_reason is None and state.finished:
                ended = DONE
            else:
                ended = STOPPED
            self._ended_states[runner.job_id] = (state, files.start_wall, files.cfg.time_scale)
            self.outcomes[runner.job_id] = outcome
        else:
            ended = FAILED
            view = (
                live_view(state_now, files.cfg, files.start_wall, None)
                if isinstance(state_now, RunState)
                else {**_queued_view(self._store.row(runner.job_id)), **runner.view}
            )
            view["stop_reason"] = f"daemon error: {error}"
        view["history"] = runner.history
        with self._cond:
            if self.log is not None:
                self.log.info(
                    "job " + ended,
                    job=runner.job_id,
                    done=view.get("done"),
                    tasks=view.get("tasks"),
                    cost=view.get("cost"),
                    stop_reason=view.get("stop_reason"),
                )
            if ended == INTERRUPTED:
                self._store.set_state(runner.job_id, INTERRUPTED)
            else:
                self._store.set_state(runner.job_id, ended, ended_at=self.clock(), final=view)
            del self._runners[runner.job_id]
            self._cond.notify_all()
        if self.on_job_end is not None and ended != INTERRUPTED:
            with contextlib.suppress(Exception):
                self.on_job_end(self, runner.job_id)


def _for_the_service(cfg: RunConfig, max_running: int) -> RunConfig:
    """A job's config as the service runs it: its metrics are the service's, and with
    jobs side by side each dispatcher takes a free port."""
    daemon = cfg.daemon.model_copy(
        update={"metrics_port": None, **({"port": 0} if max_running > 1 else {})}
    )
    return cfg.model_copy(update={"daemon": daemon})


def _with_constraint(cfg: RunConfig, budget: float | None, deadline_s: float | None) -> RunConfig:
    """A queued job's config with a new budget or deadline."""
    new = {k: v for k, v in (("budget", budget), ("deadline_s", deadline_s)) if v is not None}
    data = cfg.model_dump(mode="json")
    if cfg.jobs:
        for job in data["jobs"]:
            job["constraint"].update(new)
    else:
        data["constraint"].update(new)
    return RunConfig.model_validate(data)

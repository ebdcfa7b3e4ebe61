"""The service's store: its jobs in SQLite, journaled before they are acknowledged.

A job is one row (its config, tasks, state, run directory, and once it ends what it
showed last); every update and cancellation is a row of ``updates``. Writes are WAL with
``synchronous=FULL``: a job acknowledged is on disk. A job's deadline is kept as an
absolute wall-clock time (``deadline_at``), fixed when it is submitted: a job that
waits in the queue keeps the user's deadline. A job records the user who submitted it
(``user``); a store from before users has none, and its jobs are ``admin``'s
(``service.users``).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import sqlite3
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autoscaler.config.schema import RunConfig
from autoscaler.config.work import DEFAULT_PROJECT
from autoscaler.core.errors import AutoscalerError
from autoscaler.core.model import TaskSpec
from autoscaler.core.task_json import task_extra, task_of
from autoscaler.service.job_states import JobState

DB_FILE = "service.db"
FIRST_USER = "admin"
"""Whose the jobs of a store from before users are: the state directory's own token's
user (``service.users.ADMIN``)."""


class JobNotFound(AutoscalerError):
    code = "JobNotFound"


class DeadlinePassed(AutoscalerError):
    """A queued job's deadline passed before it could start."""

    code = "DeadlinePassed"


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
CREATE TABLE IF NOT EXISTS job_tasks (
    job TEXT NOT NULL,
    idx INTEGER NOT NULL,
    command TEXT,
    env TEXT,
    extra TEXT,
    PRIMARY KEY (job, idx)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS app_runs (
    app TEXT NOT NULL,
    type TEXT NOT NULL,
    count REAL NOT NULL,
    total REAL NOT NULL,
    squares REAL NOT NULL,
    PRIMARY KEY (app, type)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS updates (
    seq INTEGER PRIMARY KEY,
    job TEXT NOT NULL,
    t REAL NOT NULL,
    kind TEXT NOT NULL,
    data TEXT NOT NULL
);
"""

_COLUMNS_ADDED = {
    "deadline_at": "REAL",
    "task_times": "TEXT",
    "project": "TEXT",
    "user": "TEXT",
}
"""Columns later than the first schema, added to a store that lacks them."""


@dataclass(frozen=True)
class JobRow:
    """One job as the store holds it."""

    id: str
    name: str
    submitted_at: float  # wall clock, epoch seconds
    state: JobState
    config: RunConfig
    n_tasks: int
    run_dir: Path
    started_at: float | None
    ended_at: float | None
    final: dict[str, Any] | None  # what it showed when it ended (a view's JSON)
    run_id: str | None  # given at submission (`autoscaler run`), else made at its start
    seed: int | None  # likewise; None: the config's
    in_pool: bool
    deadline_at: float | None  # wall clock, fixed at submission; None: no single deadline
    task_times: dict[str, Any] | None = None  # its task_s from the store's memory (app_runs)
    project: str = DEFAULT_PROJECT  # the project its money is charged to (older jobs: default)
    user: str = FIRST_USER  # who submitted it


def deadline_s_of(cfg: RunConfig) -> float | None:
    """A job's one deadline, run seconds from its start (None: it has none, or several
    jobs with deadlines of their own)."""
    if cfg.jobs:
        if len(cfg.jobs) > 1:
            return None
        job = cfg.jobs[0]
        return None if job.constraint.deadline_s is None else job.at + job.constraint.deadline_s
    return cfg.constraint.deadline_s if cfg.constraint is not None else None


def deadline_at_of(cfg: RunConfig, now: float) -> float | None:
    """The wall-clock time of a job's one deadline, for a job submitted at ``now``."""
    deadline_s = deadline_s_of(cfg)
    return None if deadline_s is None else now + deadline_s / cfg.time_scale


def lock_state_dir(lock_file: Path) -> int:
    """Take a state directory for this process (one service each): the lock file's
    descriptor, held until it is closed, with this process's id in it."""
    fd = os.open(lock_file, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        other = os.pread(fd, 32, 0).decode(errors="replace").strip()
        os.close(fd)
        raise AutoscalerError(
            f"{lock_file.parent}: another service runs here (pid {other or '?'})"
        ) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


class Store:
    """The service's jobs in SQLite (WAL, synchronous FULL): a write returns once it is
    on disk. One connection, used under a lock by every thread."""

    def __init__(self, path: Path, *, read_only: bool = False, untouched: bool = False) -> None:
        """``read_only``: the store of a service that is not running (``jobs``), read as
        it was left, with nothing created or changed. ``untouched`` (read only): not even
        SQLite's shared-memory and log files beside it, when no log is there (a service
        that is not running; a dry run reads the memory of a user's service so)."""
        self._lock = threading.Lock()
        if read_only:
            still = untouched and not path.with_name(f"{path.name}-wal").exists()
            self._db = sqlite3.connect(
                f"{path.resolve().as_uri()}?mode=ro{'&immutable=1' if still else ''}",
                uri=True,
                check_same_thread=False,
            )
            have = {r[1] for r in self._db.execute("PRAGMA table_info(jobs)")}
            self._added = {c: c if c in have else "NULL" for c in _COLUMNS_ADDED}
            return
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        with self._lock:
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
            self._db.executescript(_SCHEMA)
            have = {r[1] for r in self._db.execute("PRAGMA table_info(jobs)")}
            for column, kind in _COLUMNS_ADDED.items():
                if column not in have:
                    self._db.execute(f"ALTER TABLE jobs ADD COLUMN {column} {kind}")
            if "extra" not in {r[1] for r in self._db.execute("PRAGMA table_info(job_tasks)")}:
                self._db.execute("ALTER TABLE job_tasks ADD COLUMN extra TEXT")
        self._added = {c: c for c in _COLUMNS_ADDED}

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
        user: str = FIRST_USER,
    ) -> str:
        """Journal a new job submitted at ``now`` (its deadline fixed then) by ``user``;
        its id (``j1``, ``j2``, ...). ``run_id`` and ``seed``, when given, are its run's."""
        config = cfg.model_dump_json()
        with self._tx() as db:
            (seq,) = db.execute("SELECT COALESCE(MAX(seq), 0) + 1 FROM jobs").fetchone()
            job_id = f"j{seq}"
            db.execute(
                "INSERT INTO jobs (seq, id, name, submitted_at, state, config, tasks, n_tasks, "
                "run_dir, run_id, seed, deadline_at, project, user) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    seq,
                    job_id,
                    name,
                    now,
                    JobState.QUEUED.value,
                    config,
                    "",  # the tasks are rows of job_tasks (a store before them kept JSON here)
                    len(tasks),
                    str(run_dir(job_id)),
                    run_id,
                    seed,
                    deadline_at_of(cfg, now),
                    cfg.project_name,
                    user,
                ),
            )
            # One row a task, streamed: the bag is never held a second time as one text.
            db.executemany(
                "INSERT INTO job_tasks (job, idx, command, env, extra) VALUES (?, ?, ?, ?, ?)",
                (
                    (
                        job_id,
                        i,
                        t.command,
                        json.dumps(dict(t.env)) if t.env else None,
                        json.dumps(extra) if (extra := task_extra(t)) else None,
                    )
                    for i, t in enumerate(tasks)
                ),
            )
        return job_id

    def set_state(self, job_id: str, state: JobState, **fields: Any) -> None:
        cols = ", ".join(f"{k} = ?" for k in fields)
        values = [json.dumps(v) if k == "final" else v for k, v in fields.items()]
        with self._tx() as db:
            db.execute(
                f"UPDATE jobs SET state = ?{', ' + cols if cols else ''} WHERE id = ?",
                (state.value, *values, job_id),
            )

    def set_config(self, job_id: str, cfg: RunConfig, deadline_at: float | None) -> None:
        """A queued job's new config and deadline (an update before it started)."""
        with self._tx() as db:
            db.execute(
                "UPDATE jobs SET config = ?, deadline_at = ? WHERE id = ?",
                (cfg.model_dump_json(), deadline_at, job_id),
            )

    def set_task_times(self, job_id: str, cfg: RunConfig, note: dict[str, Any]) -> None:
        """A queued job's config with task times from memory, and where they came from."""
        with self._tx() as db:
            db.execute(
                "UPDATE jobs SET config = ?, task_times = ? WHERE id = ?",
                (cfg.model_dump_json(), json.dumps(note), job_id),
            )

    def remember(self, app: str, runs: dict[str, list[float]]) -> None:
        """Add runs of ``app``'s tasks per machine type (count, sum, sum of squares)."""
        with self._tx() as db:
            db.executemany(
                "INSERT INTO app_runs (app, type, count, total, squares) VALUES (?, ?, ?, ?, ?) "
                "ON CONFLICT (app, type) DO UPDATE SET count = count + excluded.count, "
                "total = total + excluded.total, squares = squares + excluded.squares",
                ((app, t, *r) for t, r in runs.items() if r[0] > 0),
            )

    def remembered(self, app: str) -> dict[str, list[float]]:
        """What ``app``'s tasks took per machine type: (count, sum, sum of squares)."""
        with self._lock:
            rows = self._db.execute(
                "SELECT type, count, total, squares FROM app_runs WHERE app = ?", (app,)
            ).fetchall()
        return {t: [n, total, squares] for t, n, total, squares in rows}

    def memory(self) -> dict[str, dict[str, list[float]]]:
        """Every application's remembered runs (``remembered``), to start another
        memory from (a dry run's, ``autoscaler run SERVICE --dry-run --memory``)."""
        with self._lock:
            rows = self._db.execute(
                "SELECT app, type, count, total, squares FROM app_runs ORDER BY app, type"
            ).fetchall()
        out: dict[str, dict[str, list[float]]] = {}
        for app, t, n, total, squares in rows:
            out.setdefault(app, {})[t] = [n, total, squares]
        return out

    def log_update(self, job_id: str, now: float, kind: str, data: dict[str, Any]) -> None:
        with self._tx() as db:
            db.execute(
                "INSERT INTO updates (job, t, kind, data) VALUES (?, ?, ?, ?)",
                (job_id, now, kind, json.dumps(data)),
            )

    def updates(self, kind: str) -> list[tuple[str, float, dict[str, Any]]]:
        """Every logged update of ``kind``, oldest first: (job, time, data)."""
        with self._lock:
            rows = self._db.execute(
                "SELECT job, t, data FROM updates WHERE kind = ? ORDER BY seq", (kind,)
            ).fetchall()
        return [(job, t, json.loads(data)) for job, t, data in rows]

    def rows(self, where: str = "", args: tuple[Any, ...] = (), limit: int = -1) -> list[JobRow]:
        with self._lock:
            cur = self._db.execute(
                "SELECT id, name, submitted_at, state, config, n_tasks, run_dir, started_at, "
                f"ended_at, final, run_id, seed, in_pool, {self._added['deadline_at']}, "
                f"{self._added['task_times']}, {self._added['project']}, "
                f"{self._added['user']} "
                f"FROM jobs {where} ORDER BY seq LIMIT ?",
                (*args, limit),
            )
            raw = cur.fetchall()
        return [
            JobRow(
                r[0],
                r[1],
                r[2],
                JobState(r[3]),
                RunConfig.model_validate_json(r[4]),
                r[5],
                Path(r[6]),
                r[7],
                r[8],
                None if r[9] is None else json.loads(r[9]),
                r[10],
                r[11],
                bool(r[12]),
                r[13],
                None if r[14] is None else json.loads(r[14]),
                r[15] or DEFAULT_PROJECT,
                r[16] or FIRST_USER,
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
            if text:  # a job stored before job_tasks: its tasks as one JSON list
                items = [
                    (item[0], item[1]) if isinstance(item, list) else (item, {})
                    for item in json.loads(text)
                ]
                return [TaskSpec(i, command, env) for i, (command, env) in enumerate(items)]
            have = {r[1] for r in self._db.execute("PRAGMA table_info(job_tasks)")}
            extra = "extra" if "extra" in have else "NULL"  # a store read as it was left
            rows = self._db.execute(
                f"SELECT command, env, {extra} FROM job_tasks WHERE job = ? ORDER BY idx",
                (job_id,),
            )
            return [
                task_of(i, command, json.loads(env) if env else {}, json.loads(more or "{}"))
                for i, (command, env, more) in enumerate(rows)
            ]

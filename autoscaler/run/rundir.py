"""A run's directory: what it holds, who holds it, and the state its journal left.

A run directory holds the config, the tasks, the agents' token (mode 0600), the journal
and the outputs; ``RunFiles`` reads and writes them alike for a new run and a resumed one.
It holds the directory as an absolute path, resolved once against the working directory
the run starts in: what is built from it (a batch job's log and working directory, an
agent's token file) means the same wherever it is read, as the scheduler runs a job in
another directory than ours.
The tasks file holds the config's tasks, then those of jobs added to a live pool
(``JobAdded``), each line of those naming its job. An added job's tasks are written
before its event is journaled, and the journal is the truth: lines no journaled job owns
(a daemon killed between the two) are dropped when a daemon resumes the run.
One daemon holds the directory at a time (``run_lock``, an flock that dies with its
holder), and ``daemon_alive`` asks who does.
Whom the run's machines are charged to (``CostTags``: its project, job and user) is
fixed when the run is made and kept in the journal's facts, so a resumed run tags its
machines as the first daemon did.
"""

from __future__ import annotations

import contextlib
import fcntl
import getpass
import json
import os
import secrets
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml

from autoscaler.config.schema import RunConfig
from autoscaler.core.atomic import write_atomic
from autoscaler.core.errors import AutoscalerError
from autoscaler.core.journal import JOURNAL_DB, SqliteJournal, replay
from autoscaler.core.model import TaskSpec
from autoscaler.core.state import RunState
from autoscaler.core.task_json import task_extra, task_of
from autoscaler.providers.cost_tags import CostTags
from autoscaler.run.assemble import CONFIG_FILE, new_state, write_config
from autoscaler.run.results import JOURNALED_META

TOKEN_FILE = "token"
TASKS_FILE = "tasks.jsonl"
OUTPUTS_FILE = "outputs.jsonl"
LOCK_FILE = "daemon.lock"


@dataclass
class RunFiles:
    """What a run directory holds, for a new run and for a resumed one alike."""

    run_dir: Path  # absolute (``create``, ``open``)
    run_id: str
    cfg: RunConfig
    tasks: list[TaskSpec]
    token: str
    seed: int
    start_wall: float  # time.time() at run time 0
    cost_tags: CostTags  # whom the run's machines are charged to
    address: tuple[str, int] | None = None  # the dispatcher's, once bound
    config_tasks: int = -1  # how many of ``tasks`` the config gives (-1: all of them)

    def __post_init__(self) -> None:
        if self.config_tasks < 0:
            self.config_tasks = len(self.tasks)

    @classmethod
    def create(
        cls,
        cfg: RunConfig,
        tasks: Sequence[TaskSpec],
        run_dir: Path,
        run_id: str,
        seed: int,
        cost_tags: CostTags | None = None,
    ) -> RunFiles:
        """A new run's directory written; ``cost_tags``: whom its machines are charged
        to (None: ``own_cost_tags``, the config's project and name, the OS user)."""
        run_dir = run_dir.absolute()
        run_dir.mkdir(parents=True, exist_ok=True)
        if (run_dir / JOURNAL_DB).exists():
            raise AutoscalerError(f"{run_dir} already holds a run: use --resume {run_dir}")
        token = secrets.token_urlsafe(32)
        charged = cost_tags or own_cost_tags(cfg)
        files = cls(run_dir, run_id, cfg, list(tasks), token, seed, time.time(), charged)
        # The journal first, holding the run's facts: a run killed at any point after
        # this is one ``--resume`` can name (or says what it lacks), and the tasks file,
        # written whole and last, shows the directory complete.
        journal = SqliteJournal(run_dir / JOURNAL_DB)
        try:
            journal.set_meta(**{JOURNALED_META: 1}, **files.journal_meta())
        finally:
            journal.close()
        write_config(cfg, run_dir)
        fd = os.open(run_dir / TOKEN_FILE, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(token)
        write_atomic(run_dir / TASKS_FILE, _task_lines(tasks))
        return files

    @classmethod
    def open(cls, run_dir: Path) -> RunFiles:
        run_dir = run_dir.absolute()
        if not (run_dir / JOURNAL_DB).is_file():
            raise AutoscalerError(f"{run_dir}: no {JOURNAL_DB} here; is it a real run's directory?")
        try:
            data = yaml.safe_load((run_dir / CONFIG_FILE).read_text(encoding="utf-8"))
            cfg = RunConfig.model_validate(data)
            with (run_dir / TASKS_FILE).open(encoding="utf-8") as f:
                # A line being appended (an added job) counts once it is whole.
                lines = [json.loads(line) for line in f if line.endswith("\n")]
            tasks = [task_of(int(d["id"]), d["command"], d.get("env") or {}, d) for d in lines]
            token = (run_dir / TOKEN_FILE).read_text(encoding="utf-8").strip()
        except (OSError, ValueError, KeyError) as exc:
            raise AutoscalerError(f"{run_dir}: cannot read the run ({exc})") from None
        journal = SqliteJournal(run_dir / JOURNAL_DB)
        try:
            meta = journal.meta()
        finally:
            journal.close()
        try:
            address = (str(meta["host"]), int(meta["port"])) if "port" in meta else None
            return cls(
                run_dir,
                str(meta["run_id"]),
                cfg,
                tasks,
                token,
                int(meta["seed"]),
                float(meta["start_wall"]),
                _cost_tags(meta) or own_cost_tags(cfg),
                address,
                sum(1 for d in lines if "job" not in d),
            )
        except KeyError as exc:
            raise AutoscalerError(f"{run_dir}: the journal lacks {exc}") from None

    def journal_meta(self) -> dict[str, str | float | int]:
        """What ``open`` reads back from the journal (the dispatcher's address once bound)."""
        meta: dict[str, str | float | int] = {
            "run_id": self.run_id,
            "seed": self.seed,
            "start_wall": self.start_wall,
        }
        if self.address is not None:
            meta.update(host=self.address[0], port=self.address[1])
        tags = self.cost_tags
        meta.update(cost_project=tags.project, cost_job=tags.job, cost_user=tags.user)
        return {**meta, "time_scale": self.cfg.time_scale, "n_tasks": len(self.tasks)}

    def add_tasks(self, job: str, tasks: Sequence[TaskSpec]) -> None:
        """Append job ``job``'s ``tasks`` (numbered on from the last) to the tasks file,
        synced, before the job is journaled."""
        if [t.id for t in tasks] != list(range(len(self.tasks), len(self.tasks) + len(tasks))):
            raise AutoscalerError(f"job {job!r}: its tasks must be numbered from {len(self.tasks)}")
        with (self.run_dir / TASKS_FILE).open("a", encoding="utf-8") as f:
            f.write(_task_lines(tasks, job))
            f.flush()
            os.fsync(f.fileno())
        self.tasks.extend(tasks)

    def keep_tasks(self, n_tasks: int) -> None:
        """Drop the tasks from ``n_tasks`` on, written for a job the journal never took
        (only the daemon holding the run may: a reader could see a job being added)."""
        if len(self.tasks) < n_tasks:
            raise AutoscalerError(
                f"{self.run_dir}: the journal knows {n_tasks} tasks, {TASKS_FILE} {len(self.tasks)}"
            )
        if len(self.tasks) == n_tasks:
            return
        path = self.run_dir / TASKS_FILE
        with path.open(encoding="utf-8") as f:
            lines = f.readlines()[:n_tasks]
        write_atomic(path, "".join(lines))
        del self.tasks[n_tasks:]


def os_user() -> str:
    """Who runs this process, as the OS says (``unknown`` where it cannot tell)."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no USER, LOGNAME... and no passwd entry for the uid
        return "unknown"


def own_cost_tags(cfg: RunConfig) -> CostTags:
    """Whom a run started by hand is charged to: its config's project, its name, and
    the OS user who started it."""
    return CostTags(cfg.project_name, cfg.name, os_user())


def _cost_tags(meta: dict[str, object]) -> CostTags | None:
    """The cost tags a run's journal keeps (None: a run made before it kept them)."""
    keys = ("cost_project", "cost_job", "cost_user")
    if not all(k in meta for k in keys):
        return None
    return CostTags(*(str(meta[k]) for k in keys))


def _task_lines(tasks: Sequence[TaskSpec], job: str | None = None) -> str:
    """Tasks as lines of the tasks file; those of an added job name it. Each keeps its
    timeout, what it needs and its files (``task_extra``): a resumed run's tasks (and its
    report's categories) are the ones it started with."""
    out = []
    for t in tasks:
        line: dict[str, object] = {"id": t.id, "command": t.command, "env": dict(t.env)}
        line.update(task_extra(t))
        if job is not None:
            line["job"] = job
        out.append(json.dumps(line) + "\n")
    return "".join(out)


def rebuild_state(files: RunFiles, journal: SqliteJournal) -> RunState:
    """The run's state as its journal left it: the config's tasks, and the jobs added
    since (``JobAdded``). Read-only: a resuming daemon drops tasks the journal never took
    (``RunFiles.keep_tasks``)."""
    state = new_state(files.cfg, files.config_tasks, files.seed)
    replay(state, journal.records())
    return state


def made(run_dir: Path) -> bool:
    """Whether ``run_dir`` holds a run whose making was finished: its journal, and its
    tasks file, which ``RunFiles.create`` writes whole and last. A start killed before
    that launched nothing and spent nothing: whoever started it begins again."""
    return (run_dir / JOURNAL_DB).is_file() and (run_dir / TASKS_FILE).is_file()


def read_run(run_dir: Path) -> tuple[RunFiles, RunState]:
    """A run directory's files and the state its journal holds (read only: a live
    daemon may be writing it)."""
    files = RunFiles.open(run_dir)
    journal = SqliteJournal(run_dir / JOURNAL_DB)
    try:
        return files, rebuild_state(files, journal)
    finally:
        journal.close()


@contextlib.contextmanager
def run_lock(run_dir: Path) -> Iterator[None]:
    """Hold the run directory: one daemon per run (the lock dies with its holder)."""
    path = run_dir / LOCK_FILE
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            other = os.pread(fd, 32, 0).decode(errors="replace").strip()
            raise AutoscalerError(
                f"{run_dir}: another daemon runs this run (pid {other or '?'})"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield
    finally:
        os.close(fd)


def daemon_alive(run_dir: Path) -> int | None:
    """The pid of the daemon holding ``run_dir``, if one does."""
    path = run_dir / LOCK_FILE
    if not path.exists():
        return None
    fd = os.open(path, os.O_RDONLY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            text = os.pread(fd, 32, 0).decode(errors="replace").strip()
            return int(text) if text.isdigit() else -1
        return None
    finally:
        os.close(fd)

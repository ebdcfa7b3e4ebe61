"""The service's deadline pool: one long-lived deadline-mode run that every deadline job
without a budget of its own joins, so those jobs share machines as the multi-job
planner decides (paper 002 §IV: a job that arrives is planned first onto the machines
already running, without extending their paid time, then machines are bought).

The pool is a keep-open run (``deadline.keep_open``) in ``<state dir>/pool``. The first
such job makes it, as its config's one job; later ones join it with ``Daemon.add_job``
(journaled as ``JobAdded``). Inside the pool a job is named by its service job id. A job
ends when each of its tasks is done or failed; its report (``jobs/<id>/report.json``)
is its line of the pool's per-job report: deadline, finish, lateness, and the cost
attributed to it (``core.cost_shares``: each billing step of a machine shared by the
seconds it ran the jobs that were there when it began).
A job cancelled by its user is withdrawn from the run (``JobWithdrawn``): its queued and
running tasks are cancelled, the other jobs are planned again, and its report says what
it cost up to then.

A job with a budget keeps its own run: a budget is only held for sure on machines that
no other job draws on.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autoscaler.config.schema import RunConfig
from autoscaler.core.errors import AutoscalerError
from autoscaler.core.model import JobSpec, JobWithdrawn, TaskSpec, TaskState
from autoscaler.core.state import RunState
from autoscaler.core.words import counted
from autoscaler.service.job_tags import pool_cost_tags
from autoscaler.service.memory import application, job_runs, said
from autoscaler.service.store import DeadlinePassed, JobRow, deadline_at_of
from autoscaler.service.view import Clock, HistoryPoint, Progress, progress

if TYPE_CHECKING:
    from autoscaler.run.daemon import Daemon
    from autoscaler.run.rundir import RunFiles

POOL_DIR = "pool"

JobEnded = Callable[[str, Progress, list[HistoryPoint], bool], None]
"""Told when a pool job's every task is done or failed, or it was withdrawn: its id, last
view, history, and whether it was cancelled."""


def shares_the_pool(cfg: RunConfig) -> bool:
    """A deadline job with no budget of its own, one job: it joins the pool. Not one
    with task files (``files:``): the pool's added tasks carry only their commands, so
    its inputs and outputs would be lost there; it keeps a run of its own."""
    if any(job.bag.files is not None for job in cfg.deadline_jobs()):
        return False
    return cfg.deadline_mode and cfg.constraint.budget is None and len(cfg.jobs) <= 1


def _task_s(cfg: RunConfig) -> dict[str, float]:
    return dict(cfg.jobs[0].task_s) if cfg.jobs else {}


def pool_spec(cfg: RunConfig, name: str, count: int, deadline: float) -> JobSpec:
    """A job of ``count`` tasks joining the running pool as ``name``, due at run time
    ``deadline``: its known task times (its own, or from memory) and its application.
    The pool numbers its tasks and sets when it arrived."""
    return JobSpec(
        name=name,
        first=0,
        count=count,
        at=0.0,
        deadline=deadline,
        budget=None,
        task_s=_task_s(cfg),
        app=application(cfg) or "",
    )


POOL_HOLDER = "pool"
"""The deadline pool's name where the jobs' are their ids: in the quota ledger, and
first in its machines' names."""


def pool_config(cfg: RunConfig, job_id: str) -> RunConfig:
    """The pool's run config, made from its first job's: that job, named by its id, in
    the jobs form, and the run kept open."""
    data = cfg.model_dump(mode="json")
    job = data["jobs"][0] if cfg.jobs else {"bag": data["bag"], "constraint": data["constraint"]}
    job["app"] = application(cfg)
    job["name"] = job_id
    job["at"] = 0.0
    data.update(name="pool", jobs=[job], bag=None, constraint=None)
    data["deadline"] = {**data["deadline"], "keep_open": True}
    return RunConfig.model_validate(data)


@dataclass
class Pool:
    """The pool's daemon and the service jobs in it. ``clock`` is the service's wall
    clock, ``row`` reads a job's row, ``ended`` is told when a job's tasks are all done."""

    files: RunFiles
    clock: Callable[[], float]
    row: Callable[[str], JobRow]
    ended: JobEnded
    daemon: Daemon | None = None
    jobs: set[str] = field(default_factory=set)
    thread: threading.Thread | None = None
    views: dict[str, Progress] = field(default_factory=dict)
    histories: dict[str, list[HistoryPoint]] = field(default_factory=dict)
    remember: Callable[[str, dict[str, list[float]]], None] | None = None  # runs per app
    _last_point: float = 0.0

    @property
    def run_dir(self) -> Path:
        return self.files.run_dir

    @property
    def run_clock(self) -> Clock:
        return Clock(self.files.start_wall, self.files.cfg.time_scale)

    def run_time(self, wall: float) -> float:
        """The pool's run time (emulated seconds) at wall-clock time ``wall``."""
        return (wall - self.files.start_wall) * self.files.cfg.time_scale

    def add(self, row: JobRow, tasks: list[TaskSpec]) -> None:
        """Join a job to the running pool, with the deadline fixed when it was
        submitted; raises if the pool refuses it."""
        assert self.daemon is not None
        cfg = row.config
        deadline_at = row.deadline_at or deadline_at_of(cfg, row.submitted_at)
        assert deadline_at is not None, "a pool job has a deadline"
        if deadline_at <= self.clock():
            raise DeadlinePassed("its deadline passed while it was queued")
        spec = pool_spec(cfg, row.id, len(tasks), self.run_time(deadline_at))
        self.retag(row)
        self.daemon.add_job(spec, tasks).result(timeout=120)

    def retag(self, joining: JobRow | None = None) -> None:
        """Charge the pool's launches to what its jobs (and ``joining``) have in common
        (``job_tags``); with no job, they keep what they said."""
        rows = [self.row(j) for j in sorted(self.jobs) if joining is None or j != joining.id]
        if joining is not None:
            rows.append(joining)
        if rows and self.daemon is not None:
            self.daemon.retag(pool_cost_tags(rows))

    def withdraw(self, job_id: str) -> None:
        """Withdraw a job from the running pool (a user's cancel); it ends, cancelled,
        once the pool's daemon has folded the withdrawal (``progress``)."""
        assert self.daemon is not None
        self.daemon.tell(JobWithdrawn(job_id, "cancelled by the user"))

    # --- what the pool's daemon shows, per job ---------------------------------------

    def progress(self, state: RunState, estimate: float | None) -> None:
        """The pool daemon's progress hook: each job's view; a job whose every task is
        done or failed ends, and so does a job withdrawn (cancelled)."""
        now = self.clock()
        point = now - self._last_point >= 1.0
        if point:
            self._last_point = now
        ended: list[tuple[str, bool]] = []  # (job, cancelled)
        views = job_views(state, self.files.cfg, self.run_clock, self.run_dir, list(self.jobs))
        for job_id, view in views.items():
            job = state.work.job_named(job_id)
            if job_id in state.work.withdrawn:
                view = view.stopped("cancelled by the user")
            self.views[job_id] = view
            if point:
                history = self.histories.setdefault(job_id, [])
                history.append((round(now, 3), view.done, view.cost))
            if view.done + view.failed == job.count:
                ended.append((job_id, False))
            elif job_id in state.work.withdrawn:
                ended.append((job_id, True))
        for job_id, cancelled in ended:
            self._end(job_id, state, cancelled)

    def _end(self, job_id: str, state: RunState, cancelled: bool = False) -> None:
        from autoscaler.report.attribution import job_outcomes

        outcomes, _ = job_outcomes(state)
        outcome = next(o for o in outcomes if o.name == job_id)
        if self.remember is not None:
            self.remember(*job_runs(state, job_id))
        view = replace(self.views[job_id], met_deadline=outcome.met_deadline)
        row = self.row(job_id)
        report = {
            "job": job_id,
            "name": row.name,
            "mode": "deadline",
            "shared_run": str(self.run_dir),
            "tasks_total": outcome.tasks,
            "tasks_done": outcome.done,
            "tasks_failed": outcome.failed,
            "cost": outcome.cost,
            "outcome": _jsonable(outcome),
        }
        if row.task_times is not None:
            report["task_times_from"] = row.task_times
        if cancelled:
            job = state.work.job_named(job_id)
            ids = range(job.first, job.first + job.count)
            report["tasks_cancelled"] = sum(
                state.tasks.task_state[t] is TaskState.CANCELLED for t in ids
            )
            report["cancelled_at"] = self.run_clock.wall(state.work.withdrawn[job_id])
        row.run_dir.mkdir(parents=True, exist_ok=True)
        (row.run_dir / "report.json").write_text(json.dumps(report, indent=2) + "\n")
        text = _markdown(row.name, job_id, outcome, self.run_dir)
        if row.task_times is not None:
            text += f"\nIt started from the {said(row.task_times)}.\n"
        if cancelled:
            text = _cancelled_markdown(row.name, job_id, outcome, report, self.run_dir)
        (row.run_dir / "report.md").write_text(text)
        self.jobs.discard(job_id)
        self.retag()
        self.ended(job_id, view, self.histories.get(job_id, []), cancelled)


def job_views(
    state: RunState, cfg: RunConfig, clock: Clock, run_dir: Path, job_ids: Iterable[str]
) -> dict[str, Progress]:
    """Each of ``job_ids`` that the pool's run (``run_dir``, its ``state``) has, as its
    own view: its tasks, and the cost attributed to it."""
    from autoscaler.report.attribution import job_costs

    costs, _ = job_costs(state)
    names = {j.name for j in state.work.jobs}
    return {
        job_id: progress(
            state,
            cfg,
            clock,
            job=state.work.job_named(job_id),
            cost=costs.get(job_id, 0.0),
            pool=str(run_dir),
        )
        for job_id in job_ids
        if job_id in names
    }


def _jsonable(outcome: Any) -> dict[str, Any]:
    import dataclasses

    data: dict[str, Any] = json.loads(json.dumps(dataclasses.asdict(outcome), default=str))
    return data


def _markdown(name: str, job_id: str, o: Any, run_dir: Path) -> str:
    met = (
        "met its deadline"
        if o.met_deadline
        else f"missed its deadline ({counted(o.tasks_late, 'task')} late)"
    )
    return (
        f"# Job {job_id} ({name})\n\n"
        f"A deadline job in the service's shared pool ({run_dir}): {o.done} of "
        f"{counted(o.tasks, 'task')} done, {o.failed} failed; it {met}. "
        f"Finish {o.finish_s} s, deadline {o.deadline_s} s (pool run time). "
        f"Cost attributed: {o.cost:.4f}"
        + (f" (forecast {o.predicted_cost:.4f})" if o.predicted_cost is not None else "")
        + ".\n\nThe pool's own report, Gantt and journal are in its run directory.\n"
    )


def _cancelled_markdown(
    name: str, job_id: str, o: Any, report: dict[str, Any], run_dir: Path
) -> str:
    return (
        f"# Job {job_id} ({name})\n\n"
        f"A deadline job in the service's shared pool ({run_dir}), cancelled by the user "
        f"at {report['cancelled_at']} (epoch seconds): {o.done} of "
        f"{counted(o.tasks, 'task')} done, "
        f"{o.failed} failed, {report['tasks_cancelled']} cancelled. "
        f"Cost up to then: {o.cost:.4f}.\n\n"
        "The pool's own report, Gantt and journal are in its run directory.\n"
    )


class PoolRefused(AutoscalerError):
    code = "PoolRefused"

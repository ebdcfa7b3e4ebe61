"""The service's deadline pool: one long-lived deadline-mode run that every deadline job
without a budget of its own joins, so those jobs share machines as the multi-job
planner decides (paper 002 §IV: a job that arrives is planned first onto the machines
already running, without extending their paid time, then machines are bought).

The pool is a keep-open run (``deadline.keep_open``) in ``<state dir>/pool``. The first
such job makes it, as its config's one job; later ones join it with ``Daemon.add_job``
(journaled as ``JobAdded``). Inside the pool a job is named by its service job id. A job
ends when each of its tasks is done or failed; its report (``jobs/<id>/report.json``)
is its line of the pool's per-job report: deadline, finish, lateness, and the cost
attributed to it (each machine's cost shared by the seconds it ran each job's tasks).
A job cancelled by its user is withdrawn from the run (``JobWithdrawn``): its queued and
running tasks are cancelled, the other jobs are planned again, and its report says what
it cost up to then.

A job with a budget keeps its own run: a budget is only held for sure on machines that
no other job draws on.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autoscaler.config.schema import RunConfig
from autoscaler.core.errors import AutoscalerError
from autoscaler.core.model import JobSpec, JobWithdrawn, TaskState
from autoscaler.core.state import RunState

if TYPE_CHECKING:
    from autoscaler.run.rundir import RunFiles
    from autoscaler.service.service import JobRow, Service

POOL_DIR = "pool"


def shares_the_pool(cfg: RunConfig) -> bool:
    """A deadline job with no budget of its own, one job: it joins the pool."""
    return cfg.deadline_mode and cfg.constraint.budget is None and len(cfg.jobs) <= 1


def _deadline_s(cfg: RunConfig) -> float:
    deadline = cfg.jobs[0].constraint.deadline_s if cfg.jobs else cfg.constraint.deadline_s
    assert deadline is not None
    return deadline


def _task_s(cfg: RunConfig) -> dict[str, float]:
    return dict(cfg.jobs[0].task_s) if cfg.jobs else {}


def pool_config(cfg: RunConfig, job_id: str) -> RunConfig:
    """The pool's run config, made from its first job's: that job, named by its id, in
    the jobs form, and the run kept open."""
    data = cfg.model_dump(mode="json")
    job = data["jobs"][0] if cfg.jobs else {"bag": data["bag"], "constraint": data["constraint"]}
    job["name"] = job_id
    job["at"] = 0.0
    data.update(name="pool", jobs=[job], bag=None, constraint=None)
    data["deadline"] = {**data["deadline"], "keep_open": True}
    return RunConfig.model_validate(data)


@dataclass
class Pool:
    """The pool's daemon and the service jobs in it."""

    service: Service
    files: RunFiles
    daemon: Any
    jobs: set[str] = field(default_factory=set)
    thread: threading.Thread | None = None
    views: dict[str, dict[str, Any]] = field(default_factory=dict)
    histories: dict[str, list[list[float]]] = field(default_factory=dict)
    _last_point: float = 0.0

    @property
    def run_dir(self) -> Path:
        return self.files.run_dir

    def wall(self, t: float | None) -> float | None:
        if t is None:
            return None
        return round(self.files.start_wall + t / self.files.cfg.time_scale, 3)

    def add(self, row: JobRow, tasks: list[Any]) -> None:
        """Join a job to the running pool; raises if the pool refuses it."""
        cfg = row.config
        spec = JobSpec(
            name=row.id,
            first=0,
            count=len(tasks),
            at=0.0,
            deadline=self.daemon.now() + _deadline_s(cfg),
            budget=None,
            task_s=_task_s(cfg),
        )
        self.daemon.add_job(spec, tasks).result(timeout=120)

    def withdraw(self, job_id: str) -> None:
        """Withdraw a job from the running pool (a user's cancel); it ends, cancelled,
        once the pool's daemon has folded the withdrawal (``progress``)."""
        self.daemon.tell(JobWithdrawn(job_id, "cancelled by the user"))

    # --- what the pool's daemon shows, per job ---------------------------------------

    def progress(self, state: RunState, estimate: float | None) -> None:
        """The pool daemon's progress hook: each job's view; a job whose every task is
        done or failed ends, and so does a job withdrawn (cancelled)."""
        from autoscaler.report.attribution import job_costs

        now = self.service.clock()
        costs, _ = job_costs(state)
        point = now - self._last_point >= 1.0
        if point:
            self._last_point = now
        ended: list[tuple[str, bool]] = []  # (job, cancelled)
        names = {j.name for j in state.jobs}
        for job_id in list(self.jobs):
            if job_id not in names:
                continue
            job = state.job_named(job_id)
            ids = range(job.first, job.first + job.count)
            states = [state.task_state[t] for t in ids]
            done = sum(s is TaskState.DONE for s in states)
            failed = sum(s is TaskState.FAILED for s in states)
            forecast = state.forecasts.get(job_id)
            machines = [
                {"id": m.id, "type": m.type.name, "state": m.state.value}
                for m in state.alive_machines()
                if any(job.owns(t) for t in (*m.queue, *m.running))
            ]
            cost = round(costs.get(job_id, 0.0), 4)
            view = {
                "mode": "deadline",
                "tasks": job.count,
                "done": done,
                "failed": failed,
                "running": sum(s is TaskState.RUNNING for s in states),
                "spend": cost,
                "cost": cost,
                "budget": None,
                "deadline_at": self.wall(job.deadline),
                "predicted_finish_at": self.wall(forecast.finish if forecast else None),
                "machines": machines,
                "stop_reason": "cancelled by the user" if job_id in state.withdrawn else None,
                "late_tasks": state.late[job_id].tasks if job_id in state.late else 0,
                "pool": str(self.run_dir),
            }
            self.views[job_id] = view
            if point:
                history = self.histories.setdefault(job_id, [])
                history.append([round(now, 3), done, cost])
            if done + failed == job.count:
                ended.append((job_id, False))
            elif job_id in state.withdrawn:
                ended.append((job_id, True))
        for job_id, cancelled in ended:
            self._end(job_id, state, cancelled)

    def _end(self, job_id: str, state: RunState, cancelled: bool = False) -> None:
        from autoscaler.report.attribution import job_outcomes

        outcomes, _ = job_outcomes(state)
        outcome = next(o for o in outcomes if o.name == job_id)
        view = dict(self.views[job_id])
        view["met_deadline"] = outcome.met_deadline
        view["history"] = self.histories.get(job_id, [])
        row = self.service.store_row(job_id)
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
        if cancelled:
            job = state.job_named(job_id)
            ids = range(job.first, job.first + job.count)
            report["tasks_cancelled"] = sum(state.task_state[t] is TaskState.CANCELLED for t in ids)
            report["cancelled_at"] = self.wall(state.withdrawn[job_id])
        row.run_dir.mkdir(parents=True, exist_ok=True)
        (row.run_dir / "report.json").write_text(json.dumps(report, indent=2) + "\n")
        text = _markdown(row.name, job_id, outcome, self.run_dir)
        if cancelled:
            text = _cancelled_markdown(row.name, job_id, outcome, report, self.run_dir)
        (row.run_dir / "report.md").write_text(text)
        self.jobs.discard(job_id)
        self.service.pool_job_ended(job_id, view, cancelled=cancelled)


def _jsonable(outcome: Any) -> dict[str, Any]:
    import dataclasses

    data: dict[str, Any] = json.loads(json.dumps(dataclasses.asdict(outcome), default=str))
    return data


def _markdown(name: str, job_id: str, o: Any, run_dir: Path) -> str:
    met = "met its deadline" if o.met_deadline else f"missed its deadline ({o.tasks_late} late)"
    return (
        f"# Job {job_id} ({name})\n\n"
        f"A deadline job in the service's shared pool ({run_dir}): {o.done} of {o.tasks} "
        f"tasks done, {o.failed} failed; it {met}. Finish {o.finish_s} s, deadline "
        f"{o.deadline_s} s (pool run time). Cost attributed: {o.cost:.4f}"
        + (f" (forecast {o.predicted_cost:.4f})" if o.predicted_cost is not None else "")
        + ".\n\nThe pool's own report, Gantt and journal are in its run directory.\n"
    )


def _cancelled_markdown(
    name: str, job_id: str, o: Any, report: dict[str, Any], run_dir: Path
) -> str:
    return (
        f"# Job {job_id} ({name})\n\n"
        f"A deadline job in the service's shared pool ({run_dir}), cancelled by the user "
        f"at {report['cancelled_at']} (epoch seconds): {o.done} of {o.tasks} tasks done, "
        f"{o.failed} failed, {report['tasks_cancelled']} cancelled. "
        f"Cost up to then: {o.cost:.4f}.\n\n"
        "The pool's own report, Gantt and journal are in its run directory.\n"
    )


class PoolRefused(AutoscalerError):
    code = "PoolRefused"

"""What the daemon's owner (the service) hands a live run, let in or turned away: a
user's update or an interruption (``Told``), and jobs for a pool (``AddJob``)."""

from __future__ import annotations

from typing import Any

from autoscaler.budget.controller import Controller
from autoscaler.config.schema import JobMeans
from autoscaler.core.model import (
    BudgetSet,
    DeadlineSet,
    Event,
    Interrupted,
    JobSpec,
    JobWithdrawn,
    Shutdown,
)
from autoscaler.core.state import RunState
from autoscaler.deadline.controller import DeadlineController
from autoscaler.run.inbox import AddJob


def admit(state: RunState, event: Event, log: Any) -> list[Event]:
    """An owner's event, unless the run is past it or it does not fit the run."""
    match event:
        case BudgetSet(budget=budget) if budget < state.committed - 1e-9:
            log.warning(
                "budget update refused: below what is committed",
                budget=budget,
                committed=round(state.committed, 4),
            )
            return []
        case DeadlineSet(job=name) if name not in {j.name for j in state.jobs}:
            log.warning("deadline update refused: no such job", job=name)
            return []
        case JobWithdrawn(job=name) if name not in {j.name for j in state.jobs}:
            log.warning("withdrawal refused: no such job", job=name)
            return []
        case Interrupted() if state.stopped or state.interrupted:
            return [Shutdown(event.reason)] if not state.shutdown else []
        case Shutdown() if state.shutdown:
            return []
    log.info("told", kind=type(event).__name__, detail=repr(event))
    return [event]


def refusal(
    state: RunState,
    controller: Controller | DeadlineController,
    item: AddJob,
    batch: list[JobSpec],
    events: list[Event],
) -> str | None:
    """Why the run cannot take the job of ``item``; None if it can. ``batch``: jobs added
    in this step already; ``events``: the step's events so far."""
    names = {j.name for j in (*state.jobs, *batch)}
    if not isinstance(controller, DeadlineController):
        return "a budget-mode run takes no jobs"
    if state.stopped or state.shutdown or any(isinstance(e, Shutdown) for e in events):
        return "the run is ending"
    if item.job.name in names:
        return f"the run has a job named {item.job.name!r} already"
    if not item.tasks:
        return "a job needs at least one task"
    return None


def job_means(job: JobSpec) -> JobMeans | None:
    """An added job's mean task times, as synthetic tasks run them (its known ``task_s``)."""
    return JobMeans(job.name, dict(job.task_s)) if job.task_s else None

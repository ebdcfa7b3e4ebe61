"""What the daemon's owner (the service) hands a live run, let in or turned away: a
user's update or an interruption (``Told``), and jobs for a pool (``AddJob``)."""

from __future__ import annotations

import dataclasses
from typing import Any

from autoscaler.budget.controller import Controller
from autoscaler.categories.of_config import categories_of_tasks
from autoscaler.config.bag import task_means
from autoscaler.config.schema import JobMeans, RunConfig
from autoscaler.core.errors import AutoscalerError
from autoscaler.core.job_ledger import Jobs
from autoscaler.core.model import (
    BudgetSet,
    DeadlineSet,
    Event,
    Interrupted,
    JobAdded,
    JobSpec,
    JobWithdrawn,
    LaunchFailed,
    MachineLaunched,
    MachineLost,
    MachineReady,
    Shutdown,
)
from autoscaler.core.money_ledger import Money
from autoscaler.core.state import RunState
from autoscaler.deadline.deadline_controller import DeadlineController
from autoscaler.run.assemble import added_job
from autoscaler.run.inbox import AddJob


def admit(state: RunState, event: Event, log: Any) -> list[Event]:
    """An owner's event, unless the run is past it or it does not fit the run."""
    match event:
        case BudgetSet(budget=budget) if budget < state.money.committed - 1e-9:
            log.warning(
                "budget update refused: below what is committed",
                budget=budget,
                committed=round(state.money.committed, 4),
            )
            return []
        case DeadlineSet(job=name) if name not in {j.name for j in state.work.jobs}:
            log.warning("deadline update refused: no such job", job=name)
            return []
        case JobWithdrawn(job=name) if name not in {j.name for j in state.work.jobs}:
            log.warning("withdrawal refused: no such job", job=name)
            return []
        case Interrupted() if state.money.stopped or state.money.interrupted:
            return [Shutdown(event.reason)] if not state.money.shutdown else []
        case Shutdown() if state.money.shutdown:
            return []
    log.info("told", kind=type(event).__name__, detail=repr(event))
    return [event]


def refusal(
    money: Money,
    work: Jobs,
    controller: Controller | DeadlineController,
    item: AddJob,
    batch: list[JobSpec],
    events: list[Event],
) -> str | None:
    """Why the run cannot take the job of ``item``; None if it can. ``batch``: jobs added
    in this step already; ``events``: the step's events so far."""
    names = {j.name for j in (*work.jobs, *batch)}
    if not isinstance(controller, DeadlineController):
        return "a budget-mode run takes no jobs"
    if money.stopped or money.shutdown or any(isinstance(e, Shutdown) for e in events):
        return "the run is ending"
    if item.job.name in names:
        return f"the run has a job named {item.job.name!r} already"
    if not item.tasks:
        return "a job needs at least one task"
    return None


def pool_job(
    cfg: RunConfig,
    state: RunState,
    controller: Controller | DeadlineController,
    item: AddJob,
    batch: list[JobSpec],
    events: list[Event],
    now: float,
    seed: int,
) -> JobAdded | None:
    """The event of the job of ``item`` joining the pool, its tasks numbered after the
    run's and ``batch``'s and sorted into the run's categories (``categories_of_tasks``)
    where it has them; None, and ``item`` answered why, if the run cannot take it."""
    why = refusal(state.money, state.work, controller, item, batch, events)
    if why is not None:
        item.answer.set_exception(AutoscalerError(f"job {item.job.name!r} refused: {why}"))
        return None
    first = state.n_tasks + sum(j.count for j in batch)
    cats: tuple[int, ...] = ()
    if state.tasks.task_category and isinstance(controller, DeadlineController):
        cats = categories_of_tasks(cfg, controller.settings.categories, item.tasks)
    job = dataclasses.replace(item.job, count=len(item.tasks))
    return added_job(job, first, now, seed, cats)


def all_gone(state: RunState, why: str, *, launches: bool = False) -> list[Event]:
    """Every live machine lost for ``why`` (and, with ``launches``, every launch under way
    abandoned): what the state learns when the daemon ends them all at once."""
    events: list[Event] = [MachineLost(m.id, why) for m in state.fleet.alive_machines()]
    if launches:
        for token, (tname, count) in list(state.fleet.pending_launches.items()):
            events.append(LaunchFailed(token, tname, count, f"abandoned: {why}"))
    return events


def job_means(job: JobSpec) -> JobMeans | None:
    """An added job's mean task times, as synthetic tasks run them (its known ``task_s``)."""
    return JobMeans(job.name, dict(job.task_s)) if job.task_s else None


def all_task_means(
    cfg: RunConfig, state: RunState, n_tasks: int, config_tasks: int
) -> list[JobMeans | None]:
    """Per task, its job's mean task times as synthetic tasks run them: the config's
    (``task_means``), and for the jobs added since (numbered from ``config_tasks``), each
    one's own."""
    means = task_means(cfg, n_tasks)
    for job in state.work.jobs:
        if job.first >= config_tasks:
            means[job.first : job.first + job.count] = [job_means(job)] * job.count
    return means


def step_order(events: list[Event]) -> list[Event]:
    """A step's events in the order the state takes them: machines launched or ready
    first (before their results, as they happened), machines lost last, the rest as
    they came. A loss found in the step (a health check, the provider's word) does not
    undo a result its machine sent in the same step: the task was done, and taken
    after the loss the result was journaled but ignored, and the task ran again."""

    if not any(issubclass(kind, _MOVED) for kind in set(map(type, events))):
        return list(events)  # most steps: results, ticks, polls; nothing moves

    def rank(e: Event) -> int:
        return (
            0
            if isinstance(e, MachineLaunched | MachineReady)
            else int(isinstance(e, MachineLost)) + 1
        )

    return sorted(events, key=rank)


_MOVED = (MachineLaunched, MachineReady, MachineLost)

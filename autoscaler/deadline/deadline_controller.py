"""Deadline mode's decision core: ``DeadlineController.step(state, events, now) -> actions``.

Paper 002 (Thai, Varghese, Barker) as a controller. Jobs (``state.jobs``) arrive over
time (``JobArrived``), each with a deadline. Whenever tasks of arrived jobs are in the
bag (a job arrives, a machine is lost, a task fails), the controller plans them: it
fills the machines that run already without extending their paid time (Algorithm 1),
then buys the cheapest new machines that finish the rest in time (Algorithm 2 with the
multi-job model (7), or Algorithm 3 with the single-job model (10); ``planning``).
Tasks are queued on machines at once (``Assign``; a new machine's queue travels with
its ``Launch``), and a machine runs its queue earliest deadline first.

Every monitoring interval (``Tick``) it estimates each machine's finish times from its
queue and its observed speed and moves queued tasks off machines that would miss a
deadline onto machines with room (Algorithm 4, ``reassign``, ``watch``; ``Move``). Beyond the
paper: tasks still late after the moves are given to new machines when the deadline
(and the budget, if one is set) allows; otherwise the controller says so at once
(``Late``: the job, the tasks and seconds it expects to be late, and what gave way).

A job's known task times (``task_s``) are a prior, not a fact: plans use them blended
with the runs of the job and of earlier jobs of its application (``prior``: a conjugate
normal update), and a large, confident deviation is said once (``Learned``,
``learning``); a type learned slower moves what it makes late at once (``replan``). A
job without known task times is sampled first: each type runs ``sample`` of its tasks,
and the plan uses mean + z·σ/√n of what they took (the estimate with its uncertainty).
Machines are released at the end of a paid unit once they have no work and no job
arriving within their next unit could use them. Money: nothing is launched or extended
that the budget (the sum of the jobs' budgets, when every job has one) cannot pay; a
plan the budget cannot pay is bought in part, the rest queued where it finishes first,
and the lateness said with ``budget`` as what gave way.

A pool (``keep_open``: the service's deadline jobs) takes new jobs while it runs
(``JobAdded``: new tasks, planned at once like an arrival) and does not stop when its
work is done: its machines go as idle machines do, and it ends on ``Shutdown`` (or waits
after ``Interrupted``) only.

No clock, no I/O: the emulator and the daemon drive it exactly as the budget
controller (``budget.controller``), with whom it shares ``core.step.Step``.

``step`` reads the events and calls, in order: ``ends.at_boundary`` (money at the end of
a paid unit), ``sampling.sample``, ``planning.plan_jobs`` (with ``forecast``),
``watch.move_late`` and ``watch.watch`` (lateness), ``ends.release_idle`` and
``ends.finish_run``. A withdrawn job (``JobWithdrawn``, a user's cancel in the pool):
each of its runs gets a ``Cancel`` for its agent (``withdraw``), and what the plan in
force expects of the other jobs is said again.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from autoscaler.core.model import (
    Action,
    BoundaryNear,
    BudgetSet,
    Cancel,
    DeadlineSet,
    Event,
    JobAdded,
    JobArrived,
    JobSpec,
    JobWithdrawn,
    LaunchFailed,
    Learned,
    MachineLost,
    QuotaSet,
    RebalanceRecommended,
    Release,
    Resumed,
    Shutdown,
    Stop,
    TaskDone,
    TaskFailed,
    Tick,
)
from autoscaler.core.reclaims import drain
from autoscaler.core.state import RunState
from autoscaler.deadline.ends import at_boundary, finish_run, release_idle
from autoscaler.deadline.forecast import forecast, outdated
from autoscaler.deadline.job_sampling import sample
from autoscaler.deadline.jobs import DeadlineSettings, task_times
from autoscaler.deadline.learning import say_learned
from autoscaler.deadline.planning import PlanStep, plan_jobs
from autoscaler.deadline.replan import proven_wrong
from autoscaler.deadline.watch import move_late, watch
from autoscaler.deadline.withdraw import still_open, withdrawn_runs

__all__ = ["DeadlineController", "DeadlineSettings"]


class DeadlineController:
    """Deadline-aware controller for jobs with deadlines. Holds settings only."""

    def __init__(self, settings: DeadlineSettings | None = None):
        self.settings = settings or DeadlineSettings()

    def step(self, state: RunState, events: Iterable[Event], now: float) -> list[Action]:
        s = PlanStep(state, now)
        seen = _read(s, events)
        for action in seen.cancels:
            s.do(action)
        if state.money.shutdown:
            for m in list(state.fleet.alive_machines()):
                s.do(Release(m.id, "shutdown"))
            return s.decided()
        for mid in seen.boundaries:
            at_boundary(s, state.fleet.machines[mid])
        # The bag changes only with news, at a boundary (a released machine's queue goes
        # back), or when a sampled job's samples come in; ticks re-plan what is left.
        sampled = seen.done and any(
            not j.task_s for j in state.work.jobs if j.name in state.work.arrived
        )
        wake = (
            seen.news
            or seen.tick
            or bool(seen.boundaries)
            or sampled
            or not state.decisions.configurations
        )
        cfg = self.settings
        if not state.money.stopped:
            wrong = False  # a declared time proved too short: move what it makes late now
            said: list[Learned] = []
            if seen.done:
                said = say_learned(cfg, s)
                wrong = cfg.replan and bool(proven_wrong(state.work, said))
            check = seen.tick or wrong
            sample(cfg, s)
            planned = plan_jobs(cfg, s) if wake else False
            if seen.withdrawn:
                forecast(
                    cfg,
                    s,
                    still_open(state.tasks, state.work),
                    "withdrawn: " + ", ".join(seen.withdrawn),
                )
            moved = move_late(cfg, s) if check and cfg.reassign else set()
            if check or planned or seen.news:
                bought = watch(cfg, s, buy=seen.tick and cfg.reassign and cfg.buy_when_late)
                changed = bought | moved
                if changed:  # the plan in force changed: what it expects of them now
                    why = "bought for late tasks" if bought else "late tasks moved"
                    forecast(cfg, s, changed, f"{why}: " + ", ".join(sorted(changed)))
            stale = outdated(state, said, now if seen.tick else None)
            if stale:  # what the last forecasts rest on proved wrong: say it again
                forecast(cfg, s, stale, "forecast outdated: " + ", ".join(sorted(stale)))
            release_idle(cfg, s)
        finish_run(cfg, s)
        return s.decided()

    def task_times(self, state: RunState, job: JobSpec) -> dict[str, float]:
        """The planned time per task of ``job`` per type: known (blended with the runs
        seen: ``deadline.prior``), else sampled (mean + z·σ/√n, once ``sample`` runs
        ended there); types missing cannot run it (yet)."""
        return task_times(self.settings, state, job)


@dataclass(frozen=True, slots=True)
class _Seen:
    """What a step's events say."""

    boundaries: tuple[str, ...]  # machines near the end of a paid unit
    tick: bool  # a monitoring interval
    done: bool  # a task ended with a result
    news: bool  # something that changes the plan's premises
    withdrawn: tuple[str, ...]  # jobs withdrawn
    cancels: tuple[Cancel, ...]  # for the agents of the withdrawn jobs' runs


def _read(s: PlanStep, events: Iterable[Event]) -> _Seen:
    """Feed ``events`` to the state, in order; a ``Shutdown`` stops the run where it comes."""
    state = s.state
    boundaries: list[str] = []
    withdrawn: list[str] = []
    cancels: list[Cancel] = []  # read before the state folds the withdrawal
    tick = done = news = False
    for event in events:
        if isinstance(event, JobWithdrawn):
            cancels.extend(withdrawn_runs(state.fleet, state.work, event.job))
        s.feed(event)
        match event:
            case Tick():
                tick = True
            case TaskDone():
                done = True
            case BoundaryNear(machine=mid):
                boundaries.append(mid)
            case (
                JobArrived()
                | JobAdded()
                | MachineLost()
                | LaunchFailed()
                | TaskFailed()
                | BudgetSet()
                | DeadlineSet()
                | Resumed()
                | QuotaSet()
            ):
                news = True
            case JobWithdrawn(job=name):
                withdrawn.append(name)
                news = True
            case RebalanceRecommended(machine=mid):  # drains: its queue planned again
                cancels.extend(drain(state.fleet.machines[mid]))
                news = True
            case Shutdown(reason=reason):
                if not state.money.stopped:
                    s.do(Stop(reason))
    return _Seen(tuple(boundaries), tick, done, news, tuple(withdrawn), tuple(cancels))

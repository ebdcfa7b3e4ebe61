"""Watching the plan in force (paper 002 §V, Algorithm 4, and beyond): what it expects per
job and for the run (``Forecast``, ``Configure``), moves of queued tasks off machines that
would miss a deadline, new machines for tasks still late, and ``Late`` when a job will
miss its deadline, with what gave way."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from autoscaler.core.model import Cancel, Late
from autoscaler.core.state import Machine, RunState
from autoscaler.core.step import Step
from autoscaler.core.words import counted
from autoscaler.deadline.assign import solve_new
from autoscaler.deadline.category_parts import by_job, job_of_key, key_times
from autoscaler.deadline.forecast import at_low_end
from autoscaler.deadline.instance import DeadlineJob
from autoscaler.deadline.jobs import (
    EPS,
    DeadlineSettings,
    job_deadlines,
)
from autoscaler.deadline.planning import (
    PlanStep,
    carry_out,
    plan_types,
    reclaim_priced,
    type_slots,
)
from autoscaler.deadline.queues import all_queues
from autoscaler.deadline.reassign import (
    Lateness,
    Queue,
    late_tasks,
    lateness,
    reassign,
)
from autoscaler.deadline.slot_queues import slotted

CAUSES = {
    "budget": "the budget cannot pay for machines that would finish it in time",
    "deadline": "no machines the provider allows finish it in time",
}


def move_late(cfg: DeadlineSettings, s: Step) -> set[str]:
    """Move queued tasks expected late to machines that finish them in time; never to a
    machine that drains (its provider warned it may be taken back: ``Machine.draining``).
    Returns the jobs whose tasks moved (what the plan expects of them changed)."""
    state = s.state
    machines = state.fleet.machines
    queues = [
        q
        for q in all_queues(cfg, state, s.now, cfg.guard_z)
        if not _draining(machines.get(q.machine))
    ]
    result = reassign(queues, job_deadlines(cfg, state, guarded=True))
    moved: set[str] = set()
    for move in result.moves:
        s.do(move)
        moved |= {state.work.job_of(t).name for t in move.tasks}
    return moved


def watch(cfg: DeadlineSettings, s: PlanStep, buy: bool) -> set[str]:
    """Say what will be late; first, if ``buy``, give late tasks to new machines that
    finish them in time, when the budget pays for them. Returns the jobs machines were
    bought for (what the plan expects of them changed)."""
    state = s.state
    deadlines = job_deadlines(cfg, state)
    cause: str | None = None
    changed: set[str] = set()
    if buy:
        guarded = job_deadlines(cfg, state, guarded=True)
        at_risk = lateness(all_queues(cfg, state, s.now), guarded)
        if at_risk:
            bought, cause = buy_for_late(cfg, s, at_risk, guarded)
            if bought:
                changed = set(by_job(state, {item.job for item in at_risk}))
    late_by_job = per_job(s.state, lateness(all_queues(cfg, state, s.now), deadlines))
    for job in state.work.jobs:
        if job.name in state.work.withdrawn:
            continue  # nothing of it is left to be late
        item = late_by_job.get(job.name)
        said = state.work.late.get(job.name)
        if item is None:
            if said is not None and said.tasks > 0:
                s.do(Late(job.name, 0, 0.0, "", f"job {job.name}: expected on time again"))
            continue
        if said is not None and said.tasks > 0 and not late_changed(cfg, said, item):
            continue
        why = cause or ("budget" if job.name in s.unpaid else None)
        if why is None:
            why = said.cause if said is not None and said.cause else "deadline"
        s.do(
            Late(
                job.name,
                item.tasks,
                item.seconds,
                why,
                f"job {job.name} is expected to miss its deadline: {counted(item.tasks, 'task')} "
                f"late, the last by {item.seconds:.0f} s ({CAUSES[why]})",
            )
        )
    return changed


def _draining(m: Machine | None) -> bool:
    return m is not None and m.draining


def per_job(state: RunState, late: Sequence[Lateness]) -> dict[str, Lateness]:
    """What is late per key (job, or a job's part of a category) as what is late per
    job: the tasks added up, the latest of the seconds."""
    items = {item.job: item for item in late}
    out = {}
    for name, keys in by_job(state, items).items():
        parts = [items[k] for k in keys]
        out[name] = Lateness(name, sum(p.tasks for p in parts), max(p.seconds for p in parts))
    return out


def late_changed(cfg: DeadlineSettings, said: Late, now: Lateness) -> bool:
    share = cfg.late_change
    return abs(now.tasks - said.tasks) > share * max(said.tasks, 1) or abs(
        now.seconds - said.seconds
    ) > share * max(said.seconds, 1.0)


def buy_for_late(
    cfg: DeadlineSettings, s: PlanStep, late: Sequence[Lateness], deadlines: Mapping[str, float]
) -> tuple[bool, str]:
    """New machines for the tasks expected late (by ``deadlines``), if they finish
    them in time and the budget pays; returns (whether any were bought, what gave
    way otherwise). Where the types a job is planned on cannot (a provider's part of a
    split job, at its provider's limit), the tasks of it late even at the low end of
    their spread (``forecast.at_low_end``: not a few slow first runs) go to new
    machines of its fallback types (``JobSpec.fallback``): the other providers'."""
    state = s.state
    queues = all_queues(cfg, state, s.now)
    bought, cause = _buy(cfg, s, queues, late, deadlines)
    if bought or cause != "deadline":
        return bought, cause
    rescue = {item.job for item in late if job_of_key(state.work, item.job).fallback}
    if not rescue:
        return bought, cause
    low = at_low_end(cfg, state, queues)
    sure = [item for item in lateness(low, deadlines) if item.job in rescue]
    if not sure:
        return bought, cause
    return _buy(cfg, s, low, sure, deadlines, every=True)


def _buy(
    cfg: DeadlineSettings,
    s: PlanStep,
    queues: Sequence[Queue],
    late: Sequence[Lateness],
    deadlines: Mapping[str, float],
    every: bool = False,
) -> tuple[bool, str]:
    """``buy_for_late`` for the tasks ``queues`` finish late, on the types their jobs
    are planned on (``every``: their fallback types too)."""
    state = s.state
    late_jobs = {item.job for item in late}
    # The late tasks: from the end of each violating machine's queue of the job.
    taken: dict[str, list[tuple[int, str]]] = {}
    for q in queues:
        for name, (n, _) in late_tasks(q, deadlines).items():
            if name not in late_jobs or n <= 0:
                continue
            queued = [tid for tid, j in q.tasks if j == name]
            for tid in queued[len(queued) - n :]:
                taken.setdefault(name, []).append((tid, q.machine))
    if not taken:
        return False, "deadline"
    jobs = []
    for name, items in taken.items():
        times = key_times(cfg, state, name, every) or dict(job_of_key(state.work, name).task_s)
        times = reclaim_priced(state, times)  # as the plan buys: a spot type's lost work priced
        if times:
            jobs.append(DeadlineJob(name, len(items), deadlines[name], times))
    jobs, types = slotted(jobs, plan_types(state), type_slots(state))
    result = solve_new(jobs, types, state.billing, s.now, solver=cfg.solver)
    if result.plan is None:
        return False, "deadline"
    money = math.inf if state.money.budget is None else state.money.budget - state.money.committed
    if result.plan.cost > money + EPS:
        return False, "budget"
    for items in taken.values():
        for tid, mid in items:
            s.do(Cancel(tid, mid, "late here: moved to a new machine"))
    tasks = {name: [tid for tid, _ in items] for name, items in taken.items()}
    carry_out(cfg, s, result.plan, tasks)
    return True, "deadline"

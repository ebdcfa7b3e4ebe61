"""Planning the tasks in the bag (paper 002 Algorithms 1–3): the running machines and the
types as the planners see them, the plan (deadlines relaxed step by step when none meets
them), and carrying it out: ``Assign`` on running machines, ``Launch`` with queues for
new ones the budget pays, the rest queued where it finishes first."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from autoscaler.core.limits import new_caps
from autoscaler.core.model import Assign, Launch
from autoscaler.core.state import RunState
from autoscaler.core.step import Step
from autoscaler.deadline.assign import handle_multi, handle_single
from autoscaler.deadline.category_parts import by_key, job_of_key, key_times, keyed, machine_key_s
from autoscaler.deadline.forecast import forecast
from autoscaler.deadline.instance import (
    DeadlineJob,
    DeadlinePlan,
    DeadlineProblem,
    DeadlineResult,
    MachineType,
    RunningMachine,
)
from autoscaler.deadline.jobs import (
    EPS,
    DeadlineSettings,
    is_sampling,
    job_deadlines,
)
from autoscaler.deadline.queues import queue_of
from autoscaler.deadline.slot_queues import slotted

RELAX = (1.5, 2.0, 4.0, 8.0, 32.0)  # deadline windows tried when no plan meets them


class PlanStep(Step):
    """A step, and the jobs whose machines the budget could not pay for in it."""

    def __init__(self, state: RunState, now: float):
        super().__init__(state, now)
        self.unpaid: set[str] = set()


def ready_jobs(cfg: DeadlineSettings, state: RunState) -> dict[str, list[int]]:
    """Tasks in the bag per arrived job that can be planned (sampled or known)."""
    ready = {
        j.name: j
        for j in state.work.jobs
        if j.name in state.work.arrived and not is_sampling(cfg, state, j)
    }
    out: dict[str, list[int]] = {}
    if not ready:
        return out
    for tid in state.tasks.pending:
        job = state.work.job_of(tid)
        if job.name in ready:
            out.setdefault(job.name, []).append(tid)
    return out


def running_machines(cfg: DeadlineSettings, state: RunState, now: float) -> list[RunningMachine]:
    margin = state.billing.boundary_margin_s()
    out = []
    for m in state.fleet.alive_machines():
        if m.marked:
            continue
        q = queue_of(cfg, state, m, now)
        free = q.busy_until + sum(q.task_s.get(j, 0.0) for _, j in q.tasks)
        out.append(RunningMachine(m.id, m.type.name, m.paid_until - margin, free))
    return out


def plan_types(state: RunState) -> list[MachineType]:
    """The types new machines may come from, each with how many it may launch (its
    provider's limits shared among the provider's types: ``core.limits.new_caps``),
    each as much as it counts (``Capacity.weight``).

    None of a type avoided (no capacity, or its provider held by a limit). "Counts
    less": a type recovering from a refused launch, at weight w < 1, is priced c_i / w
    in the cost-minimising models (paper 002's (7) and (10)), so the plan buys it only
    where it stays the cheapest way to meet a deadline at that surcharge. Money is
    safe: the surcharge only raises what the plan believes its machines cost; what
    is committed is the real price, within the budget (``carry_out``).
    """
    caps = new_caps(state)
    out = []
    for t in state.types.values():
        w = state.capacity.weight(t.name, state.now)
        room = caps[t.name] if w > 0 else 0
        price = t.price / w if w > 0 else t.price
        out.append(MachineType(t.name, price, state.fleet.boot_s(t.name), room))  # β as measured
    return out


def reclaim_priced(state: RunState, times: Mapping[str, float]) -> dict[str, float]:
    """A job's time per task on each type, each divided by the share of its machines'
    work their reclaims leave (``RunState.reclaim_factor``): the models (7) and (10)
    then buy a spot type for what it does between reclaims, and plan the delay; a type
    its reclaims leave nothing of cannot run the job. Unchanged at rate 0."""
    out = {}
    for name, t in times.items():
        kept = state.reclaim_factor(name, t)
        if kept >= 1.0:
            out[name] = t
        elif kept > 0.0:
            out[name] = t / kept
    return out


def type_slots(state: RunState) -> dict[str, int]:
    return {t.name: t.slots for t in state.types.values()}


def solve_plan(cfg: DeadlineSettings, problem: DeadlineProblem) -> DeadlineResult:
    if cfg.planner == "single":
        return handle_single(problem, solver=cfg.solver)
    return handle_multi(problem, solver=cfg.solver)


def plan_jobs(cfg: DeadlineSettings, s: PlanStep) -> bool:
    """Plan every task of an arrived job in the bag; True if anything was planned.
    With categories, each job's part of each category is planned as a job of its own
    (``deadline.category_parts``)."""
    state = s.state
    ready = ready_jobs(cfg, state)
    if not ready:
        return False
    tasks = by_key(cfg, state, ready)
    guarded = job_deadlines(cfg, state, guarded=True)
    jobs = []
    for name, tids in tasks.items():
        times = reclaim_priced(state, key_times(cfg, state, name))
        if not times:
            continue
        jobs.append(DeadlineJob(name, len(tids), guarded[name], times))
    if not jobs:
        return False
    machines = running_machines(cfg, state, s.now)
    jobs, types = slotted(jobs, plan_types(state), type_slots(state))
    result: DeadlineResult | None = None
    for factor in (1.0, *RELAX, enough(jobs, types, s.now)):
        relaxed = [relax(j, s.now, factor, types) for j in jobs]
        problem = DeadlineProblem(
            relaxed, types, state.billing, s.now, machines, fastest_first=keyed(cfg, state.tasks)
        )
        result = solve_plan(cfg, problem)
        if result.plan is not None:
            break
    if result is None or result.plan is None:
        crowd(cfg, s, tasks, machines)
    else:
        carry_out(cfg, s, result.plan, tasks)
    forecast(cfg, s, set(ready), "planned: " + ", ".join(sorted(ready)))
    return True


def enough(jobs: Sequence[DeadlineJob], types: Sequence[MachineType], now: float) -> float:
    """A last window factor, for when none of ``RELAX`` gives a plan: one whose windows
    hold every job's tasks on all the machines that may be launched, twice over (a job
    far past its deadline, on a cluster whose machines' time limits end them, is then
    still given machines, not left in the bag)."""
    lanes = sum(max(0, t.max_count) for t in types)
    work = sum(j.tasks * min(j.task_s.values(), default=0.0) for j in jobs)
    need = 2.0 * (max((t.boot_s for t in types), default=0.0) + work / max(1, lanes))
    least = [relax(j, now, 1.0, types) for j in jobs]
    shortest = min((max(j.deadline_s - now, 1.0) for j in least), default=1.0)
    return max(2.0 * RELAX[-1], need / shortest)


def relax(job: DeadlineJob, now: float, factor: float, types: Sequence[MachineType]) -> DeadlineJob:
    """``job`` with its window from ``now`` stretched ``factor`` times (at least one
    task on a new machine of its slowest-booting type): a plan when none is in time."""
    if factor == 1.0:
        return job
    least = max((t.boot_s + job.task_s[t.name] for t in types if t.name in job.task_s), default=0.0)
    window = max(job.deadline_s - now, least)
    return DeadlineJob(job.name, job.tasks, now + factor * window, job.task_s)


def carry_out(
    cfg: DeadlineSettings, s: PlanStep, plan: DeadlinePlan, tasks: dict[str, list[int]]
) -> None:
    """Queue the plan's tasks (by key: job, or job's part of a category): on running
    machines (``Assign``), and on the new machines the budget pays for (``Launch`` with
    their queues); what it cannot pay for is queued where it finishes first."""
    state = s.state
    left = {name: list(tids) for name, tids in tasks.items()}

    def take(name: str, n: int) -> list[int]:
        got, left[name] = left[name][:n], left[name][n:]
        return got

    for mid, per_job in plan.existing.items():
        for name in edf_names(state, per_job):
            for tid in take(name, per_job[name]):
                s.do(Assign(tid, mid))
    money = math.inf if state.money.budget is None else state.money.budget - state.money.committed
    bought: dict[str, list[tuple[int, ...]]] = {}
    # The machines doing the most per unit of money first, when money is short.
    for new in sorted(plan.new, key=lambda m: -sum(m.tasks.values()) / max(m.cost, EPS)):
        first = state.billing.cost(state.types[new.type].commit_price, state.billing.first_step_s)
        if first > money + EPS:
            s.unpaid.update(job_of_key(state.work, n).name for n, k in new.tasks.items() if k > 0)
            continue
        money -= max(first, min(new.cost, money))
        queue: list[int] = []
        for name in edf_names(state, new.tasks):
            queue.extend(take(name, new.tasks[name]))
        bought.setdefault(new.type, []).append(tuple(queue))
    for name, queues in bought.items():
        s.do(Launch(name, len(queues), state.fleet.next_token(), tuple(queues)))
    rest = {name: tids for name, tids in left.items() if tids}
    if rest:
        crowd(cfg, s, rest, running_machines(cfg, state, s.now))


def edf_names(state: RunState, per_job: Mapping[str, int]) -> list[str]:
    return sorted(per_job, key=lambda name: (job_of_key(state.work, name).deadline, name))


def crowd(
    cfg: DeadlineSettings,
    s: Step,
    tasks: Mapping[str, Sequence[int]],
    machines: Sequence[RunningMachine],
) -> None:
    """No machines can be bought for ``tasks`` (by key): queue each where it finishes
    first (list scheduling over the machines alive); they will be late, and ``_watch``
    says so. Without a machine that can run a job, its tasks stay in the bag."""
    state = s.state
    free = {m.id: m.free_at for m in machines}
    for name in sorted(tasks, key=lambda n: job_of_key(state.work, n).deadline):
        for tid in tasks[name]:
            best: tuple[float, str] | None = None
            for m in machines:
                e = machine_key_s(cfg, state, state.fleet.machines[m.id], name)
                if e is None:
                    continue
                e /= state.fleet.machines[m.id].type.slots
                if best is None or free[m.id] + e < best[0]:
                    best = (free[m.id] + e, m.id)
            if best is None:
                break
            free[best[1]] = best[0]
            s.do(Assign(tid, best[1]))

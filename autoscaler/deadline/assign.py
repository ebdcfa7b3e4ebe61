"""Algorithms 1–3 of paper 002 (Thai, Varghese, Barker) §IV: ``assign`` is Algorithm 1
(fill running machines without extending their paid time or missing a deadline),
``handle_multi`` Algorithm 2 (assign every job, then model (7) for what is left),
``handle_single`` Algorithm 3 (job by job: assign, then model (10), the new machines
joining the running ones). ``solve_new`` is model (7), or (10) for one job, on new
machines only (``autoscaler.deadline.milp``), never costing more than job by job.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import replace

from autoscaler.core.billing import BillingModel
from autoscaler.core.solve import Solver
from autoscaler.deadline.instance import (
    Assignment,
    DeadlineJob,
    DeadlinePlan,
    DeadlineProblem,
    DeadlineResult,
    Formulation,
    Instance,
    MachineType,
    NewMachine,
    RunningMachine,
    edf,
    fits,
)
from autoscaler.deadline.milp import FALLBACK_S, plan_new


def assign(
    jobs: Sequence[DeadlineJob],
    machines: Sequence[RunningMachine],
    now: float,
    left: Mapping[str, int] | None = None,
    fastest_first: bool = False,
) -> Assignment:
    """Algorithm 1: give each job (EDF) as many tasks as each machine (in the order
    given, or ``fastest_first`` for the job) can finish by min(deadline, paid_until),
    after its queue.

    A machine's work is never pushed past its paid time nor past the job's deadline;
    ``left`` (default: every job's n_j) is what is still to place.
    """
    remaining = {j.name: (left[j.name] if left is not None else j.tasks) for j in jobs}
    free = {m.id: max(m.free_at, now) for m in machines}
    tasks: dict[str, dict[str, int]] = {m.id: {} for m in machines}
    for job in edf(jobs):
        order = machines
        if fastest_first:
            order = sorted(machines, key=lambda m: job.task_s.get(m.type, math.inf))
        for m in order:
            if remaining[job.name] <= 0:
                break
            e = job.task_s.get(m.type)
            if e is None or e <= 0:
                continue
            n = min(remaining[job.name], fits(min(job.deadline_s, m.paid_until) - free[m.id], e))
            if n > 0:
                tasks[m.id][job.name] = tasks[m.id].get(job.name, 0) + n
                free[m.id] += n * e
                remaining[job.name] -= n
    extended = tuple(
        RunningMachine(m.id, m.type, m.paid_until, max(m.free_at, free[m.id])) for m in machines
    )
    return Assignment({k: v for k, v in tasks.items() if v}, remaining, extended)


def _job_by_job(
    inst: Instance, solver: Solver, limit: float | None
) -> tuple[list[NewMachine] | None, list[str]]:
    """Algorithm 3's machines for the same tasks: a plan of model (7) (each machine
    runs its jobs in EDF order), so the fast model never costs more than job by job."""
    jobs = [replace(j, tasks=n) for j, n in zip(inst.jobs, inst.need, strict=True)]
    types = [tp.t for tp in inst.types]
    result = handle_single(DeadlineProblem(jobs, types, inst.billing, inst.now), solver, limit)
    if result.plan is None:
        return None, list(result.notes)
    return list(result.plan.new), list(result.notes)


def solve_new(
    jobs: Sequence[DeadlineJob],
    types: Sequence[MachineType],
    billing: BillingModel,
    now: float = 0.0,
    formulation: Formulation = "fast",
    solver: Solver = "highs",
    time_limit_s: float | None = None,
    need: Mapping[str, int] | None = None,
    fallback_s: float | None = FALLBACK_S,
) -> DeadlineResult:
    """The cheapest new machines that finish ``need`` (default: every job's n_j) by the
    deadlines: model (7), or model (10) for one job. No running machine is used."""
    left = need if need is not None else {j.name: j.tasks for j in jobs}
    return plan_new(
        jobs, left, types, billing, now, formulation, solver, time_limit_s, fallback_s, _job_by_job
    )


def handle_multi(
    problem: DeadlineProblem,
    formulation: Formulation = "fast",
    solver: Solver = "highs",
    time_limit_s: float | None = None,
    fallback_s: float | None = FALLBACK_S,
) -> DeadlineResult:
    """Algorithm 2: fill the running machines (Algorithm 1), then model (7) for every
    job's tasks left."""
    done = assign(problem.jobs, problem.machines, problem.now, fastest_first=problem.fastest_first)
    result = solve_new(
        problem.jobs,
        problem.types,
        problem.billing,
        problem.now,
        formulation,
        solver,
        time_limit_s,
        need=done.left,
        fallback_s=fallback_s,
    )
    if result.plan is None:
        return result
    plan = DeadlinePlan(done.tasks, result.plan.new, result.plan.cost)
    return DeadlineResult(plan, None, result.notes, result.proven, result.bound)


def handle_single(
    problem: DeadlineProblem, solver: Solver = "highs", time_limit_s: float | None = None
) -> DeadlineResult:
    """Algorithm 3: job by job (EDF), fill the running machines and those bought so far
    (Algorithm 1), then model (10) for the job's tasks left, from the machines of each
    type not yet bought; the new machines join the running ones with their paid time."""
    running = list(problem.machines)
    existing: dict[str, dict[str, int]] = {}
    new: dict[str, tuple[NewMachine, dict[str, int]]] = {}  # id -> (as bought, tasks added)
    notes: list[str] = []
    proven = True
    for job in edf(problem.jobs):
        done = assign([job], running, problem.now, fastest_first=problem.fastest_first)
        running = list(done.machines)
        for mid, tasks in done.tasks.items():
            target = new[mid][1] if mid in new else existing.setdefault(mid, {})
            for name, n in tasks.items():
                target[name] = target.get(name, 0) + n
        used = Counter(m.type for m, _ in new.values())
        allowed = [replace(t, max_count=t.max_count - used[t.name]) for t in problem.types]
        result = solve_new(
            [job],
            allowed,
            problem.billing,
            problem.now,
            "fast",
            solver,
            time_limit_s,
            need=done.left,
        )
        notes.extend(result.notes)
        proven = proven and result.proven
        if result.plan is None:
            return DeadlineResult(None, result.reason, tuple(notes))
        for m in result.plan.new:
            mid = f"new-{len(new)}"
            new[mid] = (m, dict(m.tasks))
            running.append(
                RunningMachine(mid, m.type, problem.now + m.paid_s, problem.now + m.busy_s)
            )
    types = {t.name: t for t in problem.types}
    jobs = {j.name: j for j in problem.jobs}
    machines = []
    for bought, tasks in new.values():
        t = types[bought.type]
        busy = t.boot_s + sum(n * jobs[name].task_s[t.name] for name, n in tasks.items())
        machines.append(NewMachine(t.name, tasks, busy, bought.paid_s, bought.cost))
    plan = DeadlinePlan(existing, tuple(machines), sum(m.cost for m in machines))
    return DeadlineResult(plan, None, tuple(notes), proven)

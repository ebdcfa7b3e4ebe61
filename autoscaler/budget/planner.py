"""The budget planner of paper 000 §2.1: the fastest machine mix the budget can pay for.

Model (fixed ATUs). Choose a_i = keep_i + new_i machines of each type i, where keep_i
of the l_i live machines are kept and new_i are launched (boot time β_i), a_i ≤ A_i::

    minimise  T_e = N / Σ a_i·s_i/T_i
    s.t.      ⌈T_e/ATU⌉ · Σ a_i·c_i ≤ B

A machine of type i runs s_i tasks at once (its slots), each in T_i, the time per task
measured at that slot count; its throughput is s_i/T_i (s_i = 1 is the paper's model).

For a fixed number k of further units (after the time each live machine has already
paid for) the problem is linear::

    maximise  Σ a_i·s_i / T_i
    s.t.      Σ a_i·k·c_i + new_i·f_i ≤ B
              Σ a_i·m_i(k·ATU) + new_i·p_i ≥ N

where a new machine first pays one step f_i (one ATU) in which it boots and then does
p_i = s_i·⌊(step − β_i)/T_i⌋ tasks, exactly as the monitor will count it once it runs. The
first feasible k ≥ 1 is optimal (a mix that fits in fewer units would have been
feasible for that smaller k). k = 0 is not offered: it would count live machines as
kept for nothing, yet they go on working (and paying) past their paid time.
``m_i(h)`` is the number of tasks one machine is expected to finish in h seconds
(``estimate.tasks_within``: h/T_i less the discreteness cushion of the final unit,
slides 001, "fluid vs discrete"). N here is N_e, the tasks left
once the time already paid on live machines has been used (paper 000 §2.2), and B the
budget not yet committed.

Under per-second billing: ``budget.per_second``.

Solved with PuLP: HiGHS in-process (highspy) by default, CBC as the fallback, also when
HiGHS ends without an answer. The LP relaxation of each k is checked first by a greedy
fractional knapsack, so the MILP is only solved for k that can be feasible. Every
solver status that is neither Optimal nor Infeasible is named in ``PlanResult.notes``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from fractions import Fraction

import pulp

from autoscaler.budget.per_second import solve_per_second
from autoscaler.budget.problem import (
    BudgetProblem,
    Plan,
    PlanResult,
    TypeEstimate,
    capacity,
    whole,
)
from autoscaler.core.billing import BillingModel
from autoscaler.core.solve import PlannerError, Solved, Solver, solve_lp

__all__ = ["plan_budget", "plan_clairvoyant", "solve_budget"]

_MAX_UNITS = 100_000
_MAX_FAILED = 3  # solves without an answer before the search gives up (a broken solver)


# --- fixed ATUs -------------------------------------------------------------------------------


def _relaxation_feasible(problem: BudgetProblem, k: int) -> bool:
    """Can a fractional mix do N tasks in k further units within B? (greedy knapsack;
    a limited provider's room caps each of its types alone, a relaxation still)"""
    atu = problem.billing.atu_s
    caps: dict[str, int] = {}
    for room in problem.groups:
        most = room.machines_for(k * atu)
        if most is not None:
            caps.update(dict.fromkeys(room.types, most))
    items: list[tuple[float, float, float]] = []  # (cost per task, tasks per machine, count)
    for t in problem.types:
        live = min(t.live, t.max_count, caps.get(t.name, t.max_count))
        most = min(t.max_count, caps.get(t.name, t.max_count))
        cap = capacity(t, k * atu, problem)
        for tasks, cost, count in (
            (cap, k * t.price, live),
            (cap + t.first_tasks, k * t.price + t.first_cost, most - live),
        ):
            if tasks > 0 and count > 0:
                items.append((cost / tasks, float(tasks), float(count)))
    items.sort()
    need = problem.tasks
    money = problem.budget
    for cost_per_task, per_machine, machines in items:
        take = min(machines * per_machine, need)
        money -= take * cost_per_task
        need -= take
        if need <= 1e-9:
            return money >= -1e-9
    return False


def _mix_variables(
    lp: pulp.LpProblem, types: Sequence[TypeEstimate]
) -> tuple[dict[str, pulp.LpVariable], dict[str, pulp.LpVariable]]:
    """keep_i ≤ l_i live machines kept, new_i ≤ A_i − l_i machines launched."""
    keep: dict[str, pulp.LpVariable] = {}
    new: dict[str, pulp.LpVariable] = {}
    for i, t in enumerate(types):
        live = min(t.live, t.max_count)
        keep[t.name] = lp.add_variable(f"keep_{i}", 0, live, cat="Integer")
        new[t.name] = lp.add_variable(f"new_{i}", 0, t.max_count - live, cat="Integer")
    return keep, new


def _exact_cost(
    problem: BudgetProblem, k: int, counts: dict[str, int], launched: dict[str, int]
) -> Fraction:
    """A solved mix's cost in exact decimal arithmetic. The solvers accept a budget row
    violated within their feasibility tolerance (HiGHS took an $84 mix for a budget of
    $83.999999), and money must never go over, not even by a rounding. Each amount is
    the decimal its float stands for (``repr``: what the user typed, 0.1 and not the
    binary 0.1000000000000000055...), so three machines at $0.10 fit a budget of $0.30."""
    return sum(
        (
            k * _decimal(t.price) * counts[t.name] + _decimal(t.first_cost) * launched[t.name]
            for t in problem.types
        ),
        Fraction(0),
    )


def _decimal(amount: float) -> Fraction:
    """The shortest decimal that reads back as ``amount``, exactly."""
    return Fraction(repr(amount))


def _solve_fixed_k(
    problem: BudgetProblem, k: int, solver: Solver, time_limit_s: float | None
) -> tuple[Plan | None, Solved]:
    atu = problem.billing.atu_s
    lp = pulp.LpProblem("bats_budget", pulp.LpMaximize)
    keep, new = _mix_variables(lp, problem.types)
    speed = pulp.lpSum((keep[t.name] + new[t.name]) * t.rate for t in problem.types)
    cost = pulp.lpSum((keep[t.name] + new[t.name]) * t.price for t in problem.types)
    # Among equally fast mixes prefer the cheaper one, then the one that launches less.
    min_speed = min(t.rate for t in problem.types)
    max_cost = sum(t.price * t.max_count for t in problem.types) or 1.0
    lp += speed - 1e-3 * min_speed * cost / max_cost - 1e-6 * min_speed * pulp.lpSum(new.values())
    lp += k * cost + pulp.lpSum(new[t.name] * t.first_cost for t in problem.types) <= (
        problem.budget
    )
    lp += (
        pulp.lpSum(
            (keep[t.name] + new[t.name]) * capacity(t, k * atu, problem)
            + new[t.name] * t.first_tasks
            for t in problem.types
        )
        >= problem.tasks
    )
    for room in problem.groups:  # each limited provider: machines at once, machine time
        mine = [t.name for t in problem.types if t.name in room.types]
        if room.machines is not None:
            lp += pulp.lpSum(keep[n] + new[n] for n in mine) <= room.machines
        if room.seconds is not None:  # k more units each; a new one pays its first too
            lp += (
                pulp.lpSum((keep[n] + new[n]) * k * atu + new[n] * atu for n in mine)
                <= room.seconds
            )
    solved = solve_lp(lp, solver, f"k={k}", time_limit_s, jump=False, preprocess=False)
    if solved.outcome in ("failed", "infeasible"):
        return None, solved
    counts = {t.name: whole(keep[t.name]) + whole(new[t.name]) for t in problem.types}
    launched = {t.name: whole(new[t.name]) for t in problem.types}
    exact = _exact_cost(problem, k, counts, launched)
    if exact > _decimal(problem.budget):
        return None, Solved(
            "infeasible", f"k={k}: the solver's mix costs more than the budget; k skipped"
        )
    plan = Plan(
        counts=counts,
        units=k,
        speed=sum(counts[t.name] * t.slots / t.mean_s for t in problem.types),
        cost=float(exact),  # rounds to at most B, which is a float itself
    )
    return plan, solved


def _solve_fixed(problem: BudgetProblem, solver: Solver, time_limit_s: float | None) -> PlanResult:
    types = problem.types
    atu = problem.billing.atu_s
    fastest = sum(t.max_count * t.slots / t.mean_s for t in types)
    k = max(1, math.floor(problem.tasks / (fastest * atu)) - 1)
    cheapest = min(t.price for t in types)
    notes: list[str] = []
    failed = 0
    while k * cheapest <= problem.budget + 1e-9 and k <= _MAX_UNITS:
        if _relaxation_feasible(problem, k):
            plan, solved = _solve_fixed_k(problem, k, solver, time_limit_s)
            if solved.outcome == "feasible":
                notes.append(f"{solved.note}; its mix used, not proven the fastest at k={k}")
            elif solved.outcome == "failed":
                notes.append(f"{solved.note}; k={k} taken as infeasible, the plan may be slower")
                failed += 1
            elif solved.note:
                notes.append(solved.note)
            if plan is not None:
                return PlanResult(plan, tuple(notes))
            if failed >= _MAX_FAILED:
                notes.append(f"{failed} solves without an answer: search stopped at k={k}")
                break
        k += 1
    return PlanResult(None, tuple(notes))


# --- entry points -----------------------------------------------------------------------------


def plannable(problem: BudgetProblem) -> bool:
    """Whether ``problem`` has a type a plan may use: one with a runtime estimate that
    may have a machine. Without one ``solve_budget`` refuses (``PlannerError``); a type
    may have none when a service's other jobs hold every machine its limit allows."""
    return any(t.mean_s > 0 and t.max_count > 0 for t in problem.types)


def solve_budget(
    problem: BudgetProblem, solver: Solver = "highs", time_limit_s: float | None = None
) -> PlanResult:
    """The fastest affordable configuration (None when no mix fits the budget), with a
    note for every solver status that was neither Optimal nor Infeasible.

    ``time_limit_s`` bounds each MILP solve; a solve it cuts short is noted.
    """
    types = [t for t in problem.types if t.mean_s > 0 and t.max_count > 0]
    if not types:
        raise PlannerError("no machine type has a runtime estimate")
    problem = replace(problem, types=types)
    if problem.tasks <= 0:
        return PlanResult(Plan(counts={t.name: 0 for t in types}, units=0, speed=0.0, cost=0.0))
    if problem.billing.mode == "per_second":
        return solve_per_second(problem, solver, time_limit_s)
    return _solve_fixed(problem, solver, time_limit_s)


def plan_budget(problem: BudgetProblem, solver: Solver = "highs") -> Plan | None:
    """The fastest affordable configuration, or None when no mix fits the budget."""
    return solve_budget(problem, solver).plan


def plan_clairvoyant(
    tasks: int, budget: float, types: Sequence[TypeEstimate], billing: BillingModel
) -> Plan | None:
    """The best mix when the true mean runtimes are known from the start.

    Fluid model, no sampling, no boot, no cushion: minimise N / Σ a_i/μ_i subject to
    ⌈T/ATU⌉·Σ a_i·c_i ≤ B. Its makespan bounds what any budget planner can reach. It
    is ``plan_budget`` with nothing live, nothing paid for a first unit, and the fluid
    capacity k·ATU/μ_i per machine (no spread, no final-unit loss).
    """
    bare = [TypeEstimate(t.name, t.price, t.max_count, 0.0, t.mean_s, slots=t.slots) for t in types]
    problem = BudgetProblem(float(tasks), budget, bare, billing, cushion_z=0.0, final_loss=0.0)
    return plan_budget(problem)

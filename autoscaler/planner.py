"""The budget planner of paper 000 §2.1: the fastest machine mix the budget can pay for.

Model (fixed ATUs). Choose a_i = keep_i + new_i machines of each type i, where keep_i
of the l_i live machines are kept and new_i are launched (boot time β_i), a_i ≤ A_i::

    minimise  T_e = N / Σ a_i/T_i
    s.t.      ⌈T_e/ATU⌉ · Σ a_i·c_i ≤ B

For a fixed number k of further units (after the time each live machine has already
paid for) the problem is linear::

    maximise  Σ a_i / T_i
    s.t.      Σ a_i·k·c_i + new_i·f_i ≤ B
              Σ a_i·m_i(k·ATU) + new_i·p_i ≥ N

where a new machine first pays one step f_i (one ATU) in which it boots and then does
p_i = ⌊(step − β_i)/T_i⌋ tasks, exactly as the monitor will count it once it runs. The
first feasible k ≥ 1 is optimal (a mix that fits in fewer units would have been
feasible for that smaller k). k = 0 is not offered: it would count live machines as
kept for nothing, yet they go on working (and paying) past their paid time.
``m_i(h)`` is the number of tasks one machine is expected to finish in h seconds
(``estimate.tasks_within``: h/T_i less the discreteness cushion of the final unit,
slides 001, "fluid vs discrete"). N here is N_e, the tasks left
once the time already paid on live machines has been used (paper 000 §2.2), and B the
budget not yet committed.

Per-second billing makes the budget constraint linear without k:
N · Σ a_i·c_i ≤ B · ATU · Σ a_i/T_i (cost rate times time N/speed within budget).

Solved with PuLP: HiGHS in-process (highspy) by default, CBC as the fallback. The LP
relaxation of each k is checked first by a greedy fractional knapsack, so the MILP is
only solved for k that can be feasible.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Literal

import pulp

from autoscaler.billing import BillingModel
from autoscaler.errors import AutoscalerError
from autoscaler.estimate import tasks_within

Solver = Literal["highs", "cbc"]

_MAX_UNITS = 100_000


@dataclass(frozen=True, slots=True)
class TypeEstimate:
    """One machine type as the planner sees it."""

    name: str
    price: float  # c_i per ATU
    max_count: int  # A_i
    boot_s: float  # β_i
    mean_s: float  # T_i
    sd_s: float = 0.0  # spread of the runtimes, for the cushion
    live: int = 0  # l_i: machines of this type alive now, kept without a new boot
    first_cost: float = 0.0  # f_i: what a new machine commits at launch (one step)
    first_tasks: int = 0  # p_i: tasks a new machine does in its first step, after boot


@dataclass(frozen=True, slots=True)
class BudgetProblem:
    tasks: float  # N_e
    budget: float  # B: money not yet committed
    types: Sequence[TypeEstimate]
    billing: BillingModel
    cushion_z: float = 0.0
    final_loss: float = 0.25  # tasks per machine lost at the end of its last unit


@dataclass(frozen=True, slots=True)
class Plan:
    """A configuration: machines per type, and what it is expected to take."""

    counts: Mapping[str, int]
    units: int  # k, further ATUs (0 under per-second billing)
    speed: float  # Σ a_i/T_i, tasks per second
    cost: float  # money the plan commits beyond what is committed now

    def makespan_s(self, tasks: float) -> float:
        """T_e = N / Σ a_i/T_i."""
        return math.inf if self.speed <= 0 else tasks / self.speed


class PlannerError(AutoscalerError):
    code = "PlannerError"


def _solve(lp: pulp.LpProblem, name: Solver) -> str:
    """Solve with the chosen solver; fall back to CBC if HiGHS is missing or fails."""
    if name == "highs":
        try:
            return str(pulp.LpStatus[lp.solve(_solver("highs"))])
        except pulp.PulpSolverError:
            name = "cbc"
    return str(pulp.LpStatus[lp.solve(_solver(name))])


def _solver(name: Solver) -> pulp.LpSolver:
    # The default relative MIP gaps (1e-4) would let a slightly slower mix count as optimal.
    if name == "highs":
        return pulp.HiGHS(msg=False, gapRel=1e-9)
    with warnings.catch_warnings():  # PuLP 3.3 deprecates its bundled CBC for 4.0
        warnings.simplefilter("ignore", DeprecationWarning)
        return pulp.PULP_CBC_CMD(msg=False, gapRel=1e-9)


def _capacity(t: TypeEstimate, horizon_s: float, problem: BudgetProblem) -> float:
    return tasks_within(horizon_s, t.mean_s, t.sd_s, problem.cushion_z, problem.final_loss)


def _relaxation_feasible(problem: BudgetProblem, k: int) -> bool:
    """Can a fractional mix do N tasks in k further units within B? (greedy knapsack)"""
    atu = problem.billing.atu_s
    items: list[tuple[float, float, float]] = []  # (cost per task, tasks per machine, count)
    for t in problem.types:
        live = min(t.live, t.max_count)
        cap = _capacity(t, k * atu, problem)
        for tasks, cost, count in (
            (cap, k * t.price, live),
            (cap + t.first_tasks, k * t.price + t.first_cost, t.max_count - live),
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


def _solve_fixed_k(problem: BudgetProblem, k: int, solver: Solver) -> Plan | None:
    atu = problem.billing.atu_s
    lp = pulp.LpProblem("bats_budget", pulp.LpMaximize)
    keep, new = _mix_variables(lp, problem.types)
    speed = pulp.lpSum((keep[t.name] + new[t.name]) * (1.0 / t.mean_s) for t in problem.types)
    cost = pulp.lpSum((keep[t.name] + new[t.name]) * t.price for t in problem.types)
    # Among equally fast mixes prefer the cheaper one, then the one that launches less.
    min_speed = min(1.0 / t.mean_s for t in problem.types)
    max_cost = sum(t.price * t.max_count for t in problem.types) or 1.0
    lp += speed - 1e-3 * min_speed * cost / max_cost - 1e-6 * min_speed * pulp.lpSum(new.values())
    lp += k * cost + pulp.lpSum(new[t.name] * t.first_cost for t in problem.types) <= (
        problem.budget
    )
    lp += (
        pulp.lpSum(
            (keep[t.name] + new[t.name]) * _capacity(t, k * atu, problem)
            + new[t.name] * t.first_tasks
            for t in problem.types
        )
        >= problem.tasks
    )
    return _extract(lp, problem, keep, new, k, solver)


def _extract(
    lp: pulp.LpProblem,
    problem: BudgetProblem,
    keep: Mapping[str, pulp.LpVariable],
    new: Mapping[str, pulp.LpVariable],
    k: int,
    solver: Solver,
) -> Plan | None:
    if _solve(lp, solver) != "Optimal":
        return None
    counts = {
        t.name: round(keep[t.name].value() or 0) + round(new[t.name].value() or 0)
        for t in problem.types
    }
    speed = sum(counts[t.name] / t.mean_s for t in problem.types)
    per_unit = sum(counts[t.name] * t.price for t in problem.types)
    if problem.billing.mode == "fixed":
        cost = k * per_unit + sum(
            round(new[t.name].value() or 0) * t.first_cost for t in problem.types
        )
    else:
        cost = per_unit / problem.billing.atu_s * problem.tasks / speed if speed > 0 else 0.0
    return Plan(counts=counts, units=k, speed=speed, cost=cost)


def _solve_per_second(problem: BudgetProblem, solver: Solver) -> Plan | None:
    lp = pulp.LpProblem("bats_budget_per_second", pulp.LpMaximize)
    keep, new = _mix_variables(lp, problem.types)
    speed = pulp.lpSum((keep[t.name] + new[t.name]) * (1.0 / t.mean_s) for t in problem.types)
    rate = pulp.lpSum((keep[t.name] + new[t.name]) * t.price for t in problem.types)
    lp += speed
    lp += problem.tasks * rate <= problem.budget * problem.billing.atu_s * speed
    # The budget constraint is homogeneous: the empty mix satisfies it. Ask for a machine
    # in whole numbers (a bound on the speed, 1e-12, sat inside the solver's feasibility
    # tolerance and let an unaffordable budget come back as a zero-machine plan).
    lp += pulp.lpSum(keep.values()) + pulp.lpSum(new.values()) >= 1
    return _extract(lp, problem, keep, new, 0, solver)


def plan_budget(problem: BudgetProblem, solver: Solver = "highs") -> Plan | None:
    """The fastest affordable configuration, or None when no mix fits the budget."""
    types = [t for t in problem.types if t.mean_s > 0 and t.max_count > 0]
    if not types:
        raise PlannerError("no machine type has a runtime estimate")
    problem = replace(problem, types=types)
    if problem.tasks <= 0:
        return Plan(counts={t.name: 0 for t in types}, units=0, speed=0.0, cost=0.0)
    if problem.billing.mode == "per_second":
        return _solve_per_second(problem, solver)
    atu = problem.billing.atu_s
    fastest = sum(t.max_count / t.mean_s for t in types)
    k = max(1, math.floor(problem.tasks / (fastest * atu)) - 1)
    cheapest = min(t.price for t in types)
    while k * cheapest <= problem.budget + 1e-9 and k <= _MAX_UNITS:
        if _relaxation_feasible(problem, k):
            plan = _solve_fixed_k(problem, k, solver)
            if plan is not None:
                return plan
        k += 1
    return None


def plan_clairvoyant(
    tasks: int, budget: float, types: Sequence[TypeEstimate], billing: BillingModel
) -> Plan | None:
    """The best mix when the true mean runtimes are known from the start.

    Fluid model, no sampling, no boot, no cushion: minimise N / Σ a_i/μ_i subject to
    ⌈T/ATU⌉·Σ a_i·c_i ≤ B. Its makespan bounds what any budget planner can reach. It
    is ``plan_budget`` with nothing live, nothing paid for a first unit, and the fluid
    capacity k·ATU/μ_i per machine (no spread, no final-unit loss).
    """
    bare = [TypeEstimate(t.name, t.price, t.max_count, 0.0, t.mean_s) for t in types]
    problem = BudgetProblem(float(tasks), budget, bare, billing, cushion_z=0.0, final_loss=0.0)
    return plan_budget(problem)

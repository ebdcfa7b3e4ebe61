"""The minimum budget that finishes a bag (pure).

``minimum_budget`` bisects on the budget of a ``BudgetProblem`` for the least money with
which the planner still finds a mix that finishes the tasks (planner feasibility is
monotone in the budget: a mix affordable with B is affordable with more).
"""

from __future__ import annotations

from dataclasses import replace

from autoscaler.budget.planner import plan_budget, plannable
from autoscaler.budget.problem import BudgetProblem
from autoscaler.core.solve import Solver

_GROWTH_LIMIT = 2**12  # give up beyond this many times the fluid lower bound


def fluid_lower_bound(problem: BudgetProblem) -> float:
    """No budget below this finishes: every task on the most profitable type, no boot,
    no partial unit (c_i·T_i/(s_i·ATU) per task)."""
    per_task = min(t.price * t.mean_s / t.slots / problem.billing.atu_s for t in problem.types)
    return problem.tasks * per_task


def minimum_budget(
    problem: BudgetProblem, solver: Solver = "highs", rel_tol: float = 0.005
) -> float | None:
    """The least money (beyond what is committed) the planner finishes ``problem.tasks``
    with, within ``rel_tol``; None when even a huge budget finds no plan."""
    if problem.tasks <= 0:
        return 0.0
    if not plannable(problem):
        return None

    def feasible(budget: float) -> bool:
        return plan_budget(replace(problem, budget=budget), solver) is not None

    lo = fluid_lower_bound(problem)
    limit = _GROWTH_LIMIT * max(lo, 1e-9)
    hi = max(lo, 1e-9) * 1.25
    while not feasible(hi):
        lo = hi
        hi *= 2
        if hi > limit:
            return None
    while hi - lo > rel_tol * hi:
        mid = (lo + hi) / 2
        if feasible(mid):
            hi = mid
        else:
            lo = mid
    return hi

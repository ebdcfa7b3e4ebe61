"""Planning (category, type) counts with a MILP: ours, instead of paper 004's genetic
algorithm (``ga``), over the same model (§5).

Variables ``x[k][j]``: integer tasks of category k given to type (resource) j, for
every pair with metrics: ``AvgTRTime[j][k]`` (``turnaround``) and ``AvgPCost[j][k]``
(``cost``). Constraints, with ``lanes[j]`` the tasks type j runs side by side
(machines x slots; 1 for one of the paper's resources):

* time: Σ_k x[k][j] · AvgTRTime[j][k] <= remaining deadline · lanes[j], for each j
  (or ``available_s[j]``, type j's time left when it is busy until after now);
* money: Σ_j Σ_k x[k][j] · AvgPCost[j][k] <= remaining budget;
* tasks: Σ_j x[k][j] <= tasks left in category k.

``plan_max_tasks`` (budget mode, and the paper's experiment) maximises the tasks done,
then, among plans doing as many, the cheapest (a cost term weighted below one task).
Stopped by its time limit before proving optimality, it keeps the better of HiGHS's
incumbent and the LP relaxation rounded down and filled greedily (``_rounded``).
``plan_min_cost`` (deadline mode) does every task by the deadline at the least cost,
or reports the problem infeasible. A missing budget or deadline is not a constraint.
Solved with HiGHS through PuLP (``core.solve``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

import pulp

from autoscaler.categories.deployment import Key
from autoscaler.core.solve import SolveOutcome, solve_lp


@dataclass(frozen=True, slots=True)
class CategoryPlan:
    """Tasks per (category, type), with what the plan expects them to take."""

    outcome: SolveOutcome
    counts: dict[Key, int] = field(default_factory=dict)
    cost: float = 0.0
    busy_s: dict[str, float] = field(default_factory=dict)  # per type: Σ x·TR / lanes
    note: str | None = None

    @property
    def tasks(self) -> int:
        return sum(self.counts.values())

    def allocation(self, type_name: str) -> dict[int, int]:
        """Category to tasks, for one type (the paper's TRA_Rj)."""
        return {k: n for (k, t), n in self.counts.items() if t == type_name and n > 0}


def plan_max_tasks(
    left: Mapping[int, int],
    turnaround: Mapping[Key, float],
    cost: Mapping[Key, float],
    *,
    budget: float | None,
    deadline_s: float | None,
    lanes: Mapping[str, int] | None = None,
    available_s: Mapping[str, float] | None = None,
    time_limit_s: float | None = 10.0,
    cheapest: bool = True,
) -> CategoryPlan:
    """The plan doing the most tasks within the budget and deadline; a budget or
    deadline already spent (<= 0) plans nothing. ``cheapest``: of the plans doing as
    many, the cheapest (harder to prove optimal); else any of them."""
    if (budget is not None and budget <= 0) or (deadline_s is not None and deadline_s <= 0):
        return CategoryPlan("optimal")
    lp = pulp.LpProblem("categories_max_tasks", pulp.LpMaximize)
    x = _variables(lp, left, turnaround)
    most = sum(left.values()) * max((cost.get(key, 0.0) for key in x), default=0.0)
    weight = 1.0 / (2.0 * most) if most > 0 and cheapest else 0.0
    lp += _sum((v, 1.0 - weight * cost[key]) for key, v in x.items())
    window = _window(deadline_s, lanes, available_s)
    _constrain(lp, x, left, turnaround, cost, budget, window)
    plan = _read(lp, x, turnaround, cost, lanes, time_limit_s)
    if plan.outcome == "optimal":
        return plan
    rounded = _rounded(left, turnaround, cost, budget, window, lanes, weight)
    return rounded if (rounded.tasks, -rounded.cost) > (plan.tasks, -plan.cost) else plan


def plan_min_cost(
    left: Mapping[int, int],
    turnaround: Mapping[Key, float],
    cost: Mapping[Key, float],
    *,
    deadline_s: float,
    budget: float | None = None,
    lanes: Mapping[str, int] | None = None,
    available_s: Mapping[str, float] | None = None,
    time_limit_s: float | None = 10.0,
) -> CategoryPlan:
    """The cheapest plan doing every task left by the deadline (outcome
    ``infeasible`` with no counts when none does)."""
    lp = pulp.LpProblem("categories_min_cost", pulp.LpMinimize)
    x = _variables(lp, left, turnaround)
    lp += _sum((v, cost[key]) for key, v in x.items())
    window = _window(deadline_s, lanes, available_s)
    _constrain(lp, x, left, turnaround, cost, budget, window, exact=True)
    return _read(lp, x, turnaround, cost, lanes, time_limit_s)


def _variables(
    lp: pulp.LpProblem, left: Mapping[int, int], turnaround: Mapping[Key, float]
) -> dict[Key, pulp.LpVariable]:
    return {
        (k, j): lp.add_variable(f"x_{k}_{i}", 0, left[k], cat="Integer")
        for i, (k, j) in enumerate(sorted(turnaround))
        if left.get(k, 0) > 0
    }


def _constrain(
    lp: pulp.LpProblem,
    x: Mapping[Key, pulp.LpVariable],
    left: Mapping[int, int],
    turnaround: Mapping[Key, float],
    cost: Mapping[Key, float],
    budget: float | None,
    window: Callable[[str], float] | None,
    *,
    exact: bool = False,
) -> None:
    for k, n in sorted(left.items()):
        share = _sum((v, 1.0) for (kk, _), v in x.items() if kk == k)
        lp += (share == n) if exact else (share <= n), f"tasks_{k}"
    if window is not None:
        for i, j in enumerate(sorted({j for _, j in x})):
            busy = _sum((v, turnaround[key]) for key, v in x.items() if key[1] == j)
            lp += busy <= max(0.0, window(j)), f"time_{i}"
    if budget is not None:
        lp += _sum((v, cost[key]) for key, v in x.items()) <= budget, "money"


def _sum(terms: Iterable[tuple[pulp.LpVariable, float]]) -> pulp.LpAffineExpression:
    """Σ coefficient·variable, built in one go (PuLP's operators copy at every term)."""
    return pulp.LpAffineExpression(list(terms))


def _window(
    deadline_s: float | None,
    lanes: Mapping[str, int] | None,
    available_s: Mapping[str, float] | None,
) -> Callable[[str], float] | None:
    """Each type's task-time capacity: its time left (or the deadline) x its lanes."""
    if deadline_s is None:
        return None

    def window(type_name: str) -> float:
        left = deadline_s if available_s is None else available_s.get(type_name, deadline_s)
        return min(left, deadline_s) * _lanes(lanes, type_name)

    return window


def _lanes(lanes: Mapping[str, int] | None, type_name: str) -> int:
    return 1 if lanes is None else lanes.get(type_name, 0)


def _read(
    lp: pulp.LpProblem,
    x: Mapping[Key, pulp.LpVariable],
    turnaround: Mapping[Key, float],
    cost: Mapping[Key, float],
    lanes: Mapping[str, int] | None,
    time_limit_s: float | None,
) -> CategoryPlan:
    if not x:
        return CategoryPlan("optimal")
    solved = solve_lp(lp, "highs", "category plan", time_limit_s)
    if solved.outcome not in ("optimal", "feasible"):
        return CategoryPlan(solved.outcome, note=solved.note)
    counts = {key: round(v.value() or 0) for key, v in x.items()}
    return _plan_of(solved.outcome, counts, turnaround, cost, lanes, solved.note)


def _plan_of(
    outcome: SolveOutcome,
    counts: Mapping[Key, int],
    turnaround: Mapping[Key, float],
    cost: Mapping[Key, float],
    lanes: Mapping[str, int] | None,
    note: str | None,
) -> CategoryPlan:
    kept = {key: n for key, n in counts.items() if n > 0}
    busy: dict[str, float] = {}
    for (k, j), n in kept.items():
        busy[j] = busy.get(j, 0.0) + n * turnaround[k, j] / max(1, _lanes(lanes, j))
    spent = sum(n * cost[key] for key, n in kept.items())
    return CategoryPlan(outcome, kept, cost=spent, busy_s=busy, note=note)


def _rounded(
    left: Mapping[int, int],
    turnaround: Mapping[Key, float],
    cost: Mapping[Key, float],
    budget: float | None,
    window: Callable[[str], float] | None,
    lanes: Mapping[str, int] | None,
    weight: float,
) -> CategoryPlan:
    """The MILP's fallback when its time limit stops it unproven (a busy host): the LP
    relaxation rounded down, then filled one task at a time with the pair that uses
    the least of the money and its type's time left. Deterministic, and never worse
    than G + C tasks below the relaxation's bound before the filling."""
    lp = pulp.LpProblem("categories_relaxed", pulp.LpMaximize)
    keys = [key for key in sorted(turnaround) if left.get(key[0], 0) > 0]
    x = {key: lp.add_variable(f"r_{i}", 0, left[key[0]]) for i, key in enumerate(keys)}
    lp += _sum((v, 1.0 - weight * cost[key]) for key, v in x.items())
    _constrain(lp, x, left, turnaround, cost, budget, window)
    solved = solve_lp(lp, "highs", "category plan (relaxed)", None)
    counts = dict.fromkeys(keys, 0)
    if solved.outcome in ("optimal", "feasible"):
        counts = {key: math.floor(v.value() or 0) for key, v in x.items()}
    money = math.inf if budget is None else budget - sum(n * cost[k] for k, n in counts.items())
    time_left = {j: window(j) if window else math.inf for _, j in keys}
    todo = dict(left)
    for (k, j), n in counts.items():
        time_left[j] -= n * turnaround[k, j]
        todo[k] -= n
    while True:
        fits = [
            (_share(cost[key], money) + _share(turnaround[key], time_left[key[1]]), key)
            for key in keys
            if todo[key[0]] > 0 and cost[key] <= money and turnaround[key] <= time_left[key[1]]
        ]
        if not fits:
            break
        _, (k, j) = min(fits)
        counts[k, j] += 1
        todo[k] -= 1
        money -= cost[k, j]
        time_left[j] -= turnaround[k, j]
    return _plan_of("feasible", counts, turnaround, cost, lanes, "LP relaxation rounded and filled")


def _share(need: float, left: float) -> float:
    return 0.0 if math.isinf(left) or left <= 0 else need / left


def plan_categories(
    counts: Mapping[int, int],
    means: Mapping[Key, float],
    prices: Mapping[str, float],
    budget: float | None,
    deadline_s: float | None,
    lanes: Mapping[str, int] | None = None,
) -> dict[Key, int]:
    """The narrow entry point for the run's planners: ``means`` the mean task time per
    (category, type), ``prices`` each type's price per second of a task's time (for a
    cloud type, its price per ATU over the ATU), ``lanes`` tasks each type runs at once
    (machines x slots). With a budget, the most tasks it and the deadline allow; with
    only a deadline, every task at the least cost (empty when that is infeasible)."""
    cost = {key: means[key] * prices[key[1]] for key in means if key[1] in prices}
    turnaround = {key: means[key] for key in cost}
    if budget is None and deadline_s is not None:
        return plan_min_cost(counts, turnaround, cost, deadline_s=deadline_s, lanes=lanes).counts
    return plan_max_tasks(
        counts, turnaround, cost, budget=budget, deadline_s=deadline_s, lanes=lanes
    ).counts

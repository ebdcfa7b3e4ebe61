"""Budgets and what they buy: the options ``autoscaler plan`` offers once the samples
are in, from the minimum budget that finishes the bag (``budget.minimum``) to the one
that buys the fastest mix (pure)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from autoscaler.budget.controller import Controller
from autoscaler.budget.minimum import minimum_budget
from autoscaler.budget.planner import plan_budget
from autoscaler.budget.problem import BudgetProblem
from autoscaler.core.state import RunState

__all__ = [
    "Frontier",
    "Option",
    "cents_up",
    "dominates",
    "frontier",
    "undominated",
]


@dataclass(frozen=True, slots=True)
class Option:
    """One budget and what it is predicted to buy."""

    label: str
    budget: float  # the whole run's budget
    counts: dict[str, int]
    cost: float
    cost_interval: tuple[float, float]
    makespan_s: float
    makespan_interval_s: tuple[float, float]


def dominates(a: Option, b: Option) -> bool:
    """Whether ``a`` is predicted to cost no more than ``b`` and to end no later, and
    strictly less of one of them."""
    return (
        a.cost <= b.cost
        and a.makespan_s <= b.makespan_s
        and (a.cost < b.cost or a.makespan_s < b.makespan_s)
    )


def undominated(options: Sequence[Option]) -> tuple[Option, ...]:
    """``options`` without those another option dominates (dearer and no faster, or
    slower and no cheaper), in their order."""
    return tuple(o for o in options if not any(dominates(p, o) for p in options))


@dataclass(frozen=True, slots=True)
class Frontier:
    """The budget-estimation frontier (slides 001): budgets from the least that finishes
    the bag to the one that buys the fastest mix, each with its prediction; none of
    them dominated by another."""

    sampled_at_s: float  # when the samples were complete
    sampling_cost: float  # committed by then (paid whichever option is chosen)
    tasks_left: int
    minimum_budget: float | None  # None: no budget the planner can search finishes it
    options: tuple[Option, ...]
    slots: Mapping[str, int] = field(default_factory=dict)  # tasks a type's machine runs at once


def frontier(controller: Controller, state: RunState, now: float, between: int = 3) -> Frontier:
    """The options at ``now``, once the samples are in: the minimum budget, +20 % over it,
    ``between`` budgets spaced evenly (geometrically) up to the fastest −20 %, and the
    fastest (every machine the types allow), less those another option dominates (a
    higher budget may buy a mix predicted to cost less and end sooner). With categories,
    each option's mix is the one a re-plan with that budget would choose
    (``category_mix``), predicted at the means it would show. Pure: ``state`` is not
    changed."""
    est, n_e = controller.outlook(state, now)
    if not est:
        raise ValueError("no machine type has a runtime estimate yet")
    base = state.money.committed

    def problem(money: float) -> BudgetProblem:
        return controller.budget_problem(state, now, est, n_e, money)

    solver = controller.settings.solver
    more = minimum_budget(problem(0.0), solver)
    if more is None:
        return Frontier(now, base, state.tasks_left, None, (), _slots(state))
    reserve = controller.end_reserve(state, est)
    b_min = base + more + reserve
    if controller.mixes_categories:  # the least money whose own mix finishes the bag
        money = controller.least_money(state, now, est, n_e, more + reserve)
        if money is None:
            return Frontier(now, base, state.tasks_left, None, (), _slots(state))
        b_min = base + money
    b_min = cents_up(b_min)
    # Enough money for every machine over the fluid makespan of them all, twice over.
    everything = list(problem(0.0).types)
    speed = sum(t.max_count * t.slots / t.mean_s for t in everything)
    units = math.ceil(n_e / speed / state.billing.atu_s) + 2
    ample = sum(t.max_count * (t.price * units + t.first_cost) for t in everything) * 2
    fastest = plan_budget(problem(ample), solver)
    b_fast = max(b_min, base + reserve + (fastest.cost if fastest is not None else more))
    budgets: list[tuple[str, float]] = [("minimum", b_min)]
    low, high = 1.2 * b_min, 0.8 * b_fast
    if high > low:
        budgets.append(("minimum +20%", low))
        ratio = (high / low) ** (1 / (between + 1))
        budgets += [("between", low * ratio**i) for i in range(1, between + 1)]
        budgets.append(("fastest -20%", high))
    budgets.append(("fastest", b_fast))
    budgets = [(label, cents_up(b)) for label, b in budgets]
    options: list[Option] = []
    seen: set[tuple[tuple[str, int], ...]] = set()
    for label, budget in budgets:
        if controller.mixes_categories:  # which tasks each type gets shapes the mix
            plan = controller.mix_plan(state, now, est, n_e, budget - base)
        else:
            plan = plan_budget(problem(budget - base - reserve), solver)
        if plan is None:
            continue
        counts = {n: plan.counts.get(n, 0) for n in state.types}
        key = tuple(sorted(counts.items()))
        if key in seen and label not in ("minimum", "fastest"):
            continue
        seen.add(key)
        c = controller.predict(state, now, counts, est, budget)
        assert c.cost_interval is not None
        assert c.makespan_interval_s is not None
        assert c.predicted_cost is not None
        assert c.predicted_makespan_s is not None
        options.append(
            Option(
                label,
                budget,
                counts,
                c.predicted_cost,
                c.cost_interval,
                c.predicted_makespan_s,
                c.makespan_interval_s,
            )
        )
    return Frontier(now, base, state.tasks_left, b_min, undominated(options), _slots(state))


def cents_up(budget: float) -> float:
    """``budget`` rounded up to the cent: an option is planned and predicted for the
    budget it shows, and no rounding puts it below the least budget that finishes the
    bag (a relative 1e-12 of float noise is not a cent)."""
    return math.ceil(round(budget * 100 * (1 - 1e-12), 6)) / 100


def _slots(state: RunState) -> dict[str, int]:
    return {name: t.slots for name, t in state.types.items()}

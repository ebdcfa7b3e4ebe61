"""The budget at risk: the plan in force finishes the bag within the budget at the
estimated runtimes, but its cost interval, uncapped, reaches past the budget (pure).

A ``Shortfall`` says the budget will not suffice at the estimates; a ``Risk`` says,
earlier and more often, that it may not: at the slow end of the runtimes' intervals
the mix would need more money than the budget (``Configure.slow_cost``: the upper end
of the plan's cost interval before it is capped at the budget, ``plans.configure``).
Said once per budget (and not after a shortfall).
"""

from __future__ import annotations

from autoscaler.budget.settings import EPS
from autoscaler.core.model import Configure, Risk
from autoscaler.core.state import RunState
from autoscaler.core.step import Step


def said(state: RunState) -> bool:
    """Whether the risk (or the shortfall, which says more) was said under this budget."""
    for warnings in (state.risks, state.shortfalls):
        if warnings:
            at = warnings[-1][0]
            if state.budget_set_at is None or at >= state.budget_set_at:
                return True
    return False


def check_risk(s: Step, plan: Configure) -> bool:
    """Say the budget is at risk if ``plan``'s uncapped cost interval reaches past it
    and that has not been said; True when said now."""
    state = s.state
    budget = state.budget
    if budget is None or state.tasks_left <= 0 or plan.slow_cost is None or said(state):
        return False
    hi = plan.slow_cost
    if hi <= budget + EPS:
        return False
    slow = ", ".join(f"{n} {t:.0f} s" for n, t in sorted(plan.assumed_hi_s.items()))
    message = (
        f"budget at risk: at the slow end of the runtime estimates ({slow}) the plan's "
        f"cost interval reaches {hi:.2f}, past the budget of {budget:.2f}, with "
        f"{state.tasks_left} tasks left"
    )
    s.do(Risk(state.tasks_left, hi, message))
    return True

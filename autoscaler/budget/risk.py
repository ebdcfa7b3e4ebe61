"""The budget at risk: the plan in force finishes the bag within the budget at the
estimated runtimes, but its cost interval, uncapped, reaches past the budget (pure).

A ``Shortfall`` says the budget will not suffice at the estimates; a ``Risk`` says,
earlier and more often, that it may not: at the slow end of the runtimes' intervals
the mix would need more money than the budget (``Configure.slow_cost``: the upper end
of the plan's cost interval before it is capped at the budget, ``plans.configure``).
Said once per budget (and not after a shortfall).

One more is said at the start, before any runtime is known (``check_start``): when
the sampling configuration's first commitment alone is more than ``START_SHARE`` of
the budget. No warning made from measured runtimes can then come before half the
budget is committed, and less than half is left for the rest of the bag whatever the
runtimes turn out to be. The slow end's warning may still follow it.
"""

from __future__ import annotations

from autoscaler.budget.settings import EPS
from autoscaler.core.model import Configure, Risk
from autoscaler.core.state import RunState
from autoscaler.core.step import Step

START_SHARE = 0.5
"""Sampling's first commitment past this share of the budget is a risk said at once."""


def said(state: RunState) -> bool:
    """Whether the risk at the slow end (or the shortfall, which says more) was said
    under this budget; the risk said at the start does not count."""
    for warnings in (state.shortfalls, [(t, r) for t, r in state.risks if not r.at_start]):
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
    s.do(Risk(state.tasks_left, hi, message, committed=state.committed))
    return True


def check_start(s: Step, sampling: Configure) -> bool:
    """At the start, before the sampling machines are launched: say the budget is at
    risk if their first commitment (a whole ATU each under fixed billing, the first
    step under per-second) is more than ``START_SHARE`` of it; True when said."""
    state = s.state
    budget = state.budget
    if budget is None or budget <= 0 or state.tasks_left <= 0:
        return False
    billing = state.billing
    first = sum(
        c * billing.cost(state.types[n].price, billing.first_step_s)
        for n, c in sampling.counts.items()
        if c > 0
    )
    if first <= START_SHARE * budget + EPS:
        return False
    machines = ", ".join(f"{n} {c}" for n, c in sorted(sampling.counts.items()) if c > 0)
    message = (
        f"budget at risk: sampling alone ({machines}) commits {first:.2f} of the budget "
        f"of {budget:.2f} before any runtime is known, so less than half is left for the "
        f"{state.tasks_left} tasks whatever their runtimes"
    )
    s.do(Risk(state.tasks_left, None, message, committed=state.committed, at_start=True))
    return True

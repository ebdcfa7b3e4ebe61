"""The budget at risk: the money left finishes the bag at the estimated runtimes, but not
at the slower runtimes the planner keeps a reserve for (pure).

One question, "does the money left finish the tasks left?", asked at two runtimes:

* a ``Shortfall`` (``monitor``) says it does not even at the estimated means;
* a ``Risk`` (here) says it does not at the reserved runtimes, each mean raised by
  ``reserve_z`` standard errors (``runtimes.reserved``): no mix the planner can find
  finishes the tasks the time already paid leaves (N_e) with the money left.

``autoscaler plan`` finds its minimum budget by the same test with the end reserve
(``runtimes.end_reserve``) kept back on top (``frontier.frontier``,
``minimum.minimum_budget``; with categories ``category_mix.least_money``), so a budget
the planner offers is not said at risk by the same planner while the estimates stay as
they were; said later, the message gives the estimates that moved. The end reserve is
not kept back here: it is the money for the end of the bag, and a run spends it there.
The test asks whether any mix finishes, not what the mix in force would cost at the slow
end: the monitor re-plans onto a cheaper mix when runtimes turn out slow, and a mix's
slow-end cost past the budget warned runs that then finished.

Said once per budget, not after a shortfall, and only once runtimes are measured: before
the samples are in nothing is known of them, and the share of the budget sampling
commits predicts nothing of the rest. The report says whether the run bore it out
(``report.build``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from autoscaler.budget.category_mix import least_money, pays_for
from autoscaler.budget.minimum import minimum_budget
from autoscaler.budget.planner import plan_budget, plannable
from autoscaler.budget.plans import budget_problem
from autoscaler.budget.problem import TypeEstimate
from autoscaler.budget.runtimes import reserved
from autoscaler.budget.settings import ControllerSettings, money_left
from autoscaler.categories.sort import Category
from autoscaler.core.model import Risk
from autoscaler.core.money_ledger import Money
from autoscaler.core.observations import Observations
from autoscaler.core.state import RunState
from autoscaler.core.step import Step
from autoscaler.core.words import counted


def said(state: RunState) -> bool:
    """Whether a risk (or a shortfall, which says more) was said under this budget; a
    risk said at the start by older versions does not count."""
    for warnings in (
        state.decisions.shortfalls,
        [(t, r) for t, r in state.decisions.risks if not r.at_start],
    ):
        if warnings:
            at = warnings[-1][0]
            if state.money.budget_set_at is None or at >= state.money.budget_set_at:
                return True
    return False


def affords(
    settings: ControllerSettings,
    state: RunState,
    now: float,
    est: dict[str, TypeEstimate],
    n_e: float,
    money: float,
    categories: Sequence[Category] | None = None,
) -> bool:
    """Whether ``money`` (beyond what is committed) pays for the ``n_e`` tasks the time
    already paid leaves, at the reserved runtimes: the minimum budget's test, the end
    reserve aside."""
    if n_e <= 0:
        return True
    if categories is not None:
        return pays_for(settings, state, now, est, n_e, categories, reserve=False)(money)
    problem = budget_problem(settings, state, now, est, n_e, money)
    return plannable(problem) and plan_budget(problem, settings.solver) is not None


def needed(
    settings: ControllerSettings,
    state: RunState,
    now: float,
    est: dict[str, TypeEstimate],
    n_e: float,
    categories: Sequence[Category] | None = None,
) -> float | None:
    """About the least whole-run budget that passes ``affords`` (None: none the planner
    can search), as ``autoscaler plan`` works out its minimum, the end reserve aside."""
    problem = budget_problem(settings, state, now, est, n_e, 0.0)
    more = minimum_budget(problem, settings.solver) if problem.types else None
    if more is None:
        return None
    if categories is None:
        return state.money.committed + more
    money = least_money(settings, state, now, est, n_e, categories, more, reserve=False)
    return None if money is None else state.money.committed + money


def check_risk(
    settings: ControllerSettings,
    s: Step,
    est: dict[str, TypeEstimate],
    n_e: float,
    categories: Sequence[Category] | None = None,
) -> bool:
    """Say the budget is at risk if the money left does not pay for the tasks left at the
    reserved runtimes (``affords``) and that has not been said; True when said now."""
    state = s.state
    budget = state.money.budget
    if budget is None or state.tasks_left <= 0 or not est or said(state):
        return False
    left = money_left(state.money)
    if affords(settings, state, s.now, est, n_e, left, categories):
        return False
    need = needed(settings, state, s.now, est, n_e, categories)
    slow = _runtimes(state.money, state.observed, est, reserved(settings, state, est))
    bag = (
        f"the bag needs about {need:.2f} in all"
        if need is not None
        else "no budget the planner can search finishes the bag"
    )
    z = settings.reserve_z
    message = (
        f"budget at risk: at runtimes {counted(z, 'standard error', spec='g')} slower "
        f"than estimated ({slow}) the {left:.2f} left does not finish the "
        f"{counted(state.tasks_left, 'task')} left: {bag}, the budget is {budget:.2f}"
    )
    s.do(Risk(state.tasks_left, need, message, committed=state.money.committed))
    return True


def _runtimes(
    money: Money,
    observed: Observations,
    est: Mapping[str, TypeEstimate],
    slow: Mapping[str, TypeEstimate],
) -> str:
    """Each type's reserved runtime, with its estimate and the runs it rests on, and
    what the estimate was when the samples were in, if the run was held then for a
    budget (``autoscaler plan``: its options were made on those)."""
    parts = []
    for n, e in sorted(est.items()):
        if n not in slow:
            continue
        held = money.held_means.get(n)
        was = "" if held is None else f", {held:.0f} s when the plan's options were made"
        parts.append(
            f"{n} {slow[n].mean_s:.0f} s: estimate {e.mean_s:.0f} s from "
            f"{counted(observed.stats[n].done, 'run')}{was}"
        )
    return "; ".join(parts)

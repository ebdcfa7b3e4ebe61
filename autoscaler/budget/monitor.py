"""Monitoring and re-planning (paper 000 §2.2): N_e against N_p every monitoring
interval, a re-plan on a violation or when a clearly faster mix is affordable, and the
warning (or stop) when the budget is unlikely to finish the bag."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

from autoscaler.budget import plans
from autoscaler.budget.category_means import alone
from autoscaler.budget.category_mix import plan_mix
from autoscaler.budget.outlook import forecast, potential
from autoscaler.budget.planner import plan_budget, plannable
from autoscaler.budget.plans import best_effort
from autoscaler.budget.problem import Plan, TypeEstimate
from autoscaler.budget.risk import check_risk
from autoscaler.budget.risk import needed as needed_at_reserved
from autoscaler.budget.runtimes import end_reserve, n_eff, outlook, running_ages
from autoscaler.budget.sampling import (
    compact_progress,
    is_compact,
    late_sampled,
    late_sampling,
    late_types,
    refused_unsampled,
    sampling_types,
    stats,
)
from autoscaler.budget.settings import EPS, ControllerSettings, money_left, planned
from autoscaler.categories.sort import Category
from autoscaler.core.decisions import Decisions
from autoscaler.core.model import Hold, Shortfall, Stop
from autoscaler.core.state import RunState
from autoscaler.core.step import Step
from autoscaler.core.words import counted

_EARLY_CHECK = 5  # completions per type before an early "budget insufficient" is trusted


def check(
    settings: ControllerSettings,
    s: Step,
    tick: bool,
    categories: Sequence[Category] | None = None,
) -> bool:
    """Check the plan; re-plan when needed. Returns True when the target changed.
    ``categories``: the means are those of the tasks each type is given
    (``category_means``), and so is the mix (``category_mix``)."""
    state = s.state
    if state.money.awaiting_budget:
        return False
    if not planned(state.decisions):
        if is_compact(settings, state):
            ready, sampling = compact_progress(settings, s)
        else:
            sampling = sampling_types(state, s.now)
            ready = bool(sampling) and all(state.observed.stats[n].sampled for n in sampling)
        if ready:
            est, n_e = outlook(settings, state, s.now, categories)
            if settings.hold_after_sampling:
                means = {n: e.mean_s for n, e in est.items()}
                s.do(Hold("samples complete: the run waits for a budget", means))
                return False
            return replan(
                settings, s, est, n_e, "plan after sampling", force=True, categories=categories
            )
        if (
            tick
            and sampling
            and not settings.hold_after_sampling  # planning: any budget may come
            and not state.decisions.shortfalls
            and all(stats(settings, state, n).done >= _EARLY_CHECK for n in sampling)
        ):
            # Before the samples are complete, warn only if even the optimistic
            # reading of what is known says the budget cannot finish the bag.
            est, n_e = outlook(settings, state, s.now)
            _shortfall(settings, s, est, n_e, optimistic=True)
        return False
    if state.finished:
        return False
    late = _late(settings, s, tick, categories)
    if late is not None:
        return late
    if not tick:
        return False
    est, n_e = outlook(settings, state, s.now, categories)
    if not est:
        return False
    n_p = potential(
        state,
        {n: e.mean_s for n, e in est.items()},
        {n: e.sd_s for n, e in est.items()},
        settings.cushion_z,
        settings.final_loss,
    )
    if n_p < n_e - _noise(settings, state, est, n_e):
        why = f"N_p={n_p:.0f} < N_e={n_e:.0f}"
        return replan(settings, s, est, n_e, why, force=True, shrink=True, categories=categories)
    moved = _left_assumed(state.decisions, est)
    if moved is not None and state.tasks.pending:
        return replan(settings, s, est, n_e, moved, force=True, refresh=True, categories=categories)
    return replan(
        settings, s, est, n_e, "faster mix affordable", force=False, categories=categories
    )


def _late(
    settings: ControllerSettings, s: Step, tick: bool, categories: Sequence[Category] | None
) -> bool | None:
    """On a tick, sample the types refused through sampling once they may be launched
    again (``sampling.late_sampling``); plan with them as soon as their samples are in.
    The plan in force holds meanwhile, as the first sampling holds the first plan.
    Returns whether the target changed, or None when no such type concerns the step."""
    state = s.state
    waiting = late_sampled(state, s.now)
    if waiting:
        return False
    if waiting is not None:
        got = [n for n in late_types(state.decisions) if state.observed.stats[n].sampled]
        if not got:
            return None  # refused again, or no task left to sample: monitored as usual
        est, n_e = outlook(settings, state, s.now, categories)
        why = f"plan after sampling {', '.join(got)}, refused through sampling"
        return replan(settings, s, est, n_e, why, force=True, categories=categories)
    if not tick or not refused_unsampled(settings, state):
        return None
    est, n_e = outlook(settings, state, s.now, categories)
    configured = late_sampling(settings, state, s.now, _spare(state, s.now, est))
    if configured is None:
        return None
    s.do(configured)
    return True


def _spare(state: RunState, now: float, est: dict[str, TypeEstimate]) -> float:
    """The money the plan in force leaves: the budget less what its mix is forecast to
    cost to the end of the bag (fluid, at the estimated means) and the end reserve.
    All the money left when the plan is a best effort: the known types cannot finish
    the bag within the budget, so sampling another risks no finish they promised."""
    plan = state.decisions.plan()
    if state.money.budget is None or (plan is not None and plan.best_effort):
        return money_left(state.money)
    counts = {n: c for n, c in state.decisions.target.items() if n in est}
    means = {n: e.mean_s for n, e in est.items()}
    needed = forecast(state, now, counts, means).fluid_cost + end_reserve(state, est)
    return state.money.budget - needed


def _noise(
    settings: ControllerSettings, state: RunState, est: dict[str, TypeEstimate], n_e: float
) -> float:
    """How far N_p may fall below N_e by the estimates' noise alone: N_e times the
    largest relative standard error of a mean runtime (σ_i/T_i/√n_i). A shortfall
    within it does not force a re-plan (that would trade a plan made to spend the
    budget exactly for a much slower one, over a few tasks the next estimate may
    give back); the end reserve pays for what is left of it."""
    worst = max(
        (e.sd_s / e.mean_s / math.sqrt(n_eff(settings, state, n, e)) for n, e in est.items()),
        default=0.0,
    )
    return n_e * worst


def _left_assumed(decisions: Decisions, est: dict[str, TypeEstimate]) -> str | None:
    """Which estimate has left the interval the current plan assumed, if any."""
    current = decisions.plan()
    if current is None:
        return None
    for name, e in sorted(est.items()):
        lo, hi = current.assumed_lo_s.get(name), current.assumed_hi_s.get(name)
        if lo is not None and hi is not None and not lo <= e.mean_s <= hi:
            return (
                f"estimate left the plan's interval: {name} {e.mean_s:.0f} s "
                f"outside [{lo:.0f}, {hi:.0f}]"
            )
    return None


def replan(
    settings: ControllerSettings,
    s: Step,
    est: dict[str, TypeEstimate],
    n_e: float,
    reason: str,
    force: bool,
    refresh: bool = False,
    shrink: bool = False,
    categories: Sequence[Category] | None = None,
) -> bool:
    """Solve the budget problem for what is left; adopt the result if it is needed.

    ``force`` (first plan, or N_p < N_e) adopts whatever the planner finds. Otherwise
    a plan is adopted when it is ``leap_ratio`` faster than the current mix (a plan
    made on pessimistic samples is left as soon as the estimates recover), or
    ``improve_ratio`` faster and still affordable with ``improve_reserve`` of the
    money kept back (small gains must not chase noise). ``refresh`` issues the
    configuration even when the counts stay, so its prediction is renewed.
    ``shrink`` (N_p < N_e: the machines kept cost more than the money left pays)
    first looks for a mix of the machines alive, launching none, and takes it if
    it finishes the bag within budget: a new machine pays a whole first step, and
    on types that differ by noise alone the planner would trade machines back and
    forth on every small move of the estimates. With ``categories`` each mix is
    planned with, and predicted at, the means it will show (``category_mix``).
    """
    state = s.state
    if not est:
        return False
    first = not planned(state.decisions)
    kept = state.fleet.alive_counts(include_marked=False)
    current = {name: kept[name] for name in state.types}
    speed_now = sum(current[n] * e.slots / e.mean_s for n, e in est.items())
    wanted = speed_now * settings.improve_ratio
    if not force and _at_most(settings, state, est, categories) < wanted:
        return False  # no mix is fast enough to be taken: the planner is not asked
    budget = money_left(state.money)
    chosen: Plan | None
    notes: list[str] = []
    used = est  # the means the chosen mix is predicted at
    tight = False  # the planner found no mix the budget pays for

    def mix(types: dict[str, TypeEstimate], money: float, wanted: float = 0.0) -> Plan | None:
        nonlocal used
        found, used = plan_mix(
            settings, state, s.now, types, n_e, money, notes, wanted, categories, not force
        )
        return found

    if n_e <= 0:
        chosen = Plan(counts=current, units=0, speed=speed_now, cost=0.0)
        reason += "; time already paid covers the bag"
    else:
        chosen = None
        if shrink:
            alive = {n: replace(e, max_count=min(e.max_count, e.live)) for n, e in est.items()}
            chosen = mix(alive, budget)
        if chosen is None:
            chosen = mix(est, budget, 0.0 if force else speed_now * settings.improve_ratio)
        if not force and chosen is not None and chosen.speed < speed_now * settings.improve_ratio:
            return False  # the full budget buys nothing clearly faster
        if not force and chosen is not None and chosen.speed < speed_now * settings.leap_ratio:
            # A small gain must hold with money to spare.
            chosen = mix(est, budget * (1 - settings.improve_reserve))
    if chosen is None:
        if not force:
            return False
        if _shortfall(settings, s, est, n_e, optimistic=False):
            return True
        used = alone(state, est, categories)
        chosen = best_effort(state, used)
        tight = True
        reason += "; budget tight: most profitable type only"
    elif not force and chosen.speed < speed_now * settings.improve_ratio:
        return False
    counts = {name: chosen.counts.get(name, 0) for name in state.types}
    if counts == state.decisions.target and not first and not refresh:
        return False
    if notes:
        reason += "; solver: " + "; ".join(notes)
    configured = plans.configure(settings, s, counts, used, reason)
    if tight:
        configured = replace(configured, best_effort=True)
    s.do(configured)
    if state.money.budget is not None and state.tasks_left > 0:
        # The plan fits the planner's model; if even its fluid cost at the estimated
        # means is more than the budget, and no mix the planner finds at those means
        # fits the money left, the bag is unlikely to finish: say so now. One mix too
        # dear says only that: the monitor re-plans it (N_p < N_e) before it overspends.
        means = {n: e.mean_s for n, e in used.items()}
        over = forecast(state, s.now, counts, means).fluid_cost
        if over > state.money.budget + EPS and not _finishes_at_means(settings, s, est, n_e):
            _shortfall(settings, s, est, n_e, optimistic=False, needed_at_least=over)
        check_risk(settings, s, est, n_e, categories)
    return True


def _finishes_at_means(
    settings: ControllerSettings, s: Step, est: dict[str, TypeEstimate], n_e: float
) -> bool:
    """Whether some mix the planner finds at the estimated means does the ``n_e`` tasks
    the paid time leaves with the money left."""
    if n_e <= 0:
        return True
    problem = plans.bare_problem(settings, s.state, s.now, est, n_e, money_left(s.state.money))
    return plannable(problem) and plan_budget(problem, settings.solver) is not None


def _at_most(
    settings: ControllerSettings,
    state: RunState,
    est: dict[str, TypeEstimate],
    categories: Sequence[Category] | None,
) -> float:
    """The most speed any mix the planner may find can have: every type's machines at
    its limit (or those alive, if more) at its estimated mean; a mix is planned at
    means no shorter (``plans.plan``: raised by the reserve, divided by a recovering
    type's weight) and taken at these. Inf (no bound) with categories, whose mixes are
    judged at the means they would show, and under compact sampling, where planning
    builds the mapped estimates it keeps (``budget.sampling.derived``). Widened by a
    relative 1e-9, for sums added in another order."""
    if categories is not None or is_compact(settings, state):
        return math.inf
    top = sum(max(e.max_count, e.live) * e.slots / e.mean_s for e in est.values())
    return top * (1 + 1e-9)


def _shortfall(
    settings: ControllerSettings,
    s: Step,
    est: dict[str, TypeEstimate],
    n_e: float,
    optimistic: bool,
    needed_at_least: float = 0.0,
) -> bool:
    """Say that the budget is unlikely to finish the bag, once it is known; with
    ``on_shortfall: stop`` also stop the run. Returns True when it stopped.

    ``optimistic`` (before the samples are complete): only when even the cheapest
    conceivable way of doing N_e tasks does not fit, every type at the lower end
    of its mean's interval (each running task counted as ending now), all on the
    most profitable type at its fluid cost c_i·T_i/ATU. Otherwise the planner found
    no affordable mix at the estimated means, or the mix it found costs more than the
    budget in the forecast (``needed_at_least``). The budget needed is the planner's
    minimum at the estimated means plus the end reserve and what is committed, and
    at least ``needed_at_least``.
    """
    state = s.state
    if state.decisions.shortfalls:
        # Said already under this budget: the needed budget (a bisection of planner
        # solves) is worked out again, and said again, only once a tenth of the tasks
        # then left is done.
        said_at, last = state.decisions.shortfalls[-1]
        same_budget = state.money.budget_set_at is None or said_at >= state.money.budget_set_at
        if same_budget and state.tasks_left > 0.9 * last.tasks_left:
            return settings.on_shortfall == "stop" and _stop(s, last.message)
    budget = money_left(state.money)
    if optimistic:
        z = settings.confidence_z
        atu = state.billing.atu_s
        ages = running_ages(state.fleet, s.now)
        per_task = math.inf
        for name, e in est.items():
            st = stats(settings, state, name)
            seen = [*st.done_times, *st.censored_times, *ages.get(name, ())]
            low = sum(seen) / len(seen) - z * e.sd_s / math.sqrt(len(seen))
            per_task = min(per_task, e.price * max(low, 1e-9) / atu)
        if per_task * n_e <= budget:
            return False
    # The budget at risk's need (the reserved runtimes), with the end reserve on top.
    bare = needed_at_reserved(settings, state, s.now, est, n_e)
    needed = None if bare is None else bare + end_reserve(state, est)
    if needed is not None:
        needed = max(needed, needed_at_least)
    said = (
        f"about {n_e:.0f} of {counted(state.tasks_left, 'task')} left need a budget of about "
        f"{needed:.2f} in all"
        if needed is not None
        else f"about {counted(round(n_e), 'task')} left cannot be finished at any budget the "
        "planner can search"
    )
    message = (
        f"budget unlikely to finish the bag: {said}; the budget is "
        f"{state.money.budget if state.money.budget is not None else math.inf:.2f}"
    )
    s.do(Shortfall(state.tasks_left, needed, message, committed=state.money.committed))
    return settings.on_shortfall == "stop" and _stop(s, message)


def _stop(s: Step, message: str) -> bool:
    s.do(Stop(message + " (on_shortfall: stop)"))
    return True

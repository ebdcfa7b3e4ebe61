"""A mix for the money left, and its prediction: the budget problem the planner solves
at ``now``, with or without the end reserve, and the configuration that issues a mix
with its cost and makespan and their intervals."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace

from autoscaler.budget.outlook import forecast, money_end
from autoscaler.budget.planner import plannable, solve_budget
from autoscaler.budget.problem import BudgetProblem, Plan, TypeEstimate
from autoscaler.budget.runtimes import end_reserve, intervals, reserved, running_ages
from autoscaler.budget.sampling import stats
from autoscaler.budget.settings import EPS, ControllerSettings
from autoscaler.core.limits import rooms
from autoscaler.core.model import Configure
from autoscaler.core.state import RunState
from autoscaler.core.step import Step
from autoscaler.learn.ragged import ragged_end
from autoscaler.learn.stats import RuntimeStats


def budget_problem(
    settings: ControllerSettings,
    state: RunState,
    now: float,
    est: dict[str, TypeEstimate],
    n_e: float,
    money: float,
) -> BudgetProblem:
    """The budget problem the planner would solve at ``now`` with ``money`` left, on
    the reserved runtimes (``runtimes.reserved``)."""
    return BudgetProblem(
        tasks=n_e,
        budget=money,
        types=_launchable(state, now, reserved(settings, state, est)),
        billing=state.billing,
        cushion_z=settings.cushion_z,
        final_loss=settings.final_loss,
        groups=rooms(state),
    )


def plan(
    settings: ControllerSettings,
    state: RunState,
    now: float,
    est: dict[str, TypeEstimate],
    n_e: float,
    money: float,
    notes: list[str],
    wanted: float = 0.0,
) -> Plan | None:
    """The fastest mix ``money`` pays for, with the reserve for the end of the bag
    (``reserved`` runtimes, ``end_reserve`` kept back) unless the reserve would
    cost more than ``reserve_cost`` of the speed: the fixed-ATU problem has cliffs,
    where a little less money buys a mix many times slower, and a reserve must not
    push a plan over one. Speeds are at the estimated means. When even the mix
    without a reserve is slower than ``wanted`` (the caller will not take it), the
    one with the reserve, no faster, is not solved for."""
    if money <= 0:
        return None
    bare = _solve(settings, bare_problem(settings, state, now, est, n_e, money), notes)
    if bare is not None and bare.speed < wanted:
        return bare
    kept = money - end_reserve(state, est)
    guarded = (
        _solve(settings, budget_problem(settings, state, now, est, n_e, kept), notes)
        if kept > 0 and settings.reserve_z >= 0
        else None
    )
    if bare is None or guarded is None:
        return bare if guarded is None else at_means(guarded, est)
    bare, guarded = at_means(bare, est), at_means(guarded, est)
    if guarded.speed >= (1 - settings.reserve_cost) * bare.speed:
        return guarded
    return bare


def at_means(plan: Plan, est: Mapping[str, TypeEstimate]) -> Plan:
    """``plan`` with its speed Σ a_i·s_i/T_i at the means of ``est``."""
    speed = sum(c * est[n].slots / est[n].mean_s for n, c in plan.counts.items() if n in est)
    return replace(plan, speed=speed)


def bare_problem(
    settings: ControllerSettings,
    state: RunState,
    now: float,
    est: dict[str, TypeEstimate],
    n_e: float,
    money: float,
) -> BudgetProblem:
    """The budget problem on the estimated means, without a reserve."""
    return replace(
        budget_problem(settings, state, now, est, n_e, money),
        types=_launchable(state, now, est),
    )


def _solve(settings: ControllerSettings, problem: BudgetProblem, notes: list[str]) -> Plan | None:
    """The planner's answer; what it says of solver trouble goes into ``notes``."""
    if not plannable(problem):
        notes.append("no machine type with an estimate can be launched")
        return None
    result = solve_budget(problem, settings.solver)
    notes.extend(result.notes)
    return result.plan


def _launchable(state: RunState, now: float, est: dict[str, TypeEstimate]) -> list[TypeEstimate]:
    """The types a plan may use, each as much as it counts (``Capacity.weight``) and
    as much of its machines' work as their reclaims leave (``RunState.reclaim_factor``).

    A type the provider lacks capacity for, or whose provider a limit holds while
    another provider's type can still be launched, keeps only the machines it has
    (none: left out), so the plan does not wait for it; when every type is held the
    plan is made as if none were, and its launches wait for the hold.

    "Counts less": a type recovering from a refused launch, at weight w < 1, enters
    the MILP (paper 000 §2.1) with its mean runtime T_i taken as T_i / w, so each of
    its machines adds w/T_i, not 1/T_i, to the speed Σ a_i/T_i the plan maximises
    (and does ⌊w·p_i⌋ tasks in its first step): the plan takes the other types first
    and this one for what it still adds. Money is untouched: prices, first costs and
    the fixed-ATU constraint k·Σ a_i·c_i ≤ B stay as they are, and the per-second
    constraint N·Σ a_i·c_i ≤ B·Σ a_i/T_i only tightens, so a discount may make a plan
    slower, never let it commit more than the budget.

    A type whose machines are taken back (spot) has its T_i taken as T_i / f, f the
    share of their work a reclaim does not lose; the tasks of its first step stay as
    they are (⌊f·p_i⌋ would take a whole task off for a rate of 0.05 an hour). A type
    its reclaims leave nothing of keeps only the machines it has.
    """
    capacity = state.capacity
    free = any(capacity.launchable(name, now) for name in est)
    out = []
    for name, e in est.items():
        kept = state.reclaim_factor(name, e.mean_s)
        if not capacity.available(name, now) or (free and capacity.held(now, name)) or kept <= 0.0:
            if e.live > 0:
                out.append(replace(e, max_count=e.live))
            continue
        w = capacity.weight(name, now) if free else 1.0
        if 0.0 < w < 1.0:
            e = replace(e, mean_s=e.mean_s / w, first_tasks=math.floor(e.first_tasks * w))
        if kept < 1.0:
            e = replace(e, mean_s=e.mean_s / kept)
        out.append(e)
    return out


def best_effort(state: RunState, est: dict[str, TypeEstimate]) -> Plan:
    """Keep going on the most profitable type while the budget pays for units: the
    least money per task, a type's reclaims counted as work lost (``_launchable``)."""

    def per_task(e: TypeEstimate) -> float:
        kept = state.reclaim_factor(e.name, e.mean_s)
        return e.price * e.mean_s / e.slots / kept if kept > 0 else math.inf

    best = min(est.values(), key=per_task)
    count = max(1, min(best.live, best.max_count))
    speed = count * best.slots / best.mean_s
    return Plan(counts={best.name: count}, units=0, speed=speed, cost=0.0)


def configure(
    settings: ControllerSettings,
    s: Step,
    counts: dict[str, int],
    est: dict[str, TypeEstimate],
    reason: str,
    budget: float | None = None,
) -> Configure:
    """The configuration with its prediction: cost and makespan at the estimated
    means with the median ragged end (``ragged.RaggedEnd``: on heavy tails most runs
    end well before the expected end), and their interval at the ends of each mean's
    interval and of the end's, widened for the spread of the finite number of tasks
    left (``RuntimeEstimate.widened``). Costs are capped at the budget (the run never
    spends more). Whether the budget is at risk is another question, whether any mix
    finishes the bag (``risk.check_risk``), not what this one would cost."""
    state = s.state
    within = intervals(settings, state, s.now, est)
    z = settings.confidence_z
    rate = {n: counts.get(n, 0) * e.slots / e.mean_s for n, e in est.items()}
    total = sum(rate.values()) or 1.0
    lo: dict[str, float] = {}
    hi: dict[str, float] = {}
    for name, e in within.items():
        share = state.tasks_left * rate.get(name, 0.0) / total
        lo[name], hi[name] = e.widened(share, z)
    up = max((hi[n] / e.mean_s for n, e in est.items() if counts.get(n)), default=1.0)
    down = min((lo[n] / e.mean_s for n, e in est.items() if counts.get(n)), default=1.0)
    means = {n: e.mean_s for n, e in est.items()}
    fluid = forecast(state, s.now, counts, means, 0.0, budget)
    ages = running_ages(state.fleet, s.now)
    running = sum(len(a) for a in ages.values())
    to_start = max(0, state.tasks_left - running)
    ragged = ragged_end(
        fluid.end_s - s.now,
        ((stats(settings, state, n), to_start * rate.get(n, 0.0) / total) for n in est),
        ((stats(settings, state, n), age) for n, a in ages.items() if n in est for age in a),
        settings.confidence_z,
        copies=_copies(settings, state, counts, est),
    )
    cap = state.money.budget if budget is None else budget
    point = forecast(state, s.now, counts, means, ragged.median_s, budget)
    point_end = point.end_s
    if _held(point.cost, cap):
        # Held at its budget, the run lets machines go as its money runs short, and
        # the fewer left end the bag later, an end the copies do not shorten.
        assert cap is not None
        median = ragged.median_s if ragged.uncopied_s is None else ragged.uncopied_s
        held, finishes = money_end(state, s.now, counts, means, cap)
        if finishes:
            point_end = max(point_end, held + median)
    fast = forecast(state, s.now, counts, lo, ragged.lo_s * down, budget)
    # The cost and makespan interval's slow end also lets runs still going past every
    # end last as long again (``open_end``); the interval the monitor holds the
    # estimates to (assumed_hi_s) does not, so no decision moves with it.
    hi_open = {n: h + within[n].open_s for n, h in hi.items()}
    slow = forecast(state, s.now, counts, hi_open, ragged.hi_s * up, budget)
    slow_end = max(slow.end_s, point_end)
    if _held(slow.cost, cap):
        assert cap is not None
        ends, finishes = money_end(state, s.now, counts, hi_open, cap)
        slow_end = max(slow_end, ends + ragged.hi_s * up if finishes else ends)
        short = _short_end(settings, s, est, (hi, hi_open), ragged.hi_s * up, cap)
        slow_end = max(slow_end, short)
    return Configure(
        counts,
        point.cost,
        point_end,
        reason,
        cost_interval=(
            min(fast.cost, point.cost, _held_low(state, counts, est, point.cost, cap)),
            max(slow.cost, point.cost),
        ),
        makespan_interval_s=(min(fast.end_s, point_end), slow_end),
        assumed_lo_s={n: e.lo_s for n, e in within.items()},
        assumed_hi_s={n: e.hi_s for n, e in within.items()},
    )


def _copies(
    settings: ControllerSettings,
    state: RunState,
    counts: Mapping[str, int],
    est: Mapping[str, TypeEstimate],
) -> list[tuple[RuntimeStats, RuntimeStats, float]]:
    """What tail replication does to the plan's end (``ragged.ragged_end``'s ``copies``):
    each type's tasks still running when the bag is empty copied onto the fastest type
    of the plan that is faster, in the share its slots bear to half the slower type's
    (about half of those are still running at the fluid end). Empty if the run does not
    replicate (``budget.tail``)."""
    if settings.policy != "bats" or not settings.tail_replication:
        return []
    used = [n for n in est if counts.get(n, 0) > 0]
    out = []
    for n in used:
        faster = [m for m in used if est[m].mean_s < est[n].mean_s]
        if not faster:
            continue
        j = min(faster, key=lambda m: est[m].mean_s)
        share = 2 * counts[j] * est[j].slots / max(1, counts[n] * est[n].slots)
        out.append((stats(settings, state, n), stats(settings, state, j), min(share, 1.0)))
    return out


def _short_end(
    settings: ControllerSettings,
    s: Step,
    est: Mapping[str, TypeEstimate],
    high: tuple[Mapping[str, float], Mapping[str, float]],
    ragged_s: float,
    cap: float,
) -> float:
    """When a run whose runtimes are at the high end of their intervals ends, when its
    mix then costs more than the budget ``cap`` (the caller's slow forecast is held
    there): the monitor re-plans onto the mix the money left pays for at those runtimes
    (N_p < N_e), and the run ends when that mix does. Before, the makespan's high end
    kept the plan's mix, and a run at 1.1 × B_min the monitor cut from 90 machines to 31
    ended 14 % past it (``benchmarks.estimates``, lognormal σ 0.5, per second, long
    boots). ``high``: the runtimes' high ends, as planned on and with runs still going
    let last as long again (``open_end``). ``-inf`` when no mix fits (such a run does
    not finish)."""
    state = s.state
    if state.tasks_left <= 0:
        return -math.inf
    planned, ends = high
    slow = {n: replace(e, mean_s=planned.get(n, e.mean_s)) for n, e in est.items()}
    money = cap - state.money.committed
    cheaper = plan(settings, state, s.now, slow, state.tasks_left, money, [])
    if cheaper is None:
        return -math.inf
    return forecast(state, s.now, cheaper.counts, ends, ragged_s, cap).end_s


def _held_low(
    state: RunState,
    counts: Mapping[str, int],
    est: dict[str, TypeEstimate],
    cost: float,
    cap: float | None,
) -> float:
    """The least a run forecast to spend its whole budget ``cap`` may spend. It commits
    money a unit at a time and stops when the next unit it wants does not fit, up to
    one unit of the dearest type of its mix short of the budget; and a re-plan as its
    money runs short keeps back the end reserve (``runtimes.end_reserve``: a step of
    each type), which it spends only if the end needs it. Without them, a forecast held
    at a budget that is not a whole number of units under hourly billing was the point
    [B, B]: the runs spent B less a fraction of a unit, or less the reserve when the
    monitor cut the mix (``benchmarks.estimates``, long boots at 1.1 × B_min: cost
    coverage 40 %). ``cost`` itself where the forecast is not held there."""
    if cap is None or not _held(cost, cap):
        return cost
    billing = state.billing
    units = [billing.cost(state.types[n].price, billing.step_s) for n, c in counts.items() if c > 0]
    return cap - end_reserve(state, est) - max(units, default=0.0)


def _held(cost: float, cap: float | None) -> bool:
    """Whether a forecast ``cost`` is the budget ``cap``: the forecast was capped there."""
    return cap is not None and cost >= cap - EPS

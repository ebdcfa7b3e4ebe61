"""The budget planner's mix, category-aware (issue 21 §3, paper 004 §5).

With categories the time a type takes per task depends on which tasks it is given,
and that depends on the mix: a type fast at category 0 and slow at 1 takes category 0
when the mix has a type that is fast at 1, and everything when it is alone. So the mix
and the types' means are found together, by alternating (at most ``ROUNDS`` rounds):

1. the budget plan (``plans.plan``: the fastest mix the money left pays for, its
   reserve included) on the means T_j^(r) → the machine counts a^(r);
2. the least-makespan share of each category's tasks left among the lanes
   L_j = a_j^(r)·s_j, and each type's mean over the tasks it is given
   (``category_means.effective``: T_j = Σ_k x[k][j]·T[k][j] / Σ_k x[k][j]; a type given
   nothing, the mean of its best categories) → T_j^(r+1);
3. again from 1 on T^(r+1), until a mix repeats.

Three chains of rounds are run: from T^(0) the outlook's (``category_means.aware``: the
means as the fleet kept would see them); from T^(0) each type's mean over every task
left as if it were alone (``category_means.alone_means``: pessimistic, as a type in
company is given what it is best at); and from each type's mean over only what it is
best at (optimistic: as if each type had partners for the rest). Without the third, a
mix that pays only as a whole was never proposed near the least budget: on blended
means the cheapest type per task is one type alone, and alone its means stay blended,
so the search stopped at a few machines of one type for many hours (the crossed
scenario's least budget: 5 machines of ``a`` for 5.7 h, 2 for 13.3 h) where both
types, each at what it is fast at, end in 2 h for the same money.

Each mix found is scored at its own T^(r+1), the means it would really show: its speed
Σ_j a_j·s_j / T_j^(r+1), which is the planner's objective. The fastest mix whose
forecast cost at those means (``outlook.forecast``, fluid) leaves the end reserve
(``runtimes.end_reserve``: one more step for one machine of each type) within the
budget is kept, with the means its prediction is to be made on; else the fastest whose
cost alone is within it (a budget with no room for the reserve), else the one whose
forecast cost is least; a re-plan that need not happen (``strict``) takes only the
first kind, or none. A mix that spends the whole budget to end just before a billing
boundary left its last tasks to a machine that could not pay for the next step: at the
least budget, 510–597 of 600 tasks were done.

Under per-second billing the end reserve is one commitment step, and the least budget
the means' point paid for did 573–598 of 600 on the ``three`` scenario (the estimates
within 5 % of the truth): the end of a bag with categories costs more than the fluid
forecast (lanes whose categories ran out take tasks they are slow at), and money above
the forecast went on a faster mix the end could not pay for. There the mixes are
proposed on, and paid for at, the slow side of each type's mean (``slow_side``: the
top of the plan's interval at ``confidence_z``, the BaTS confidence level), each lane
paying one more whole task at it; the least budget rose 8–10 % and did every task.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace

from autoscaler.budget.category_means import (
    CategoryTimes,
    alone_means,
    category_times,
    effective,
)
from autoscaler.budget.outlook import forecast
from autoscaler.budget.plans import at_means, plan
from autoscaler.budget.problem import Plan, TypeEstimate, first_tasks
from autoscaler.budget.runtimes import end_reserve, intervals
from autoscaler.budget.settings import EPS, ControllerSettings
from autoscaler.categories.sort import Category
from autoscaler.core.state import RunState

ROUNDS = 4
_SCAN = 1.5  # least_money scans up to this many times its start, then doubles


def plan_mix(
    settings: ControllerSettings,
    state: RunState,
    now: float,
    est: Mapping[str, TypeEstimate],
    n_e: float,
    money: float,
    notes: list[str],
    wanted: float = 0.0,
    categories: Sequence[Category] | None = None,
    strict: bool = False,
) -> tuple[Plan | None, dict[str, TypeEstimate]]:
    """``plans.plan`` with the means the mix will show (the module's rounds), and those
    means; without categories, or before they are sampled, ``plans.plan`` on ``est``.
    ``strict`` (a re-plan that need not happen): only a mix paid for with its reserve
    at the slow side of its means, else None."""
    base = dict(est)
    times = category_times(state, categories, sorted(base)) if categories else None
    if times is None:
        return plan(settings, state, now, base, n_e, money, notes, wanted), base
    up = slow_side(settings, state, now, base)
    found = list(_mixes(settings, state, now, base, n_e, money, notes, wanted, times, up))
    if not found:
        return None, base
    cost = [_cost(state, now, *f) for f in found]
    total = state.money.committed + money  # the run's budget in a run; an option's in a plan
    fitting = [f for f, c in zip(found, cost, strict=True) if c <= total + EPS]
    reserve = end_reserve(state, base)
    safe = [f for f in found if _safe(state, now, f, up, reserve, total)]
    if safe or (fitting and not strict):
        return max(safe or fitting, key=lambda f: f[0].speed)
    return (None, base) if strict else found[cost.index(min(cost))]


def _mixes(
    settings: ControllerSettings,
    state: RunState,
    now: float,
    base: dict[str, TypeEstimate],
    n_e: float,
    money: float,
    notes: list[str],
    wanted: float,
    times: CategoryTimes,
    up: Mapping[str, float] | None,
) -> Iterator[tuple[Plan, dict[str, TypeEstimate]]]:
    """The mixes the rounds find, in order, each with the means it would show."""
    seen: list[dict[str, int]] = []
    partnered = effective(state.billing, base, times, {})  # each type at what it is best at
    for means in (base, alone_means(state.billing, base, times), partnered):
        for _ in range(ROUNDS):
            said: list[str] = []
            chosen = plan(settings, state, now, _raised(state, means, up), n_e, money, said, wanted)
            notes.extend(n for n in said if n not in notes)
            if chosen is None:
                break
            counts = {n: c for n, c in chosen.counts.items() if c > 0}
            if counts in seen:
                break
            seen.append(counts)
            means = effective(state.billing, base, times, counts)
            yield at_means(chosen, means), means


def _safe(
    state: RunState,
    now: float,
    found: tuple[Plan, dict[str, TypeEstimate]],
    up: Mapping[str, float] | None,
    reserve: float,
    total: float,
) -> bool:
    """A mix paid for at the slow side of its means, with the end reserve, within ``total``."""
    return _cost(state, now, *found, up) + reserve <= total + EPS


def _raised(
    state: RunState, means: Mapping[str, TypeEstimate], up: Mapping[str, float] | None
) -> dict[str, TypeEstimate]:
    """``means`` at the slow side of their intervals: what the planner proposes mixes on."""
    if up is None:
        return dict(means)
    out = {}
    for n, e in means.items():
        mean = e.mean_s * up.get(n, 1.0)
        out[n] = replace(
            e, mean_s=mean, first_tasks=first_tasks(state.billing, e.boot_s, e.slots, mean)
        )
    return out


def slow_side(
    settings: ControllerSettings, state: RunState, now: float, est: Mapping[str, TypeEstimate]
) -> dict[str, float] | None:
    """Under per-second billing, each type's mean at the slow end of its interval, as a
    factor of the mean: the upper bound of the plan's interval (``runtimes.intervals``,
    at ``confidence_z``) over its point. A mix is proposed, and kept, only if it is paid
    for at these means (``_cost``). None under fixed ATUs: there the end reserve is a
    whole unit of each type, and a lane's last task falls in a unit paid whole; under
    per-second billing the reserve is one commitment step, and the least budget ran
    short at the end (issue 21 §3)."""
    if state.billing.mode == "fixed":
        return None
    within = intervals(settings, state, now, dict(est))
    return {n: max(1.0, r.hi_s / r.mean_s) if r.mean_s > 0 else 1.0 for n, r in within.items()}


def _cost(
    state: RunState,
    now: float,
    chosen: Plan,
    means: Mapping[str, TypeEstimate],
    up: Mapping[str, float] | None = None,
) -> float:
    """The run's fluid cost if ``chosen`` works at ``means`` (``outlook.forecast``).

    With ``up`` (the slow side of the interval), each mean raised by its factor, and
    each lane of the mix paid for one more task at that mean: the fluid end shares the
    work evenly, but a lane's last task is whole, and with categories it is often one
    the lane is slow at (its own categories ran out)."""
    if up is None:
        mean_s = {n: e.mean_s for n, e in means.items()}
        return forecast(state, now, chosen.counts, mean_s).fluid_cost
    mean_s = {n: e.mean_s * up.get(n, 1.0) for n, e in means.items()}
    last = sum(
        c * means[n].slots * means[n].price * mean_s[n] / state.billing.atu_s
        for n, c in chosen.counts.items()
        if c > 0 and n in means
    )
    return forecast(state, now, chosen.counts, mean_s).fluid_cost + last


@dataclass(frozen=True, slots=True)
class PaysFor:
    """``pays_for``'s test at any money, with what does not depend on it worked out once
    (the slow side is a bootstrap per type)."""

    settings: ControllerSettings
    state: RunState
    now: float
    base: dict[str, TypeEstimate]
    n_e: float
    up: Mapping[str, float] | None
    reserve: float
    times: CategoryTimes | None

    def __call__(self, money: float) -> bool:
        settings, state, now, base, up = self.settings, self.state, self.now, self.base, self.up
        total = state.money.committed + money
        if self.times is None:
            found = plan(settings, state, now, base, self.n_e, money, [], 0.0)
            return found is not None and _safe(state, now, (found, base), up, self.reserve, total)
        mixes = _mixes(settings, state, now, base, self.n_e, money, [], 0.0, self.times, up)
        return any(_safe(state, now, f, up, self.reserve, total) for f in mixes)


def pays_for(
    settings: ControllerSettings,
    state: RunState,
    now: float,
    est: Mapping[str, TypeEstimate],
    n_e: float,
    categories: Sequence[Category],
    reserve: bool = True,
) -> PaysFor:
    """Whether ``plan_mix`` would give, for the money left it is called with, a mix paid
    for at the slow side of its means with the end reserve (``reserve``; else without
    it): it gives one exactly when the rounds find one (its first choice), so the rounds
    stop at the first they find. The test of ``least_money``, and of the budget at risk
    (``risk``)."""
    base = dict(est)
    return PaysFor(
        settings,
        state,
        now,
        base,
        n_e,
        slow_side(settings, state, now, base),
        end_reserve(state, base) if reserve else 0.0,
        category_times(state, categories, sorted(base)) if categories else None,
    )


def least_money(
    settings: ControllerSettings,
    state: RunState,
    now: float,
    est: Mapping[str, TypeEstimate],
    n_e: float,
    categories: Sequence[Category],
    start: float,
    rel_tol: float = 0.005,
    reserve: bool = True,
) -> float | None:
    """The least money left (within ``rel_tol``) with which ``plan_mix`` finds a mix
    whose forecast at the slow side of the means it would show, and the end reserve,
    are within the budget: the minimum budget with categories, where the means depend
    on the mix. From ``start`` (the minimum on the fleet's means): under per-second
    billing a scan in steps of ``rel_tol``, down while it fits or up until it does (to
    ``_SCAN`` times ``start``); else, or beyond, doubling or halving, then bisection;
    None when 256 times ``start`` does not do. Without ``reserve``: the least money
    that pays for the mix at the slow side, the end reserve aside."""
    fits = pays_for(settings, state, now, est, n_e, categories, reserve)
    up = fits.up
    if start <= 0:
        return 0.0 if fits(0.0) else None
    if up is not None:
        # Under per-second billing, not bisection alone: plan_mix weighs the mixes the
        # planner proposes for the money, and a little more money may propose only a
        # faster mix that does not fit at the slow side; a scan in steps of ``rel_tol``
        # finds the first that does.
        step = 1 + rel_tol
        money = start
        if fits(money):
            while money / step >= start / 256 and fits(money / step):
                money /= step
            return money
        while money < _SCAN * start:
            money *= step
            if fits(money):
                return money
        start = money
    lo, hi = start, start
    while not fits(hi):
        lo, hi = hi, hi * 2
        if hi > 256 * start:
            return None
    if lo == hi:  # start fits: look lower
        lo = hi / 2
        while fits(lo):
            hi, lo = lo, lo / 2
            if lo < start / 256:
                return hi
    while hi - lo > rel_tol * hi:
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if fits(mid) else (mid, hi)
    return hi

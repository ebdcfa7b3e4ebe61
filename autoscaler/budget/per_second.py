"""The budget planner under per-second billing (paper 000 §2.1, adapted).

The cost is bilinear in the mix and the horizon H (the makespan), so the planner
searches over H; for a fixed H the problem is linear. A kept machine does m_i(H) tasks
and costs c_i·H/ATU. A new one pays from launch but works only after its boot: it does
m_i(H − β_i) tasks and costs c_i·max(H, F)/ATU, where F = ``billing.first_step_s`` =
max(commit step, minimum charge) is what it commits at launch (``billing.py``). A mix
is feasible at H when it does N tasks by H and its cost at H is within B; the smallest
feasible H is the makespan to reach::

    minimise  H
    s.t.      Σ keep_i·c_i·H/ATU + new_i·c_i·max(H, F)/ATU ≤ B
              Σ keep_i·m_i(H) + new_i·m_i(H − β_i) ≥ N,   Σ a_i ≥ 1

Feasibility at H is not monotone in H (a mix that finishes by H may no longer be
affordable at a larger H), so bisection on it is not safe. The search relies on these
monotone facts instead:

* per kind of machine (kept or new), tasks and cost grow with H and cost per task
  does not: the fractional relaxation, once feasible, stays feasible, so bisection on
  it gives a lower bound on the smallest feasible H (``_fractional_max``);
* a machine does at most s_i/T_i more tasks per extra second (the slope of
  ``tasks_within`` is below 1/T_i), and a mix affordable at H' ≥ H is affordable at
  H: no mix is feasible before H + (N − T(H))/S(H), with T(H) the most tasks a mix
  affordable at H does by H (a MILP) and S(H) a bound on the speed of such mixes;
* a mix that does N tasks by H finishes at its own finish time t ≤ H, where it costs
  no more than at H: each mix the MILP returns is a candidate at t when it is
  affordable there, and the search stops once H reaches the best candidate.

Among the mixes feasible at the smallest H the fastest is chosen (then the cheapest,
then the one that launches least), as for fixed ATUs; the plan's cost is what the mix
commits by its finish time. Horizons are told apart to one part in 10⁹: a mix
affordable for a shorter stretch than that past its finish time may be missed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import pulp

from autoscaler.budget.problem import (
    MONEY_REL,
    BudgetProblem,
    Plan,
    PlanResult,
    TypeEstimate,
    affordable,
    capacity,
    whole,
)
from autoscaler.core.billing import BillingModel
from autoscaler.core.solve import Solved, Solver, solve_lp

_MAX_HORIZONS = 500  # horizons tried before the search gives up (noted)
_H_REL = 1e-9  # the smallest step, relative to the horizon
_FINISH_REL = 1e-12  # precision of a mix's finish time


@dataclass(frozen=True, slots=True)
class _Kind:
    """One way to field machines of a type: keep live ones, or launch new ones."""

    type: TypeEstimate
    new: bool
    count: int


Mix = tuple[int, ...]  # machines of each kind, in the order of the kinds


def _kinds(types: Sequence[TypeEstimate]) -> list[_Kind]:
    out: list[_Kind] = []
    for t in types:
        live = min(t.live, t.max_count)
        out += [_Kind(t, False, live), _Kind(t, True, t.max_count - live)]
    return [kind for kind in out if kind.count > 0]


def _kind_tasks(kind: _Kind, horizon_s: float, problem: BudgetProblem) -> float:
    """m_i(H) for a kept machine, m_i(H − β_i) for a new one (it works after booting)."""
    return capacity(kind.type, horizon_s - kind.type.boot_s if kind.new else horizon_s, problem)


def _kind_paid(kind: _Kind, horizon_s: float, billing: BillingModel) -> float:
    """Seconds paid by H: H kept; max(H, F) new (it commits its first step at launch, and
    a machine that lives less than the minimum charge pays the minimum)."""
    return max(horizon_s, billing.first_step_s, billing.min_charge_s) if kind.new else horizon_s


def _kind_cost(kind: _Kind, horizon_s: float, billing: BillingModel) -> float:
    """c_i·(seconds paid by H)/ATU."""
    return kind.type.price * _kind_paid(kind, horizon_s, billing) / billing.atu_s


def _mix_tasks(kinds: Sequence[_Kind], mix: Mix, horizon_s: float, problem: BudgetProblem) -> float:
    return sum(a * _kind_tasks(k, horizon_s, problem) for k, a in zip(kinds, mix, strict=True) if a)


def _mix_cost(kinds: Sequence[_Kind], mix: Mix, horizon_s: float, billing: BillingModel) -> float:
    return sum(a * _kind_cost(k, horizon_s, billing) for k, a in zip(kinds, mix, strict=True) if a)


def _finish_s(kinds: Sequence[_Kind], mix: Mix, problem: BudgetProblem) -> float:
    """The first horizon by which a non-empty mix does N tasks (its tasks grow with H
    without bound), from above to one part in 10¹²."""
    low, high = 0.0, 1.0
    while _mix_tasks(kinds, mix, high, problem) < problem.tasks:
        low, high = high, 2.0 * high
    while high - low > _FINISH_REL * high:
        mid = 0.5 * (low + high)
        if _mix_tasks(kinds, mix, mid, problem) >= problem.tasks:
            high = mid
        else:
            low = mid
    return high


def _fractional_max(
    kinds: Sequence[_Kind],
    horizon_s: float,
    problem: BudgetProblem,
    value: Callable[[_Kind], float],
) -> float:
    """The most Σ x_j·value_j for Σ x_j·cost_j(H) ≤ B with fractional 0 ≤ x_j ≤ count_j
    (greedy knapsack): an upper bound on the same over whole mixes. B is read as
    ``affordable`` reads it, to the solvers' tolerance: with B exactly, one machine
    costing B to the cent fell a hair short at the horizon cap, and no plan was made.

    With value = tasks by H, it is monotone in H as a feasibility test (≥ N): per kind,
    tasks by H do not shrink and cost per task does not grow with H (m(h)/h grows,
    (h − β)/h grows, and a new machine's cost is flat below F), so a fractional x
    feasible at H gives x'_j = x_j·tasks_j(H)/tasks_j(H') ≤ x_j, feasible at H' ≥ H.
    """
    items: list[tuple[float, float, float]] = []  # (cost per value, value, count)
    for kind in kinds:
        worth = value(kind)
        if worth > 0:
            cost = _kind_cost(kind, horizon_s, problem.billing)
            items.append((cost / worth, worth, float(kind.count)))
    items.sort()
    money = problem.budget + MONEY_REL * max(1.0, abs(problem.budget))  # as ``affordable``
    total = 0.0
    for per_value, worth, count in items:
        if per_value <= 0:
            total += count * worth
            continue
        take = min(count * worth, money / per_value)
        total += take
        money -= take * per_value
        if money <= 0:
            break
    return total


def _fractional_tasks(kinds: Sequence[_Kind], horizon_s: float, problem: BudgetProblem) -> float:
    return _fractional_max(kinds, horizon_s, problem, lambda k: _kind_tasks(k, horizon_s, problem))


def _horizon_cap(kinds: Sequence[_Kind], problem: BudgetProblem) -> float | None:
    """A horizon no feasible one exceeds; None when no machine is affordable at all.

    Costs grow with H: past B·ATU/c_i no machine of type i is affordable (B as
    ``affordable`` reads it, to the solvers' tolerance: a machine costing B to the cent
    finishes a hair past B·ATU/c_i in floating point, and was refused). Free machines
    are affordable at every H: all of them together finish the bag, feasibly, by their
    finish time.
    """
    free = tuple(k.count if k.type.price <= 0 else 0 for k in kinds)
    if any(free):
        return _finish_s(kinds, free, problem)
    money = problem.budget + MONEY_REL * max(1.0, abs(problem.budget))
    caps = [
        money * problem.billing.atu_s / k.type.price
        for k in kinds
        if affordable(_kind_cost(k, 0.0, problem.billing), problem.budget)
    ]
    return max(caps) if caps else None


def _fractional_lower_bound(kinds: Sequence[_Kind], cap: float, problem: BudgetProblem) -> float:
    """A horizon before which no mix is feasible, by bisection on the (monotone)
    fractional relaxation; the caller has checked it is feasible at ``cap``."""
    low, high = 0.0, cap
    while high - low > _FINISH_REL * high:
        mid = 0.5 * (low + high)
        if _fractional_tasks(kinds, mid, problem) >= problem.tasks:
            high = mid
        else:
            low = mid
    return low


def _per_second_lp(
    kinds: Sequence[_Kind], horizon_s: float, problem: BudgetProblem, name: str
) -> tuple[pulp.LpProblem, list[pulp.LpVariable]]:
    """Variables x_j ≤ count_j, the budget at H, and at least one machine."""
    lp = pulp.LpProblem(name, pulp.LpMaximize)
    x = [lp.add_variable(f"x_{j}", 0, k.count, cat="Integer") for j, k in enumerate(kinds)]
    lp += (
        pulp.lpSum(
            v * _kind_cost(k, horizon_s, problem.billing) for v, k in zip(x, kinds, strict=True)
        )
        <= problem.budget
    )
    lp += pulp.lpSum(x) >= 1
    for room in problem.groups:  # each limited provider: machines at once, machine time
        mine = [(v, k) for v, k in zip(x, kinds, strict=True) if k.type.name in room.types]
        if room.machines is not None:
            lp += pulp.lpSum(v for v, _ in mine) <= room.machines
        if room.seconds is not None:
            lp += (
                pulp.lpSum(v * _kind_paid(k, horizon_s, problem.billing) for v, k in mine)
                <= room.seconds
            )
    return lp, x


def _most_tasks(
    kinds: Sequence[_Kind],
    horizon_s: float,
    problem: BudgetProblem,
    solver: Solver,
    time_limit_s: float | None,
) -> tuple[Solved, Mix | None]:
    """T(H): the mix affordable at H that does the most tasks by H."""
    lp, x = _per_second_lp(kinds, horizon_s, problem, "per_second_tasks")
    lp += pulp.lpSum(v * _kind_tasks(k, horizon_s, problem) for v, k in zip(x, kinds, strict=True))
    solved = solve_lp(lp, solver, f"H={horizon_s:.0f}s", time_limit_s, jump=False)
    usable = solved.outcome in ("optimal", "feasible")
    return solved, tuple(whole(v) for v in x) if usable else None


def _fastest_at(
    kinds: Sequence[_Kind],
    horizon_s: float,
    problem: BudgetProblem,
    solver: Solver,
    time_limit_s: float | None,
) -> tuple[Solved, Mix | None]:
    """Among mixes feasible at H, the fastest, then the cheapest, then the one that
    launches least (the tie-breaks of the fixed-ATU model)."""
    lp, x = _per_second_lp(kinds, horizon_s, problem, "per_second_speed")
    min_speed = min(k.type.rate for k in kinds)
    max_cost = sum(k.count * _kind_cost(k, horizon_s, problem.billing) for k in kinds) or 1.0
    lp += pulp.lpSum(
        v
        * (
            k.type.rate
            - 1e-3 * min_speed * _kind_cost(k, horizon_s, problem.billing) / max_cost
            - (1e-6 * min_speed if k.new else 0.0)
        )
        for v, k in zip(x, kinds, strict=True)
    )
    lp += pulp.lpSum(
        v * _kind_tasks(k, horizon_s, problem) for v, k in zip(x, kinds, strict=True)
    ) >= (problem.tasks * (1 - _FINISH_REL))
    solved = solve_lp(lp, solver, f"H={horizon_s:.0f}s", time_limit_s, jump=False)
    usable = solved.outcome in ("optimal", "feasible")
    return solved, tuple(whole(v) for v in x) if usable else None


def solve_per_second(
    problem: BudgetProblem, solver: Solver, time_limit_s: float | None
) -> PlanResult:
    """The smallest feasible horizon, by safe steps up from the fractional bound.

    At each H the MILP gives T(H) and its mix; the mix is a candidate at its finish
    time if affordable there. No mix is feasible in [H, H + (N − T(H))/S(H)), where
    S(H) is the fractional bound on the speed of mixes affordable at H: such a mix
    is affordable at H, did at most T(H) tasks by H, and gains at most its speed ≤ S(H)
    tasks per second. The search stops when H reaches the best candidate.
    """
    kinds = _kinds(problem.types)
    notes: list[str] = []
    cap = _horizon_cap(kinds, problem)
    if cap is None or _fractional_tasks(kinds, cap, problem) < problem.tasks:
        return PlanResult(None)
    horizon = _fractional_lower_bound(kinds, cap, problem)
    best: tuple[float, Mix] | None = None
    for _ in range(_MAX_HORIZONS):
        if best is not None and horizon >= best[0] * (1 - _H_REL):
            break
        solved, mix = _most_tasks(kinds, horizon, problem, solver, time_limit_s)
        if solved.outcome == "infeasible":
            break  # nothing is affordable at H, so nothing is at any later horizon
        bound = _fractional_tasks(kinds, horizon, problem)
        if mix is not None:
            finish = _finish_s(kinds, mix, problem)
            if affordable(_mix_cost(kinds, mix, finish, problem.billing), problem.budget) and (
                best is None or finish < best[0]
            ):
                best = (finish, mix)
            if solved.outcome == "optimal":
                bound = _mix_tasks(kinds, mix, horizon, problem)
        if bound >= problem.tasks and (best is None or best[0] > horizon * (1 + _H_REL)):
            # A solve without a proven optimum, or an optimal mix over budget by more than
            # the tolerance (otherwise it would be a candidate by H): nothing proves that
            # no mix is feasible just after H.
            notes.append(
                f"{solved.note or f'H={horizon:.0f}s: mix over budget'}; "
                "search stopped here, a faster plan may have been missed"
            )
            break
        if solved.note:
            optimal = solved.outcome == "optimal"
            notes.append(solved.note if optimal else f"{solved.note}; stepped on the LP bound")
        speed = _fractional_max(kinds, horizon, problem, lambda k: k.type.rate)
        if speed <= 0:
            break
        horizon += max((problem.tasks - bound) / speed, _H_REL * horizon)
    else:
        notes.append(
            f"horizon search stopped after {_MAX_HORIZONS} horizons at H={horizon:.0f}s; "
            "the plan may be slower than the best"
        )
    if best is None:
        return PlanResult(None, tuple(notes))
    finish, mix = best
    solved, fastest = _fastest_at(kinds, finish, problem, solver, time_limit_s)
    if solved.note:
        notes.append(f"{solved.note}; choosing among mixes that finish by then")
    if fastest is not None and any(fastest):
        at = _finish_s(kinds, fastest, problem)
        cost = _mix_cost(kinds, fastest, at, problem.billing)
        if at <= finish * (1 + _H_REL) and affordable(cost, problem.budget):
            mix = fastest
    return PlanResult(_per_second_plan(kinds, mix, problem), tuple(notes))


def _per_second_plan(kinds: Sequence[_Kind], mix: Mix, problem: BudgetProblem) -> Plan:
    """Counts per type, speed, and the money the mix commits by its finish time."""
    counts = {t.name: 0 for t in problem.types}
    for kind, a in zip(kinds, mix, strict=True):
        counts[kind.type.name] += a
    finish = _finish_s(kinds, mix, problem)
    return Plan(
        counts=counts,
        units=0,
        speed=sum(a * k.type.slots / k.type.mean_s for k, a in zip(kinds, mix, strict=True)),
        cost=_mix_cost(kinds, mix, finish, problem.billing),
    )

"""The budget planner of paper 000 §2.1: the fastest machine mix the budget can pay for.

Model (fixed ATUs). Choose a_i = keep_i + new_i machines of each type i, where keep_i
of the l_i live machines are kept and new_i are launched (boot time β_i), a_i ≤ A_i::

    minimise  T_e = N / Σ a_i/T_i
    s.t.      ⌈T_e/ATU⌉ · Σ a_i·c_i ≤ B

For a fixed number k of further units (after the time each live machine has already
paid for) the problem is linear::

    maximise  Σ a_i / T_i
    s.t.      Σ a_i·k·c_i + new_i·f_i ≤ B
              Σ a_i·m_i(k·ATU) + new_i·p_i ≥ N

where a new machine first pays one step f_i (one ATU) in which it boots and then does
p_i = ⌊(step − β_i)/T_i⌋ tasks, exactly as the monitor will count it once it runs. The
first feasible k ≥ 1 is optimal (a mix that fits in fewer units would have been
feasible for that smaller k). k = 0 is not offered: it would count live machines as
kept for nothing, yet they go on working (and paying) past their paid time.
``m_i(h)`` is the number of tasks one machine is expected to finish in h seconds
(``estimate.tasks_within``: h/T_i less the discreteness cushion of the final unit,
slides 001, "fluid vs discrete"). N here is N_e, the tasks left
once the time already paid on live machines has been used (paper 000 §2.2), and B the
budget not yet committed.

Model (per-second billing). The cost is bilinear in the mix and the horizon H (the
makespan), so the planner searches over H; for a fixed H the problem is linear. A kept
machine does m_i(H) tasks and costs c_i·H/ATU. A new one pays from launch but works
only after its boot: it does m_i(H − β_i) tasks and costs c_i·max(H, F)/ATU, where
F = ``billing.first_step_s`` = max(commit step, minimum charge) is what it commits at
launch (``billing.py``). A mix is feasible at H when it does N tasks by H and its cost
at H is within B; the smallest feasible H is the makespan to reach::

    minimise  H
    s.t.      Σ keep_i·c_i·H/ATU + new_i·c_i·max(H, F)/ATU ≤ B
              Σ keep_i·m_i(H) + new_i·m_i(H − β_i) ≥ N,   Σ a_i ≥ 1

Feasibility at H is not monotone in H (a mix that finishes by H may no longer be
affordable at a larger H), so bisection on it is not safe. The search relies on these
monotone facts instead:

* per kind of machine (kept or new), tasks and cost grow with H and cost per task
  does not: the fractional relaxation, once feasible, stays feasible, so bisection on
  it gives a lower bound on the smallest feasible H (``_fractional_max``);
* a machine does at most 1/T_i more tasks per extra second (the slope of
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

Solved with PuLP: HiGHS in-process (highspy) by default, CBC as the fallback, also when
HiGHS ends without an answer. The LP relaxation of each k is checked first by a greedy
fractional knapsack, so the MILP is only solved for k that can be feasible. Every
solver status that is neither Optimal nor Infeasible is named in ``PlanResult.notes``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

import pulp

from autoscaler.budget.estimate import tasks_within
from autoscaler.core.billing import BillingModel
from autoscaler.core.solve import PlannerError, Solved, Solver, solve_lp

_MAX_UNITS = 100_000
_MAX_FAILED = 3  # solves without an answer before the search gives up (a broken solver)
_MAX_HORIZONS = 500  # per-second search: horizons tried before it gives up (noted)
_H_REL = 1e-9  # per-second search: the smallest step, relative to the horizon
_FINISH_REL = 1e-12  # precision of a mix's finish time
_MONEY_REL = 1e-6  # costs within a millionth of B count as within it (solver tolerance)


@dataclass(frozen=True, slots=True)
class TypeEstimate:
    """One machine type as the planner sees it."""

    name: str
    price: float  # c_i per ATU
    max_count: int  # A_i
    boot_s: float  # β_i
    mean_s: float  # T_i
    sd_s: float = 0.0  # spread of the runtimes, for the cushion
    live: int = 0  # l_i: machines of this type alive now, kept without a new boot
    first_cost: float = 0.0  # f_i: what a new machine commits at launch (one step)
    first_tasks: int = 0  # p_i: tasks a new machine does in its first step, after boot


@dataclass(frozen=True, slots=True)
class BudgetProblem:
    tasks: float  # N_e
    budget: float  # B: money not yet committed
    types: Sequence[TypeEstimate]
    billing: BillingModel
    cushion_z: float = 0.0
    final_loss: float = 0.25  # tasks per machine lost at the end of its last unit


@dataclass(frozen=True, slots=True)
class Plan:
    """A configuration: machines per type, and what it is expected to take."""

    counts: Mapping[str, int]
    units: int  # k, further ATUs (0 under per-second billing)
    speed: float  # Σ a_i/T_i, tasks per second
    cost: float  # money the plan commits beyond what is committed now

    def makespan_s(self, tasks: float) -> float:
        """T_e = N / Σ a_i/T_i."""
        return math.inf if self.speed <= 0 else tasks / self.speed


@dataclass(frozen=True, slots=True)
class PlanResult:
    """What the budget planner found, and every solver status on the way that was not
    a plain answer.

    The planner is pure and does not log: ``notes`` is for the caller to log or
    journal. Each note names where it happened (``k=3``, ``H=5400s``), the status, and
    what was done (retried with CBC, solution used though not proven optimal, taken as
    infeasible). No notes: every solve ended Optimal or Infeasible.
    """

    plan: Plan | None
    notes: tuple[str, ...] = ()


def _capacity(t: TypeEstimate, horizon_s: float, problem: BudgetProblem) -> float:
    return tasks_within(horizon_s, t.mean_s, t.sd_s, problem.cushion_z, problem.final_loss)


def _affordable(cost: float, budget: float) -> bool:
    return cost <= budget + _MONEY_REL * max(1.0, abs(budget))


# --- fixed ATUs -------------------------------------------------------------------------------


def _relaxation_feasible(problem: BudgetProblem, k: int) -> bool:
    """Can a fractional mix do N tasks in k further units within B? (greedy knapsack)"""
    atu = problem.billing.atu_s
    items: list[tuple[float, float, float]] = []  # (cost per task, tasks per machine, count)
    for t in problem.types:
        live = min(t.live, t.max_count)
        cap = _capacity(t, k * atu, problem)
        for tasks, cost, count in (
            (cap, k * t.price, live),
            (cap + t.first_tasks, k * t.price + t.first_cost, t.max_count - live),
        ):
            if tasks > 0 and count > 0:
                items.append((cost / tasks, float(tasks), float(count)))
    items.sort()
    need = problem.tasks
    money = problem.budget
    for cost_per_task, per_machine, machines in items:
        take = min(machines * per_machine, need)
        money -= take * cost_per_task
        need -= take
        if need <= 1e-9:
            return money >= -1e-9
    return False


def _mix_variables(
    lp: pulp.LpProblem, types: Sequence[TypeEstimate]
) -> tuple[dict[str, pulp.LpVariable], dict[str, pulp.LpVariable]]:
    """keep_i ≤ l_i live machines kept, new_i ≤ A_i − l_i machines launched."""
    keep: dict[str, pulp.LpVariable] = {}
    new: dict[str, pulp.LpVariable] = {}
    for i, t in enumerate(types):
        live = min(t.live, t.max_count)
        keep[t.name] = lp.add_variable(f"keep_{i}", 0, live, cat="Integer")
        new[t.name] = lp.add_variable(f"new_{i}", 0, t.max_count - live, cat="Integer")
    return keep, new


def _solve_fixed_k(
    problem: BudgetProblem, k: int, solver: Solver, time_limit_s: float | None
) -> tuple[Plan | None, Solved]:
    atu = problem.billing.atu_s
    lp = pulp.LpProblem("bats_budget", pulp.LpMaximize)
    keep, new = _mix_variables(lp, problem.types)
    speed = pulp.lpSum((keep[t.name] + new[t.name]) * (1.0 / t.mean_s) for t in problem.types)
    cost = pulp.lpSum((keep[t.name] + new[t.name]) * t.price for t in problem.types)
    # Among equally fast mixes prefer the cheaper one, then the one that launches less.
    min_speed = min(1.0 / t.mean_s for t in problem.types)
    max_cost = sum(t.price * t.max_count for t in problem.types) or 1.0
    lp += speed - 1e-3 * min_speed * cost / max_cost - 1e-6 * min_speed * pulp.lpSum(new.values())
    lp += k * cost + pulp.lpSum(new[t.name] * t.first_cost for t in problem.types) <= (
        problem.budget
    )
    lp += (
        pulp.lpSum(
            (keep[t.name] + new[t.name]) * _capacity(t, k * atu, problem)
            + new[t.name] * t.first_tasks
            for t in problem.types
        )
        >= problem.tasks
    )
    solved = solve_lp(lp, solver, f"k={k}", time_limit_s)
    if solved.outcome in ("failed", "infeasible"):
        return None, solved
    counts = {t.name: _value(keep[t.name]) + _value(new[t.name]) for t in problem.types}
    per_unit = sum(counts[t.name] * t.price for t in problem.types)
    plan = Plan(
        counts=counts,
        units=k,
        speed=sum(counts[t.name] / t.mean_s for t in problem.types),
        cost=k * per_unit + sum(_value(new[t.name]) * t.first_cost for t in problem.types),
    )
    return plan, solved


def _value(var: pulp.LpVariable) -> int:
    return round(var.value() or 0)


def _solve_fixed(problem: BudgetProblem, solver: Solver, time_limit_s: float | None) -> PlanResult:
    types = problem.types
    atu = problem.billing.atu_s
    fastest = sum(t.max_count / t.mean_s for t in types)
    k = max(1, math.floor(problem.tasks / (fastest * atu)) - 1)
    cheapest = min(t.price for t in types)
    notes: list[str] = []
    failed = 0
    while k * cheapest <= problem.budget + 1e-9 and k <= _MAX_UNITS:
        if _relaxation_feasible(problem, k):
            plan, solved = _solve_fixed_k(problem, k, solver, time_limit_s)
            if solved.outcome == "feasible":
                notes.append(f"{solved.note}; its mix used, not proven the fastest at k={k}")
            elif solved.outcome == "failed":
                notes.append(f"{solved.note}; k={k} taken as infeasible, the plan may be slower")
                failed += 1
            elif solved.note:
                notes.append(solved.note)
            if plan is not None:
                return PlanResult(plan, tuple(notes))
            if failed >= _MAX_FAILED:
                notes.append(f"{failed} solves without an answer: search stopped at k={k}")
                break
        k += 1
    return PlanResult(None, tuple(notes))


# --- per-second billing -----------------------------------------------------------------------


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
    return _capacity(kind.type, horizon_s - kind.type.boot_s if kind.new else horizon_s, problem)


def _kind_cost(kind: _Kind, horizon_s: float, billing: BillingModel) -> float:
    """c_i·H/ATU kept; c_i·max(H, F)/ATU new: it commits its first step at launch, and a
    machine that lives less than the minimum charge pays the minimum."""
    paid = max(horizon_s, billing.first_step_s, billing.min_charge_s) if kind.new else horizon_s
    return kind.type.price * paid / billing.atu_s


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
    (greedy knapsack): an upper bound on the same over whole mixes.

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
    money = problem.budget
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

    Costs grow with H: past B·ATU/c_i no machine of type i is affordable. Free machines
    are affordable at every H: all of them together finish the bag, feasibly, by their
    finish time.
    """
    free = tuple(k.count if k.type.price <= 0 else 0 for k in kinds)
    if any(free):
        return _finish_s(kinds, free, problem)
    caps = [
        problem.budget * problem.billing.atu_s / k.type.price
        for k in kinds
        if _affordable(_kind_cost(k, 0.0, problem.billing), problem.budget)
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
    solved = solve_lp(lp, solver, f"H={horizon_s:.0f}s", time_limit_s)
    usable = solved.outcome in ("optimal", "feasible")
    return solved, tuple(_value(v) for v in x) if usable else None


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
    min_speed = min(1.0 / k.type.mean_s for k in kinds)
    max_cost = sum(k.count * _kind_cost(k, horizon_s, problem.billing) for k in kinds) or 1.0
    lp += pulp.lpSum(
        v
        * (
            1.0 / k.type.mean_s
            - 1e-3 * min_speed * _kind_cost(k, horizon_s, problem.billing) / max_cost
            - (1e-6 * min_speed if k.new else 0.0)
        )
        for v, k in zip(x, kinds, strict=True)
    )
    lp += pulp.lpSum(
        v * _kind_tasks(k, horizon_s, problem) for v, k in zip(x, kinds, strict=True)
    ) >= (problem.tasks * (1 - _FINISH_REL))
    solved = solve_lp(lp, solver, f"H={horizon_s:.0f}s", time_limit_s)
    usable = solved.outcome in ("optimal", "feasible")
    return solved, tuple(_value(v) for v in x) if usable else None


def _solve_per_second(
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
            if _affordable(_mix_cost(kinds, mix, finish, problem.billing), problem.budget) and (
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
        speed = _fractional_max(kinds, horizon, problem, lambda k: 1.0 / k.type.mean_s)
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
        if at <= finish * (1 + _H_REL) and _affordable(cost, problem.budget):
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
        speed=sum(a / k.type.mean_s for k, a in zip(kinds, mix, strict=True)),
        cost=_mix_cost(kinds, mix, finish, problem.billing),
    )


# --- entry points -----------------------------------------------------------------------------


def solve_budget(
    problem: BudgetProblem, solver: Solver = "highs", time_limit_s: float | None = None
) -> PlanResult:
    """The fastest affordable configuration (None when no mix fits the budget), with a
    note for every solver status that was neither Optimal nor Infeasible.

    ``time_limit_s`` bounds each MILP solve; a solve it cuts short is noted.
    """
    types = [t for t in problem.types if t.mean_s > 0 and t.max_count > 0]
    if not types:
        raise PlannerError("no machine type has a runtime estimate")
    problem = replace(problem, types=types)
    if problem.tasks <= 0:
        return PlanResult(Plan(counts={t.name: 0 for t in types}, units=0, speed=0.0, cost=0.0))
    if problem.billing.mode == "per_second":
        return _solve_per_second(problem, solver, time_limit_s)
    return _solve_fixed(problem, solver, time_limit_s)


def plan_budget(problem: BudgetProblem, solver: Solver = "highs") -> Plan | None:
    """The fastest affordable configuration, or None when no mix fits the budget."""
    return solve_budget(problem, solver).plan


def plan_clairvoyant(
    tasks: int, budget: float, types: Sequence[TypeEstimate], billing: BillingModel
) -> Plan | None:
    """The best mix when the true mean runtimes are known from the start.

    Fluid model, no sampling, no boot, no cushion: minimise N / Σ a_i/μ_i subject to
    ⌈T/ATU⌉·Σ a_i·c_i ≤ B. Its makespan bounds what any budget planner can reach. It
    is ``plan_budget`` with nothing live, nothing paid for a first unit, and the fluid
    capacity k·ATU/μ_i per machine (no spread, no final-unit loss).
    """
    bare = [TypeEstimate(t.name, t.price, t.max_count, 0.0, t.mean_s) for t in types]
    problem = BudgetProblem(float(tasks), budget, bare, billing, cushion_z=0.0, final_loss=0.0)
    return plan_budget(problem)

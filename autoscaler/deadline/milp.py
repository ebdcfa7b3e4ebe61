"""The deadline models of paper 002 (Thai, Varghese, Barker) §III–IV: the cheapest new
machines that finish every job by its deadline (inputs and constraint (2') in
``autoscaler.deadline.instance``).

Model (7), literal (``formulation="literal"``): a candidate machine v per type and
index k ≤ K_it, binary x_v, integer tasks n_{j,v} ≤ x_v·⌊L_{j,it}/e_{j,it}⌋, (2'),
Σ_v n_{j,v} = n_j, and the ATU-rounded cost: integer units u_v ≥ x_v with
u_v·ATU ≥ β·x_v + Σ_j n_{j,v}·e_{j,it} (per second: paid seconds P_v ≥ that and
≥ min_charge·x_v). Minimise Σ_v c_{it_v}·u_v.

Candidate bound K_it. Take an optimal plan with the fewest machines. Two machines of
one type whose fills f_v = max_j W_v(j)/L_j (W_v(j) the left side of (2')) sum to at
most 1 could be merged into one that meets (2') and costs no more (⌈(β+a+b)/ATU⌉ ≤
⌈(β+a)/ATU⌉ + ⌈(β+b)/ATU⌉), so at most one machine of a type has f_v ≤ ½. Since
f_v ≤ Σ_j n_{j,v}·e_{j,it}/L_{j,it} (EDF: L grows with j), the count M_it satisfies
(M_it − 1)/2 < Σ_j n_j·e_{j,it}/L_{j,it} =: S_it, so K_it = min(max_count, ⌊2·S_it⌋ + 1)
loses no optimum.

Model (7), fast (``formulation="fast"``): aggregated by type, so machines of a type
are not told apart (no symmetry). Under fixed ATUs a group g = (it, u) holds the y_g
machines of type it paid for u units; its windows are W_{j,g} = min(L_{j,it},
u·ATU − β_it). Integer N_{j,g} tasks of job j run on the group::

    minimise   Σ_g u·c_it·y_g
    s.t.       Σ_g N_{j,g} = n_j                                   every job j
               Σ_{j' ≤ j} N_{j',g}·e_{j',it} ≤ W_{j,g}·y_g          every group, job
               N_{j,g} ≤ ⌊W_{j,g}/e_{j,it}⌋·y_g                     every group, job
               Σ_u y_{it,u} ≤ K_it                                 every type

Every plan of model (7) gives one of this model with the same cost (sum its machines'
tasks per group), so its optimum is a lower bound on (7)'s. It is solved in two steps:
y integer with N continuous (a relaxation: its optimum is a lower bound on the
aggregate's), then N integer with y fixed there; when that costs no more, it is an
optimum of the aggregate (HiGHS takes seconds on the integer N of 10 jobs × 1,000 tasks,
milliseconds on the two steps); otherwise the aggregate is solved whole. Its solution
is then split into machines, group by group: first fit, then least loaded first (both
in EDF order); if both leave tasks, per-machine job patterns as columns (every pattern
over the group's jobs with tasks, each with as many tasks of its last job as fit, at
most ``patterns.MAX_PATTERNS``; a list cut there is used only up to
``patterns._PARTIAL_LANES`` jobs):
integer z_p machines of pattern p, Σ z_p ≤ y_g, Σ_p z_p·p ≥ N_g. When such a pattern
split finds none after the two steps, the whole aggregate's solution (another optimum)
is split too. Tasks still left are planned again the same way on the machines not used. A split
that costs the lower bound is a plan of (7) at the bound, hence optimal for (7)
(``proven``; ``bound`` is the lower bound).

Otherwise (the aggregate let tasks of several machines share their spare seconds):
model (7) over per-machine job patterns as columns, all groups at once: every pattern
of every group (as above, over all the type's jobs), integer z_p, Σ_p z_p·p_j ≥ n_j,
Σ z_p ≤ K_it per type, minimise Σ_p z_p·cost_p. Every machine of a plan of (7) runs
at most what some pattern of its group holds, so under fixed ATUs this is exact: when
solved to optimality its plan is proven optimal for (7), above the aggregate's bound
or not. It is skipped when a group has ``patterns.MAX_PATTERNS`` patterns or more (many jobs)
and limited to ``_PATTERN_MODEL_S``. Failing that, the plan is the cheapest of the
split, the pattern model's best plan and Algorithm 3's machines (so model (7) never
costs more than job by job), then the per-machine model (the literal one, machines of
a type ordered x_1 ≥ x_2 ≥ … against symmetry) under ``fallback_s`` if it finds a
cheaper one; ``proven`` is False and ``bound`` says how far from optimal the plan can
be. Under per-second billing a group is a type, with paid seconds P ≥ β·y + Σ_j N_j·e_j
and P ≥ min·y, and a pattern costs its full load: neither is exact, so a plan is
proven only when it reaches the aggregate's bound.

Model (10), single job: the fast model with one job. With one job a group's tasks
always split (each machine takes at most ⌊W/e⌋), so under fixed ATUs it is exact:
the paper's n_j = Σ_it ni_it·n_{j,it} with ≥ (a machine may do fewer than n_{j,it}) and
the cost rounded to ATUs per machine.


Solved with PuLP (HiGHS, CBC as fallback) through ``core.solve.solve_lp``; every status
that is neither Optimal nor Infeasible is named in ``notes``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

import pulp

from autoscaler.core.billing import BillingModel
from autoscaler.core.solve import Solver
from autoscaler.deadline.instance import (
    MONEY_TOL,
    DeadlineJob,
    DeadlinePlan,
    DeadlineResult,
    Formulation,
    Instance,
    MachineType,
    NewMachine,
    TypeLanes,
    fits,
    make_instance,
    new_machine,
    rest_of,
    units,
    unreachable,
)
from autoscaler.deadline.patterns import (
    Group,
    Outcome,
    groups,
    int_value,
    pattern_model,
    run_lp,
    split_group,
    split_patterns,
)

_PATTERN_LIMIT_S = 0.5  # per group split: a pattern MILP not solved by then is not used
_PATTERN_MODEL_S = 2.0  # the pattern model's time limit
FALLBACK_S = 5.0
"""Fast model: how long the per-machine model may run when a split stays above the bound."""

JobByJob = Callable[[Instance, Solver, float | None], tuple[list[NewMachine] | None, list[str]]]
"""Another plan of model (7) for the same instance (Algorithm 3's machines), with notes."""


def _per_machine(
    inst: Instance, solver: Solver, limit: float | None, symmetry_cuts: bool, label: str
) -> Outcome:
    """Model (7) with a variable per candidate machine (see the module docstring)."""
    lp = pulp.LpProblem("deadline_literal", pulp.LpMinimize)
    atu = inst.billing.atu_s
    cover: list[list[pulp.LpVariable]] = [[] for _ in inst.jobs]
    machines: list[tuple[TypeLanes, dict[int, pulp.LpVariable]]] = []
    cost = []
    for a, tp in enumerate(inst.types):
        previous = None
        top = len(units(inst, tp))
        for k in range(tp.bound):
            x = lp.add_variable(f"x_{a}_{k}", 0, 1, cat="Binary")
            n = {
                ln.job: lp.add_variable(
                    f"n_{a}_{k}_{ln.job}", 0, min(ln.cap, inst.need[ln.job]), cat="Integer"
                )
                for ln in tp.lanes
            }
            work = []
            for ln in tp.lanes:
                lp += n[ln.job] <= ln.cap * x
                cover[ln.job].append(n[ln.job])
                work.append(n[ln.job] * ln.e)
                lp += pulp.lpSum(work) <= ln.window
            busy = tp.t.boot_s * x + pulp.lpSum(work)
            if inst.billing.mode == "fixed":
                u = lp.add_variable(f"u_{a}_{k}", 0, top, cat="Integer")
                lp += u >= x
                lp += u * atu >= busy
                cost.append(tp.t.price * u)
            else:
                p = lp.add_variable(f"p_{a}_{k}", 0)
                lp += p >= busy
                lp += p >= inst.billing.min_charge_s * x
                cost.append(tp.t.price / atu * p)
            if symmetry_cuts and previous is not None:
                lp += previous >= x
            previous = x
            machines.append((tp, n))
    for i, terms in enumerate(cover):
        lp += pulp.lpSum(terms) == inst.need[i]
    lp += pulp.lpSum(cost)
    usable, out = run_lp(lp, solver, label, limit)
    if usable:
        out.machines = []
        for tp, n in machines:
            tasks = [int_value(n[i]) if i in n else 0 for i in range(len(inst.jobs))]
            if any(tasks):
                out.machines.append(new_machine(inst, tp.t, tasks))
    return out


def aggregate_lp(
    inst: Instance, solver: Solver, limit: float | None, label: str, staged: bool = True
) -> tuple[Outcome, float, list[tuple[Group, int, list[int]]]]:
    """Solve the aggregate, in two steps (``_two_stage``) when ``staged`` and they reach
    its optimum, else whole. Returns the outcome (its machines unset; ``staged`` says
    which), the optimum, and per group its machines and tasks per lane (empty when there
    is no solution)."""
    lp = pulp.LpProblem("deadline_fast", pulp.LpMinimize)
    atu = inst.billing.atu_s
    cover: list[list[pulp.LpVariable]] = [[] for _ in inst.jobs]
    per_type: dict[str, list[pulp.LpVariable]] = {}
    rows = []
    cost = []
    for g, (group, u) in enumerate(groups(inst)):
        tp = group.tp
        y = lp.add_variable(f"y_{g}", 0, tp.bound, cat="Integer")
        per_type.setdefault(tp.t.name, []).append(y)
        big_n = []
        work = []
        for a, (ln, window) in enumerate(zip(tp.lanes, group.windows, strict=True)):
            var = lp.add_variable(f"N_{g}_{a}", 0, inst.need[ln.job], cat="Integer")
            big_n.append(var)
            cover[ln.job].append(var)
            lp += var <= fits(window, ln.e) * y
            work.append(var * ln.e)
            lp += pulp.lpSum(work) <= window * y
        if inst.billing.mode == "fixed":
            cost.append(u * tp.t.price * y)
        else:
            p = lp.add_variable(f"p_{g}", 0)
            lp += p >= tp.t.boot_s * y + pulp.lpSum(work)
            lp += p >= inst.billing.min_charge_s * y
            cost.append(tp.t.price / atu * p)
        rows.append((group, y, big_n))
    for tp in inst.types:
        lp += pulp.lpSum(per_type.get(tp.t.name, [])) <= tp.bound
    for i, terms in enumerate(cover):
        lp += pulp.lpSum(terms) == inst.need[i]
    lp += pulp.lpSum(cost)
    ys = [y for _, y, _ in rows]
    tasks = [v for _, _, big_n in rows for v in big_n]
    busy = None
    if inst.billing.mode == "fixed":  # cost fixed with y: the least busy time breaks ties
        busy = pulp.LpAffineExpression(
            [
                (v, ln.e)
                for group, _, big_n in rows
                for v, ln in zip(big_n, group.tp.lanes, strict=True)
            ]
        )
    two = _two_stage(lp, ys, tasks, busy, solver, label, limit) if staged else None
    if two is not None:
        out, lower = two
        out.staged = True
    else:
        usable, out = run_lp(lp, solver, label, limit)
        if not usable:
            return out, math.inf, []
        lower = pulp.value(lp.objective) or 0.0
    solution = [(group, int_value(y), [int_value(v) for v in big_n]) for group, y, big_n in rows]
    return out, lower, solution


def _two_stage(
    lp: pulp.LpProblem,
    ys: Sequence[pulp.LpVariable],
    tasks: Sequence[pulp.LpVariable],
    busy: pulp.LpAffineExpression | None,
    solver: Solver,
    label: str,
    limit: float | None,
) -> tuple[Outcome, float] | None:
    """The aggregate in two steps: machines y integer with tasks N continuous (a
    relaxation, so its optimum is a lower bound on the aggregate's), then integer N with
    y fixed at that optimum. When the second step costs no more than the first, its
    solution is an optimum of the aggregate; ``busy`` (when the cost is fixed by y), the
    second step's objective, prefers the least busy of them. None (the model as it was)
    otherwise; the caller then solves the aggregate whole."""
    for v in tasks:
        v.cat = pulp.LpContinuous
    usable, first = run_lp(lp, solver, f"{label} (tasks relaxed)", limit)
    for v in tasks:
        v.cat = pulp.LpInteger
    if not usable or not first.proven:
        return None
    lower = pulp.value(lp.objective) or 0.0
    bounds = [(y.lowBound, y.upBound) for y in ys]
    for y in ys:
        y.lowBound = y.upBound = int_value(y)
    objective = lp.objective
    if busy is not None:
        lp.setObjective(busy)
    usable, second = run_lp(lp, solver, f"{label} (machines fixed)", limit)
    lp.setObjective(objective)
    for y, (low, up) in zip(ys, bounds, strict=True):
        y.lowBound, y.upBound = low, up
    cost = pulp.value(objective) if usable else None
    if not second.proven or cost is None or cost > lower + MONEY_TOL * max(1.0, abs(lower)):
        return None
    return second, lower


def _split_all(
    inst: Instance,
    solution: Sequence[tuple[Group, int, list[int]]],
    solver: Solver,
    limit: float | None,
    label: str,
) -> tuple[list[NewMachine] | None, list[str], bool]:
    """Split every group into machines; tasks a split leaves are planned again (the same
    way) on the machines not used yet. None when that places nothing more. The flag:
    some group's pattern split was tried and found none."""
    machines: list[NewMachine] = []
    used: dict[str, int] = {}
    left = [0] * len(inst.jobs)
    extra: list[str] = []
    stuck = False
    for group, count, tasks in solution:
        if count == 0 or not any(tasks):
            continue
        split, rest = split_group(inst, group, count, tasks)
        if any(rest):
            by_patterns, notes, tried = split_patterns(
                inst, group, count, tasks, solver, min(limit or math.inf, _PATTERN_LIMIT_S)
            )
            extra.extend(notes)
            stuck = stuck or (tried and by_patterns is None)
            if by_patterns is not None:
                split, rest = by_patterns, [0] * len(rest)
        for ln, n in zip(group.tp.lanes, rest, strict=True):
            left[ln.job] += n
        taken = [row for row in split if any(row)]
        used[group.tp.t.name] = used.get(group.tp.t.name, 0) + len(taken)
        machines.extend(new_machine(inst, group.tp.t, row) for row in taken)
    if not any(left):
        return machines, extra, stuck
    if list(left) == list(inst.need):
        return None, extra, stuck
    rest_inst = rest_of(inst, left, used)
    out, _, again = aggregate_lp(rest_inst, solver, limit, f"{label} repair")
    if not again:
        return None, extra + out.notes, stuck
    more, notes, _ = _split_all(rest_inst, again, solver, limit, label)
    if more is None:
        return None, extra + out.notes + notes, stuck
    return machines + more, extra + out.notes + notes, stuck


def _cost(machines: Sequence[NewMachine]) -> float:
    return sum(m.cost for m in machines)


def _aggregate(
    inst: Instance,
    solver: Solver,
    limit: float | None,
    label: str,
    fallback_s: float | None,
    job_by_job: JobByJob,
) -> Outcome:
    """The fast model: the aggregate's optimum is a lower bound on model (7); its
    machines, split, are the plan when they reach it. Otherwise the cheapest of: the
    split (and repair) of the aggregate with slack, job by job (Algorithm 3), and the
    per-machine model under ``fallback_s``."""
    out, lower, solution = aggregate_lp(inst, solver, limit, label)
    if not solution:
        return out  # infeasible: no plan of model (7) either; or the solver failed
    bound = lower if out.proven else None

    def reached(machines: Sequence[NewMachine]) -> bool:
        return bound is not None and _cost(machines) <= bound + MONEY_TOL * max(1.0, bound)

    best, notes, stuck = _split_all(inst, solution, solver, limit, label)
    out.notes.extend(notes)
    if best is not None and reached(best):
        out.machines, out.bound = best, bound
        return out
    candidates = [best]
    if stuck and out.staged:
        # the two steps' tasks per group do not split; the whole aggregate may pick
        # others (same optimum) that do
        whole, _, other = aggregate_lp(inst, solver, limit, label, staged=False)
        out.notes.extend(whole.notes)
        if other:
            again, notes, _ = _split_all(inst, other, solver, limit, label)
            out.notes.extend(notes)
            if again is not None and reached(again):
                out.machines, out.bound = again, bound
                return out
            candidates.append(again)
    by_patterns, exact, notes = pattern_model(
        inst, solver, min(limit or math.inf, _PATTERN_MODEL_S), label
    )
    out.notes.extend(notes)
    if by_patterns is not None and exact:
        out.machines, out.bound = by_patterns, _cost(by_patterns)
        return out
    candidates.append(by_patterns)
    if len(inst.jobs) > 1:
        machines, notes = job_by_job(inst, solver, limit)
        out.notes.extend(notes)
        candidates.append(machines)
    found = [c for c in candidates if c is not None]
    best = min(found, key=_cost) if found else None
    if best is not None and reached(best):
        out.machines, out.bound = best, bound
        return out
    out.notes.append(
        f"{label}: no split of the aggregate reaches its bound {lower:.6g}"
        + (f" (best plan {_cost(best):.6g})" if best is not None else "")
    )
    return _fallback(inst, solver, fallback_s, label, out.notes, best, bound)


def _fallback(
    inst: Instance,
    solver: Solver,
    limit: float | None,
    label: str,
    notes: list[str],
    repaired: list[NewMachine] | None,
    bound: float | None,
) -> Outcome:
    """The per-machine model (with a symmetry cut) under ``limit`` (0: not tried); the
    repaired split when that ends with nothing cheaper."""
    if limit == 0.0:
        out = Outcome(None, list(notes), failed=repaired is None)
    else:
        out = _per_machine(inst, solver, limit, symmetry_cuts=True, label=f"{label} per machine")
        out.notes[:0] = notes
    out.bound = bound
    if repaired is None:
        return out
    cost = sum(m.cost for m in repaired)
    if out.machines is None or (not out.proven and cost < sum(m.cost for m in out.machines)):
        out.notes.append(f"{label}: the repaired split used ({cost:.6g})")
        out.machines, out.failed = repaired, False
        out.proven = bound is not None and cost <= bound + MONEY_TOL * max(1.0, bound)
    return out


def plan_new(
    jobs: Sequence[DeadlineJob],
    need: Mapping[str, int],
    types: Sequence[MachineType],
    billing: BillingModel,
    now: float,
    formulation: Formulation,
    solver: Solver,
    time_limit_s: float | None,
    fallback_s: float | None,
    job_by_job: JobByJob,
) -> DeadlineResult:
    """Model (7), or (10) for one job, for ``need`` on new machines only; ``job_by_job``
    gives the fast model a plan to compare with when its split stays above the bound."""
    inst = make_instance(jobs, need, types, billing, now)
    if not inst.jobs:
        return DeadlineResult(DeadlinePlan({}, (), 0.0))
    reason = unreachable(inst)
    if reason is not None:
        return DeadlineResult(None, reason)
    label = "model 7" if len(inst.jobs) > 1 else "model 10"
    if formulation == "literal":
        out = _per_machine(inst, solver, time_limit_s, symmetry_cuts=False, label=label)
    else:
        out = _aggregate(inst, solver, time_limit_s, label, fallback_s, job_by_job)
    notes = tuple(out.notes)
    if out.machines is not None:
        plan = DeadlinePlan({}, tuple(out.machines), sum(m.cost for m in out.machines))
        return DeadlineResult(plan, None, notes, out.proven, out.bound)
    names = ", ".join(repr(j.name) for j in inst.jobs)
    if out.failed:
        return DeadlineResult(None, f"jobs {names}: the solver gave no answer (see notes)", notes)
    return DeadlineResult(
        None,
        f"jobs {names}: no mix of at most the allowed machines finishes them all by their "
        "deadlines",
        notes,
    )

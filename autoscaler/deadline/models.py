"""The deadline planners of paper 002 (Thai, Varghese, Barker) §III–IV: the cheapest
machines that finish every job by its deadline.

Environment (paper 002 §III.A). A job j has n_j tasks, a deadline d_j (absolute run
time) and a mean task time e_{j,it} per machine type (the paper's recurring
applications; a type without one cannot run the job). A type has a price c_it per
ATU, a boot time β_it and a maximum count. A new machine is launched at ``now``,
boots, then runs its jobs one after the other; it is paid from launch for its
running time r_v = β + Σ_j n_{j,v}·e_{j,it}, rounded up to whole ATUs (``BillingModel``;
under per-second billing, r_v with the minimum charge).

Job order. A machine runs its jobs earliest deadline first (EDF; ties in the order
given). The paper uses "a pre-defined priority"; EDF loses nothing: on one machine with
given task counts, if any order meets every deadline, EDF does (exchange argument).
So the deadline constraint (2) is, for every job j, with L_{j,it} = d_j − now − β_it::

    Σ_{j' ≤ j} n_{j',v}·e_{j',it} ≤ L_{j,it}                                   (2')

(for a job v does not run, the constraint is implied by the one of the last job before
it that v runs, whose deadline is no later).

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
most ``_MAX_PATTERNS``; a list cut there is used only up to ``_PARTIAL_LANES`` jobs):
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
or not. It is skipped when a group has ``_MAX_PATTERNS`` patterns or more (many jobs)
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

Algorithms (paper 002 §IV): ``assign`` is Algorithm 1 (fill running machines without
extending their paid time or missing a deadline), ``handle_multi`` Algorithm 2 (assign
every job, then model (7) for what is left), ``handle_single`` Algorithm 3 (job by job:
assign, then model (10), the new machines joining the running ones).

A deadline no mix can meet is a result, not an error: ``DeadlineResult.plan`` is None
and ``reason`` names the job(s). Solved with PuLP (HiGHS, CBC as fallback) through the
``core.solve.solve_lp``; every status that is neither Optimal nor Infeasible is
named in ``notes``.
"""

from __future__ import annotations

import heapq
import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

import pulp

from autoscaler.core.billing import BillingModel
from autoscaler.core.solve import Solver, solve_lp

Formulation = Literal["fast", "literal"]

_EPS = 1e-9
_MONEY_TOL = 1e-6
_MAX_PATTERNS = 2_000  # per group split
_PATTERN_LIMIT_S = 0.5  # per group split: a pattern MILP not solved by then is not used
_PARTIAL_LANES = 3  # per group split: patterns cut at _MAX_PATTERNS are used up to this many jobs
_PATTERN_MODEL_S = 2.0  # the pattern model's time limit
FALLBACK_S = 5.0
"""Fast model: how long the per-machine model may run when a split stays above the bound."""


# --- inputs ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DeadlineJob:
    """A bag with a deadline (paper 002: j, n_j, d_j, e_{a_j,it})."""

    name: str
    tasks: int  # n_j
    deadline_s: float  # d_j, absolute run time
    task_s: Mapping[str, float]  # e_{j,it}: mean task time per type name; absent: unknown


@dataclass(frozen=True, slots=True)
class MachineType:
    name: str
    price: float  # c_it per ATU
    boot_s: float  # β_it
    max_count: int  # new machines of this type at most


@dataclass(frozen=True, slots=True)
class RunningMachine:
    """A machine that exists already (booting or running)."""

    id: str
    type: str
    paid_until: float  # absolute time its paid time ends
    free_at: float  # absolute time its queue is done (for a booting machine: ready + queue)


@dataclass(frozen=True, slots=True)
class DeadlineProblem:
    jobs: Sequence[DeadlineJob]
    types: Sequence[MachineType]
    billing: BillingModel
    now: float = 0.0
    machines: Sequence[RunningMachine] = ()


# --- outputs ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class NewMachine:
    """A machine to launch now, and the tasks of each job it runs (in EDF order)."""

    type: str
    tasks: Mapping[str, int]
    busy_s: float  # r_v: boot plus work, from launch
    paid_s: float  # what it is paid for: whole ATUs, or r_v with the minimum charge
    cost: float


@dataclass(frozen=True, slots=True)
class DeadlinePlan:
    existing: Mapping[str, Mapping[str, int]]  # running machine id -> job -> tasks
    new: tuple[NewMachine, ...]
    cost: float  # money the new machines commit

    def counts(self) -> dict[str, int]:
        """New machines per type."""
        out: dict[str, int] = {}
        for m in self.new:
            out[m.type] = out.get(m.type, 0) + 1
        return out


@dataclass(frozen=True, slots=True)
class DeadlineResult:
    """A plan, or None with the reason (naming the jobs); ``notes`` names every solver
    status that was neither Optimal nor Infeasible, and fallbacks taken. ``proven``:
    the plan is an optimum of its model (False when a time limit cut a solve short, or
    the fast model's split stayed above its bound). ``bound``: the fast model's lower
    bound on the cost of model (7) (None for the literal model)."""

    plan: DeadlinePlan | None
    reason: str | None = None
    notes: tuple[str, ...] = ()
    proven: bool = True
    bound: float | None = None


@dataclass(frozen=True, slots=True)
class Assignment:
    """What Algorithm 1 did: tasks per running machine and job, and tasks left per job."""

    tasks: Mapping[str, Mapping[str, int]]
    left: Mapping[str, int]
    machines: tuple[RunningMachine, ...]  # the machines with their queues extended


# --- Algorithm 1 -----------------------------------------------------------------------------


def edf(jobs: Sequence[DeadlineJob]) -> list[DeadlineJob]:
    """Jobs earliest deadline first, ties in the order given."""
    return sorted(jobs, key=lambda j: j.deadline_s)


def _fits(seconds: float, task_s: float) -> int:
    return max(0, math.floor(seconds / task_s + _EPS)) if seconds > 0 else 0


def assign(
    jobs: Sequence[DeadlineJob],
    machines: Sequence[RunningMachine],
    now: float,
    left: Mapping[str, int] | None = None,
) -> Assignment:
    """Algorithm 1: give each job (EDF) as many tasks as each machine (in the order
    given) can finish by min(deadline, paid_until), after its queue.

    A machine's work is never pushed past its paid time nor past the job's deadline;
    ``left`` (default: every job's n_j) is what is still to place.
    """
    remaining = {j.name: (left[j.name] if left is not None else j.tasks) for j in jobs}
    free = {m.id: max(m.free_at, now) for m in machines}
    tasks: dict[str, dict[str, int]] = {m.id: {} for m in machines}
    for job in edf(jobs):
        for m in machines:
            if remaining[job.name] <= 0:
                break
            e = job.task_s.get(m.type)
            if e is None or e <= 0:
                continue
            n = min(remaining[job.name], _fits(min(job.deadline_s, m.paid_until) - free[m.id], e))
            if n > 0:
                tasks[m.id][job.name] = tasks[m.id].get(job.name, 0) + n
                free[m.id] += n * e
                remaining[job.name] -= n
    extended = tuple(
        RunningMachine(m.id, m.type, m.paid_until, max(m.free_at, free[m.id])) for m in machines
    )
    return Assignment({k: v for k, v in tasks.items() if v}, remaining, extended)


# --- the models ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Lane:
    """One job on one type: its window L and task time e (only when one task fits)."""

    job: int  # index in EDF order
    e: float
    window: float  # L_{j,it} = d_j − now − β_it
    cap: int  # ⌊L/e⌋


@dataclass(frozen=True, slots=True)
class _Type:
    t: MachineType
    lanes: tuple[_Lane, ...]  # jobs this type can run, in EDF order
    bound: int  # K_it


@dataclass(frozen=True, slots=True)
class _Instance:
    jobs: tuple[DeadlineJob, ...]  # EDF, only those with tasks to place
    need: tuple[int, ...]
    types: tuple[_Type, ...]
    billing: BillingModel
    now: float


def _instance(
    jobs: Sequence[DeadlineJob],
    need: Mapping[str, int],
    types: Sequence[MachineType],
    billing: BillingModel,
    now: float,
) -> _Instance:
    ordered = tuple(j for j in edf(jobs) if need.get(j.name, 0) > 0)
    counts = tuple(need[j.name] for j in ordered)
    out: list[_Type] = []
    for t in types:
        lanes = []
        for i, job in enumerate(ordered):
            e = job.task_s.get(t.name)
            window = job.deadline_s - now - t.boot_s
            if e is not None and e > 0 and _fits(window, e) > 0:
                lanes.append(_Lane(i, e, window, _fits(window, e)))
        if not lanes or t.max_count <= 0:
            continue
        s = sum(counts[ln.job] * ln.e / ln.window for ln in lanes)
        out.append(_Type(t, tuple(lanes), min(t.max_count, math.floor(2 * s + _EPS) + 1)))
    return _Instance(ordered, counts, tuple(out), billing, now)


def _unreachable(inst: _Instance) -> str | None:
    """A reason when some job cannot be finished even with every machine to itself."""
    late = []
    for i, job in enumerate(inst.jobs):
        most = sum(tp.t.max_count * ln.cap for tp in inst.types for ln in tp.lanes if ln.job == i)
        if most == 0:
            late.append(
                f"job {job.name!r}: no machine type finishes one task by its deadline "
                f"(boot + one task is longer than the time left, or no task time known)"
            )
        elif most < inst.need[i]:
            late.append(
                f"job {job.name!r}: {inst.need[i]} tasks, but every machine allowed "
                f"finishes at most {most} by its deadline"
            )
    return "; ".join(late) or None


def _units(inst: _Instance, tp: _Type) -> range:
    """Unit counts worth buying for a type: up to the one that covers its last window."""
    atu = inst.billing.atu_s
    last = max(ln.window for ln in tp.lanes) + tp.t.boot_s
    return range(1, max(1, math.ceil(last / atu - _EPS)) + 1)


def _machine_cost(billing: BillingModel, t: MachineType, busy_s: float) -> tuple[float, float]:
    """(paid seconds, cost) of a new machine busy for ``busy_s`` from launch."""
    if billing.mode == "fixed":
        paid = billing.units(busy_s) * billing.atu_s
    else:
        paid = max(busy_s, billing.min_charge_s)
    return paid, billing.cost(t.price, busy_s)


def _new_machine(inst: _Instance, t: MachineType, tasks: Sequence[int]) -> NewMachine:
    busy = t.boot_s + sum(n * j.task_s[t.name] for n, j in zip(tasks, inst.jobs, strict=True) if n)
    paid, cost = _machine_cost(inst.billing, t, busy)
    named = {j.name: n for n, j in zip(tasks, inst.jobs, strict=True) if n}
    return NewMachine(t.name, named, busy, paid, cost)


def _int(var: pulp.LpVariable) -> int:
    return round(var.value() or 0)


@dataclass(slots=True)
class _Outcome:
    machines: list[NewMachine] | None
    notes: list[str] = field(default_factory=list)
    failed: bool = False  # the solver gave no usable answer (as opposed to infeasible)
    proven: bool = True  # optimal, not only feasible
    bound: float | None = None  # the aggregate's optimum: no plan of model (7) costs less
    staged: bool = False  # the aggregate was solved in two steps (``_two_stage``)


def _run(
    lp: pulp.LpProblem, solver: Solver, label: str, limit: float | None
) -> tuple[bool, _Outcome]:
    solved = solve_lp(lp, solver, label, limit)
    out = _Outcome(None)
    if solved.outcome == "feasible":
        out.notes.append(f"{solved.note}; plan used, not proven the cheapest")
        out.proven = False
    elif solved.outcome == "failed":
        out.notes.append(f"{solved.note}; no plan")
        out.failed = True
    elif solved.note:
        out.notes.append(solved.note)
    return solved.outcome in ("optimal", "feasible"), out


def _per_machine(
    inst: _Instance, solver: Solver, limit: float | None, symmetry_cuts: bool, label: str
) -> _Outcome:
    """Model (7) with a variable per candidate machine (see the module docstring)."""
    lp = pulp.LpProblem("deadline_literal", pulp.LpMinimize)
    atu = inst.billing.atu_s
    cover: list[list[pulp.LpVariable]] = [[] for _ in inst.jobs]
    machines: list[tuple[_Type, dict[int, pulp.LpVariable]]] = []
    cost = []
    for a, tp in enumerate(inst.types):
        previous = None
        top = len(_units(inst, tp))
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
    usable, out = _run(lp, solver, label, limit)
    if usable:
        out.machines = []
        for tp, n in machines:
            tasks = [_int(n[i]) if i in n else 0 for i in range(len(inst.jobs))]
            if any(tasks):
                out.machines.append(_new_machine(inst, tp.t, tasks))
    return out


@dataclass(frozen=True, slots=True)
class _Group:
    tp: _Type
    windows: tuple[float, ...]  # W_{j,g} per lane
    caps: tuple[int, ...]  # ⌊W/e⌋ per lane


def _groups(inst: _Instance) -> list[tuple[_Group, int]]:
    """(group, units) pairs: per type and unit count under fixed ATUs, per type otherwise."""
    out = []
    for tp in inst.types:
        if inst.billing.mode == "fixed":
            for u in _units(inst, tp):
                reach = u * inst.billing.atu_s - tp.t.boot_s
                windows = tuple(min(ln.window, reach) for ln in tp.lanes)
                caps = tuple(_fits(w, ln.e) for w, ln in zip(windows, tp.lanes, strict=True))
                if any(caps):
                    out.append((_Group(tp, windows, caps), u))
        else:
            out.append(
                (
                    _Group(
                        tp, tuple(ln.window for ln in tp.lanes), tuple(ln.cap for ln in tp.lanes)
                    ),
                    0,
                )
            )
    return out


def _pack(
    inst: _Instance, group: _Group, count: int, tasks: Sequence[int], first_fit: bool
) -> tuple[list[list[int]], list[int]]:
    """Place a group's tasks (per lane, EDF) on ``count`` machines, each meeting (2'):
    first fit (fill machine 1, then 2, ...) or least loaded first. Returns the machines'
    tasks per job and the tasks per lane that did not fit."""
    loads = [0.0] * count
    rows = [[0] * len(inst.jobs) for _ in range(count)]
    left = []
    for ln, window, n in zip(group.tp.lanes, group.windows, tasks, strict=True):
        if first_fit:
            for k in range(count):
                fit = min(n, _fits(window - loads[k], ln.e))
                rows[k][ln.job] += fit
                loads[k] += fit * ln.e
                n -= fit
        else:
            heap = [(load, k) for k, load in enumerate(loads)]
            heapq.heapify(heap)
            while n > 0 and _fits(window - heap[0][0], ln.e):
                load, k = heap[0]
                heapq.heapreplace(heap, (load + ln.e, k))
                rows[k][ln.job] += 1
                loads[k] += ln.e
                n -= 1
        left.append(n)
    return rows, left


def _split(
    inst: _Instance, group: _Group, count: int, tasks: Sequence[int]
) -> tuple[list[list[int]], list[int]]:
    """The better of first fit and least loaded first (fewest seconds of work left)."""
    best: tuple[list[list[int]], list[int]] | None = None
    for first_fit in (True, False):
        rows, left = _pack(inst, group, count, tasks, first_fit)
        if not any(left):
            return rows, left
        work = sum(n * ln.e for n, ln in zip(left, group.tp.lanes, strict=True))
        if best is None or work < sum(
            n * ln.e for n, ln in zip(best[1], group.tp.lanes, strict=True)
        ):
            best = (rows, left)
    assert best is not None
    return best


def _patterns(group: _Group, active: Sequence[int]) -> list[tuple[int, ...]]:
    """Per-machine patterns over the lanes in ``active`` (tasks per lane meeting (2')),
    each with as many tasks of its last lane as fit; at most ``_MAX_PATTERNS``, the
    fullest first."""
    lanes = group.tp.lanes
    out: list[tuple[int, ...]] = []

    def room(load: float, pos: int) -> float:
        # the time left for lane ``active[pos]``: every later window must hold it too
        return min(group.windows[a] for a in active[pos:]) - load

    def walk(pos: int, load: float, chosen: list[int]) -> None:
        if len(out) >= _MAX_PATTERNS:
            return
        a = active[pos]
        most = min(group.caps[a], _fits(room(load, pos), lanes[a].e))
        if pos == len(active) - 1:
            out.append((*chosen, most))
            return
        for n in range(most, -1, -1):
            walk(pos + 1, load + n * lanes[a].e, [*chosen, n])

    walk(0, 0.0, [])
    return out


def _split_patterns(
    inst: _Instance,
    group: _Group,
    count: int,
    tasks: Sequence[int],
    solver: Solver,
    limit: float | None,
) -> tuple[list[list[int]] | None, list[str], bool]:
    """Split a group by choosing per-machine patterns (columns): integer z_p machines
    of pattern p, Σ z_p ≤ count, Σ z_p·p ≥ tasks per lane; extra tasks are dropped.
    Not tried (None) when the group has ``_MAX_PATTERNS`` patterns or more over more than
    ``_PARTIAL_LANES`` jobs: the first patterns listed then vary only the last jobs, and
    a model over them rarely splits what first fit could not. The flag: the model was
    tried."""
    active = [a for a, n in enumerate(tasks) if n > 0]
    patterns = _patterns(group, active)
    if len(patterns) >= _MAX_PATTERNS and len(active) > _PARTIAL_LANES:
        return None, [], False
    lp = pulp.LpProblem("deadline_patterns", pulp.LpMinimize)
    z = [lp.add_variable(f"z_{p}", 0, count, cat="Integer") for p in range(len(patterns))]
    lp += pulp.lpSum(z) <= count
    for pos, a in enumerate(active):
        terms = [(v, pat[pos]) for v, pat in zip(z, patterns, strict=True) if pat[pos]]
        lp += pulp.LpAffineExpression(terms) >= tasks[a]
    lp += pulp.lpSum(z)
    usable, out = _run(lp, solver, f"patterns {group.tp.t.name}", limit)
    if not usable:
        return None, out.notes, True
    lanes = group.tp.lanes
    need = list(tasks)
    rows = []
    for v, pat in zip(z, patterns, strict=True):
        for _ in range(_int(v)):
            row = [0] * len(inst.jobs)
            for pos, a in enumerate(active):
                take = min(pat[pos], need[a])
                row[lanes[a].job] = take
                need[a] -= take
            rows.append(row)
    return rows, out.notes, True


def _pattern_model(
    inst: _Instance, solver: Solver, limit: float | None, label: str
) -> tuple[list[NewMachine] | None, bool, list[str]]:
    """Model (7) over per-machine job patterns as columns: integer z_p machines of
    pattern p (a group and its tasks per job, ``_patterns`` over all the type's jobs),
    Σ_p z_p·p_j ≥ n_j, at most K_it per type, minimise Σ_p z_p·cost_p; extra tasks are
    dropped. Every machine of a plan of (7) runs at most what some pattern of its group
    holds, so under fixed ATUs its optimum is (7)'s. Not tried when a group has
    ``_MAX_PATTERNS`` patterns or more. Returns the machines, whether they are proven
    optimal, and notes."""
    lp = pulp.LpProblem("deadline_patterns_all", pulp.LpMinimize)
    columns: list[tuple[_Group, tuple[int, ...], pulp.LpVariable]] = []
    per_type: dict[str, list[pulp.LpVariable]] = {}
    cover: list[list[pulp.LpExpression]] = [[] for _ in inst.jobs]
    cost = []
    listed = [
        (group, u, _patterns(group, range(len(group.tp.lanes)))) for group, u in _groups(inst)
    ]
    if any(len(patterns) >= _MAX_PATTERNS for _, _, patterns in listed):
        return None, False, [f"{label}: too many patterns, pattern model not tried"]
    for group, u, patterns in listed:
        tp = group.tp
        for pat in patterns:
            if not any(pat):
                continue
            z = lp.add_variable(f"z_{len(columns)}", 0, tp.bound, cat="Integer")
            columns.append((group, pat, z))
            per_type.setdefault(tp.t.name, []).append(z)
            for ln, n in zip(tp.lanes, pat, strict=True):
                if n:
                    cover[ln.job].append(n * z)
            busy = tp.t.boot_s + sum(n * ln.e for ln, n in zip(tp.lanes, pat, strict=True))
            if inst.billing.mode == "fixed":
                cost.append(u * tp.t.price * z)
            else:
                cost.append(_machine_cost(inst.billing, tp.t, busy)[1] * z)
    for tp in inst.types:
        lp += pulp.lpSum(per_type.get(tp.t.name, [])) <= tp.bound
    for i, terms in enumerate(cover):
        lp += pulp.lpSum(terms) >= inst.need[i]
    lp += pulp.lpSum(cost)
    usable, out = _run(lp, solver, f"{label} patterns", limit)
    if not usable:
        return None, False, out.notes
    need = list(inst.need)
    machines = []
    for group, pat, z in columns:
        for _ in range(_int(z)):
            row = [0] * len(inst.jobs)
            for ln, n in zip(group.tp.lanes, pat, strict=True):
                row[ln.job] = min(n, need[ln.job])
                need[ln.job] -= row[ln.job]
            if any(row):
                machines.append(_new_machine(inst, group.tp.t, row))
    proven = out.proven and inst.billing.mode == "fixed"
    return machines, proven, out.notes


def _aggregate_lp(
    inst: _Instance, solver: Solver, limit: float | None, label: str, staged: bool = True
) -> tuple[_Outcome, float, list[tuple[_Group, int, list[int]]]]:
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
    for g, (group, u) in enumerate(_groups(inst)):
        tp = group.tp
        y = lp.add_variable(f"y_{g}", 0, tp.bound, cat="Integer")
        per_type.setdefault(tp.t.name, []).append(y)
        big_n = []
        work = []
        for a, (ln, window) in enumerate(zip(tp.lanes, group.windows, strict=True)):
            var = lp.add_variable(f"N_{g}_{a}", 0, inst.need[ln.job], cat="Integer")
            big_n.append(var)
            cover[ln.job].append(var)
            lp += var <= _fits(window, ln.e) * y
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
        usable, out = _run(lp, solver, label, limit)
        if not usable:
            return out, math.inf, []
        lower = pulp.value(lp.objective) or 0.0
    solution = [(group, _int(y), [_int(v) for v in big_n]) for group, y, big_n in rows]
    return out, lower, solution


def _two_stage(
    lp: pulp.LpProblem,
    ys: Sequence[pulp.LpVariable],
    tasks: Sequence[pulp.LpVariable],
    busy: pulp.LpAffineExpression | None,
    solver: Solver,
    label: str,
    limit: float | None,
) -> tuple[_Outcome, float] | None:
    """The aggregate in two steps: machines y integer with tasks N continuous (a
    relaxation, so its optimum is a lower bound on the aggregate's), then integer N with
    y fixed at that optimum. When the second step costs no more than the first, its
    solution is an optimum of the aggregate; ``busy`` (when the cost is fixed by y), the
    second step's objective, prefers the least busy of them. None (the model as it was)
    otherwise; the caller then solves the aggregate whole."""
    for v in tasks:
        v.cat = pulp.LpContinuous
    usable, first = _run(lp, solver, f"{label} (tasks relaxed)", limit)
    for v in tasks:
        v.cat = pulp.LpInteger
    if not usable or not first.proven:
        return None
    lower = pulp.value(lp.objective) or 0.0
    bounds = [(y.lowBound, y.upBound) for y in ys]
    for y in ys:
        y.lowBound = y.upBound = _int(y)
    objective = lp.objective
    if busy is not None:
        lp.setObjective(busy)
    usable, second = _run(lp, solver, f"{label} (machines fixed)", limit)
    lp.setObjective(objective)
    for y, (low, up) in zip(ys, bounds, strict=True):
        y.lowBound, y.upBound = low, up
    cost = pulp.value(objective) if usable else None
    if not second.proven or cost is None or cost > lower + _MONEY_TOL * max(1.0, abs(lower)):
        return None
    return second, lower


def _split_all(
    inst: _Instance,
    solution: Sequence[tuple[_Group, int, list[int]]],
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
        split, rest = _split(inst, group, count, tasks)
        if any(rest):
            by_patterns, notes, tried = _split_patterns(
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
        machines.extend(_new_machine(inst, group.tp.t, row) for row in taken)
    if not any(left):
        return machines, extra, stuck
    if list(left) == list(inst.need):
        return None, extra, stuck
    rest_inst = _rest(inst, left, used)
    out, _, again = _aggregate_lp(rest_inst, solver, limit, f"{label} repair")
    if not again:
        return None, extra + out.notes, stuck
    more, notes, _ = _split_all(rest_inst, again, solver, limit, label)
    if more is None:
        return None, extra + out.notes + notes, stuck
    return machines + more, extra + out.notes + notes, stuck


def _job_by_job(
    inst: _Instance, solver: Solver, limit: float | None
) -> tuple[list[NewMachine] | None, list[str]]:
    """Algorithm 3's machines for the same tasks: a plan of model (7) (each machine
    runs its jobs in EDF order), so the fast model never costs more than job by job."""
    jobs = [replace(j, tasks=n) for j, n in zip(inst.jobs, inst.need, strict=True)]
    types = [tp.t for tp in inst.types]
    result = handle_single(DeadlineProblem(jobs, types, inst.billing, inst.now), solver, limit)
    if result.plan is None:
        return None, list(result.notes)
    return list(result.plan.new), list(result.notes)


def _cost(machines: Sequence[NewMachine]) -> float:
    return sum(m.cost for m in machines)


def _aggregate(
    inst: _Instance, solver: Solver, limit: float | None, label: str, fallback_s: float | None
) -> _Outcome:
    """The fast model: the aggregate's optimum is a lower bound on model (7); its
    machines, split, are the plan when they reach it. Otherwise the cheapest of: the
    split (and repair) of the aggregate with slack, job by job (Algorithm 3), and the
    per-machine model under ``fallback_s``."""
    out, lower, solution = _aggregate_lp(inst, solver, limit, label)
    if not solution:
        return out  # infeasible: no plan of model (7) either; or the solver failed
    bound = lower if out.proven else None

    def reached(machines: Sequence[NewMachine]) -> bool:
        return bound is not None and _cost(machines) <= bound + _MONEY_TOL * max(1.0, bound)

    best, notes, stuck = _split_all(inst, solution, solver, limit, label)
    out.notes.extend(notes)
    if best is not None and reached(best):
        out.machines, out.bound = best, bound
        return out
    candidates = [best]
    if stuck and out.staged:
        # the two steps' tasks per group do not split; the whole aggregate may pick
        # others (same optimum) that do
        whole, _, other = _aggregate_lp(inst, solver, limit, label, staged=False)
        out.notes.extend(whole.notes)
        if other:
            again, notes, _ = _split_all(inst, other, solver, limit, label)
            out.notes.extend(notes)
            if again is not None and reached(again):
                out.machines, out.bound = again, bound
                return out
            candidates.append(again)
    by_patterns, exact, notes = _pattern_model(
        inst, solver, min(limit or math.inf, _PATTERN_MODEL_S), label
    )
    out.notes.extend(notes)
    if by_patterns is not None and exact:
        out.machines, out.bound = by_patterns, _cost(by_patterns)
        return out
    candidates.append(by_patterns)
    if len(inst.jobs) > 1:
        machines, notes = _job_by_job(inst, solver, limit)
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


def _rest(inst: _Instance, left: Sequence[int], used: Mapping[str, int]) -> _Instance:
    """The instance of the tasks a split left, with the machines it used taken away."""
    types = [replace(tp.t, max_count=tp.t.max_count - used.get(tp.t.name, 0)) for tp in inst.types]
    need = {j.name: n for j, n in zip(inst.jobs, left, strict=True)}
    return _instance(inst.jobs, need, types, inst.billing, inst.now)


def _fallback(
    inst: _Instance,
    solver: Solver,
    limit: float | None,
    label: str,
    notes: list[str],
    repaired: list[NewMachine] | None,
    bound: float | None,
) -> _Outcome:
    """The per-machine model (with a symmetry cut) under ``limit`` (0: not tried); the
    repaired split when that ends with nothing cheaper."""
    if limit == 0.0:
        out = _Outcome(None, list(notes), failed=repaired is None)
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
        out.proven = bound is not None and cost <= bound + _MONEY_TOL * max(1.0, bound)
    return out


def _plan_new(
    jobs: Sequence[DeadlineJob],
    need: Mapping[str, int],
    types: Sequence[MachineType],
    billing: BillingModel,
    now: float,
    formulation: Formulation,
    solver: Solver,
    time_limit_s: float | None,
    fallback_s: float | None,
) -> DeadlineResult:
    inst = _instance(jobs, need, types, billing, now)
    if not inst.jobs:
        return DeadlineResult(DeadlinePlan({}, (), 0.0))
    reason = _unreachable(inst)
    if reason is not None:
        return DeadlineResult(None, reason)
    label = "model 7" if len(inst.jobs) > 1 else "model 10"
    if formulation == "literal":
        out = _per_machine(inst, solver, time_limit_s, symmetry_cuts=False, label=label)
    else:
        out = _aggregate(inst, solver, time_limit_s, label, fallback_s)
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


# --- entry points ----------------------------------------------------------------------------


def solve_new(
    jobs: Sequence[DeadlineJob],
    types: Sequence[MachineType],
    billing: BillingModel,
    now: float = 0.0,
    formulation: Formulation = "fast",
    solver: Solver = "highs",
    time_limit_s: float | None = None,
    need: Mapping[str, int] | None = None,
    fallback_s: float | None = FALLBACK_S,
) -> DeadlineResult:
    """The cheapest new machines that finish ``need`` (default: every job's n_j) by the
    deadlines: model (7), or model (10) for one job. No running machine is used."""
    left = need if need is not None else {j.name: j.tasks for j in jobs}
    return _plan_new(jobs, left, types, billing, now, formulation, solver, time_limit_s, fallback_s)


def handle_multi(
    problem: DeadlineProblem,
    formulation: Formulation = "fast",
    solver: Solver = "highs",
    time_limit_s: float | None = None,
    fallback_s: float | None = FALLBACK_S,
) -> DeadlineResult:
    """Algorithm 2: fill the running machines (Algorithm 1), then model (7) for every
    job's tasks left."""
    done = assign(problem.jobs, problem.machines, problem.now)
    result = solve_new(
        problem.jobs,
        problem.types,
        problem.billing,
        problem.now,
        formulation,
        solver,
        time_limit_s,
        need=done.left,
        fallback_s=fallback_s,
    )
    if result.plan is None:
        return result
    plan = DeadlinePlan(done.tasks, result.plan.new, result.plan.cost)
    return DeadlineResult(plan, None, result.notes, result.proven, result.bound)


def handle_single(
    problem: DeadlineProblem, solver: Solver = "highs", time_limit_s: float | None = None
) -> DeadlineResult:
    """Algorithm 3: job by job (EDF), fill the running machines and those bought so far
    (Algorithm 1), then model (10) for the job's tasks left, from the machines of each
    type not yet bought; the new machines join the running ones with their paid time."""
    running = list(problem.machines)
    existing: dict[str, dict[str, int]] = {}
    new: dict[str, tuple[NewMachine, dict[str, int]]] = {}  # id -> (as bought, tasks added)
    notes: list[str] = []
    proven = True
    for job in edf(problem.jobs):
        done = assign([job], running, problem.now)
        running = list(done.machines)
        for mid, tasks in done.tasks.items():
            target = new[mid][1] if mid in new else existing.setdefault(mid, {})
            for name, n in tasks.items():
                target[name] = target.get(name, 0) + n
        used = Counter(m.type for m, _ in new.values())
        allowed = [replace(t, max_count=t.max_count - used[t.name]) for t in problem.types]
        result = solve_new(
            [job],
            allowed,
            problem.billing,
            problem.now,
            "fast",
            solver,
            time_limit_s,
            need=done.left,
        )
        notes.extend(result.notes)
        proven = proven and result.proven
        if result.plan is None:
            return DeadlineResult(None, result.reason, tuple(notes))
        for m in result.plan.new:
            mid = f"new-{len(new)}"
            new[mid] = (m, dict(m.tasks))
            running.append(
                RunningMachine(mid, m.type, problem.now + m.paid_s, problem.now + m.busy_s)
            )
    types = {t.name: t for t in problem.types}
    jobs = {j.name: j for j in problem.jobs}
    machines = []
    for bought, tasks in new.values():
        t = types[bought.type]
        busy = t.boot_s + sum(n * jobs[name].task_s[t.name] for name, n in tasks.items())
        machines.append(NewMachine(t.name, tasks, busy, bought.paid_s, bought.cost))
    plan = DeadlinePlan(existing, tuple(machines), sum(m.cost for m in machines))
    return DeadlineResult(plan, None, tuple(notes), proven)

"""Groups of machines of one type and per-machine job patterns (paper 002 model (7),
fast formulation): splitting a group's tasks into machines that each meet (2'), and
model (7) over patterns as columns. See ``autoscaler.deadline.milp`` for the models."""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass, field

import pulp

from autoscaler.core.solve import Solver, solve_lp
from autoscaler.deadline.instance import (
    Instance,
    NewMachine,
    TypeLanes,
    fits,
    machine_cost,
    new_machine,
    units,
)

MAX_PATTERNS = 2_000  # per group split
_PARTIAL_LANES = 3  # per group split: patterns cut at MAX_PATTERNS are used up to this many jobs


def int_value(var: pulp.LpVariable) -> int:
    return round(var.value() or 0)


@dataclass(slots=True)
class Outcome:
    machines: list[NewMachine] | None
    notes: list[str] = field(default_factory=list)
    failed: bool = False  # the solver gave no usable answer (as opposed to infeasible)
    proven: bool = True  # optimal, not only feasible
    bound: float | None = None  # the aggregate's optimum: no plan of model (7) costs less
    staged: bool = False  # the aggregate was solved in two steps (``_two_stage``)


def run_lp(
    lp: pulp.LpProblem, solver: Solver, label: str, limit: float | None
) -> tuple[bool, Outcome]:
    solved = solve_lp(lp, solver, label, limit)
    out = Outcome(None)
    if solved.outcome == "feasible":
        out.notes.append(f"{solved.note}; plan used, not proven the cheapest")
        out.proven = False
    elif solved.outcome == "failed":
        out.notes.append(f"{solved.note}; no plan")
        out.failed = True
    elif solved.note:
        out.notes.append(solved.note)
    return solved.outcome in ("optimal", "feasible"), out


@dataclass(frozen=True, slots=True)
class Group:
    tp: TypeLanes
    windows: tuple[float, ...]  # W_{j,g} per lane
    caps: tuple[int, ...]  # ⌊W/e⌋ per lane


def groups(inst: Instance) -> list[tuple[Group, int]]:
    """(group, units) pairs: per type and unit count under fixed ATUs, per type otherwise."""
    out = []
    for tp in inst.types:
        if inst.billing.mode == "fixed":
            for u in units(inst, tp):
                reach = u * inst.billing.atu_s - tp.t.boot_s
                windows = tuple(min(ln.window, reach) for ln in tp.lanes)
                caps = tuple(fits(w, ln.e) for w, ln in zip(windows, tp.lanes, strict=True))
                if any(caps):
                    out.append((Group(tp, windows, caps), u))
        else:
            out.append(
                (
                    Group(
                        tp, tuple(ln.window for ln in tp.lanes), tuple(ln.cap for ln in tp.lanes)
                    ),
                    0,
                )
            )
    return out


def _pack(
    inst: Instance, group: Group, count: int, tasks: Sequence[int], first_fit: bool
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
                fit = min(n, fits(window - loads[k], ln.e))
                rows[k][ln.job] += fit
                loads[k] += fit * ln.e
                n -= fit
        else:
            heap = [(load, k) for k, load in enumerate(loads)]
            heapq.heapify(heap)
            while n > 0 and fits(window - heap[0][0], ln.e):
                load, k = heap[0]
                heapq.heapreplace(heap, (load + ln.e, k))
                rows[k][ln.job] += 1
                loads[k] += ln.e
                n -= 1
        left.append(n)
    return rows, left


def split_group(
    inst: Instance, group: Group, count: int, tasks: Sequence[int]
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


def job_patterns(group: Group, active: Sequence[int]) -> list[tuple[int, ...]]:
    """Per-machine patterns over the lanes in ``active`` (tasks per lane meeting (2')),
    each with as many tasks of its last lane as fit; at most ``MAX_PATTERNS``, the
    fullest first."""
    lanes = group.tp.lanes
    out: list[tuple[int, ...]] = []

    def room(load: float, pos: int) -> float:
        # the time left for lane ``active[pos]``: every later window must hold it too
        return min(group.windows[a] for a in active[pos:]) - load

    def walk(pos: int, load: float, chosen: list[int]) -> None:
        if len(out) >= MAX_PATTERNS:
            return
        a = active[pos]
        most = min(group.caps[a], fits(room(load, pos), lanes[a].e))
        if pos == len(active) - 1:
            out.append((*chosen, most))
            return
        for n in range(most, -1, -1):
            walk(pos + 1, load + n * lanes[a].e, [*chosen, n])

    walk(0, 0.0, [])
    return out


def split_patterns(
    inst: Instance,
    group: Group,
    count: int,
    tasks: Sequence[int],
    solver: Solver,
    limit: float | None,
) -> tuple[list[list[int]] | None, list[str], bool]:
    """Split a group by choosing per-machine patterns (columns): integer z_p machines
    of pattern p, Σ z_p ≤ count, Σ z_p·p ≥ tasks per lane; extra tasks are dropped.
    Not tried (None) when the group has ``MAX_PATTERNS`` patterns or more over more than
    ``_PARTIAL_LANES`` jobs: the first patterns listed then vary only the last jobs, and
    a model over them rarely splits what first fit could not. The flag: the model was
    tried."""
    active = [a for a, n in enumerate(tasks) if n > 0]
    patterns = job_patterns(group, active)
    if len(patterns) >= MAX_PATTERNS and len(active) > _PARTIAL_LANES:
        return None, [], False
    lp = pulp.LpProblem("deadline_patterns", pulp.LpMinimize)
    z = [lp.add_variable(f"z_{p}", 0, count, cat="Integer") for p in range(len(patterns))]
    lp += pulp.lpSum(z) <= count
    for pos, a in enumerate(active):
        terms = [(v, pat[pos]) for v, pat in zip(z, patterns, strict=True) if pat[pos]]
        lp += pulp.LpAffineExpression(terms) >= tasks[a]
    lp += pulp.lpSum(z)
    usable, out = run_lp(lp, solver, f"patterns {group.tp.t.name}", limit)
    if not usable:
        return None, out.notes, True
    lanes = group.tp.lanes
    need = list(tasks)
    rows = []
    for v, pat in zip(z, patterns, strict=True):
        for _ in range(int_value(v)):
            row = [0] * len(inst.jobs)
            for pos, a in enumerate(active):
                take = min(pat[pos], need[a])
                row[lanes[a].job] = take
                need[a] -= take
            rows.append(row)
    return rows, out.notes, True


def pattern_model(
    inst: Instance, solver: Solver, limit: float | None, label: str
) -> tuple[list[NewMachine] | None, bool, list[str]]:
    """Model (7) over per-machine job patterns as columns: integer z_p machines of
    pattern p (a group and its tasks per job, ``job_patterns`` over all the type's jobs),
    Σ_p z_p·p_j ≥ n_j, at most K_it per type, minimise Σ_p z_p·cost_p; extra tasks are
    dropped. Every machine of a plan of (7) runs at most what some pattern of its group
    holds, so under fixed ATUs its optimum is (7)'s. Not tried when a group has
    ``MAX_PATTERNS`` patterns or more. Returns the machines, whether they are proven
    optimal, and notes."""
    lp = pulp.LpProblem("deadline_patterns_all", pulp.LpMinimize)
    columns: list[tuple[Group, tuple[int, ...], pulp.LpVariable]] = []
    per_type: dict[str, list[pulp.LpVariable]] = {}
    cover: list[list[pulp.LpExpression]] = [[] for _ in inst.jobs]
    cost = []
    listed = [
        (group, u, job_patterns(group, range(len(group.tp.lanes)))) for group, u in groups(inst)
    ]
    if any(len(patterns) >= MAX_PATTERNS for _, _, patterns in listed):
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
                cost.append(machine_cost(inst.billing, tp.t, busy)[1] * z)
    for tp in inst.types:
        lp += pulp.lpSum(per_type.get(tp.t.name, [])) <= tp.bound
    for i, terms in enumerate(cover):
        lp += pulp.lpSum(terms) >= inst.need[i]
    lp += pulp.lpSum(cost)
    usable, out = run_lp(lp, solver, f"{label} patterns", limit)
    if not usable:
        return None, False, out.notes
    need = list(inst.need)
    machines = []
    for group, pat, z in columns:
        for _ in range(int_value(z)):
            row = [0] * len(inst.jobs)
            for ln, n in zip(group.tp.lanes, pat, strict=True):
                row[ln.job] = min(n, need[ln.job])
                need[ln.job] -= row[ln.job]
            if any(row):
                machines.append(new_machine(inst, group.tp.t, row))
    proven = out.proven and inst.billing.mode == "fixed"
    return machines, proven, out.notes

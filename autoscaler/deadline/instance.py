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

A deadline no mix can meet is a result, not an error: ``DeadlineResult.plan`` is None
and ``reason`` names the job(s).

This module holds the inputs and outputs of the planners and the instance they solve
(jobs in EDF order, each type's lanes and candidate bound K_it); ``milp`` holds models
(7) and (10), ``patterns`` the split of groups into machines, ``assign`` Algorithms 1–3.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Literal

from autoscaler.core.billing import BillingModel

Formulation = Literal["fast", "literal"]

EPS = 1e-9
MONEY_TOL = 1e-6


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
    # Algorithm 1 gives each job its running machines fastest first (with categories a
    # job's part is fast on some types only); False: in the order given, as the paper.
    fastest_first: bool = False


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


def edf(jobs: Sequence[DeadlineJob]) -> list[DeadlineJob]:
    """Jobs earliest deadline first, ties in the order given."""
    return sorted(jobs, key=lambda j: j.deadline_s)


def fits(seconds: float, task_s: float) -> int:
    return max(0, math.floor(seconds / task_s + EPS)) if seconds > 0 else 0


@dataclass(frozen=True, slots=True)
class Lane:
    """One job on one type: its window L and task time e (only when one task fits)."""

    job: int  # index in EDF order
    e: float
    window: float  # L_{j,it} = d_j − now − β_it
    cap: int  # ⌊L/e⌋


@dataclass(frozen=True, slots=True)
class TypeLanes:
    t: MachineType
    lanes: tuple[Lane, ...]  # jobs this type can run, in EDF order
    bound: int  # K_it


@dataclass(frozen=True, slots=True)
class Instance:
    jobs: tuple[DeadlineJob, ...]  # EDF, only those with tasks to place
    need: tuple[int, ...]
    types: tuple[TypeLanes, ...]
    billing: BillingModel
    now: float


def make_instance(
    jobs: Sequence[DeadlineJob],
    need: Mapping[str, int],
    types: Sequence[MachineType],
    billing: BillingModel,
    now: float,
) -> Instance:
    ordered = tuple(j for j in edf(jobs) if need.get(j.name, 0) > 0)
    counts = tuple(need[j.name] for j in ordered)
    out: list[TypeLanes] = []
    for t in types:
        lanes = []
        for i, job in enumerate(ordered):
            e = job.task_s.get(t.name)
            window = job.deadline_s - now - t.boot_s
            if e is not None and e > 0 and fits(window, e) > 0:
                lanes.append(Lane(i, e, window, fits(window, e)))
        if not lanes or t.max_count <= 0:
            continue
        s = sum(counts[ln.job] * ln.e / ln.window for ln in lanes)
        out.append(TypeLanes(t, tuple(lanes), min(t.max_count, math.floor(2 * s + EPS) + 1)))
    return Instance(ordered, counts, tuple(out), billing, now)


def unreachable(inst: Instance) -> str | None:
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


def units(inst: Instance, tp: TypeLanes) -> range:
    """Unit counts worth buying for a type: up to the one that covers its last window."""
    atu = inst.billing.atu_s
    last = max(ln.window for ln in tp.lanes) + tp.t.boot_s
    return range(1, max(1, math.ceil(last / atu - EPS)) + 1)


def machine_cost(billing: BillingModel, t: MachineType, busy_s: float) -> tuple[float, float]:
    """(paid seconds, cost) of a new machine busy for ``busy_s`` from launch."""
    if billing.mode == "fixed":
        paid = billing.units(busy_s) * billing.atu_s
    else:
        paid = max(busy_s, billing.min_charge_s)
    return paid, billing.cost(t.price, busy_s)


def new_machine(inst: Instance, t: MachineType, tasks: Sequence[int]) -> NewMachine:
    busy = t.boot_s + sum(n * j.task_s[t.name] for n, j in zip(tasks, inst.jobs, strict=True) if n)
    paid, cost = machine_cost(inst.billing, t, busy)
    named = {j.name: n for n, j in zip(tasks, inst.jobs, strict=True) if n}
    return NewMachine(t.name, named, busy, paid, cost)


def rest_of(inst: Instance, left: Sequence[int], used: Mapping[str, int]) -> Instance:
    """The instance of the tasks a split left, with the machines it used taken away."""
    types = [replace(tp.t, max_count=tp.t.max_count - used.get(tp.t.name, 0)) for tp in inst.types]
    need = {j.name: n for j, n in zip(inst.jobs, left, strict=True)}
    return make_instance(inst.jobs, need, types, inst.billing, inst.now)

"""What the budget planner is given and what it answers: the machine types as it sees
them, the budget problem, a plan, and the few measures both of its models share."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pulp

from autoscaler.core.billing import BillingModel
from autoscaler.core.limits import Room
from autoscaler.learn.stats import tasks_within

MONEY_REL = 1e-6  # costs within a millionth of B count as within it (solver tolerance)


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
    slots: int = 1  # s_i: tasks a machine runs at once, each taking T_i (T_i is per task
    # at that slot count: tasks sharing a machine slow each other)

    @property
    def rate(self) -> float:
        """s_i/T_i: tasks one machine does per second."""
        return self.slots / self.mean_s


@dataclass(frozen=True, slots=True)
class BudgetProblem:
    """N_e tasks, the money B not yet committed, and the types to plan on."""

    tasks: float  # N_e
    budget: float  # B: money not yet committed
    types: Sequence[TypeEstimate]
    billing: BillingModel
    cushion_z: float = 0.0
    final_loss: float = 0.25  # tasks per machine lost at the end of its last unit
    groups: Sequence[Room] = ()  # limited providers: what is left of their limits


@dataclass(frozen=True, slots=True)
class Plan:
    """A configuration: machines per type, and what it is expected to take."""

    counts: Mapping[str, int]
    units: int  # k, further ATUs (0 under per-second billing)
    speed: float  # Σ a_i·s_i/T_i, tasks per second
    cost: float  # money the plan commits beyond what is committed now

    def makespan_s(self, tasks: float) -> float:
        """T_e = N / Σ a_i·s_i/T_i."""
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


def capacity(t: TypeEstimate, horizon_s: float, problem: BudgetProblem) -> float:
    """m_i(h): tasks one machine of ``t`` is expected to finish in ``horizon_s``: each of
    its s_i slots works through tasks one after another."""
    lane = tasks_within(horizon_s, t.mean_s, t.sd_s, problem.cushion_z, problem.final_loss)
    return t.slots * lane


def first_tasks(billing: BillingModel, boot_s: float, slots: int, mean_s: float) -> int:
    """p_i: tasks a new machine does in its first step, after its boot, each of its
    slots taking ``mean_s`` a task."""
    usable = billing.first_step_s - billing.boundary_margin_s()
    return slots * max(0, math.floor((usable - boot_s) / mean_s))


def affordable(cost: float, budget: float) -> bool:
    """Whether ``cost`` is within ``budget``, to the solver's tolerance."""
    return cost <= budget + MONEY_REL * max(1.0, abs(budget))


def whole(var: pulp.LpVariable) -> int:
    """A MILP's integer variable as an int (0 when it has no value)."""
    return round(var.value() or 0)

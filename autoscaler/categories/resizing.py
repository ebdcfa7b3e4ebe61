"""The batch-resizing policies (paper 004 §4) and Algorithm 2, the size of a task group.

When a task is added to a group for a resource, the group must still satisfy:

1. its CPU time <= the resource's MaxCPUTime;
2. its wall-clock time <= MaxWCTime;
3. its transfer time (inputs out, outputs back) <= MaxTransTime;
4. its files' size <= MaxSpace;
5. its turnaround time <= the remaining deadline;
6. its processing cost <= the remaining budget;
7. its tasks from a category <= the tasks left in that category.

Algorithm 2 walks the categories in id order and adds tasks of each, up to the tasks
left and the plan's allocation to the resource (``TRA_Rj[k]``), accumulating the
category's mean metrics; at the first task that would break a policy it goes to the
next category. A limit not given (None) is not checked; ``policies`` chooses which
policies apply (the paper's one-by-one vs groups experiment uses 1–4 and 7).

``machine_group_size`` is the same idea for one machine of ours with ``slots``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from autoscaler.categories.deployment import Metrics

ALL = frozenset(range(1, 8))
RESOURCE = frozenset({1, 2, 3, 4, 7})
"""Policies 1–4 (the resource's and network's limits) and 7 (tasks left)."""


@dataclass(frozen=True, slots=True)
class Limits:
    """A resource's utilisation constraints for one group (paper 004 Table 2)."""

    max_cpu_s: float | None = None
    max_wall_s: float | None = None
    max_transfer_s: float | None = None
    max_space_bytes: float | None = None


@dataclass(frozen=True, slots=True)
class Group:
    """Tasks per category in the group, and the policy that stopped it first (None:
    it ran out of tasks or of the plan's allocation)."""

    counts: dict[int, int] = field(default_factory=dict)
    stopped_by: int | None = None

    @property
    def size(self) -> int:
        return sum(self.counts.values())


def group_size(
    metrics: Mapping[int, Metrics],
    limits: Limits,
    left: Mapping[int, int],
    *,
    deadline_s: float | None = None,
    budget: float | None = None,
    allocation: Mapping[int, int] | None = None,
    policies: frozenset[int] = ALL,
    share: int | None = None,
    largest_first: bool = False,
) -> Group:
    """Algorithm 2 for one resource: ``metrics`` per category on it, ``left`` tasks
    per category, the remaining ``deadline_s`` and ``budget``, and the plan's
    ``allocation`` per category (None: no plan, every task left may go). ``share``
    (ours, not the paper's) caps the whole group, e.g. at a fair share of the tasks
    left among the resources, so that the last groups end together; a group stopped
    by it reports policy 7. ``largest_first`` (ours too) walks the categories by CPU
    time, longest first, and fills what the limits leave with shorter tasks (first fit
    decreasing): in id order, short tasks fill every group until they run out, and the
    long ones left then go one per group, each paying a deployment's overhead."""
    cpu = wall = transfer = space = turnaround = cost = 0.0
    counts: dict[int, int] = {}
    stopped: int | None = None
    order = sorted(left)
    if largest_first:
        order.sort(key=lambda k: -metrics[k].cpu_s if k in metrics else 0.0)
    for k in order:
        m = metrics.get(k)
        if m is None:
            continue
        n = left[k] if 7 in policies else math.inf
        if allocation is not None:
            n = min(n, allocation.get(k, 0))
        added = 0
        while added < n:
            if share is not None and sum(counts.values()) + added >= share:
                stopped = stopped or 7
                break
            broken = _broken(
                policies,
                (cpu + m.cpu_s, limits.max_cpu_s),
                (wall + m.wall_s, limits.max_wall_s),
                (transfer + m.transfer_s, limits.max_transfer_s),
                (space + m.space_bytes, limits.max_space_bytes),
                (turnaround + m.turnaround_s, deadline_s),
                (cost + m.cost, budget),
            )
            if broken is not None:
                stopped = stopped or broken
                break
            cpu += m.cpu_s
            wall += m.wall_s
            transfer += m.transfer_s
            space += m.space_bytes
            turnaround += m.turnaround_s
            cost += m.cost
            added += 1
        if added:
            counts[k] = added
    return Group(counts, stopped)


def _broken(policies: frozenset[int], *checks: tuple[float, float | None]) -> int | None:
    """The first policy (1–6) whose sum would exceed its limit, or None."""
    for number, (total, limit) in enumerate(checks, start=1):
        if number in policies and limit is not None and total > limit:
            return number
    return None


def machine_group_size(
    *,
    free_slots: int,
    slots: int,
    mean_s: float | None,
    paid_left_s: float | None,
    deadline_left_s: float | None,
    budget_left: float | None,
    cost_per_task: float,
    tasks_left: int,
    fair_share: int | None = None,
    max_tasks: int | None = None,
) -> int:
    """How many tasks to queue on one machine of ours: the most ``k`` whose expected
    time ceil(k / slots) x ``mean_s`` fits the machine's paid time left and the job's
    deadline left, whose cost k x ``cost_per_task`` fits the budget left, and which
    takes no more than the tasks left, a fair share of the bag among the machines and
    a per-type limit. Without an estimate yet (sampling): one task per free slot. At
    least one task per free slot when any are left and the budget pays for them (a
    task that does not fit is the planners' call, not the group's)."""
    caps = [tasks_left]
    if fair_share is not None:
        caps.append(max(fair_share, free_slots))
    if max_tasks is not None:
        caps.append(max_tasks)
    if budget_left is not None and cost_per_task > 0:
        caps.append(int(budget_left // cost_per_task))
    if mean_s is None or mean_s <= 0:
        return max(0, min(free_slots, *caps))
    for window in (paid_left_s, deadline_left_s):
        if window is not None:
            caps.append(max(free_slots, int(window // mean_s) * slots))
    return max(0, min(caps))

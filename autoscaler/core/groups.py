"""Task groups (paper 004 §4): how many tasks a machine is handed at once.

A machine's agent is sent every task queued on it, runs them ``slots`` at a time, and
reports results many per message, so a group saves a round trip (and a controller step,
and journal records) per task. The group is sized by the batch-resizing policies as they
apply to us (paper 004, policies 1–7):

* its expected time, ⌈k / slots⌉ waves of the type's mean task time, fits the time the
  machine may still work: the paid time left when it will not be extended, else the
  group horizon (``group_s``: take-back stays cheap and the estimate fresh; stretched in
  a fleet of thousands as the agents' heartbeat is, ``stretched``), and the type's own
  limits (``max_s``, policies 1–2; ``max_tasks``);
* it is at most a fair share of the tasks left among the machines' slots, so no machine
  hoards the bag's tail (policy 7, tasks left);
* without an estimate yet (sampling), it is one task per free slot;
* a type whose one task fills the time gets groups of one per slot: today's one-by-one
  dispatch, unchanged;
* in a fleet of thousands, a busy machine is topped up before its queue runs dry, so its
  agent's work comes with the answers to its heartbeats (``ahead``).

The remaining budget (policy 6) and a job's deadline (policy 5) bound the machines a
planner buys and the paid time they are given; a group never extends a machine by
itself, so it cannot spend money the planner did not commit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class GroupLimits:
    """A run's and a type's bounds on one group."""

    horizon_s: float = 0.0  # a group's expected time at most this (run seconds); 0: one per slot
    max_s: float | None = None  # the type's limit on a group's expected time (run seconds)
    max_tasks: int | None = None  # the type's limit on tasks per group


def stretched(horizon_s: float, fleet_at: float, machines: int) -> float:
    """The group horizon in a fleet of ``machines``: ``horizon_s``, grown in proportion to
    the machines past ``fleet_at`` of them (0: never), as the agents' heartbeat grows
    (``run.agents.heartbeat_s``): a busy agent reports once a heartbeat, so a group of a
    heartbeat's work costs about one request, where groups of one short task cost one
    each."""
    if fleet_at <= 0 or machines <= fleet_at:
        return horizon_s
    return horizon_s * machines / fleet_at


def ahead(fleet_at: float, machines: int) -> bool:
    """Whether a busy machine of a fleet of ``machines`` keeps work queued ahead of the
    group it runs (``group_size``): past ``fleet_at`` machines (0: never), where the
    agents' heartbeat stretches.

    Past that fleet a busy agent's results ride on its heartbeat, and work handed back in
    the answer to a heartbeat rides on it too. With more than a horizon's work queued, the
    agent's queue does not run dry between two heartbeats, so it polls about once a
    heartbeat instead of once a group and once a heartbeat (5,000 agents of 2 s tasks,
    300,000 tasks: 0.25 requests a task instead of 0.31). Up to that fleet a machine is
    handed work only when a slot is free, as always."""
    return 0 < fleet_at < machines


def fair_share(pending: int, slots: int, total_slots: int) -> int:
    """A machine's share of ``pending`` tasks by its slots among ``total_slots`` in all."""
    if total_slots <= 0:
        return max(slots, pending)
    return max(slots, math.ceil(pending * slots / total_slots))


def group_size(
    *,
    slots: int,
    in_flight: int,
    pending: int,
    share: int,
    mean_s: float | None,
    window_s: float | None,
    limits: GroupLimits,
    ahead: bool = False,
) -> int:
    """How many more tasks to queue on a machine that has ``in_flight`` (running and
    queued) now; 0 for none.

    ``mean_s``: the expected time of one task on it at its slot count (None: no estimate
    yet); ``window_s``: the paid time it has left when it will not be extended (None: it
    will be, so only the horizon bounds the group). ``ahead`` (``ahead``): it may hold
    twice the horizon's waves and one, and with no slot free it is topped up only by a
    horizon's group or more, so each report of a busy agent adds about a horizon's work
    and more than that stays queued. The window, the share and the type's limits bound
    them all; once they leave less than a group to add, a machine gets work as its slots
    free up. A draining machine whose window holds no whole wave gets nothing: the caller
    releases it when it is idle.
    """
    if pending <= 0:
        return 0
    free = max(0, slots - in_flight)
    if mean_s is None or mean_s <= 0:
        return min(pending, free)
    bounds = [limits.horizon_s]
    if limits.max_s is not None:
        bounds.append(limits.max_s)
    group = max(1, math.floor(min(bounds) / mean_s))  # waves: at least one task per slot
    waves = 2 * group + 1 if ahead else group
    if window_s is not None:
        waves = min(waves, math.floor(max(0.0, window_s) / mean_s))
    want = min(waves * slots, share)
    if window_s is None:
        want = max(want, slots)
    if limits.max_tasks is not None:
        want = min(want, limits.max_tasks)
    add = max(0, min(pending, want - in_flight))
    if ahead and in_flight >= slots and add < group * slots:
        return 0  # no slot free and more than a horizon's work queued: a later report
    return add

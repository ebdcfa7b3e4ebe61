"""Machines that run several tasks at once, as the deadline planners see them.

A machine of s slots runs its queue s tasks at a time, in order, each taking e (the time
per task measured at that slot count). k tasks of one job take ⌈k/s⌉·e; a queue of
several jobs, run in order as slots free up (list scheduling), ends by

    W/s + (1 − 1/s)·e_max        (Graham's bound; W the queue's work, Σ n_j·e_j)

and a prefix of the queue (the jobs due first, paper 002's EDF order) by the same bound
on its own work. So the paper's models, which run one task at a time, hold for a slotted
machine when its time per task is e/s and its start is (1 − 1/s)·e_max later: a plan
they make meets every deadline on the real machine, and pays at most (1 − 1/s)·e_max of
a machine's time too much. With s = 1 nothing changes (the same objects come back).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from autoscaler.deadline.instance import DeadlineJob, MachineType


def cushion(slots: int, e_max: float) -> float:
    """(1 − 1/s)·e_max: what a queue on s slots may end later than its work over s."""
    return 0.0 if slots <= 1 else (1.0 - 1.0 / slots) * e_max


def per_slot(times: Mapping[str, float], slots: Mapping[str, int]) -> dict[str, float]:
    """Each type's time per task (``times`` by type name) as a one-task-at-a-time
    machine: e/s."""
    return {t: e / slots.get(t, 1) if slots.get(t, 1) > 1 else e for t, e in times.items()}


def on_slots(times: Mapping[str, float], slots: int) -> dict[str, float]:
    """One machine's times per task (``times`` by job name) on its ``slots``: e/s."""
    return dict(times) if slots <= 1 else {j: e / slots for j, e in times.items()}


def slotted(
    jobs: Sequence[DeadlineJob], types: Sequence[MachineType], slots: Mapping[str, int]
) -> tuple[list[DeadlineJob], list[MachineType]]:
    """The problem the paper's planners solve for machines of ``slots`` (per type name):
    jobs with their times per task divided by the slots, each slotted type's boot raised
    by its cushion (of the longest task time of the jobs on it)."""
    if all(slots.get(t.name, 1) <= 1 for t in types):
        return list(jobs), list(types)
    out_jobs = [replace(j, task_s=per_slot(j.task_s, slots)) for j in jobs]
    out_types = []
    for t in types:
        s = slots.get(t.name, 1)
        e_max = max((j.task_s[t.name] for j in jobs if t.name in j.task_s), default=0.0)
        out_types.append(t if s <= 1 else replace(t, boot_s=t.boot_s + cushion(s, e_max)))
    return out_jobs, out_types

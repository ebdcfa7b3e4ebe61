"""Tail replication (slides 001, tail phase): once the bag is empty, an idle paid
machine copies the running task expected to finish last, if it would finish first."""

from __future__ import annotations

import math

from autoscaler.budget.boundaries import can_extend
from autoscaler.budget.sampling import stats
from autoscaler.budget.settings import ControllerSettings
from autoscaler.core.model import Move, Replicate, TaskState
from autoscaler.core.state import Machine
from autoscaler.core.step import Step


def replicate(settings: ControllerSettings, s: Step, m: Machine) -> bool:
    """Copy the running task expected to finish last onto ``m``, if ``m`` beats it."""
    state = s.state
    if settings.policy != "bats" or not settings.tail_replication:
        return False
    mine = stats(settings, state, m.type.name)
    if mine.done == 0:
        return False
    margin = state.billing.boundary_margin_s()
    my_finish = s.now + mine.mean()
    # Only within time already paid: not into a unit committed but not yet begun.
    paid_end = m.paid_until
    if state.billing.mode == "fixed":
        paid_end = min(paid_end, state.billing.next_boundary(m.launched_at, s.now))
    if my_finish > paid_end - margin:
        return False
    best: tuple[float, int] | None = None
    for tid, runs in state.running_on.items():
        if len(runs) != 1 or state.task_state[tid] is not TaskState.RUNNING:
            continue
        ((other, start),) = runs.items()
        if other == m.id:
            continue  # a copy on its own machine (another of its slots) beats nothing
        host = state.machines[other]
        host_stats = stats(settings, state, host.type.name)
        finish = start + host_stats.tail_estimate(s.now - start)
        if finish > host.paid_until - margin and not can_extend(state, host):
            finish = math.inf  # its machine goes before it is done: it will be cut off
        if best is None or finish > best[0]:
            best = (finish, tid)
    if best is None or my_finish >= best[0]:
        return False
    s.do(Replicate(best[1], m.id))
    return True


def take_back(s: Step, m: Machine) -> bool:
    """Once the bag is empty, idle ``m`` takes queued, not yet started tasks (the back
    half of a task group) from the machine whose queue lasts longest, when that queue
    outlasts one task of ``m``'s and ``m`` can run one within its paid time (paper 004:
    a group is taken back, not waited for)."""
    state = s.state
    mine = state.stats[m.type.name]
    if mine.done == 0:
        return False
    margin = state.billing.boundary_margin_s()
    if not can_extend(state, m) and s.now + mine.mean() + mine.stddev() > m.paid_until - margin:
        return False
    # The longest wait; among equal ones the machine launched first (the order of
    # ``alive_machines``). Only machines with a queue can be it (``state.queued``).
    best: tuple[float, int, Machine] | None = None
    for host in state.queued.values():
        if host is m:
            continue
        theirs = state.stats[host.type.name]
        wait = len(host.queue) * (theirs.mean() if theirs.done else mine.mean()) / host.type.slots
        place = state.launch_index[host.id]
        if best is None or wait > best[0] or (wait == best[0] and place < best[1]):
            best = (wait, place, host)
    if best is None or best[0] <= mine.mean():
        return False
    host = best[2]
    n = max(1, len(host.queue) // 2)
    s.do(Move(tuple(list(host.queue)[-n:]), host.id, m.id))
    return True

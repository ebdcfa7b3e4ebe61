"""Tail replication (slides 001, tail phase): once the bag is empty, an idle paid
machine copies the running task expected to finish last, if it would finish first."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from autoscaler.budget.boundaries import can_extend
from autoscaler.budget.sampling import stats
from autoscaler.budget.settings import ControllerSettings
from autoscaler.core.machine_ledger import Fleet
from autoscaler.core.model import Move, Release, Replicate, TaskState
from autoscaler.core.state import Machine
from autoscaler.core.step import Step
from autoscaler.core.task_ledger import Tasks
from autoscaler.learn.stats import tail_estimates

_RUNNING = TaskState.RUNNING  # an enum member read once: it is asked of every running task


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
    best = last_to_finish(settings, s, m)
    if best is None or my_finish >= best[0]:
        return False
    s.do(Replicate(best[1], m.id))
    return True


@dataclass(slots=True)
class _Candidates:
    """The tasks running once, in ``running_on`` order, with their runs' starts and
    machines (``_scan``); and when each is expected to finish (start + τ_e at its age on
    its machine's type), worked out once per step (``_refresh``): at a tick every idle
    machine asks. Kept on the state while no task has joined them
    (``Tasks.solo_gains``): the tasks running once now are these, less those that
    ended or were replicated since. Those are not looked for (a pass over every
    candidate at every step of the tail): one found no longer running once when it comes
    out on top is marked ``gone`` and passed over from then on."""

    gains: int  # state.solo_gains when scanned
    tids: list[int]
    hosts: list[Machine]
    starts: np.ndarray
    kinds: list[str]  # the hosts' types, sorted
    code: np.ndarray | None  # each candidate's index in ``kinds`` (None: one type)
    gone: np.ndarray  # bool: no longer running once
    step: Step | None = None  # the step ``finish`` and ``paid`` were worked out in
    actions: int = 0  # len(step.actions) then, or last seen to hold since
    finish: np.ndarray = field(default_factory=lambda: np.empty(0))  # -inf: gone
    paid: np.ndarray = field(default_factory=lambda: np.empty(0))  # each host's paid_until


def _scan(fleet: Fleet, tasks: Tasks) -> _Candidates:
    """The tasks running once (one run, and running) as ``running_on`` orders them."""
    tids: list[int] = []
    starts: list[float] = []
    hosts: list[Machine] = []
    task_state, machines, running = tasks.task_state, fleet.machines, _RUNNING
    for tid, runs in tasks.running_on.items():  # every step of the tail: kept lean
        if len(runs) == 1 and task_state[tid] is running:
            for other, start in runs.items():
                tids.append(tid)
                starts.append(start)
                hosts.append(machines[other])
    names = [h.type.name for h in hosts]
    kinds = sorted(set(names))
    code = None
    if len(kinds) > 1:
        index = {n: k for k, n in enumerate(kinds)}
        code = np.array([index[n] for n in names])
    gone = np.zeros(len(tids), dtype=bool)
    return _Candidates(tasks.solo_gains, tids, hosts, np.array(starts), kinds, code, gone)


def _refresh(settings: ControllerSettings, s: Step, kept: _Candidates) -> None:
    """When each candidate is expected to finish, and its host's paid time, at ``s``
    (``tail_estimates`` works element by element: the same floats as for the
    candidates alone)."""
    state = s.state
    finish = np.full(len(kept.tids), -math.inf)  # gone: never
    live = ~kept.gone
    for k, name in enumerate(kept.kinds):
        at = live if kept.code is None else live & (kept.code == k)
        own = kept.starts[at]
        finish[at] = own + tail_estimates(stats(settings, state, name), s.now - own)
    kept.finish = finish
    kept.paid = np.array([h.paid_until for h in kept.hosts])
    kept.step, kept.actions = s, len(s.actions)


def last_to_finish(settings: ControllerSettings, s: Step, m: Machine) -> tuple[float, int] | None:
    """The running task (one run, not on ``m``) expected to finish last, and when: its
    start plus τ_e at its age on its machine's type (``tail_estimates``), never if its
    machine goes before then; the first in ``running_on`` order among equals.

    The candidates are kept on the state until a task joins them (``_Candidates``), and
    when they finish on the step while its actions since are replicas and releases (of
    idle machines: no run starts or ends); a task replicated since, or running on
    ``m``, is passed over when it comes first."""
    state = s.state
    kept = state.tasks.memo.get("tail")
    if not isinstance(kept, _Candidates) or kept.gains != state.tasks.solo_gains:
        kept = _scan(state.fleet, state.tasks)
        state.tasks.memo["tail"] = kept
    if kept.step is not s or not all(
        isinstance(a, Replicate | Release) for a in s.actions[kept.actions :]
    ):
        _refresh(settings, s, kept)
    if not kept.tids:
        return None
    kept.actions = len(s.actions)
    finish = kept.finish.copy()
    margin = state.billing.boundary_margin_s()
    for i in np.flatnonzero(finish > kept.paid - margin).tolist():
        if not can_extend(state, kept.hosts[i]):
            finish[i] = math.inf  # its machine goes before it is done: it will be cut off
    while True:
        best = int(np.argmax(finish))  # the first of the latest
        if finish[best] == -math.inf:
            return None
        tid, host = kept.tids[best], kept.hosts[best]
        runs = state.tasks.running_on.get(tid, {})
        if len(runs) != 1 or state.tasks.task_state[tid] is not TaskState.RUNNING:
            kept.gone[best] = True  # ended or replicated since the scan: for good
            kept.finish[best] = -math.inf
        elif host is not m:
            return float(finish[best]), tid
        finish[best] = -math.inf


def take_back(s: Step, m: Machine) -> bool:
    """Once the bag is empty, idle ``m`` takes queued, not yet started tasks (the back
    half of a task group) from the machine whose queue lasts longest, when that queue
    outlasts one task of ``m``'s and ``m`` can run one within its paid time (paper 004:
    a group is taken back, not waited for)."""
    state = s.state
    mine = state.observed.stats[m.type.name]
    if mine.done == 0:
        return False
    margin = state.billing.boundary_margin_s()
    if not can_extend(state, m) and s.now + mine.mean() + mine.stddev() > m.paid_until - margin:
        return False
    # The longest wait; among equal ones the machine launched first (the order of
    # ``alive_machines``). Only machines with a queue can be it, and of each kind (type
    # and slots) the one with the longest queue, the first launched among equals
    # (``Fleet.longest_queues``): a longer queue waits longer. (``m`` is idle: not one.)
    best: tuple[float, int, Machine] | None = None
    fleet = state.fleet
    for mid, n in fleet.longest_queues():
        host = fleet.machines[mid]
        theirs = state.observed.stats[host.type.name]
        wait = n * (theirs.mean() if theirs.done else mine.mean()) / host.type.slots
        place = fleet.launch_index[mid]
        if best is None or wait > best[0] or (wait == best[0] and place < best[1]):
            best = (wait, place, host)
    if best is None or best[0] <= mine.mean():
        return False
    host = best[2]
    n = max(1, len(host.queue) // 2)
    s.do(Move(tuple(list(host.queue)[-n:]), host.id, m.id))
    return True

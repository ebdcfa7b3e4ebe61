"""A machine's queue as the reassignment and the forecasts see it (``reassign.Queue``):
when its current tasks end by its observed speed, its queued tasks by key (their job, or
with categories their job's part of their category: ``deadline.category_parts``), and its
time per task of each key it can run."""

from __future__ import annotations

from autoscaler.core.model import MachineState
from autoscaler.core.state import Machine, RunState
from autoscaler.deadline.category_parts import all_keys, job_of_key, key_of, machine_key_s
from autoscaler.deadline.jobs import DeadlineSettings
from autoscaler.deadline.reassign import Queue
from autoscaler.deadline.slot_queues import cushion, on_slots


def queue_of(cfg: DeadlineSettings, state: RunState, m: Machine, now: float) -> Queue:
    """``m`` as the reassignment sees it: when its current task ends (by its observed
    speed), its queue, and its time per task of each job it can run. A machine of s > 1
    slots is seen as one that runs a task at a time in e/s, busy until the rest of its
    running tasks over s plus the cushion (``deadline.slot_queues``)."""
    times: dict[str, float] = {}
    for key in all_keys(cfg, state):
        e = machine_key_s(cfg, state, m, key)
        if e is not None:
            times[key] = e
    booting = m.state is MachineState.BOOTING
    busy = max(now, m.launched_at + m.type.boot_s) if booting else now
    ready = busy
    running = {tid: key_of(cfg, state.tasks, state.work, tid) for tid in m.running}
    for tid, start in m.running.items():
        e = times.get(running[tid], 0.0)
        busy = max(busy, start + e, now)
    tasks = [(tid, key_of(cfg, state.tasks, state.work, tid)) for tid in m.queue]
    for _, key in tasks:
        times.setdefault(key, job_of_key(state.work, key).task_s.get(m.type.name, 0.0))
    if m.type.slots > 1:
        busy, times = _slotted(m, ready, times, running)
    return Queue(m.id, busy, m.paid_until - state.billing.boundary_margin_s(), tasks, times)


def _slotted(
    m: Machine, ready: float, times: dict[str, float], running: dict[int, str]
) -> tuple[float, dict[str, float]]:
    """A slotted machine's start and times per task as a one-lane queue."""
    s = m.type.slots
    rest = 0.0
    for tid, start in m.running.items():
        rest += max(0.0, start + times.get(running[tid], 0.0) - ready)
    e_max = max(times.values(), default=0.0)
    return ready + rest / s + cushion(s, e_max), on_slots(times, s)


def all_queues(cfg: DeadlineSettings, state: RunState, now: float) -> list[Queue]:
    return [queue_of(cfg, state, m, now) for m in state.fleet.alive_machines()]

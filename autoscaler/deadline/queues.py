"""A machine's queue as the reassignment and the forecasts see it (``reassign.Queue``):
when its current tasks end by its observed speed, given how long they have run
(``still_running``), its queued tasks by key (their job, or with categories their job's
part of their category: ``deadline.category_parts``), and its time per task of each key
it can run."""

from __future__ import annotations

import math

from autoscaler.core.model import MachineState
from autoscaler.core.state import Machine, RunState
from autoscaler.deadline.category_parts import (
    all_keys,
    category_of_key,
    job_of_key,
    key_of,
    machine_key_s,
)
from autoscaler.deadline.jobs import DeadlineSettings
from autoscaler.deadline.prior import mean_sd
from autoscaler.deadline.reassign import Queue
from autoscaler.deadline.slot_queues import cushion, on_slots


def queue_of(
    cfg: DeadlineSettings, state: RunState, m: Machine, now: float, lead_z: float = 0.0
) -> Queue:
    """``m`` as the reassignment sees it: when its current task ends (by its observed
    speed and its runs' spread, given how long it has run: ``still_running``), its
    queue, and its time per task of each job it can run. A machine of s > 1 slots is
    seen as one that runs a task at a time in e/s, busy until the rest of its running
    tasks over s plus the cushion (``deadline.slot_queues``)."""
    times: dict[str, float] = {}
    for key in all_keys(cfg, state):
        e = machine_key_s(cfg, state, m, key)
        if e is not None:
            times[key] = e
    booting = m.state is MachineState.BOOTING
    busy = max(now, m.launched_at + m.type.boot_s) if booting else now
    ready = busy
    running = {tid: key_of(cfg, state.tasks, state.work, tid) for tid in m.running}
    spread = 0.0
    for tid, start in m.running.items():
        key = running[tid]
        e = times.get(key, 0.0)
        r = spread_of(state, m, key)
        busy = max(busy, start + still_running(e, r, now - start), now)
        spread = max(spread, still_running_sd(e, r, now - start))
    tasks = [(tid, key_of(cfg, state.tasks, state.work, tid)) for tid in m.queue]
    for _, key in tasks:
        times.setdefault(key, job_of_key(state.work, key).task_s.get(m.type.name, 0.0))
    if m.type.slots > 1:
        busy, times = _slotted(m, ready, times, running)
    paid = m.paid_until - state.billing.boundary_margin_s()
    return Queue(m.id, busy, paid, tasks, times, lead_z * spread)


def _mills(a: float) -> float:
    """The inverse Mills ratio φ(a) / (1 − Φ(a)): a standard normal's mean beyond a."""
    tail = 0.5 * math.erfc(a / math.sqrt(2.0))
    if a > 8.0 or tail <= 0.0:
        return a + 1.0 / a  # its asymptote, where the tail underflows
    return math.exp(-0.5 * a * a) / math.sqrt(2.0 * math.pi) / tail


def still_running_sd(e: float, r: float, ran: float) -> float:
    """The sd of that time, SD[T | T > ran]: sd·√(1 + aλ − λ²), λ the ratio at a."""
    sd = r * e
    if sd <= 0.0 or e <= 0.0:
        return 0.0
    a = (ran - e) / sd
    if a > 8.0:
        return sd / a  # the variance's asymptote, 1/a² (the formula cancels away there)
    lam = _mills(a)
    return sd * math.sqrt(max(0.0, 1.0 + a * lam - lam * lam))


def still_running(e: float, r: float, ran: float) -> float:
    """The expected time of a task of expected time ``e`` and relative sd ``r`` that
    has run ``ran`` and not ended: E[T | T > ran] for T normal about e, sd r·e (e plus
    the sd times the inverse Mills ratio). A task past its expected time is not about to
    end at once: one a sd past it has about 1.5 sd to go. Without a spread (r = 0), e."""
    sd = r * e
    if sd <= 0.0 or e <= 0.0:
        return e
    return e + sd * _mills((ran - e) / sd)


def spread_of(state: RunState, m: Machine, key: str) -> float:
    """The relative sd of ``key``'s runs on ``m``'s type (its job's, or its category's
    part's), else the widest on any type; 0 before two runs end anywhere."""
    cat = category_of_key(key)
    if cat is not None:
        seen = {t: r for (c, t), r in state.observed.category_runs.items() if c == cat}
    else:
        job = job_of_key(state.work, key).name
        seen = {t: r for t in state.types if (r := state.observed.job_runs.get((job, t)))}
    mine = seen.get(m.type.name)
    rows = [mine] if mine is not None and mine[0] >= 2 else list(seen.values())
    out = 0.0
    for runs in rows:
        mean, sd = mean_sd(runs)
        if runs[0] >= 2 and mean > 0:
            out = max(out, sd / mean)
    return out


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


def all_queues(
    cfg: DeadlineSettings, state: RunState, now: float, lead_z: float = 0.0
) -> list[Queue]:
    """Every alive machine's queue; ``lead_z``: its lead (``Queue.lead_s``) that many sds
    of its running task's end (0: none, as forecasts and plans see it)."""
    return [queue_of(cfg, state, m, now, lead_z) for m in state.fleet.alive_machines()]

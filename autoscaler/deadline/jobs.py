"""What the deadline controller knows of its jobs and machines: the settings, each job's
planned time per task (known, or sampled: mean + z·σ/√n), a machine's observed speed, its
queue as the reassignment sees it, and the deadlines plans aim for."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from autoscaler.core.model import JobSpec, MachineState
from autoscaler.core.solve import Solver
from autoscaler.core.state import Machine, RunState
from autoscaler.deadline.reassign import Queue
from autoscaler.deadline.slots import cushion, on_slots

EPS = 1e-6


@dataclass(frozen=True, slots=True)
class DeadlineSettings:
    planner: Literal["multi", "single"] = "multi"  # Algorithm 2 (model 7) or 3 (model 10)
    reassign: bool = True  # Algorithm 4 every monitoring interval
    buy_when_late: bool = True  # beyond the paper: new machines for what is still late
    solver: Solver = "highs"
    sample: int = 5  # runs per type of a job without known times before it is planned
    z: float = 1.96  # a sampled job is planned on mean + z·σ/√n
    late_change: float = 0.1  # a lateness is said again when it changes by this share
    guard_z: float = 2.0  # plans and moves aim this many task-time sds before a deadline
    keep_open: bool = False  # a pool: no Stop when the work is done; jobs join (JobAdded)


def task_times(cfg: DeadlineSettings, state: RunState, job: JobSpec) -> dict[str, float]:
    """The planned time per task of ``job`` per type: known, else sampled (mean +
    z·σ/√n, once ``sample`` runs ended there); types missing cannot run it (yet)."""
    if job.task_s:
        return {t: e for t, e in job.task_s.items() if t in state.types}
    out: dict[str, float] = {}
    for name in state.types:
        runs = state.job_runs.get((job.name, name))
        if runs is None or runs[0] < min(cfg.sample, job.count):
            continue
        mean, sd = mean_sd(runs)
        out[name] = mean + cfg.z * sd / math.sqrt(runs[0])
    return out


def machine_task_s(state: RunState, m: Machine, job: JobSpec) -> float | None:
    """``m``'s time per task of ``job``: what it showed, else its type's, else planned."""
    for runs in (
        state.machine_job_runs.get((m.id, job.name)),
        state.job_runs.get((job.name, m.type.name)),
    ):
        if runs is not None and runs[0] > 0:
            return runs[1] / runs[0]
    known = job.task_s.get(m.type.name)
    if known is not None:
        return known
    return None


def is_sampling(cfg: DeadlineSettings, state: RunState, job: JobSpec) -> bool:
    """Whether ``job`` still waits for samples (no known times, some type short)."""
    if job.task_s:
        return False
    return any(
        launchable(state, name)
        and (state.job_runs.get((job.name, name)) or [0])[0] < min(cfg.sample, job.count)
        for name in state.types
    ) or not task_times(cfg, state, job)


def launchable(state: RunState, name: str) -> bool:
    return state.types[name].max_count > 0 and state.available(name, state.now)


def queue_of(state: RunState, m: Machine, now: float) -> Queue:
    """``m`` as the reassignment sees it: when its current task ends (by its observed
    speed), its queue, and its time per task of each job it can run. A machine of s > 1
    slots is seen as one that runs a task at a time in e/s, busy until the rest of its
    running tasks over s plus the cushion (``deadline.slots``)."""
    times: dict[str, float] = {}
    for job in state.jobs:
        e = machine_task_s(state, m, job)
        if e is not None:
            times[job.name] = e
    booting = m.state is MachineState.BOOTING
    busy = max(now, m.launched_at + m.type.boot_s) if booting else now
    ready = busy
    for tid, start in m.running.items():
        e = times.get(state.job_of(tid).name, 0.0)
        busy = max(busy, start + e, now)
    tasks = [(tid, state.job_of(tid).name) for tid in m.queue]
    for _, name in tasks:
        times.setdefault(name, state.job_named(name).task_s.get(m.type.name, 0.0))
    if m.type.slots > 1:
        busy, times = _slotted(state, m, ready, times)
    return Queue(m.id, busy, m.paid_until - state.billing.boundary_margin_s(), tasks, times)


def _slotted(
    state: RunState, m: Machine, ready: float, times: dict[str, float]
) -> tuple[float, dict[str, float]]:
    """A slotted machine's start and times per task as a one-lane queue."""
    s = m.type.slots
    rest = 0.0
    for tid, start in m.running.items():
        rest += max(0.0, start + times.get(state.job_of(tid).name, 0.0) - ready)
    e_max = max(times.values(), default=0.0)
    return ready + rest / s + cushion(s, e_max), on_slots(times, s)


def all_queues(state: RunState, now: float) -> list[Queue]:
    return [queue_of(state, m, now) for m in state.alive_machines()]


def job_deadlines(
    cfg: DeadlineSettings, state: RunState, guarded: bool = False
) -> dict[str, float]:
    """Each job's deadline; ``guarded``: less ``guard_z`` times the spread of one of
    its tasks (the largest sd seen on a type), what plans and moves aim for, so the
    last task's own noise does not carry it past the deadline."""
    return {j.name: j.deadline - (guard(cfg, state, j) if guarded else 0.0) for j in state.jobs}


def guard(cfg: DeadlineSettings, state: RunState, job: JobSpec) -> float:
    worst = 0.0
    for name in state.types:
        runs = state.job_runs.get((job.name, name))
        if runs is not None and runs[0] >= 2:
            worst = max(worst, mean_sd(runs)[1])
    return cfg.guard_z * worst


def mean_sd(runs: Sequence[float]) -> tuple[float, float]:
    """Mean and sample sd of runs kept as (count, sum, sum of squares)."""
    n, total, squares = runs
    mean = total / n
    return mean, math.sqrt(max(0.0, squares / n - mean * mean) * n / max(n - 1, 1))

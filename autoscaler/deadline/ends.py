"""Money at the end of a paid unit, idle machines and the end of a run: extend a machine
with work (when the budget pays), release one without, and stop when every job is done
or nothing more can be bought."""

from __future__ import annotations

import math

from autoscaler.core.job_ledger import Jobs
from autoscaler.core.limits import may_extend, no_extension, rooms
from autoscaler.core.model import Extend, Release, Stop
from autoscaler.core.state import Machine, RunState
from autoscaler.core.step import Step
from autoscaler.core.words import counted
from autoscaler.deadline.jobs import EPS, DeadlineSettings
from autoscaler.deadline.planning import ready_jobs


def can_extend(state: RunState, m: Machine) -> bool:
    """Whether the budget (if any) and the provider's machine time pay ``m``'s next step."""
    if state.money.budget is None:
        return may_extend(state, m)
    extra = state.billing.extension_cost(m.type.commit_price, m.launched_at, m.paid_until)
    return state.money.committed + extra <= state.money.budget + EPS and may_extend(state, m)


def wanted_soon(work: Jobs, m: Machine, until: float) -> bool:
    """Whether a job that has not arrived yet arrives before ``until`` and can run on
    ``m``'s type."""
    return any(
        job.name not in work.arrived
        and job.at < until
        and (not job.task_s or m.type.name in job.task_s)
        for job in work.jobs
    )


def at_boundary(s: Step, m: Machine) -> None:
    state = s.state
    margin = state.billing.boundary_margin_s()
    if not m.alive or m.paid_until - s.now > margin + EPS:
        return
    work = bool(m.running or m.queue)
    if state.money.stopped:
        s.do(Release(m.id, "end of paid time: run stopping"))
    elif m.draining and not m.running:  # takes no new work: nothing to pay another unit for
        s.do(Release(m.id, "end of paid time: draining (its provider may take it back)"))
    elif not work and not wanted_soon(state.work, m, m.paid_until + state.billing.step_s):
        s.do(Release(m.id, "end of paid time: no work left"))
    elif can_extend(state, m):
        s.do(Extend(m.id, m.paid_until + state.billing.step_s))
    else:
        why = no_extension(state, m) or "budget cannot pay another unit"
        s.do(Release(m.id, f"end of paid time: {why}"))


def release_idle(cfg: DeadlineSettings, s: Step) -> None:
    """Per-second billing: an idle machine no arriving job can use goes now (fixed
    ATUs: it stays to its boundary, a recipient for late work at no cost)."""
    state = s.state
    if state.billing.mode == "fixed":
        return
    idle = [m for m in state.fleet.alive_machines() if m.idle]
    if not idle or ready_jobs(cfg, state):
        return
    for m in idle:
        if not wanted_soon(state.work, m, m.paid_until):
            s.do(Release(m.id, "idle: no work left"))


def finish_run(cfg: DeadlineSettings, s: Step) -> None:
    state = s.state
    if cfg.keep_open:
        return  # a pool ends on Shutdown or Interrupted only; idle machines go as above
    if state.finished:
        for m in list(state.fleet.alive_machines()):
            s.do(Release(m.id, "every job finished"))
        if not state.money.stopped:
            s.do(Stop(None))
        return
    if state.money.stopped or state.fleet.pending_launches or state.fleet.any_alive():
        return
    none_left = state.none_left()
    if none_left is not None:
        s.do(Stop(none_left))
        return
    if len(state.work.arrived) < len(state.work.jobs):
        return  # waiting for jobs to arrive
    left = (
        state.money.budget - state.money.committed if state.money.budget is not None else math.inf
    )
    unit_s = state.billing.first_step_s
    spent = [r for r in rooms(state) if r.seconds is not None and r.seconds < unit_s]
    used_up = sorted({state.types[t].provider or "its provider" for r in spent for t in r.types})
    others = [t for t, spec in state.types.items() if spec.max_count > 0]
    others = [t for t in others if not any(t in r.types for r in spent)]
    shut = sorted(t for t in others if not state.capacity.launchable(t, s.now))
    said = [f"the machine hours of {', '.join(used_up)} are used"] if used_up else []
    if shut:
        said.append(f"{', '.join(shut)} cannot be launched now")
    if len(shut) < len(others) and state.money.budget is not None:
        said.append(f"{max(left, 0):.2f} of the budget left cannot pay a unit")
    why = f"({'; '.join(said or ['no type can run them, or none is available'])})"
    s.do(
        Stop(
            f"{counted(state.tasks_left, 'task')} left and no machine can be bought for them {why}"
        )
    )

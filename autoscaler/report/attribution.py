"""Cost attribution in a deadline-mode run: each machine's cost shared by the jobs
whose tasks it ran, and each job against its deadline and budget."""

from __future__ import annotations

import math

from autoscaler.core.cost_shares import arrivals, machine_runs, shares, step_costs
from autoscaler.core.job_ledger import Jobs
from autoscaler.core.model import JobSpec, Late, TaskState
from autoscaler.core.state import Machine, RunState
from autoscaler.report.format import inside, rounded, rounded_pair
from autoscaler.report.records import EPS, GaveWay, JobOutcome, LateNote, LearnedNote


def machine_cost(state: RunState, machine: Machine) -> float:
    """What ``machine`` cost under the billing model: its life, to ``state.now`` while it
    is alive, at its price or a spot market's prices in force (``Fleet.billed``)."""
    end = machine.ended_at if machine.ended_at is not None else state.now
    return state.fleet.billed(machine, end)


def machine_shares(state: RunState) -> dict[str, tuple[dict[str, float], float]]:
    """Per machine id that ran any task: each job's part of its cost
    (``core.cost_shares``), and what no job bears."""
    arrived = arrivals(state.work)
    out = {}
    for mid, runs in machine_runs(state.tasks, state.work).items():
        m = state.fleet.machines.get(mid)
        if m is None:
            continue
        out[mid] = shares(
            runs,
            m.launched_at,
            state.billing.step_s,
            step_costs(state.fleet, m, state.now),
            arrived,
        )
    return out


def job_shares(state: RunState) -> dict[str, dict[str, float]]:
    """Per machine id, the share of the machine's cost each job bears (deadline mode,
    ``core.cost_shares``); a machine that ran no task, or cost nothing, has none."""
    out = {}
    for mid, (parts, _) in machine_shares(state).items():
        total = machine_cost(state, state.fleet.machines[mid])
        if total > 0 and parts:
            out[mid] = {name: c / total for name, c in parts.items()}
    return out


def job_costs(state: RunState) -> tuple[dict[str, float], float]:
    """Each job's part of the machines' actual cost, and the cost no job is charged
    (``core.cost_shares``: each billing step of a machine by the seconds it ran the
    jobs that were there when it began)."""
    costs = {j.name: 0.0 for j in state.work.jobs}
    by_machine = machine_shares(state)
    unattributed = 0.0
    for m in state.fleet.machines.values():
        parts, owed = by_machine.get(m.id, ({}, machine_cost(state, m)))
        unattributed += owed
        for name, c in parts.items():
            costs[name] += c
    return costs, unattributed


def job_outcomes(state: RunState) -> tuple[tuple[JobOutcome, ...], float]:
    """Each job of a deadline-mode run against its deadline, and the unattributed cost."""
    done_at: dict[int, float] = {}
    for seg in state.tasks.segments:
        if seg.outcome == "done":
            done_at[seg.task] = min(seg.end, done_at.get(seg.task, math.inf))
    costs, unattributed = job_costs(state)
    firsts: dict[str, tuple[float, Late]] = {}
    said: dict[str, int] = {}
    for t, note in state.work.late_log:
        if note.tasks > 0:
            firsts.setdefault(note.job, (t, note))
            said[note.job] = said.get(note.job, 0) + 1
    out = []
    for job in state.work.jobs:
        ids = range(job.first, job.first + job.count)
        ends = [done_at[t] for t in ids if t in done_at]
        states = [state.tasks.task_state[t] for t in ids]
        done = sum(s is TaskState.DONE for s in states)
        failed = sum(s is TaskState.FAILED for s in states)
        finish = max(ends, default=None)
        late = sum(e > job.deadline + EPS for e in ends)
        if state.now > job.deadline + EPS:
            late += job.count - len(ends)
        end = finish if len(ends) == job.count else max(state.now, finish or 0.0)
        forecast = state.work.forecasts.get(job.name)
        first = firsts.get(job.name)
        out.append(
            JobOutcome(
                name=job.name,
                at_s=round(job.at, 3),
                deadline_s=round(job.deadline, 3),
                budget=job.budget,
                tasks=job.count,
                done=done,
                failed=failed,
                finish_s=rounded(finish),
                tasks_late=late,
                seconds_late=round(max(0.0, (end or 0.0) - job.deadline), 3),
                met_deadline=late == 0 and len(ends) == job.count,
                cost=round(costs[job.name], 4),
                predicted_cost=None if forecast is None else round(forecast.cost, 4),
                predicted_finish_s=None if forecast is None else round(forecast.finish, 3),
                first_warning=None
                if first is None
                else LateNote(
                    at_s=round(first[0], 3),
                    tasks=first[1].tasks,
                    seconds=round(first[1].seconds, 3),
                    cause=first[1].cause,
                    message=first[1].message,
                ),
                warnings=said.get(job.name, 0),
                gave_way=_gave_way(job, late, costs[job.name]),
                learned=learned_notes(state.work, job.name),
                predicted_finish_interval_s=None
                if forecast is None
                else rounded_pair(forecast.finish_interval, 3),
                predicted_cost_interval=None
                if forecast is None
                else rounded_pair(forecast.cost_interval, 4),
                finish_inside=None
                if forecast is None or len(ends) < job.count or finish is None
                else inside(finish, forecast.finish_interval),
                cost_inside=None
                if forecast is None
                else inside(costs[job.name], forecast.cost_interval),
            )
        )
    return tuple(out), unattributed


def _gave_way(job: JobSpec, tasks_late: int, cost: float) -> GaveWay | None:
    if job.budget is None:
        return None
    over = cost > job.budget + EPS
    if tasks_late and over:
        return "both"
    if tasks_late:
        return "deadline"
    return "budget" if over else "none"


def learned_notes(work: Jobs, job: str) -> tuple[LearnedNote, ...]:
    """What was said of ``job``'s declared task times (``Learned``), in the order said."""
    said = sorted((t, n) for (name, _), (t, n) in work.learned.items() if name == job)
    return tuple(
        LearnedNote(
            at_s=round(t, 3),
            type=n.type,
            declared_s=n.declared_s,
            learned_s=round(n.learned_s, 3),
            runs=n.runs,
            message=n.message,
        )
        for t, n in said
    )

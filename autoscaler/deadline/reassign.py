"""Dynamic reassignment (paper 002 §V, Algorithm 4): move queued tasks off machines that
would miss a deadline onto machines that have room, without making anything late.

Pure: it takes the machines' queues, the jobs' deadlines, the task times each machine
shows for each job (observed, else planned) and ``now``, and returns ``Move`` actions
and what will still be late.

The model. A machine runs what it has now (``busy_until``: when its current task ends,
``now`` when idle; for a booting machine, when it is ready), then its queued tasks, jobs
earliest deadline first (EDF: on one machine, if any order meets every deadline, EDF
does). A job's tasks on a machine end at the finish time f of its last one there; the
machine *violates* when f > d_j for some job j it holds (Algorithm 4, lines 4–9; the
paper looks at the current job only: a later job behind a late one is late as well, so
every job is checked). A machine is a *recipient* when it violates nothing (lines
10–16: idle, or its queue ends before what it has to do next; here: any machine whose
queue meets every deadline, with room measured below).

The moves (lines 17–27). Violating machines in order of their violation time (the
latest first), recipients in order of their allowed receiving time (the most room
first). A violating machine's late job j needs n_g = ⌈(f − d_j)/e_{v_g,j}⌉ of its
queued tasks moved (line 23, ``e`` the violator's time per task of j); a recipient takes
n_r = the most tasks of j it can append (in EDF order) while every job on it still ends
by its deadline and its queue by its paid time (line 22 in that form: the paper's
"allowed receiving time" is the time from now to the earliest of the deadline, the
start of its next job and its termination, divided by its time per task); min(n_g,
n_r) move, and that recipient leaves the list (line 27: no one machine is loaded from
many). Tasks move from the end of the violator's queue of j (not yet started, latest
first), so what runs there next is undisturbed.

Beyond the paper: every late job of a violator is handled (latest deadline slack
first), a recipient is never made late nor extended beyond its paid time (so a move
never costs money or creates a violation), and what is still late after the moves is
returned (``Lateness``: tasks and seconds per job), for the controller to buy machines
if the deadline and the budget allow, or to say early that the deadline will not hold.
A job whose last task on a queue is the next to start there (the first job, EDF, with
one task queued) must end ``Queue.lead_s`` before its deadline: the spread of the end of
the task running before it, which its own guard does not cover and no later move can
mend (the watch sets it; ``deadline.queues``). A job with more tasks queued behind is
left to later moves.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from autoscaler.core.model import Move

_EPS = 1e-9


@dataclass(frozen=True, slots=True)
class Queue:
    """One machine as the reassignment sees it."""

    machine: str
    busy_until: float  # when its current task ends (ready time if booting; now if idle)
    paid_until: float  # its paid time; a recipient's queue must end by it
    tasks: Sequence[tuple[int, str]]  # queued, not started: (task id, job name), in order
    task_s: Mapping[str, float]  # its time per task of each job (observed, else planned)
    lead_s: float = 0.0  # how much earlier its next task must end, when it is its job's last here


@dataclass(frozen=True, slots=True)
class Lateness:
    """What is expected to finish after its deadline once the moves are made."""

    job: str
    tasks: int  # tasks of the job expected to end late
    seconds: float  # by how much its last task is expected to be late


@dataclass(frozen=True, slots=True)
class Reassignment:
    moves: tuple[Move, ...]
    late: tuple[Lateness, ...]  # after the moves; empty when every deadline holds


def finish_times(q: Queue, deadlines: Mapping[str, float]) -> dict[str, float]:
    """When each job's last task on ``q`` ends, its queue run in EDF order."""
    per_job: dict[str, int] = {}
    for _, job in q.tasks:
        per_job[job] = per_job.get(job, 0) + 1
    t = q.busy_until
    out: dict[str, float] = {}
    for i, job in enumerate(sorted(per_job, key=lambda j: deadlines[j])):
        t += per_job[job] * q.task_s[job]
        out[job] = t + (q.lead_s if i == 0 and per_job[job] == 1 else 0.0)
    return out


def late_tasks(q: Queue, deadlines: Mapping[str, float]) -> dict[str, tuple[int, float]]:
    """Per job: how many of its tasks on ``q`` end after its deadline, and by how much the
    last does (EDF order)."""
    per_job: dict[str, int] = {}
    for _, job in q.tasks:
        per_job[job] = per_job.get(job, 0) + 1
    t = q.busy_until
    out: dict[str, tuple[int, float]] = {}
    for i, job in enumerate(sorted(per_job, key=lambda j: deadlines[j])):
        start = t
        t += per_job[job] * q.task_s[job]
        due = deadlines[job] - (q.lead_s if i == 0 and per_job[job] == 1 else 0.0)
        if t > due + _EPS:
            e = q.task_s[job]
            on_time = max(0, math.floor((due - start) / e + _EPS)) if e > 0 else 0
            out[job] = (per_job[job] - min(on_time, per_job[job]), t - due)
    return out


def room(q: Queue, job: str, e: float, deadlines: Mapping[str, float]) -> int:
    """The most tasks of ``job`` (``e`` seconds each on ``q``) that ``q`` can take with every
    job on it still ending by its deadline and its queue by its paid time."""
    if e <= 0:
        return 0
    per_job: dict[str, int] = {}
    for _, j in q.tasks:
        per_job[j] = per_job.get(j, 0) + 1
    order = sorted({*per_job, job}, key=lambda j: deadlines[j])
    # Added tasks of `job` delay `job` and every job after it in EDF order: the most
    # that fits is the least slack among those, over e.
    t = q.busy_until
    ends: dict[str, float] = {}
    for i, j in enumerate(order):
        t += per_job.get(j, 0) * (q.task_s[j] if j in per_job else 0.0)
        ends[j] = t + (q.lead_s if i == 0 and per_job.get(j, 0) <= 1 else 0.0)
    if any(ends[j] > deadlines[j] + _EPS for j in per_job):
        return 0  # late already: not a recipient
    at = order.index(job)
    slack = min(deadlines[j] - ends[j] for j in order[at:])
    slack = min(slack, q.paid_until - t)
    return max(0, math.floor(slack / e + _EPS))


def reassign(queues: Sequence[Queue], deadlines: Mapping[str, float]) -> Reassignment:
    """Algorithm 4 over ``queues``; ``deadlines``: absolute deadline per job name."""
    work = {q.machine: q for q in queues}
    late = {q.machine: late_tasks(q, deadlines) for q in queues}
    violators = sorted(
        (m for m in work if late[m]),
        key=lambda m: -max(seconds for _, seconds in late[m].values()),
    )
    recipients = [m for m in work if not late[m]]
    moves: list[Move] = []
    for vg in violators:
        for job, (_, over) in sorted(late[vg].items(), key=lambda kv: -kv[1][1]):
            q = work[vg]
            e_g = q.task_s[job]
            need = math.ceil(over / e_g - _EPS) if e_g > 0 else 0
            # The most room first (allowed receiving time, line 18).
            recipients.sort(key=lambda m: -_receiving_s(work[m], job, deadlines))
            for vr in list(recipients):
                if need <= 0:
                    break
                r = work[vr]
                if job not in r.task_s:
                    continue  # this machine's type cannot run the job
                n = min(need, room(r, job, r.task_s[job], deadlines), _movable(q, job))
                if n <= 0:
                    continue
                taken = _take_last(q, job, n)
                q = replace(q, tasks=_without(q, taken))
                r = replace(r, tasks=[*r.tasks, *taken])
                work[vg], work[vr] = q, r
                moves.append(Move(tuple(t for t, _ in taken), vg, vr))
                recipients.remove(vr)
                need -= n
    return Reassignment(tuple(moves), lateness(list(work.values()), deadlines))


def lateness(queues: Sequence[Queue], deadlines: Mapping[str, float]) -> tuple[Lateness, ...]:
    """What ``queues`` will finish late, per job: tasks, and seconds of the latest."""
    after: dict[str, list[float]] = {}
    counts: dict[str, int] = {}
    for q in queues:
        for job, (n, seconds) in late_tasks(q, deadlines).items():
            counts[job] = counts.get(job, 0) + n
            after.setdefault(job, []).append(seconds)
    return tuple(Lateness(job, counts[job], max(after[job])) for job in sorted(after))


def _receiving_s(q: Queue, job: str, deadlines: Mapping[str, float]) -> float:
    """The time ``q`` could give ``job``: its room in tasks times its time per task."""
    e = q.task_s.get(job)
    return 0.0 if e is None else room(q, job, e, deadlines) * e


def _movable(q: Queue, job: str) -> int:
    return sum(1 for _, j in q.tasks if j == job)


def _take_last(q: Queue, job: str, n: int) -> list[tuple[int, str]]:
    """The last ``n`` queued tasks of ``job`` on ``q`` (they would run last), in order."""
    mine = [t for t in q.tasks if t[1] == job]
    return mine[len(mine) - n :]


def _without(q: Queue, taken: Sequence[tuple[int, str]]) -> list[tuple[int, str]]:
    gone = {t for t, _ in taken}
    return [t for t in q.tasks if t[0] not in gone]

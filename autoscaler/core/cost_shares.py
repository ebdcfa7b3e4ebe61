"""Which jobs bear a machine's cost (deadline mode, several jobs sharing machines).

A machine's life is cut into its billing steps (``BillingModel.step_s``: an ATU, or the
per-second commitment), each costing what it adds to the machine's bill. A step is
charged to the jobs that had arrived when it began, by the seconds the machine ran
each one's tasks in it (runs of any outcome): a job that runs in time another job had
already paid for is not charged for that time, and what comes later never changes
what an earlier step cost a job. A step in which no job that was there ran is charged
to those that ran in it; an idle step to the jobs of the step before it (the first
steps, to those of the first that ran any); a machine that ran no task is charged to
no job. The report's attribution and the deadline forecasts that predict it read this
one rule."""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Mapping, Sequence

from autoscaler.core.job_ledger import Jobs
from autoscaler.core.machine_ledger import Fleet, Machine
from autoscaler.core.task_ledger import Tasks

_EPS = 1e-6

Run = tuple[float, float, str, float]
"""A span of a machine's work: start, end, job, weight (seconds counted per second)."""


def steps(launched: float, end: float, step_s: float) -> int:
    """How many billing steps a machine launched at ``launched`` has begun by ``end``."""
    return max(1, math.ceil((end - launched) / step_s - _EPS))


def shares(
    runs: Iterable[Run],
    launched: float,
    step_s: float,
    costs: Sequence[float],
    arrived: Mapping[str, float],
) -> tuple[dict[str, float], float]:
    """Each job's part of one machine's step ``costs`` (step k begins at ``launched`` +
    k·``step_s``; ``arrived``: when each job came), and what no job bears."""
    n = len(costs)
    seconds: list[dict[str, float]] = [{} for _ in range(n)]
    for start, end, job, weight in runs:
        if end <= start or weight <= 0:
            continue
        k = min(n - 1, max(0, int((start - launched) // step_s)))
        while k < n:
            begin = launched + k * step_s
            over = (end if k == n - 1 else min(end, begin + step_s)) - max(start, begin)
            if over > 0:
                cell = seconds[k]
                cell[job] = cell.get(job, 0.0) + over * weight
            if k == n - 1 or end <= begin + step_s:
                break
            k += 1
    out: dict[str, float] = {}
    payers: dict[str, float] = {}
    owed = 0.0  # the first steps' cost, before any run
    for k, cost in enumerate(costs):
        begin = launched + k * step_s
        ran = seconds[k]
        there = {j: s for j, s in ran.items() if arrived.get(j, -math.inf) <= begin + _EPS}
        payers = there or ran or payers
        if not payers:
            owed += cost
            continue
        cost, owed = cost + owed, 0.0
        total = sum(payers.values())
        for j, s in payers.items():
            # the share first: s and total may be subnormal (cost * s would round)
            out[j] = out.get(j, 0.0) + cost * (s / total)
    return out, owed


def machine_runs(tasks: Tasks, work: Jobs) -> dict[str, list[Run]]:
    """Per machine id, its ended runs as spans of their jobs."""
    runs: dict[str, list[Run]] = {}
    for seg in tasks.segments:
        runs.setdefault(seg.machine, []).append(
            (seg.start, seg.end, work.job_of(seg.task).name, 1.0)
        )
    return runs


def arrivals(work: Jobs) -> dict[str, float]:
    """When each job came."""
    return {j.name: j.at for j in work.jobs}


def step_costs(fleet: Fleet, machine: Machine, now: float) -> list[float]:
    """What each of ``machine``'s billing steps added to its bill to its end (``now``
    while it is alive): they sum to ``Fleet.billed`` of its life."""
    end = machine.ended_at if machine.ended_at is not None else now
    step_s = fleet.billing.step_s
    n = steps(machine.launched_at, end, step_s)
    billed = [0.0] + [
        fleet.billed(machine, min(end, machine.launched_at + (k + 1) * step_s)) for k in range(n)
    ]
    return [b - a for a, b in itertools.pairwise(billed)]

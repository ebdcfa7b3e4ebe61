"""A job withdrawn from a deadline-mode run (``JobWithdrawn``, a user's cancel in the
service's pool): the ``Cancel`` each of its runs needs for its agent, and the jobs that
remain. The state ends the runs itself when it folds the event; the controller reads
them before, as it reads a finished task's other runs."""

from __future__ import annotations

from autoscaler.core.job_ledger import Jobs
from autoscaler.core.machine_ledger import Fleet
from autoscaler.core.model import Cancel, TaskState
from autoscaler.core.task_ledger import Tasks

_OPEN = (TaskState.PENDING, TaskState.RUNNING)


def withdrawn_runs(fleet: Fleet, work: Jobs, name: str) -> list[Cancel]:
    """A ``Cancel`` for each task of job ``name`` queued or running on a machine alive,
    read before the state folds its withdrawal (nothing if it was withdrawn already)."""
    if name in work.withdrawn or name not in {j.name for j in work.jobs}:
        return []
    job = work.job_named(name)
    return [
        Cancel(tid, m.id, f"job {name} withdrawn")
        for m in fleet.alive_machines()
        for tid in (*m.queue, *m.running)
        if job.owns(tid)
    ]


def still_open(tasks: Tasks, work: Jobs) -> set[str]:
    """The jobs that have arrived, are not withdrawn, and have tasks not ended."""
    return {
        j.name
        for j in work.jobs
        if j.name in work.arrived
        and j.name not in work.withdrawn
        and any(tasks.task_state[t] in _OPEN for t in range(j.first, j.first + j.count))
    }

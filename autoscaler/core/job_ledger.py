"""The jobs of a run (deadline mode, paper 002; a service's pooled jobs): which have
arrived or been withdrawn, the tasks each launch in flight was bought for, and what the
controller said of each (forecasts, lateness, runtimes learned)."""

from __future__ import annotations

import dataclasses
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

from autoscaler.core.errors import StateError
from autoscaler.core.model import DeadlineSet, Forecast, JobSpec, Late, Learned


@dataclass
class Jobs:
    jobs: tuple[JobSpec, ...] = ()
    arrived: set[str] = field(default_factory=set)
    # The tasks each launch in flight was bought for (one tuple per machine)
    launch_queues: dict[str, deque[tuple[int, ...]]] = field(default_factory=dict)
    forecasts: dict[str, Forecast] = field(default_factory=dict)  # the last, per job
    late: dict[str, Late] = field(default_factory=dict)  # the last lateness said, per job
    late_log: list[tuple[float, Late]] = field(default_factory=list)
    learned: dict[tuple[str, str], tuple[float, Learned]] = field(default_factory=dict)
    withdrawn: dict[str, float] = field(default_factory=dict)  # job -> when (JobWithdrawn)

    @property
    def deadline_mode(self) -> bool:
        return bool(self.jobs)

    def job_of(self, task: int) -> JobSpec:
        """The job that owns ``task`` (deadline mode)."""
        for job in self.jobs:
            if job.owns(task):
                return job
        raise StateError(f"task {task} belongs to no job")

    def job_named(self, name: str) -> JobSpec:
        for job in self.jobs:
            if job.name == name:
                return job
        raise StateError(f"no job named {name!r}")

    def enqueue(self, queue: deque[int], tasks: Iterable[int]) -> None:
        """Add ``tasks`` to a machine's ``queue``: at the end, or in deadline mode earliest
        deadline first (stably: after every task due no later), the order a machine runs
        its jobs in (paper 002). The emulator queues with this too, so both agree."""
        if not self.jobs:
            queue.extend(tasks)
            return
        for tid in tasks:
            due = self.job_of(tid).deadline
            i = len(queue)
            while i > 0 and self.job_of(queue[i - 1]).deadline > due:
                i -= 1
            queue.insert(i, tid)

    def arrive(self, name: str) -> None:
        self.arrived.add(self.job_named(name).name)

    def add(self, job: JobSpec) -> None:
        """A new job joins the run, arrived (its tasks checked by the caller)."""
        if any(j.name == job.name for j in self.jobs):
            raise StateError(f"job {job.name!r} is in the run already")
        self.jobs = (*self.jobs, job)
        self.arrived.add(job.name)

    def deadline_set(self, event: DeadlineSet) -> None:
        old = self.job_named(event.job)
        self.jobs = tuple(
            dataclasses.replace(j, deadline=event.deadline) if j is old else j for j in self.jobs
        )

    def forecast(self, action: Forecast) -> None:
        self.forecasts[action.job] = action

    def said_late(self, now: float, action: Late) -> None:
        self.late[action.job] = action
        self.late_log.append((now, action))

    def learn(self, now: float, action: Learned) -> None:
        self.learned[action.job, action.type] = (now, action)

    def drop_from_launches(self, tasks: set[int] | frozenset[int]) -> None:
        """``tasks`` are no longer held for the machines of launches in flight."""
        for token, queues in self.launch_queues.items():
            self.launch_queues[token] = deque(tuple(t for t in q if t not in tasks) for q in queues)

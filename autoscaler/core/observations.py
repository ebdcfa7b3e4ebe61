"""What the runs of a run's tasks showed: each runtime recorded once, by ``record``
(or, for a run that ended without a result, ``censor``), and the views read from it:
per machine type (``RuntimeStats``: the sample, the censored runs, the estimate), per
(job, type) and (machine, job) (deadline mode, paper 002), per (category, type)
(paper 004), and per type for the tasks run on every type (compact sampling,
slides 001). The views are this ledger's indexes, kept as each runtime comes."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TypeVar

from autoscaler.learn.stats import RuntimeStats

Moments = list[float]
"""[count, sum, sum of squares] of the runtimes in one view's cell."""


K = TypeVar("K")


def _add(table: dict[K, Moments], key: K, x: float) -> None:
    cell = table.setdefault(key, [0.0, 0.0, 0.0])
    cell[0] += 1
    cell[1] += x
    cell[2] += x * x


@dataclass
class Observations:
    stats: dict[str, RuntimeStats] = field(default_factory=dict)  # per type
    job_runs: dict[tuple[str, str], Moments] = field(default_factory=dict)  # (job, type)
    machine_job_runs: dict[tuple[str, str], Moments] = field(default_factory=dict)
    category_runs: dict[tuple[int, str], Moments] = field(default_factory=dict)
    # Compact sampling (slides 001): the first ``paired_target`` tasks assigned are run
    # on every type, each run counted on its type, none cancelled when another ends.
    paired_target: int = 0
    paired: list[int] = field(default_factory=list)  # those tasks, in assignment order
    paired_runs: dict[int, dict[str, float]] = field(default_factory=dict)  # runtime per type

    def record(
        self,
        task: int,
        type_name: str,
        machine: str,
        job: str | None,
        category: int | None,
        runtime_s: float,
    ) -> None:
        """A counted run of ``task`` ended with a result after ``runtime_s``: the one
        place a runtime is recorded, in every view it belongs to."""
        if job is not None:
            _add(self.job_runs, (job, type_name), runtime_s)
            _add(self.machine_job_runs, (machine, job), runtime_s)
        if category is not None:
            _add(self.category_runs, (category, type_name), runtime_s)
        self.stats[type_name].record(runtime_s, task)
        pairs = self.paired_runs.get(task)
        if pairs is not None:
            pairs[type_name] = runtime_s

    def censor(self, task: int, type_name: str, runtime_s: float) -> None:
        """A counted run ended without a result after ``runtime_s``: the task needed
        longer to succeed (a right-censored runtime)."""
        self.stats[type_name].censor(max(0.0, runtime_s), task)

    def paired_first_run(self, task: int, type_name: str) -> bool:
        """Whether a run of ``task`` starting on ``type_name`` is the paired task's
        counted run there (compact sampling): its first on the type."""
        return task in self.paired_runs and task not in self.stats[type_name].sample

    def begin(self, task: int, type_name: str, elsewhere: bool) -> bool:
        """A run of ``task`` starts on ``type_name``; whether it counts (else it is a
        replica of a run ``elsewhere``, chosen for being long: it would bias the
        estimate)."""
        if elsewhere and not self.paired_first_run(task, type_name):
            return False
        self.stats[type_name].start(task)
        return True

    def pair(self, task: int) -> None:
        """``task`` was assigned: one of the paired tasks while they are too few."""
        if len(self.paired) < self.paired_target and task not in self.paired_runs:
            self.paired.append(task)
            self.paired_runs[task] = {}

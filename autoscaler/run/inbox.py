"""What reaches the daemon's queue besides agents' polls and the machine lifecycle's
records: timers that fell due, signals, and what the daemon's owner hands the run."""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass

from autoscaler.core.model import Event, JobArrived, JobSpec, TaskSpec


@dataclass(frozen=True, slots=True)
class BoundaryDue:
    """A machine's paid unit is about to end (its timer fired)."""

    machine: str


@dataclass(frozen=True, slots=True)
class TickDue:
    """The monitoring interval passed."""


@dataclass(frozen=True, slots=True)
class ArrivalsDue:
    """Deadline mode: these jobs arrive now."""

    jobs: tuple[JobArrived, ...]


@dataclass(frozen=True, slots=True)
class HealthDue:
    """Time to look for silent machines and dropped tunnels."""


@dataclass(frozen=True, slots=True)
class SignalReceived:
    signum: int


@dataclass(frozen=True, slots=True)
class Told:
    """An event from the daemon's owner (the service): a user's update, an interruption."""

    event: Event


@dataclass(frozen=True, slots=True)
class AddJob:
    """A job for the pool (``Daemon.add_job``), answered once it is journaled."""

    job: JobSpec
    tasks: tuple[TaskSpec, ...]
    answer: Future[JobSpec]

"""What reaches the daemon's queue besides agents' polls and the machine lifecycle's
records: timers that fell due, signals, and what the daemon's owner hands the run."""

from __future__ import annotations

import contextlib
import queue
import time
from collections.abc import Callable
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


MOST_A_STEP = 5000
"""The most items one step of the daemon takes from its queue."""


def take(
    inbox: queue.SimpleQueue[object],
    gather_until: float = 0.0,
    sleep: Callable[[float], None] = time.sleep,
) -> list[object]:
    """The items of one step: the next, waited for; if ``gather_until`` (monotonic) is
    still ahead, what else arrives until then; then whatever else is queued, up to
    ``MOST_A_STEP``."""
    items = [inbox.get()]
    wait = gather_until - time.monotonic()
    if wait > 0:
        sleep(wait)
    with contextlib.suppress(queue.Empty):
        while len(items) < MOST_A_STEP:
            items.append(inbox.get_nowait())
    return items

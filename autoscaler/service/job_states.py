"""What a service job is, as the store, the API and ``autoscaler wait`` say it: its
states, those it does not leave, and ``wait``'s exit code per outcome.

Its own module, with nothing but the standard library, so a command that only talks to a
running service (``wait``, ``cancel``, ``update``, ``jobs``) starts without the config
models the store loads.
"""

from __future__ import annotations

from enum import StrEnum

__all__ = ["ENDED", "EXIT_CODES", "JobState"]


class JobState(StrEnum):
    """What a service job is; the values are what the store and the API hold."""

    QUEUED = "queued"
    """Submitted and journaled; waits for a free slot."""
    RUNNING = "running"
    """Its run is under way (on its own machines, or in the deadline pool)."""
    DONE = "done"
    """Every task done."""
    STOPPED = "stopped"
    """Its constraint gave way (the budget or the deadline cannot be met), or an error."""
    FAILED = "failed"
    """It could not start, or its daemon broke."""
    CANCELLED = "cancelled"
    """Cancelled by the user."""
    INTERRUPTED = "interrupted"
    """The service stopped while it ran: its machines were handed over (or released,
    ``serve --release-on-exit``); it resumes with the next service on the same state
    directory, which adopts the machines still running."""


ENDED = frozenset({JobState.DONE, JobState.STOPPED, JobState.CANCELLED, JobState.FAILED})
"""The states a job does not leave."""

EXIT_CODES: dict[JobState | str, int] = {
    JobState.DONE: 0,
    JobState.STOPPED: 3,
    "late": 4,
    JobState.CANCELLED: 5,
    JobState.INTERRUPTED: 6,
    JobState.FAILED: 7,
}
"""``autoscaler wait``'s exit code per outcome (``late``: done, but a deadline missed)."""

"""The tasks of a run: each one's state and attempts, the bag (``pending``, in the
order tasks leave it), where each runs now, how many ended each way, and what ended
runs left: the report's Gantt segments, errors, and the outputs committed."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from autoscaler.core.model import TaskState
from autoscaler.core.task_files import Stored

# Enum members looked up once: reading ``TaskState.RUNNING`` calls a descriptor.
_PENDING = TaskState.PENDING
_RUNNING = TaskState.RUNNING


@dataclass(slots=True)
class Segment:
    """A run of one task on one machine, for the report's Gantt chart."""

    task: int
    machine: str
    start: float
    end: float
    outcome: str  # done, failed, cancelled, lost


@dataclass
class Tasks:
    task_state: list[TaskState] = field(default_factory=list)
    attempts: list[int] = field(default_factory=list)
    pending: deque[int] = field(default_factory=deque)
    running_on: dict[int, dict[str, float]] = field(default_factory=dict)
    # Times a task came to have exactly one run (its first began, or its other ended),
    # and what a controller worked out from ``running_on`` with the count it was at: the
    # tail's candidates (``budget.tail``) hold until a task joins them. Not records.
    solo_gains: int = field(default=0, compare=False)
    memo: dict[str, object] = field(default_factory=dict, compare=False, repr=False)
    max_retries: int = 2
    done: int = 0
    failed: int = 0
    cancelled: int = 0  # tasks of withdrawn jobs that had not ended (TaskState.CANCELLED)
    segments: list[Segment] = field(default_factory=list)
    task_errors: dict[int, str] = field(default_factory=dict)
    stored: dict[int, Stored] = field(default_factory=dict)  # task -> its outputs committed
    # Categories (paper 004): each task's category id (empty: none).
    task_category: tuple[int, ...] = ()

    def run_ends(self, task: int, machine: str) -> dict[str, float] | None:
        """The run of ``task`` on ``machine`` ended: the task's runs left (None: none
        was known)."""
        runs = self.running_on.get(task)
        if runs is not None:
            runs.pop(machine, None)
            if len(runs) == 1:
                self.solo_gains += 1
        return runs

    def drop_run(self, task: int, machine: str) -> None:
        """A run of ``task`` on ``machine`` ended without a result: back to the bag if it
        was the last."""
        if self.run_ends(task, machine):
            return
        self.running_on.pop(task, None)
        if self.task_state[task] is _RUNNING:
            self.task_state[task] = _PENDING
            self.pending.appendleft(task)

    def taken(self, task: int) -> None:
        """``task`` leaves the bag for a machine's queue or a launch."""
        if self.task_state[task] is _PENDING:
            if self.pending[0] == task:
                self.pending.popleft()
            else:
                self.pending.remove(task)
        self.task_state[task] = _RUNNING

    def back_to_bag(self, tasks: tuple[int, ...] | list[int]) -> None:
        """``tasks``, held for a machine that never came, go back to the bag's front."""
        for tid in reversed(tasks):
            if self.task_state[tid] is _RUNNING and not self.running_on.get(tid):
                self.task_state[tid] = _PENDING
                self.pending.appendleft(tid)

"""The state of a run: a fold over the events and actions of its journal.

``RunState`` changes only through ``RunState.apply(t, item)``: an event that happened, or
an action the controller decided, at run time ``t``. A driver journals exactly those
pairs, so replaying a journal rebuilds the state exactly (``journal.replay``). It knows
money (what is committed), machines and tasks; it decides nothing: that is the
controller's job.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

from autoscaler.core.billing import BillingModel
from autoscaler.core.fold import Fold
from autoscaler.core.model import JobSpec, ProviderLimit, TaskState, TypeSpec
from autoscaler.core.records import Machine, Segment, StateError
from autoscaler.learn.stats import RuntimeStats

__all__ = ["Machine", "RunState", "Segment", "StateError"]


class RunState(Fold):
    """Everything the controller knows, rebuilt from the journal alone: the records
    (``core.records``) and the fold (``core.fold``)."""

    @classmethod
    def new(
        cls,
        types: Sequence[TypeSpec],
        billing: BillingModel,
        budget: float | None,
        n_tasks: int,
        order: Sequence[int],
        max_retries: int = 2,
        sample_target: int = 30,
        paired: int = 0,
        jobs: Sequence[JobSpec] = (),
        limits: Sequence[ProviderLimit] = (),
        categories: Sequence[int] = (),
        launch_prefix: str = "",
    ) -> RunState:
        """A fresh run; ``order`` is the FCFS order tasks leave the bag in; ``paired``:
        tasks to run on every type (compact sampling; 0: plain sampling); ``jobs``: a
        deadline-mode run's jobs, owning the task ids between them; ``categories``: each
        task's category id (paper 004), or none; ``launch_prefix``: what its launch
        tokens start with (``RunRecords.next_token``)."""
        if sorted(order) != list(range(n_tasks)):
            raise StateError("task order must be a permutation of the task ids")
        if jobs and sorted(t for j in jobs for t in range(j.first, j.first + j.count)) != list(
            range(n_tasks)
        ):
            raise StateError("the jobs' tasks must be the task ids, each owned by one job")
        return cls(
            jobs=tuple(jobs),
            arrived={j.name for j in jobs if j.at <= 0},
            types={t.name: t for t in types},
            billing=billing,
            budget=budget,
            n_tasks=n_tasks,
            max_retries=max_retries,
            task_state=[TaskState.PENDING] * n_tasks,
            attempts=[0] * n_tasks,
            pending=deque(order),
            spend_log=[(0.0, 0.0)],
            stats={t.name: RuntimeStats(sample_target) for t in types},
            paired_target=paired,
            limits=tuple(limits),
            task_category=tuple(categories),
            launch_prefix=launch_prefix,
        )

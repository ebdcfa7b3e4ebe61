"""Categories in budget mode (paper 004 §4–5): which of the bag's tasks a machine takes.

Without categories a machine takes the bag's next tasks (FCFS in the run's random
order). With them (``categories:`` in the config):

* **Sampling** covers each large category on each type: until the plan, a machine of
  type j takes first the tasks of the largest ``share`` of categories (the paper: 20 %)
  that have run fewer than ``per`` times on j (the paper: 2).
* **Estimates** are per (category, type): the runs that ended with a result
  (``RunState.category_runs``); a category not yet seen on a type is scaled from the
  type's measured ones by the paper's ratio rule (``categories.metrics.fill``).
* **Assignment**: once planned, the tasks not yet handed out of each category are
  shared among the types by the least-makespan LP (``category_means``, the one the
  budget planner's mix is made with, ``category_mix``), each type's lanes its machines
  alive × slots. A machine of type j then takes tasks of the categories planned for j
  (half a task or more) first, the bag's order within them, and the bag's next tasks
  when none is left. A machine marked to go has no share in the LP, yet works until its
  paid time ends: it takes the categories it is relatively fastest at, those where its
  type is at least as fast as every type kept (or, where there is none, the one where
  its time over the kept types' best is least), so that it spares the fleet kept the
  tasks that fleet is slowest at.
* **Mix** (``mix``): the budget planner, the monitor and the prediction see each type's
  mean as that of the tasks the mix gives it (``category_means``, ``category_mix``);
  off, as that of every task it ran (the category-blind mix, for comparison).

The plan is cached until tasks end or the configuration changes; it decides which
tasks go where, never how many machines or how much money (the budget planner's).
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from autoscaler.budget.category_means import category_times, tasks_left
from autoscaler.categories.deployment import Key
from autoscaler.categories.sample_order import large, to_sample
from autoscaler.categories.sort import Category
from autoscaler.core.state import RunState


@dataclass
class CategoryChoice:
    """A run's categories and what the budget controller makes of them."""

    categories: Sequence[Category]
    per: int = 2  # sample runs of each large category on each type
    share: float = 0.2  # the largest share of categories sampled
    mix: bool = True  # the budget planner's mix sees the types as the tasks they are given
    _plan: dict[Key, float] = field(default_factory=dict)
    _plan_at: tuple[int, int] = (-1, -1)
    _leaving_for: dict[str, set[int]] = field(default_factory=dict)
    _leaving_at: tuple[int, int] = (-1, -1)

    @property
    def large(self) -> set[int]:
        return large(self.categories, self.share)

    def pick(
        self, state: RunState, type_name: str, k: int, planned: bool, leaving: bool = False
    ) -> list[int]:
        """``k`` tasks of the bag for a machine of ``type_name`` (``leaving``: marked to
        go): the categories it samples, is planned for, or is relatively fastest at
        first, then the bag's order."""
        if k <= 0:
            return []
        if not planned:
            wanted = self._sampling(state, type_name)
        elif leaving:
            wanted = self._leaving(state, type_name)
        else:
            wanted = self._planned(state, type_name)
        if not wanted:
            return list(itertools.islice(state.tasks.pending, k))
        cat = state.tasks.task_category
        first = list(
            itertools.islice(
                (t for t in state.tasks.pending if t < len(cat) and cat[t] in wanted), k
            )
        )
        if len(first) < k:
            taken = set(first)
            first += [
                t for t in itertools.islice(state.tasks.pending, k + len(first)) if t not in taken
            ][: k - len(first)]
        return first

    def _sampling(self, state: RunState, type_name: str) -> set[int]:
        return to_sample(state, self.categories, type_name, self.per, self.share)

    def _planned(self, state: RunState, type_name: str) -> set[int]:
        key = (state.tasks.done, len(state.decisions.configurations))
        if key != self._plan_at:
            self._plan = self._solve(state)
            self._plan_at = key
        return {c for (c, t), n in self._plan.items() if t == type_name and n >= 0.5}

    def _leaving(self, state: RunState, type_name: str) -> set[int]:
        key = (state.tasks.done, len(state.decisions.configurations))
        if key != self._leaving_at:
            self._leaving_for, self._leaving_at = {}, key
        if type_name not in self._leaving_for:
            self._leaving_for[type_name] = self._relatively_fastest(state, type_name)
        return self._leaving_for[type_name]

    def _relatively_fastest(self, state: RunState, type_name: str) -> set[int]:
        kept = sorted(self._lanes(state))
        left = tasks_left(state.tasks, pending_only=True)
        times = category_times(state, self.categories, sorted({type_name, *kept}), left)
        if times is None or not kept:
            return set()
        t = times.mean_s
        ratio = {
            c: t[(c, type_name)] / min(t[(c, k)] for k in kept)
            for c, n in left.items()
            if n > 0 and (c, type_name) in t and all((c, k) in t for k in kept)
        }
        if not ratio:
            return set()
        return {c for c, r in ratio.items() if r <= 1.0} or {min(ratio, key=lambda c: ratio[c])}

    @staticmethod
    def _lanes(state: RunState) -> Counter[str]:
        """Slots per type of the machines alive and kept."""
        lanes: Counter[str] = Counter()
        for m in state.fleet.alive_machines():
            if not m.marked:
                lanes[m.type.name] += m.type.slots
        return lanes

    def _solve(self, state: RunState) -> dict[Key, float]:
        lanes = self._lanes(state)
        left = tasks_left(state.tasks, pending_only=True)
        times = category_times(state, self.categories, sorted(lanes), left)
        if times is None or not left:
            return {}
        return times.share(lanes).x

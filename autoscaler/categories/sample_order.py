"""Which categories a type still samples (paper 004 §4.2: 2 tasks of each of the largest
20 % of categories on each resource), as the budget and deadline controllers both draw
their samples: the large categories that have run fewer than ``per`` times on the type,
counting the runs that ended with a result and the tasks running or queued there."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from autoscaler.categories.sort import Category
from autoscaler.core.state import RunState


def large(categories: Sequence[Category], share: float) -> set[int]:
    """The ids of the largest ``share`` of ``categories`` (at least one; ties in size go
    to the lower id)."""
    count = max(1, round(share * len(categories)))
    ranked = sorted(categories, key=lambda c: (-c.size, c.id))
    return {c.id for c in ranked[:count]}


def to_sample(
    state: RunState, categories: Sequence[Category], type_name: str, per: int, share: float
) -> set[int]:
    """The large categories a machine of ``type_name`` should take tasks of first: those
    with fewer than ``per`` runs on the type, ended or under way."""
    return set(shortfall(state, categories, type_name, per, share))


def shortfall(
    state: RunState, categories: Sequence[Category], type_name: str, per: int, share: float
) -> dict[int, int]:
    """How many more runs on ``type_name`` each large category needs to have ``per``
    (those that need none left out)."""
    ran = {
        c: int(runs[0]) for (c, t), runs in state.observed.category_runs.items() if t == type_name
    }
    cat = state.tasks.task_category
    busy = Counter(
        cat[t]
        for m in state.fleet.alive_machines()
        if m.type.name == type_name
        for t in (*m.running, *m.queue)
        if t < len(cat)
    )
    have = {c: ran.get(c, 0) + busy[c] for c in large(categories, share)}
    return {c: per - n for c, n in have.items() if n < per}

"""The report's categories (paper 004 §4): each category's tasks, and on each machine
type the runs of its tasks that ended there with a result and their mean time: the
(category, type) metrics the planners and the dispatcher worked from."""

from __future__ import annotations

import math
from collections import Counter

from autoscaler.categories.of_config import categories_of
from autoscaler.categories.sort import Category
from autoscaler.config.schema import RunConfig
from autoscaler.core.model import TaskState
from autoscaler.core.state import RunState
from autoscaler.report.json_record import record as _record


@_record
class CategoryOnType:
    """What a category's tasks took on one machine type."""

    type: str
    runs: int
    """Runs of the category's tasks that ended there with a result."""
    mean_s: float
    """Their mean time, seconds."""
    sd_s: float | None
    """Their standard deviation (null below two runs)."""


@_record
class CategoryLine:
    """One category and what its tasks took on each type that ran them."""

    id: int
    name: str
    """Its label (``by: label``), or its bins: input size, estimate, output size."""
    tasks: int
    done: int
    on_types: tuple[CategoryOnType, ...]


def category_lines(cfg: RunConfig, state: RunState) -> tuple[CategoryLine, ...]:
    """The report's categories of a run of ``cfg``, sorted as its state's were (none
    without them)."""
    found = categories_of(cfg) if state.tasks.task_category else None
    if not found:
        return ()
    done = Counter(
        state.tasks.task_category[t]
        for t, st in enumerate(state.tasks.task_state)
        if st is TaskState.DONE and t < len(state.tasks.task_category)
    )
    tasks = Counter(state.tasks.task_category)  # a pool's: its jobs added since too
    return tuple(_line(state, cat, tasks[cat.id], done[cat.id]) for cat in found)


def _line(state: RunState, cat: Category, tasks: int, done: int) -> CategoryLine:
    on_types = []
    for t in sorted(state.types):
        runs = state.observed.category_runs.get((cat.id, t))
        if not runs or runs[0] <= 0:
            continue
        n, total, squares = runs
        sd = math.sqrt(max(0.0, (squares - total * total / n) / (n - 1))) if n > 1 else None
        on_types.append(
            CategoryOnType(
                type=t,
                runs=int(n),
                mean_s=round(total / n, 3),
                sd_s=None if sd is None else round(sd, 3),
            )
        )
    return CategoryLine(
        id=cat.id, name=_name(cat), tasks=tasks, done=done, on_types=tuple(on_types)
    )


def _name(cat: Category) -> str:
    if isinstance(cat.key, str):
        return cat.key or "(no label)"
    size, estimate, output = cat.key
    return f"input bin {size}, estimate bin {estimate}, output bin {output}"

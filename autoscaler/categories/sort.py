"""Sorting tasks into categories (paper 004 §4.1).

Three levels, each binned by a class interval CI: level 1 by input size, level 2 by
the estimated time, level 3 by output size. The bins of one level are
``[0, 1.5·CI)``, ``[1.5·CI, 2.5·CI)``, ``[2.5·CI, 3.5·CI)``, ...: bin 0 is half a
class wider than the rest, as in the paper's Fig. 3. A category exists only when a
task falls in it. A level whose CI is not given is not split; a task that does not
give a level's requirement falls in that level's bin -1 (sorted first). Or tasks are
sorted by a user's label (``by_label``). Categories are numbered 0.. in the order of
their keys, so the same bag gives the same ids.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from autoscaler.core.model import TaskSpec

MISSING = -1
"""The bin of a task that does not give a level's requirement."""


@dataclass(frozen=True, slots=True)
class Requirements:
    """What one task says it needs; any may be missing."""

    input_bytes: float | None = None  # TFSize
    estimate_s: float | None = None  # ETCPUTime
    output_bytes: float | None = None  # OFSize
    label: str | None = None  # a user's category


@dataclass(frozen=True, slots=True)
class ClassIntervals:
    """The class interval of each level; None: the level is not split."""

    input_bytes: float | None = None
    estimate_s: float | None = None
    output_bytes: float | None = None

    def __post_init__(self) -> None:
        for name in ("input_bytes", "estimate_s", "output_bytes"):
            value = getattr(self, name)
            if value is not None and not (value > 0 and math.isfinite(value)):
                raise ValueError(f"class interval {name} must be positive, got {value!r}")


@dataclass(frozen=True, slots=True)
class Category:
    """One category: its key (bins, or a label), its tasks and their mean requirements
    (AvgTFSize, AvgETCPUTime, AvgOFSize; None when no task of it gives one)."""

    id: int
    key: tuple[int, int, int] | str
    tasks: tuple[int, ...]
    avg_input_bytes: float | None
    avg_estimate_s: float | None
    avg_output_bytes: float | None

    @property
    def size(self) -> int:
        return len(self.tasks)


def bin_of(value: float | None, ci: float | None) -> int:
    """The bin of ``value`` for class interval ``ci``: 0 below 1.5·CI, then one per CI."""
    if ci is None:
        return 0
    if value is None:
        return MISSING
    if value < 1.5 * ci:
        return 0
    return math.floor((value - 1.5 * ci) / ci) + 1


def key_of(req: Requirements, ci: ClassIntervals) -> tuple[int, int, int]:
    return (
        bin_of(req.input_bytes, ci.input_bytes),
        bin_of(req.estimate_s, ci.estimate_s),
        bin_of(req.output_bytes, ci.output_bytes),
    )


def categorise(tasks: Mapping[int, Requirements], ci: ClassIntervals) -> list[Category]:
    """The categories of ``tasks`` (task id to requirements) by class intervals."""
    groups: dict[tuple[int, int, int], list[int]] = {}
    for task in sorted(tasks):
        groups.setdefault(key_of(tasks[task], ci), []).append(task)
    return _numbered(sorted(groups.items()), tasks)


def by_label(tasks: Mapping[int, Requirements]) -> list[Category]:
    """The categories of ``tasks`` by their labels (a task without one: label "")."""
    groups: dict[str, list[int]] = {}
    for task in sorted(tasks):
        groups.setdefault(tasks[task].label or "", []).append(task)
    return _numbered(sorted(groups.items()), tasks)


def _numbered(
    ordered: Iterable[tuple[tuple[int, int, int] | str, list[int]]],
    tasks: Mapping[int, Requirements],
) -> list[Category]:
    out = []
    for i, (key, members) in enumerate(ordered):
        reqs = [tasks[t] for t in members]
        out.append(
            Category(
                id=i,
                key=key,
                tasks=tuple(members),
                avg_input_bytes=_mean(r.input_bytes for r in reqs),
                avg_estimate_s=_mean(r.estimate_s for r in reqs),
                avg_output_bytes=_mean(r.output_bytes for r in reqs),
            )
        )
    return out


def _mean(values: Iterable[float | None]) -> float | None:
    given = [v for v in values if v is not None]
    return sum(given) / len(given) if given else None


def category_of(categories: Iterable[Category]) -> dict[int, int]:
    """Task id to its category's id."""
    return {t: c.id for c in categories for t in c.tasks}


def requirements_of(tasks: Iterable[TaskSpec]) -> dict[int, Requirements]:
    """The requirements the bag's tasks give (``config`` reads them from a table's
    columns or a sweep's templates), by task id."""
    return {
        t.id: Requirements(t.input_bytes, t.estimate_s, t.output_bytes, t.category) for t in tasks
    }

"""Deployment metrics per (category, type) (paper 004 §4.2–4.3).

A run of a task on a type gives its times and cost (``Observation``); their means per
(category, type) are the metrics ``TCat_k - R_j`` (``average``). A category no task of
which ran on a type gets that type's metrics scaled from the categories that did, by
the ratio of measured to required (the paper's §4.2, last paragraph): CPU time and cost
scale with the category's mean estimate, transfer time with its mean input + output
bytes; the wall-clock and processing overheads (wall − CPU, turnaround − transfer −
wall) are the measured categories' mean. Which tasks to benchmark: 2 tasks of each of
the largest 20 % of categories, on each type (``benchmark_tasks``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from autoscaler.categories.sort import Category


@dataclass(frozen=True, slots=True)
class Observation:
    """One task's deployment on a type (a task of a group carries its share of the
    group's overheads)."""

    category: int
    type: str
    cpu_s: float  # CPUTime
    wall_s: float  # WCTime: CPU time and the resource's overhead
    transfer_s: float  # MTRTime + RTMTime
    turnaround_s: float  # TRTime: scheduled to output retrieved
    cost: float  # PCost


@dataclass(frozen=True, slots=True)
class Metrics:
    """The mean deployment metrics of a category on a type (``TCat_k - R_j``)."""

    cpu_s: float
    wall_s: float
    transfer_s: float
    turnaround_s: float
    cost: float
    space_bytes: float = 0.0  # AvgSpace: the task's input and output files
    measured: bool = True  # False: scaled from other categories (the ratio rule)


def time_only(mean_s: float) -> Metrics:
    """The metrics of a (category, type) known only by its mean time per task."""
    return Metrics(cpu_s=mean_s, wall_s=mean_s, transfer_s=0.0, turnaround_s=mean_s, cost=0.0)


Key = tuple[int, str]
"""(category id, type name)."""


def average(observations: Iterable[Observation]) -> dict[Key, Metrics]:
    """The mean metrics of each (category, type) observed."""
    sums: dict[Key, list[float]] = {}
    for o in observations:
        acc = sums.setdefault((o.category, o.type), [0.0] * 6)
        for i, v in enumerate((o.cpu_s, o.wall_s, o.transfer_s, o.turnaround_s, o.cost, 1.0)):
            acc[i] += v
    return {
        key: Metrics(a[0] / a[5], a[1] / a[5], a[2] / a[5], a[3] / a[5], a[4] / a[5])
        for key, a in sums.items()
    }


def fill(
    measured: Mapping[Key, Metrics], categories: Sequence[Category], types: Sequence[str]
) -> dict[Key, Metrics]:
    """Metrics for every (category, type): measured where measured, else by the ratio
    rule from the type's measured categories. A type with none measured has none."""
    by_id = {c.id: c for c in categories}
    out: dict[Key, Metrics] = {}
    for type_name in types:
        known = [(by_id[k], m) for (k, t), m in measured.items() if t == type_name]
        if not known:
            continue
        cpu_ratio = _ratio([(_estimate(c), m.cpu_s) for c, m in known])
        cost_ratio = _ratio([(_estimate(c), m.cost) for c, m in known])
        transfer_ratio = _ratio([(_bytes(c), m.transfer_s) for c, m in known])
        r_over = _avg([m.wall_s - m.cpu_s for _, m in known])
        p_over = _avg([m.turnaround_s - m.transfer_s - m.wall_s for _, m in known])
        for c in categories:
            space = _bytes(c) or 0.0
            m = measured.get((c.id, type_name))
            if m is not None:
                out[c.id, type_name] = Metrics(
                    m.cpu_s, m.wall_s, m.transfer_s, m.turnaround_s, m.cost, space
                )
                continue
            cpu = _scaled(cpu_ratio, _estimate(c), [m.cpu_s for _, m in known])
            transfer = _scaled(transfer_ratio, _bytes(c), [m.transfer_s for _, m in known])
            wall = cpu + r_over
            out[c.id, type_name] = Metrics(
                cpu_s=cpu,
                wall_s=wall,
                transfer_s=transfer,
                turnaround_s=transfer + wall + p_over,
                cost=_scaled(cost_ratio, _estimate(c), [m.cost for _, m in known]),
                space_bytes=space,
                measured=False,
            )
    return out


def _estimate(c: Category) -> float | None:
    return c.avg_estimate_s


def _bytes(c: Category) -> float | None:
    if c.avg_input_bytes is None and c.avg_output_bytes is None:
        return None
    return (c.avg_input_bytes or 0.0) + (c.avg_output_bytes or 0.0)


def _ratio(pairs: Sequence[tuple[float | None, float]]) -> float | None:
    """The mean of measured / required over the pairs that give a positive requirement."""
    ratios = [got / need for need, got in pairs if need is not None and need > 0]
    return _avg(ratios) if ratios else None


def _scaled(ratio: float | None, need: float | None, fallback: Sequence[float]) -> float:
    if ratio is not None and need is not None:
        return ratio * need
    return _avg(fallback)


def _avg(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def benchmark_tasks(
    categories: Sequence[Category], types: Sequence[str], per: int = 2, share: float = 0.2
) -> dict[str, list[tuple[int, int]]]:
    """The (task, category) pairs each type benchmarks: ``per`` tasks of each of the
    largest ``share`` of categories (at least one; the paper: 20 %, 3 of 17), each task
    on one type only. Ties in size go to the lower id."""
    count = max(1, round(share * len(categories)))
    dominant = sorted(categories, key=lambda c: (-c.size, c.id))[:count]
    out: dict[str, list[tuple[int, int]]] = {t: [] for t in types}
    for c in sorted(dominant, key=lambda c: c.id):
        pool = iter(c.tasks)
        for t in types:
            for _ in range(per):
                task = next(pool, None)
                if task is not None:
                    out[t].append((task, c.id))
    return out

"""What machines did per time bucket, for the Gantt chart of a big run: one row per
machine, one column per bucket, the share of the machine's slot time in the bucket that
its runs took, per outcome, and the share it was alive. Computed with numpy over every
run at once, so a chart of a million tasks costs seconds, not a drawn bar per task."""

from __future__ import annotations

from dataclasses import dataclass
from operator import attrgetter

import numpy as np

from autoscaler.core.state import RunState

OUTCOMES = ("done", "failed", "cancelled", "lost")


@dataclass(frozen=True, slots=True)
class Activity:
    """Shares of each bucket, per machine row (``machines``, in row order)."""

    machines: list[str]
    types: list[str]  # each row's machine type
    bucket_s: float
    alive: np.ndarray  # rows × buckets: share of the bucket the machine was alive
    busy: dict[str, np.ndarray]  # outcome -> rows × buckets: share of its slot time


def covered(
    rows: np.ndarray, starts: np.ndarray, ends: np.ndarray, n_rows: int, n_buckets: int
) -> np.ndarray:
    """Time covered by intervals [start, end) (in bucket units) per row and bucket.

    The covered time up to x is Σ (x − s) over intervals begun before x, less Σ (x − e)
    over those ended before x: a slope and an intercept that change at each interval's
    first bucket edge after its start and after its end, summed along the row."""
    width = n_buckets + 2
    s_edge = np.clip(np.ceil(starts).astype(np.int64), 0, width - 1)
    e_edge = np.clip(np.ceil(ends).astype(np.int64), 0, width - 1)
    # Summed per cell with bincount over flat cell numbers (np.add.at is many times slower
    # on a million runs).
    cells = n_rows * width
    at_start, at_end = rows * width + s_edge, rows * width + e_edge
    slope = np.bincount(at_start, minlength=cells).astype(float)
    slope -= np.bincount(at_end, minlength=cells)
    icpt = np.bincount(at_end, weights=ends, minlength=cells)
    icpt -= np.bincount(at_start, weights=starts, minlength=cells)
    slope, icpt = slope.reshape(n_rows, width), icpt.reshape(n_rows, width)
    edges = np.arange(width, dtype=float)
    upto = np.cumsum(slope, axis=1) * edges + np.cumsum(icpt, axis=1)
    return np.diff(upto[:, : n_buckets + 1], axis=1)


def activity(state: RunState, buckets: int) -> Activity:
    """Each machine's life and runs over ``buckets`` equal buckets of the run's time,
    machines ordered by type, then launch time."""
    machines = sorted(state.fleet.machines.values(), key=lambda m: (m.type.name, m.launched_at))
    row_of = {m.id: i for i, m in enumerate(machines)}
    span = max(state.now, 1.0)
    bucket_s = span / buckets
    n = len(machines)
    life_start = np.array([m.launched_at for m in machines], dtype=float) / bucket_s
    life_end = np.array(
        [m.ended_at if m.ended_at is not None else state.now for m in machines], dtype=float
    )
    alive = covered(np.arange(n), life_start, life_end / bucket_s, n, buckets)
    slots = np.array([max(1, m.type.slots) for m in machines], dtype=float)[:, None]
    segs = state.tasks.segments
    n_segs = len(segs)  # a million runs: map and attrgetter, not generators
    machine, start, end, how = (attrgetter(f) for f in ("machine", "start", "end", "outcome"))
    rows = np.fromiter(map(row_of.__getitem__, map(machine, segs)), np.int64, count=n_segs)
    starts = np.fromiter(map(start, segs), dtype=float, count=n_segs) / bucket_s
    ends = np.fromiter(map(end, segs), dtype=float, count=n_segs) / bucket_s
    code = {name: i for i, name in enumerate(OUTCOMES)}
    outcome = np.fromiter((code.get(o, -1) for o in map(how, segs)), dtype=np.int8, count=n_segs)
    busy = {}
    for name in OUTCOMES:
        pick = outcome == code[name]
        if not pick.any():  # most runs have no failed or lost run: no pass over every cell
            busy[name] = np.zeros((n, buckets))
            continue
        busy[name] = covered(rows[pick], starts[pick], ends[pick], n, buckets) / slots
    return Activity(
        [m.id for m in machines], [m.type.name for m in machines], bucket_s, alive, busy
    )

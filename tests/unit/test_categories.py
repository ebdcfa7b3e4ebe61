"""Task categories (paper 004 §4.1–4.2): sorting by class intervals or labels, the
(category, type) metrics and the ratio rule, and which tasks to benchmark."""

from __future__ import annotations

import pytest

from autoscaler.categories.deployment import Observation, average, benchmark_tasks, fill
from autoscaler.categories.sort import (
    MISSING,
    ClassIntervals,
    Requirements,
    bin_of,
    by_label,
    categorise,
    category_of,
)

FIG3 = ClassIntervals(input_bytes=10, estimate_s=6, output_bytes=10)


def test_bins_follow_the_papers_class_intervals() -> None:
    """Fig. 3 with TFSize_CI = 10: [0, 15) is 0, [15, 25) is 1, [25, 35) is 2."""
    assert [bin_of(v, 10) for v in (0, 14.99, 15, 24.99, 25, 34.99, 35)] == [0, 0, 1, 1, 2, 2, 3]
    assert bin_of(None, 10) == MISSING
    assert bin_of(123, None) == 0


def test_three_levels_split_by_input_then_estimate_then_output() -> None:
    """Fig. 3's intervals: categories exist only where tasks fall, numbered by key."""
    tasks = {
        0: Requirements(5, 3, 5),  # (0, 0, 0)
        1: Requirements(12, 8, 5),  # (0, 0, 0): 12 < 15 and 8 < 9
        2: Requirements(16, 3, 5),  # (1, 0, 0)
        3: Requirements(5, 10, 5),  # (0, 1, 0): 9 <= 10 < 15
        4: Requirements(5, 3, 20),  # (0, 0, 1)
        5: Requirements(30, 20, 40),  # (2, 2, 3)
    }
    cats = categorise(tasks, FIG3)
    assert [(c.key, c.tasks) for c in cats] == [
        ((0, 0, 0), (0, 1)),
        ((0, 0, 1), (4,)),
        ((0, 1, 0), (3,)),
        ((1, 0, 0), (2,)),
        ((2, 2, 3), (5,)),
    ]
    assert [c.id for c in cats] == [0, 1, 2, 3, 4]
    first = cats[0]
    assert (first.avg_input_bytes, first.avg_estimate_s, first.avg_output_bytes) == (8.5, 5.5, 5)
    assert category_of(cats)[4] == 1


def test_same_bag_in_another_order_gives_the_same_ids() -> None:
    tasks = {i: Requirements(i * 7 % 50, i % 13, i * 3 % 40) for i in range(60)}
    shuffled = dict(sorted(tasks.items(), key=lambda kv: -kv[0]))
    assert categorise(tasks, FIG3) == categorise(shuffled, FIG3)


def test_missing_requirements_sort_first_and_are_left_out_of_the_means() -> None:
    tasks = {0: Requirements(None, 3, 5), 1: Requirements(5, None, 5), 2: Requirements(5, 3, 5)}
    cats = categorise(tasks, FIG3)
    assert [c.key for c in cats] == [(MISSING, 0, 0), (0, MISSING, 0), (0, 0, 0)]
    assert cats[0].avg_input_bytes is None


def test_by_label() -> None:
    tasks = {0: Requirements(label="b"), 1: Requirements(label="a"), 2: Requirements(label="b")}
    assert [(c.key, c.tasks) for c in by_label(tasks)] == [("a", (1,)), ("b", (0, 2))]


def test_class_intervals_must_be_positive() -> None:
    with pytest.raises(ValueError, match="estimate_s"):
        ClassIntervals(estimate_s=0)


def test_benchmark_two_tasks_of_the_largest_fifth_per_type() -> None:
    """The paper: 17 categories, 3 dominant ones, 2 tasks each on each of 5 resources."""
    sizes = [330, 64, 20, 6, 22, 12, 12, 10, 10, 10, 8, 10, 16, 12, 8, 10, 8]
    tasks: dict[int, Requirements] = {}
    for k, n in enumerate(sizes):
        for _ in range(n):
            tasks[len(tasks)] = Requirements(label=f"{k:02d}")
    cats = by_label(tasks)
    chosen = benchmark_tasks(cats, ["R0", "R1", "R2", "R3", "R4"])
    assert sorted({k for picks in chosen.values() for _, k in picks}) == [0, 1, 4]
    assert all(len(picks) == 6 for picks in chosen.values())
    every = [t for picks in chosen.values() for t, _ in picks]
    assert len(every) == len(set(every)) == 30


def _obs(k: int, t: str, cpu: float, transfer: float, cost: float) -> Observation:
    return Observation(k, t, cpu, cpu + 2, transfer, cpu + 2 + transfer + 5, cost)


def test_average_per_category_and_type() -> None:
    got = average([_obs(0, "a", 10, 1, 100), _obs(0, "a", 20, 3, 200), _obs(1, "a", 5, 1, 50)])
    assert got[0, "a"].cpu_s == 15
    assert got[0, "a"].turnaround_s == 15 + 2 + 2 + 5
    assert got[1, "a"].cost == 50


def test_unmeasured_categories_scale_by_the_ratio_of_the_measured() -> None:
    """§4.2: CPU time and cost scale with the mean estimate, transfer with the bytes;
    the overheads are the measured ones'."""
    cats = categorise(
        {0: Requirements(100, 10, 100), 1: Requirements(100, 20, 300), 2: Requirements(9, 3, 9)},
        ClassIntervals(estimate_s=6),  # levels 1 and 3 not split: three estimate bins
    )
    ten, twenty = category_of(cats)[0], category_of(cats)[1]
    measured = average([_obs(ten, "a", 5, 2, 50)])  # half the estimate, 0.01 s per byte
    got = fill(measured, cats, ["a", "b"])
    assert got[ten, "a"].measured
    assert not got[twenty, "a"].measured
    other = got[twenty, "a"]
    assert other.cpu_s == pytest.approx(10)
    assert other.cost == pytest.approx(100)
    assert other.transfer_s == pytest.approx(4)
    assert other.wall_s == pytest.approx(12)
    assert other.turnaround_s == pytest.approx(4 + 12 + 5)
    assert other.space_bytes == 400
    assert not any(t == "b" for _, t in got)  # nothing measured on b: no metrics

"""Runtime estimation against the formulas of paper 000 §2.1."""

from __future__ import annotations

import math

import pytest

from autoscaler.estimate import RuntimeStats, initial_workers, sample_size, tasks_within


def test_sample_size_of_the_papers_setting_is_30() -> None:
    """N = 1000, z = 1.96, Δ = 0.25 gives n = 30 (paper 000 §3)."""
    assert sample_size(1000, 1.96, 0.25) == 30


def test_sample_size_follows_the_formula_for_small_bags() -> None:
    """n = ⌈N·z²/(z² + 2(N−1)Δ²)⌉ where that is below the bound."""
    z, delta = 1.96, 0.25
    for n_tasks in (1, 2, 10, 50, 200):
        expected = math.ceil(n_tasks * z * z / (z * z + 2 * (n_tasks - 1) * delta**2))
        assert sample_size(n_tasks, z, delta) == min(expected, 31)


def test_sample_size_is_bounded_for_huge_bags() -> None:
    """n never exceeds ⌈z²/(2Δ²)⌉ (31 for the defaults; 34 for z = 2.58, Δ = 0.3125)."""
    assert sample_size(10**9, 1.96, 0.25) == math.ceil(1.96**2 / (2 * 0.25**2))
    assert sample_size(10**9, 2.58, 0.25) == math.ceil(2.58**2 / (2 * 0.25**2))


def test_sample_size_rejects_an_empty_bag() -> None:
    with pytest.raises(ValueError, match="n_tasks"):
        sample_size(0)


def test_initial_workers_is_min_of_a_tenth_of_the_bag_and_the_sample() -> None:
    """iw = min(N/10, n), at least one (paper 000 §2.3)."""
    assert initial_workers(1000, 30) == 30
    assert initial_workers(200, 27) == 20
    assert initial_workers(5, 5) == 1


def test_tail_estimate_is_the_mean_of_longer_sample_runtimes() -> None:
    """τ_e = mean of the sample's runtimes above the elapsed time τ."""
    stats = RuntimeStats(sample_target=4)
    for runtime in (10.0, 20.0, 30.0, 40.0):
        stats.record(runtime)
    assert stats.tail_estimate(0.0) == pytest.approx(25.0)
    assert stats.tail_estimate(15.0) == pytest.approx(30.0)
    assert stats.tail_estimate(35.0) == pytest.approx(40.0)
    assert stats.tail_estimate(50.0) == pytest.approx(50.0)  # outlived the sample


def test_moving_average_counts_running_tasks_by_their_tail_estimate() -> None:
    """T_i = (Σ τ_e of running tasks + rt_done) / (running + done)."""
    stats = RuntimeStats(sample_target=3)
    for runtime in (10.0, 20.0, 30.0):
        stats.record(runtime)
    stats.record(60.0)  # beyond the sample: in the average, not in the sample
    assert stats.sample == [10.0, 20.0, 30.0]
    # One running task at τ = 25 is expected to take 30.
    assert stats.mean([25.0]) == pytest.approx((10 + 20 + 30 + 60 + 30) / 5)


def test_sampled_once_the_target_is_reached() -> None:
    stats = RuntimeStats(sample_target=2)
    stats.record(1.0)
    assert not stats.sampled
    stats.record(2.0)
    assert stats.sampled


def test_stddev_of_completed_runtimes() -> None:
    stats = RuntimeStats(sample_target=10)
    for runtime in (2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0):
        stats.record(runtime)
    assert stats.stddev() == pytest.approx(2.138089935299395)


def test_capacity_loses_half_a_task_at_the_horizon() -> None:
    """Without spread, one machine does h/T − ½ tasks in h (the final-unit cushion)."""
    assert tasks_within(3600.0, 900.0, 0.0, 0.0) == pytest.approx(3.5)
    assert tasks_within(0.0, 900.0, 0.0, 0.0) == 0.0


def test_capacity_shrinks_with_spread_when_asked_to_be_cautious() -> None:
    plain = tasks_within(3600.0 * 4, 900.0, 134.0, 0.0)
    cautious = tasks_within(3600.0 * 4, 900.0, 134.0, 1.0)
    assert cautious < plain
    # m·T + z·√m·σ = h at m + ½.
    m = cautious + 0.5
    assert m * 900.0 + math.sqrt(m) * 134.0 == pytest.approx(3600.0 * 4)

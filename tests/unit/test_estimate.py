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


def test_a_running_task_counts_as_censored_not_as_its_tail_estimate() -> None:
    """Kaplan–Meier by hand: done 10, 20, 30, 60 and one run still going at 25.

    S drops by 1/5 at 10 and at 20 (5 and 4 at risk: S = 0.8, 0.6); the run at 25 leaves
    the risk set; 30 and 60 then take S to 0.6·(1/2) = 0.3 and to 0. The mean is the
    area under S: 10·1 + 10·0.8 + 10·0.6 + 30·0.3 = 33 (the plain mean of what finished
    would be 30; the running task, at least 25 long, pulls it up).
    """
    stats = RuntimeStats(sample_target=3)
    for runtime in (10.0, 20.0, 30.0, 60.0):
        stats.record(runtime)
    assert stats.mean([25.0]) == pytest.approx(33.0)
    assert stats.mean() == pytest.approx(30.0)


def test_sampled_once_all_but_a_tenth_of_the_sample_set_has_ended() -> None:
    """The sample set is the first n tasks started; the last 10 % may still run."""
    stats = RuntimeStats(sample_target=10)
    for task in range(12):
        stats.start(task)
    assert stats.sample == list(range(10))
    for task in range(8):
        stats.record(5.0, task)
    stats.record(1.0, 11)  # not in the sample set: counts, but does not complete it
    assert not stats.sampled
    stats.censor(3.0, 8)  # cut off: it ended, without a result
    assert stats.sampled  # one of ten still open


def test_stddev_of_completed_runtimes() -> None:
    """With every run ended the survival curve is the empirical distribution."""
    stats = RuntimeStats(sample_target=10)
    for runtime in (2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0):
        stats.record(runtime)
    assert stats.mean() == pytest.approx(5.0)
    assert stats.stddev() == pytest.approx(2.0)


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

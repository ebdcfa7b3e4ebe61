"""Runtime estimation against the formulas of paper 000 §2.1."""

from __future__ import annotations

import heapq
import math
import random
from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autoscaler.learn.ragged import ragged_end
from autoscaler.learn.stats import RuntimeStats, initial_workers, sample_size, tasks_within
from autoscaler.learn.survival import Survival, estimate_runtime, hill_alpha, skew_shift


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


# --- unbiased on skewed runtimes ----------------------------------------------------------

DISTRIBUTIONS: dict[str, Callable[[random.Random], float]] = {
    "normal": lambda r: max(1.0, r.gauss(600, 240)),
    "lognormal σ=1": lambda r: r.lognormvariate(math.log(600) - 0.5, 1.0),
    "bimodal": lambda r: r.gauss(1800, 180) if r.random() < 0.2 else r.gauss(300, 30),
    "pareto α=2.5": lambda r: 360 * r.paretovariate(2.5),  # mean 360·2.5/1.5 = 600
    "weibull k=0.7": lambda r: r.weibullvariate(600 / math.gamma(1 + 1 / 0.7), 0.7),
}


def sampling_phase(
    draw: Callable[[random.Random], float], rng: random.Random, machines: int = 30, n: int = 30
) -> tuple[RuntimeStats, list[float], float]:
    """The sampling phase of one type as the controller sees it: ``machines`` machines
    take tasks in the bag's random order, one at a time, until all but a tenth of the
    sample set (the first ``n`` started) has ended. Returns the stats then, the ages of
    the runs still going, and the plain mean of the first ``n`` to finish (the old,
    biased sample)."""
    stats = RuntimeStats(sample_target=n)
    runtimes = [draw(rng) for _ in range(2000)]
    busy: list[tuple[float, int, float]] = []  # (end, task, start)
    next_task = 0
    for _ in range(machines):
        stats.start(next_task)
        heapq.heappush(busy, (runtimes[next_task], next_task, 0.0))
        next_task += 1
    first_done: list[float] = []
    while not stats.sampled:
        end, task, start = heapq.heappop(busy)
        stats.record(end - start, task)
        first_done.append(end - start)
        stats.start(next_task)
        heapq.heappush(busy, (end + runtimes[next_task], next_task, end))
        next_task += 1
        now = end
    ages = [now - start for _, _, start in busy]
    return stats, ages, sum(first_done[:n]) / n


@pytest.mark.parametrize("name", list(DISTRIBUTIONS))
@settings(max_examples=2, deadline=None, derandomize=True)
@given(seed=st.integers(0, 2**32 - 1))
def test_the_estimate_from_a_random_sample_is_unbiased_where_first_finishers_are_not(
    name: str, seed: int
) -> None:
    """Over 30 sampling phases the mean estimate is within 15 % of the true mean 600 on
    every distribution, and its interval holds the truth in most of them; the mean of
    the first n to finish (the estimate before) is off by more on the skewed ones.

    15 %, not less: the exponential tail past the longest run seen is a model, and on
    heavy tails (lognormal, Weibull k < 1) it is short by up to about 10 % at the end
    of sampling; the naive mean is short by 30–50 % there.

    The seeds are fixed (``derandomize``): the interval's coverage on Pareto α = 2.5 is
    about 82 % (600 sampling phases), below its nominal 95 %, so "18 of 30" fails for
    about one seed in a thousand, and hypothesis's search once found such a seed
    (134217728). The under-coverage on heavy tails is known, not something to retry.
    """
    rng = random.Random(seed)
    draw = DISTRIBUTIONS[name]
    truth = 600.0
    estimates, naive, covered = [], [], 0
    for _ in range(30):
        stats, ages, first_n = sampling_phase(draw, rng)
        e = stats.estimate(ages, resamples=100)
        estimates.append(e.mean_s)
        naive.append(first_n)
        covered += e.lo_s <= truth <= e.hi_s
    mean = sum(estimates) / len(estimates)
    assert abs(mean / truth - 1) < 0.15, f"{name}: mean estimate {mean:.0f}"
    assert covered >= 18, f"{name}: the interval held the truth in {covered} of 30"
    if name != "normal":
        naive_mean = sum(naive) / len(naive)
        assert abs(naive_mean / truth - 1) > abs(mean / truth - 1), name


def test_the_last_end_of_constant_tasks_is_the_latest_start_plus_the_runtime() -> None:
    """Runtime 100 s always; 10 tasks start at F − v, v uniform on [E_eq, span] =
    [50, 1000]: the last ends at F + 100 − min v, and E[min v] = 50 + 950/11, so the
    expected excess over the fluid end F is 100 − 50 − 950/11 ≈ −36.4 s, and it is
    never above 50 s."""
    stats = RuntimeStats(sample_target=5)
    for _ in range(20):
        stats.record(100.0)
    end = ragged_end(1000.0, [(stats, 10.0)])
    assert end.mean_s == pytest.approx(100 - 50 - 950 / 11, abs=2.0)
    assert end.hi_s <= 50.0 + 1.0
    assert end.lo_s < end.mean_s < end.hi_s


def test_runs_still_going_lengthen_the_extreme_tail_as_censored_runs() -> None:
    """Ended runs 1..8 s: the tail is fitted on the 4 longest above u = 4 s (half of
    them). A run still going at 11 s is an exceedance without an end: the tail's mean
    residual life grows. One at 3 s, below u, leaves the tail as it is. The mean and
    spread are T_i's with both runs censored."""
    stats = RuntimeStats(sample_target=8)
    for runtime in range(1, 9):
        stats.record(float(runtime))
    ended = stats.extreme_curve()
    assert ended.times[-1] == pytest.approx(4.0)
    going = stats.extreme_curve([11.0, 3.0])
    assert going.times[-1] == pytest.approx(4.0)
    assert going.mrl > ended.mrl
    assert stats.extreme_curve([3.0]).mrl == pytest.approx(ended.mrl)
    assert going.mean_s == pytest.approx(stats.mean([11.0, 3.0]))
    assert going.sd_s == pytest.approx(stats.stddev([11.0, 3.0]))
    assert going.mean_s > stats.mean()


def test_a_long_running_task_ends_after_the_tails_residual_life_at_its_age() -> None:
    """Nothing left to start, one task running for 5000 s (200 exponential runs ended,
    mean 600 s), at the fluid end (span 0): its expected end is the generalized Pareto
    tail's mean residual life at that age, (σ + ξ·(5000 − u))/(1 − ξ), and its median
    lies between the interval's ends, below the mean (the residual is right-skewed)."""
    stats = RuntimeStats(sample_target=5)
    rng = random.Random(3)
    for _ in range(200):
        stats.record(rng.expovariate(1 / 600))
    curve = stats.extreme_curve([5000.0])
    xi, u = curve.xi, curve.times[-1]
    sigma = curve.mrl * (1 - xi)
    end = ragged_end(0.0, [], [(stats, 5000.0)])
    assert end.mean_s == pytest.approx((sigma + xi * (5000.0 - u)) / (1 - xi), rel=0.01)
    assert end.lo_s < end.median_s < end.mean_s < end.hi_s


def test_without_running_tasks_the_end_is_the_ended_runs_alone() -> None:
    """No task runs: both curves are the ended runs', and the end is what it was."""
    stats = RuntimeStats(sample_target=5)
    rng = random.Random(4)
    for _ in range(100):
        stats.record(rng.lognormvariate(6.0, 1.0))
    end = ragged_end(2000.0, [(stats, 50.0)])
    assert end.lo_s < end.mean_s < end.hi_s
    assert ragged_end(2000.0, [(stats, 50.0)], [(stats, 10.0)]).mean_s >= end.mean_s


def test_hill_index_of_pareto_runtimes() -> None:
    """Hill's estimate on 4000 Pareto(α = 2.5) runtimes is near 2.5 (top quarter)."""
    rng = random.Random(11)
    times = np.sort(np.asarray([360 * rng.paretovariate(2.5) for _ in range(4000)]))
    alpha = hill_alpha(times, np.ones(len(times), dtype=bool))
    assert alpha == pytest.approx(2.5, rel=0.1)


def test_a_right_skewed_sample_moves_the_upper_end_of_the_mean_out() -> None:
    """Johnson's correction: a Pareto sample's interval reaches further above the mean
    than the bootstrap alone; a symmetric sample's is left as it is."""
    rng = np.random.default_rng(3)
    heavy = 300.0 * (1.0 + rng.pareto(2.5, size=40))
    shift = skew_shift(heavy, float(np.std(heavy)), len(heavy), 1.96)
    assert shift > 0.0
    e = estimate_runtime(Survival.of(heavy.tolist(), []))
    assert e.hi_s - e.mean_s > e.mean_s - e.lo_s
    even = np.asarray([100.0, 200.0, 300.0, 400.0, 500.0])
    assert skew_shift(even, float(np.std(even)), len(even), 1.96) == 0.0


def test_runs_still_going_past_every_end_open_the_interval_s_slow_end() -> None:
    """A bimodal bag sampled before its long mode ends: 24 short runs (about 300 s)
    ended, 6 long ones still going at 740 s. The tail past the longest end is read
    from the hazard of the longest runs, ended and going; the slow end lets each run
    still going last up to as long again as it has: the share left (6 of 30) times
    740 s less that tail's residual life. Once a run past the others ends, nothing is
    added."""
    rng = random.Random(3)
    stats = RuntimeStats(30)
    for _ in range(24):
        stats.record(rng.gauss(300.0, 30.0))
    going = [740.0] * 6
    e = stats.estimate(going)
    left = 6 / 30
    assert 0.0 < e.open_s <= left * 740.0
    assert stats.estimate(going, resamples=0).open_s == 0.0  # no interval asked for
    stats.record(1800.0)  # a long one ended: the tail past it is no longer unseen
    assert stats.estimate(going[1:]).open_s == 0.0

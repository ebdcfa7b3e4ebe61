"""The tail a first plan fits while the longest runs of a type still go (issue 22 §2).

A sample as the controller has it when it makes its first plan: machines run tasks back
to back from the start, the plan is made once all but a tenth of the sample set (the
first tasks started) have ended, and the runs still going are censored at their ages.
On skewed runtimes the longest of them are the ones still going, so nothing seen shows
where the runtimes stop; a tail fitted with an end there (a generalized Pareto of shape
ξ < 0) cut the longest of many runs to a fraction of its size.
"""

from __future__ import annotations

import heapq
import math

import numpy as np
import pytest

from autoscaler.learn.gpd import Gpd, unbounded
from autoscaler.learn.ragged import ragged_end
from autoscaler.learn.stats import SAMPLE_OPEN_SHARE, RuntimeStats
from tests.unit.test_tail_max import DRAWS

MACHINES = 20  # machines sampling one type (initial workers, capped by max_count)
SAMPLE = 30  # the sample set (sample size at N = 1000, Δ = 0.25)
TASKS = 200  # the longest of this many
SEEDS = 100


def first_plan(runtimes: np.ndarray) -> tuple[list[float], list[float]]:
    """The runtimes ended and the ages of the runs going when the first plan is made:
    ``runtimes`` start in order on the first machine free, and the plan comes at the
    first end after which all but ``SAMPLE_OPEN_SHARE`` of the first ``SAMPLE`` ended."""
    need = SAMPLE - math.floor(SAMPLE_OPEN_SHARE * SAMPLE)
    free = [(0.0, m) for m in range(MACHINES)]
    starts: list[float] = []
    for runtime in runtimes:
        now, m = heapq.heappop(free)
        if len(starts) >= SAMPLE:
            ended = sum(s + r <= now for s, r in zip(starts[:SAMPLE], runtimes, strict=False))
            if ended >= need:
                break
        starts.append(now)
        heapq.heappush(free, (now + float(runtime), m))
    else:
        raise AssertionError("the sample set did not end within the runtimes drawn")
    ended_runs = [float(r) for s, r in zip(starts, runtimes, strict=False) if s + r <= now]
    going = [now - s for s, r in zip(starts, runtimes, strict=False) if s + r > now]
    return ended_runs, going


def sampled(runtimes: np.ndarray) -> tuple[RuntimeStats, bool]:
    """The stats of a first plan's sample (runs going censored at their ages), and
    whether a run still goes at or past the longest run seen to end."""
    ended, going = first_plan(runtimes)
    stats = RuntimeStats(sample_target=SAMPLE)
    for t in ended:
        stats.record(t)
    for age in going:
        stats.censor(age)
    return stats, bool(going) and max(going) >= max(ended)


@pytest.mark.parametrize("name", list(DRAWS))
def test_no_tail_with_an_end_while_runs_still_go_past_the_longest_end(name: str) -> None:
    """Over 100 first-plan samples, the curve for the longest of many runs never has a
    tail with an end (ξ < 0) where a run still goes past every run seen to end. Before,
    lognormal σ 1 samples fitted one in 31 of 100, Weibull k 0.7 in 34, Pareto α 2.5
    and bimodal bags in some."""
    draw = DRAWS[name]
    checked = 0
    for seed in range(SEEDS):
        stats, open_top = sampled(draw(np.random.default_rng(seed), 400))
        if open_top:
            checked += 1
            assert stats.extreme_curve().xi >= 0, f"{name}, seed {seed}"
    assert checked >= SEEDS // 2  # most first plans have runs going past the longest end


@pytest.mark.parametrize("name", ["lognormal σ 1", "weibull k 0.7"])
def test_the_longest_of_many_is_seldom_cut_to_a_fraction_of_its_size(name: str) -> None:
    """Over 100 first-plan samples, the ragged end's median for the longest of 200 runs
    is below 0.4 of the true median (Monte Carlo, 20,000 bags) in at most a fifth of
    them; a tail with an end put 30 % of lognormal σ 1 samples and 23 % of Weibull k 0.7
    ones there (now 14 % and 5 %)."""
    draw = DRAWS[name]
    truth = float(np.median(draw(np.random.default_rng(2026), (20_000, TASKS)).max(axis=1)))
    short = 0
    for seed in range(SEEDS):
        stats, _ = sampled(draw(np.random.default_rng(seed), 400))
        short += ragged_end(0.0, [(stats, float(TASKS))]).median_s < 0.4 * truth
    assert short <= SEEDS // 5, f"{name}: {short} of {SEEDS}"


def test_a_tail_with_an_end_becomes_the_exponential_that_fits_its_exceedances() -> None:
    """``unbounded`` keeps a tail without an end as it is; one with an end becomes the
    exponential whose mean is the exceedances' exposure per end (runs going counted as
    censored: the maximum-likelihood mean)."""
    heavy, bounded = Gpd(0.2, 100.0), Gpd(-0.5, 300.0)
    ended, going = np.array([50.0, 100.0, 150.0]), np.array([200.0])
    assert unbounded(heavy, ended, going) is heavy
    assert unbounded(Gpd(0.0, 80.0), ended, going) == Gpd(0.0, 80.0)
    assert unbounded(bounded, ended, going) == Gpd(0.0, 500.0 / 3)
    assert unbounded(bounded, ended) == Gpd(0.0, 100.0)

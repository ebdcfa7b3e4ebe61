"""T_i with the running tasks censored at their ages, as a monitor asks for it at every
tick past ``EXACT_UP_TO`` ended runs (``RuntimeStats.estimate``): worked out on the kept
sorted arrays, the runtimes seen to end passed along rather than picked out of the
merged runs again, it must be the number a computation from scratch gives, to the bit
(a float moved by rounding would move a decision)."""

from __future__ import annotations

import random

import numpy as np
import pytest

from autoscaler.learn.stats import EXACT_UP_TO, RuntimeStats, tail_estimates
from autoscaler.learn.survival import (
    hill_alpha,
    kaplan_meier,
    km_moments,
    merged,
    tail_moments,
)
from tests.unit.draws import draw_runtime


def scratch_moments(done: list[float], censored: list[float]) -> tuple[float, float]:
    """T_i and its spread as computed before the arrays were kept: pairs sorted in
    Python, Kaplan–Meier with a row of ones (at-risk counts by a cumulative sum), the
    steps of t and t² against the previous time, the tail on the weighted path."""
    pairs = sorted([(t, False) for t in done] + [(t, True) for t in censored])
    t_arr = np.asarray([t for t, _ in pairs], dtype=float)
    e_arr = np.asarray([not c for _, c in pairs], dtype=bool)
    ones = np.ones(len(t_arr))
    after, before = kaplan_meier(t_arr, e_arr, ones)
    prev = np.concatenate([[0.0], t_arr[:-1]])
    mean = (before * (t_arr - prev)).sum(axis=1)
    second = (before * (t_arr**2 - prev**2)).sum(axis=1)
    mrl, _, tail_second = tail_moments(t_arr, e_arr, ones, mean)
    m = float((mean + after[:, -1] * mrl)[0])
    s2 = float((second + after[:, -1] * tail_second)[0])
    return m, float(np.sqrt(max(0.0, s2 - m**2)))


def _runs(draw: str, seed: int, n: int) -> tuple[list[float], list[float]]:
    rng = random.Random(seed)
    done: list[float] = []
    censored: list[float] = []
    for _ in range(n):
        (censored if rng.random() < 0.15 else done).append(draw_runtime(rng, draw))
    return done or [1.0], censored


@pytest.mark.parametrize("draw", ["normal", "pareto", "lognormal"])
@pytest.mark.parametrize("n", [1, 2, 5, 130, 1025, 20_000])
def test_the_ends_passed_along_give_the_same_tail_and_moments(draw: str, n: int) -> None:
    """``tail_moments``, ``hill_alpha`` and ``km_moments`` given the sorted ends
    (``times[events]``) are what they give picking those out themselves, and
    ``km_moments`` is the computation from scratch."""
    done, censored = _runs(draw, n, n)
    times, events = merged(done, censored)
    ended = np.sort(np.asarray(done))
    restricted = np.array([float(np.mean(times))])
    got = tail_moments(times, events, None, restricted, ended)
    want = tail_moments(times, events, None, restricted)
    for g, w in zip(got, want, strict=True):
        assert np.asarray(g).tolist() == np.asarray(w).tolist()
    assert hill_alpha(times, events, ended) == hill_alpha(times, events)
    for g, w in zip(km_moments(times, events, None, ended), km_moments(times, events), strict=True):
        assert g.tolist() == w.tolist()
    mean, second = km_moments(times, events)
    sd = float(np.sqrt(max(0.0, float(second[0]) - float(mean[0]) ** 2)))
    assert (float(mean[0]), sd) == scratch_moments(done, censored)


@pytest.mark.parametrize("draw", ["normal", "pareto", "lognormal"])
@pytest.mark.parametrize("seed", [0, 1])
def test_t_i_with_running_tasks_is_the_computation_from_scratch(draw: str, seed: int) -> None:
    """Past ``EXACT_UP_TO``, as runs end (some censored) and others run (censored at
    their ages, skewed runtimes included), T_i and its spread are those from scratch on
    the ended runs and the running ones' ages, bit for bit; and τ_e of many ages at once
    is τ_e of each (the curve kept as arrays, its lists made only when asked)."""
    rng = random.Random(100 + seed)
    stats = RuntimeStats(sample_target=30)
    done: list[float] = []
    censored: list[float] = []
    checked = 0
    for i in range(EXACT_UP_TO + 700):
        t = draw_runtime(rng, draw)
        if rng.random() < 0.1:
            stats.censor(t, i)
            censored.append(t)
        else:
            stats.record(t, i)
            done.append(t)
        if i < EXACT_UP_TO - 5 or rng.random() > 0.05:
            continue
        going = [draw_runtime(rng, draw) * rng.random() for _ in range(rng.randrange(0, 60))]
        e = stats.estimate(going, resamples=0)
        assert (e.mean_s, e.sd_s) == scratch_moments(done, [*censored, *going])
        assert (e.done, e.censored) == (len(done), len(censored) + len(going))
        ages = np.asarray([rng.uniform(0.0, 3.0 * max(done)) for _ in range(20)])
        assert tail_estimates(stats, ages).tolist() == [stats.tail_estimate(a) for a in ages]
        checked += 1
    assert checked > 20


def test_a_changed_run_changes_t_i() -> None:
    """A check that the comparison can fail: one ended run longer moves T_i."""
    done, censored = _runs("normal", 3, 2000)
    before = scratch_moments(done, censored)
    done[0] += 1.0
    assert scratch_moments(done, censored) != before

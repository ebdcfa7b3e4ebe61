"""The runtime estimate a controller asks for on every dispatch is kept between runs'
ends (``RuntimeStats``): it must be what a computation from scratch gives."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from autoscaler.learn import stats as stats_module
from autoscaler.learn.curve import Curve, threshold_curve
from autoscaler.learn.stats import EXACT_UP_TO, STALE_SHARE, RuntimeStats
from autoscaler.learn.survival import (
    RuntimeEstimate,
    Survival,
    estimate_runtime,
    kaplan_meier,
    tail_moments,
)

AGES = (0.5, 10.0, 300.0, 900.0, 2500.0, 1e5)


def scratch_curve(done: list[float], censored: list[float]) -> Curve:
    """The survival curve as it was computed on every call before it was kept: pairs
    sorted in Python, one loop for the area."""
    pairs = sorted([(t, False) for t in done] + [(t, True) for t in censored])
    surv = Survival(tuple(t for t, _ in pairs), tuple(not c for _, c in pairs))
    whole = estimate_runtime(surv, resamples=0)
    t_arr = np.asarray(surv.times, dtype=float)
    e_arr = np.asarray(surv.events, dtype=bool)
    ones = np.ones(len(t_arr))
    after, before = kaplan_meier(t_arr, e_arr, ones)
    prev = np.concatenate([[0.0], t_arr[:-1]])
    restricted = (before * (t_arr - prev)).sum(axis=1)
    mrls, index, _ = tail_moments(t_arr, e_arr, ones, restricted)
    times, s_after = list(surv.times), [float(v) for v in after[0]]
    area = [0.0] * len(times)
    for j in range(len(times) - 2, -1, -1):
        area[j] = area[j + 1] + s_after[j] * (times[j + 1] - times[j])
    return Curve(times, s_after, area, float(mrls[0]), float(index[0]), whole.mean_s, whole.sd_s)


def scratch_extreme(done: list[float], censored: list[float]) -> Curve:
    """The curve for the longest of many runs, from scratch."""
    want = scratch_curve(done, censored)
    pairs = sorted([(t, False) for t in done] + [(t, True) for t in censored])
    t_arr = np.asarray([t for t, _ in pairs], dtype=float)
    e_arr = np.asarray([not c for _, c in pairs], dtype=bool)
    whole = RuntimeEstimate(want.mean_s, want.sd_s, want.mean_s, want.mean_s, 0, 0)
    return threshold_curve(t_arr, e_arr, want.times, want.s_after, whole) or want


def scratch_stats(done: list[float], censored: list[float]) -> RuntimeStats:
    fresh = RuntimeStats(sample_target=30)
    for t in done:
        fresh.record(t)
    for t in censored:
        fresh.censor(t)
    return fresh


def observations(seed: int, n: int) -> list[tuple[float, bool]]:
    """Lognormal runtimes, a tenth of them censored, ties included."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        t = round(rng.lognormvariate(6.0, 1.0), 0 if rng.random() < 0.2 else 6)
        out.append((t, rng.random() >= 0.1))
    return out


@pytest.mark.parametrize("seed", [0, 1])
def test_kept_estimate_equals_a_computation_from_scratch_bit_for_bit(seed: int) -> None:
    """Up to EXACT_UP_TO runs, after every end (censored ones too), T_i, its spread, τ_e
    at several ages and the whole curve (with its max-of-many tail) are those computed
    from scratch, to the bit; asked in either order (mean first, or the curve first)."""
    stats = RuntimeStats(sample_target=30)
    done: list[float] = []
    censored: list[float] = []
    for i, (t, ended) in enumerate(observations(seed, 400)):
        if ended:
            stats.record(t)
            done.append(t)
        else:
            stats.censor(t)
            censored.append(t)
        if not done:
            continue
        if i % 2:
            mean, sd = stats.mean(), stats.stddev()
            curve = stats._survival_curve()
        else:
            curve = stats._survival_curve()
            mean, sd = stats.mean(), stats.stddev()
        want = scratch_curve(done, censored)
        assert curve == want
        if i % 7 == 0:  # a tail fit per end would make this test slow
            assert stats.extreme_curve() == scratch_extreme(done, censored)
        assert (mean, sd) == (want.mean_s, want.sd_s)
        fresh = scratch_stats(done, censored)
        assert [stats.tail_estimate(a) for a in AGES] == [fresh.tail_estimate(a) for a in AGES]
        assert stats.done_times == sorted(done)
        assert stats.censored_times == sorted(censored)


def test_with_running_tasks_the_estimate_is_from_scratch() -> None:
    """Running tasks' ages are not kept: T_i with them is the estimate over all runs."""
    stats = scratch_stats([100.0, 200.0, 300.0, 400.0], [50.0])
    running = [350.0, 500.0]
    want = estimate_runtime(Survival.of([100.0, 200.0, 300.0, 400.0], [50.0, *running]), 1.96, 0)
    assert stats.mean(running) == want.mean_s
    assert stats.stddev(running) == want.sd_s
    assert isinstance(stats.estimate(running), RuntimeEstimate)


def _scratch_mean(seen: list[tuple[float, bool]]) -> float:
    surv = Survival.of([t for t, e in seen if e], [t for t, e in seen if not e])
    return estimate_runtime(surv, resamples=0).mean_s


def test_past_exact_up_to_the_estimate_lags_a_bounded_share_of_runs() -> None:
    """Past EXACT_UP_TO, a kept T_i is the estimate from scratch over the runs it was
    built on, never more than STALE_SHARE of the runs behind, and rebuilt (exact again)
    once the lag would exceed that share."""
    stats = RuntimeStats(sample_target=30)
    seen: list[tuple[float, bool]] = []
    built = 0  # runs the kept estimate was built on
    rebuilds = 0
    for t, ended in [(100.0, True), *observations(7, EXACT_UP_TO + 400)]:
        if ended:
            stats.record(t)
        else:
            stats.censor(t)
        seen.append((t, ended))
        mean = stats.mean()
        if mean == _scratch_mean(seen):
            rebuilds += len(seen) > EXACT_UP_TO + 1 and len(seen) - built > 1
            built = len(seen)
            continue
        assert len(seen) > EXACT_UP_TO + 1, "inexact below EXACT_UP_TO"
        assert len(seen) - built <= built * STALE_SHARE
        assert mean == _scratch_mean(seen[:built])
    assert rebuilds >= 400 // math.ceil((EXACT_UP_TO + 400) * STALE_SHARE) - 1


def test_exact_up_to_can_be_raised_for_an_exact_estimate_everywhere(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With EXACT_UP_TO raised (the old path, kept callable for benchmarks), every
    estimate is exact, past the default threshold too."""
    monkeypatch.setattr(stats_module, "EXACT_UP_TO", 10**9)
    stats = RuntimeStats(sample_target=30)
    done = []
    for t, _ in observations(3, EXACT_UP_TO + 50):
        stats.record(t)
        done.append(t)
    assert stats.mean() == scratch_curve(done, []).mean_s


def test_equal_stats_compare_equal_whatever_was_read() -> None:
    """Two stats fed the same runs are equal, whether or not one was read (sorted)."""
    a, b = RuntimeStats(5), RuntimeStats(5)
    for t in (5.0, 3.0, 4.0):
        a.record(t)
        b.record(t)
    a.censor(2.0)
    b.censor(2.0)
    _ = a.done_times
    assert a == b
    b.record(1.0)
    assert a != b


def test_bootstrap_in_chunks_draws_the_same_interval(monkeypatch: pytest.MonkeyPatch) -> None:
    """The bootstrap drawn a few rows at a time (bounded memory) gives the interval
    drawn all at once, to the bit."""
    from autoscaler.learn import survival

    seen = observations(5, 300)
    surv = Survival.of([t for t, e in seen if e], [t for t, e in seen if not e])
    whole = estimate_runtime(surv)
    monkeypatch.setattr(survival, "BOOT_CELLS", 7 * 300)
    assert estimate_runtime(surv) == whole


def test_past_exact_up_to_the_monitors_estimate_is_exact_but_its_interval_kept() -> None:
    """Past EXACT_UP_TO, T_i and its spread with running tasks are those from scratch;
    the interval's distances from T_i are those of the last bootstrap, drawn again once
    STALE_SHARE more runs ended."""
    stats = RuntimeStats(sample_target=30)
    seen = observations(11, EXACT_UP_TO + 200)
    for t, ended in seen:
        stats.record(t) if ended else stats.censor(t)
    running = [50.0, 400.0, 2000.0]

    def scratch(upto: int) -> RuntimeEstimate:
        done = [t for t, e in seen[:upto] if e]
        cens = [t for t, e in seen[:upto] if not e]
        return estimate_runtime(Survival.of(done, [*cens, *running]))

    first = stats.estimate(running)
    assert first == scratch(len(seen))
    stats.record(700.0)
    seen.append((700.0, True))
    second = stats.estimate(running)
    want = scratch(len(seen))
    assert (second.mean_s, second.sd_s) == (want.mean_s, want.sd_s)
    assert second.hi_s - second.mean_s == first.hi_s - first.mean_s
    assert stats.mean(running) == want.mean_s
    for _ in range(math.ceil(len(seen) * STALE_SHARE)):
        stats.record(700.0)
        seen.append((700.0, True))
    assert stats.estimate(running) == scratch(len(seen))

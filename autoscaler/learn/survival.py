"""Runtimes as survival data (paper 000 §2.1, T_i): a Kaplan–Meier survival estimate
over every counted run, where runs that ended without a result or still run are
right-censored at their age, with an exponential (or, on heavy-tailed runtimes, a Pareto)
tail past the longest run seen; a bootstrap gives the mean's interval."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

RESAMPLES = 200


@dataclass(frozen=True, slots=True)
class Survival:
    """Runtimes seen on one type as survival data: done runs are events, runs that ended
    without a result (cancelled, cut off, lost, failed) or still run are right-censored.

    ``times`` is sorted, an event before a censoring at the same time (the usual
    Kaplan–Meier convention).
    """

    times: tuple[float, ...]
    events: tuple[bool, ...]

    @classmethod
    def of(cls, done: Iterable[float], censored: Iterable[float]) -> Survival:
        times, events = merged(done, censored)
        return cls(tuple(times.tolist()), tuple(events.tolist()))

    @property
    def n_events(self) -> int:
        return sum(self.events)


def merged(done: Iterable[float], censored: Iterable[float]) -> tuple[np.ndarray, np.ndarray]:
    """Times and events as arrays, sorted by time, an end before a censoring at the
    same time (the order of ``Survival``)."""
    return merged_sorted(_sorted(done), _sorted(censored))


def merged_sorted(d: np.ndarray, c: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``merged`` of float arrays already sorted (a kept one: ``learn.times.SortedTimes``),
    without the check; the times seen to end are ``d`` itself, where ``events`` is True."""
    if not len(c):
        return d, np.ones(len(d), dtype=bool)
    # Each censoring after the ends at its time and before the later ones.
    at = np.searchsorted(d, c, side="right") + np.arange(len(c))
    times = np.empty(len(d) + len(c))
    events = np.ones(len(times), dtype=bool)
    events[at] = False
    times[at] = c
    times[events] = d
    return times, events


def _sorted(values: Iterable[float]) -> np.ndarray:
    """``values`` as a sorted float array; an array already sorted is taken as it is
    (a kept one: ``learn.times.SortedTimes``), without a copy or a sort."""
    if isinstance(values, np.ndarray):
        a = values.astype(float, copy=False)
    else:
        a = np.asarray(values if isinstance(values, list) else list(values), dtype=float)
    return a if _ascending(a) else np.sort(a)


def _ascending(a: np.ndarray) -> bool:
    return len(a) < 2 or bool(np.all(a[1:] >= a[:-1]))


def upper_quarter(times: np.ndarray, events: np.ndarray) -> tuple[np.ndarray, int]:
    """The runtimes seen to end, sorted, and k: a quarter of them, at least three. The
    tail models are fitted on the k longest (the piece the survival curve knows least)."""
    ended = times[events]
    if not _ascending(ended):
        ended = np.sort(ended)
    return ended, max(3, math.ceil(len(ended) / 4))


_MIN_ALPHA = 2.2
"""The heaviest Pareto tail believed (finite variance): the tail index never goes below."""


def hill_alpha(times: np.ndarray, events: np.ndarray, ended: np.ndarray | None = None) -> float:
    """Hill's estimate of the Pareto tail index from the upper quarter of the runtimes
    seen to end (at least three); inf when there are too few, or no spread among them.
    Floored at ``_MIN_ALPHA``. ``ended``: those runtimes, sorted, if the caller has them
    (``times[events]``; then neither is read)."""
    if ended is None:
        ended, k = upper_quarter(times, events & (times > 0))
    else:
        ended = ended[int(np.searchsorted(ended, 0.0, side="right")) :]
        k = max(3, math.ceil(len(ended) / 4))
    if len(ended) <= k:
        return math.inf
    spread = float(np.sum(np.log(ended[-k:] / ended[-k - 1])))
    return math.inf if spread <= 0 else max(_MIN_ALPHA, k / spread)


_DESCENDING = np.arange(1024, 0, -1, dtype=float)
_DESCENDING.flags.writeable = False


def _at_risk(n: int) -> np.ndarray:
    """n, n − 1, …, 1 as floats: the tail of one kept descending array (grown by
    doubling), not a new one for every curve; read-only."""
    global _DESCENDING
    if n > len(_DESCENDING):
        _DESCENDING = np.arange(max(n, 2 * len(_DESCENDING)), 0, -1, dtype=float)
        _DESCENDING.flags.writeable = False
    return _DESCENDING[len(_DESCENDING) - n :]


def kaplan_meier(
    times: np.ndarray, events: np.ndarray, weights: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """S just after and just before each observation, one row per row of ``weights``
    (observations taken one by one: ties give the usual product); ``weights`` None:
    every observation once (one row, the same numbers as a row of ones, in a third of
    the time: the at-risk counts are n, n − 1, …, 1 without a cumulative sum)."""
    if weights is None:
        n = len(times)
        s_one = np.cumprod(1.0 - events / _at_risk(n))
        before = np.empty(n)
        before[:1] = 1.0
        before[1:] = s_one[:-1]
        return s_one[None, :], before[None, :]
    w = np.atleast_2d(weights).astype(float)
    at_risk = np.cumsum(w[:, ::-1], axis=1)[:, ::-1]
    with np.errstate(divide="ignore", invalid="ignore"):
        hazard = np.where(at_risk > 0, w * events / at_risk, 0.0)
    s_after = np.cumprod(1.0 - hazard, axis=1)
    s_before = np.concatenate([np.ones((w.shape[0], 1)), s_after[:, :-1]], axis=1)
    return s_after, s_before


def tail_moments(
    times: np.ndarray,
    events: np.ndarray,
    weights: np.ndarray | None,
    restricted: np.ndarray,
    ended: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The tail past the longest observation, per row of ``weights``: its mean residual
    life, its Pareto index (inf where the tail is exponential), and E[T²] given T
    exceeds the longest observation.

    Exponential, its rate the events per second of exposure past the upper quarter
    of the runtimes seen to end (the piecewise-exponential maximum-likelihood
    estimate on the longest runs); with no event there, the mean residual life is the
    larger of the longest observation and ``restricted`` (the mean up to it). Where
    Hill's Pareto tail has the longer mean residual life t_max/(α−1), as on
    heavy-tailed runtimes (lognormal, Weibull k < 1, Pareto) whose hazard falls, that
    tail is used instead: an exponential one would cut their longest tasks short.
    ``weights`` None: every observation once (one row). ``ended``: the runtimes seen to
    end, sorted (``times[events]``), if the caller has them: the same numbers without
    picking them out again (with ``weights`` None only).
    """
    t_max = float(times[-1])
    if ended is None or weights is not None:
        ended, k = upper_quarter(times, events)
        given = None
    else:
        k, given = max(3, math.ceil(len(ended) / 4)), ended
    u = float(ended[-k]) if len(ended) > k else 0.0
    if weights is None:  # a row of ones: the same sums, without the products
        exposure = np.maximum(0.0, times - u)[None, :].sum(axis=1)
        if given is None:
            past = int(np.count_nonzero(events & (times > u)))
        else:  # the ends past u: counted on the sorted ends
            past = len(ended) - int(np.searchsorted(ended, u, side="right"))
        tail_events = np.array([float(past)])
    else:
        w = np.atleast_2d(weights).astype(float)
        exposure = (w * np.maximum(0.0, times - u)).sum(axis=1)
        tail_events = (w * events * (times > u)).sum(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        mrl = np.where(tail_events > 0, exposure / tail_events, np.maximum(t_max, restricted))
    alpha = hill_alpha(times, events, given)
    heavy = t_max / (alpha - 1) > mrl
    second = np.where(
        heavy,
        alpha * t_max**2 / (alpha - 2) if math.isfinite(alpha) else 0.0,
        t_max**2 + 2 * t_max * mrl + 2 * mrl**2,
    )
    index = np.where(heavy, alpha, math.inf)
    return np.where(heavy, t_max / (alpha - 1), mrl), index, second


def km_moments(
    times: np.ndarray,
    events: np.ndarray,
    weights: np.ndarray | None = None,
    ended: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Mean and second moment of runtime, one per row of ``weights`` (a bootstrap; None:
    every observation once):
    Kaplan–Meier up to the longest observation, then the survival left (runs still
    going, or cut off, longer than anything seen to end) on the tail of ``tail_moments``
    (``ended``: as there)."""
    s_after, s_before = kaplan_meier(times, events, weights)
    mean, second = _restricted(times, s_before)
    left = s_after[:, -1]
    mrl, _, tail_second = tail_moments(times, events, weights, mean, ended)
    return mean + left * mrl, second + left * tail_second


def _restricted(times: np.ndarray, s_before: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """∫ S and ∫ 2t·S up to the longest observation, per row of ``s_before``: Σ S_before
    times the steps of t and of t² (from 0). Each step is the difference the sums have
    always taken (t_j − t_{j−1}, t_j² − t_{j−1}²), worked out once for every row."""
    steps = np.empty(len(times))
    steps[:1] = times[:1]
    np.subtract(times[1:], times[:-1], out=steps[1:])
    squares = times * times
    square_steps = np.empty(len(times))
    square_steps[:1] = squares[:1]
    np.subtract(squares[1:], squares[:-1], out=square_steps[1:])
    return (s_before * steps).sum(axis=1), (s_before * square_steps).sum(axis=1)


def estimate_runtime(
    survival: Survival, z: float = 1.96, resamples: int = RESAMPLES, seed: int = 0
) -> RuntimeEstimate:
    """T_i with its spread and a bootstrap percentile interval at confidence ``z``.

    The interval is for the mean runtime of the type (what a plan's makespan and cost
    scale with); observations are resampled whole, censored ones included. Seeded, so
    the same data always gives the same interval (a replayed run decides the same).
    """
    times = np.asarray(survival.times, dtype=float)
    events = np.asarray(survival.events, dtype=bool)
    return estimate_arrays(times, events, z, resamples, seed)


BOOT_CELLS = 2_000_000
"""Bootstrap weights drawn and used at once (rows of a resample at a time): the same
draws in the same order, in bounded memory (a row per resample of 500,000 runs would
take 800 MB per array)."""


def estimate_arrays(
    times: np.ndarray,
    events: np.ndarray,
    z: float = 1.96,
    resamples: int = RESAMPLES,
    seed: int = 0,
    ended: np.ndarray | None = None,
) -> RuntimeEstimate:
    """``estimate_runtime`` on runs sorted as ``Survival`` sorts them; ``ended``: the
    runtimes seen to end, sorted, if the caller has them (``tail_moments``)."""
    n_events = int(events.sum()) if ended is None else len(ended)
    if n_events == 0:
        raise ValueError("no runtime has been seen to end yet")
    n = len(times)
    mean, second = km_moments(times, events, None, ended)
    m, sd = float(mean[0]), math.sqrt(max(0.0, float(second[0]) - float(mean[0]) ** 2))
    if resamples <= 0 or n < 2:
        return RuntimeEstimate(m, sd, m, m, n_events, n - n_events)
    rng = np.random.default_rng(seed)
    rows = max(1, BOOT_CELLS // n)
    boots = []
    for first in range(0, resamples, rows):
        weights = rng.multinomial(n, np.full(n, 1.0 / n), size=min(rows, resamples - first))
        boots.append(km_moments(times, events, weights)[0])
    boot = np.concatenate(boots)
    boot = boot[np.isfinite(boot)]
    p = NormalDist().cdf(-z)
    lo, hi = (float(np.quantile(boot, q)) for q in (p, 1 - p))
    hi += skew_shift(times[events], sd, n, z)
    return RuntimeEstimate(
        m, sd, min(lo, m), max(hi, m), n_events, n - n_events, open_end(times, events, m)
    )


def open_end(times: np.ndarray, events: np.ndarray, mean: float) -> float:
    """How much higher the mean may be than its interval says, for runs still going
    past every run seen to end (the survival left there, ``left``).

    Past the longest end the data say nothing of the tail, which ``tail_moments`` takes
    from the hazard of the longest ended runs: on a bimodal bag sampled before its long
    mode ends, the short mode's. The high end lets each such run last as long again as
    it has (the residual life of a tail whose hazard falls as 1/t, Pareto α = 2):
    ``left`` · (t_max − the tail's mean residual life), where that is more."""
    if events[-1] or not events.any():
        return 0.0
    s_after, _ = kaplan_meier(times, events)
    left = float(s_after[0, -1])
    mrl = float(tail_moments(times, events, None, np.array([mean]))[0][0])
    return left * max(0.0, float(times[-1]) - mrl)


def skew_shift(ended: np.ndarray, sd: float, n: int, z: float) -> float:
    """How far a right-skewed sample moves the upper end of its mean's interval out:
    Johnson's (1978) correction, (2z² + 1)/6 · γ·σ/n, γ the skewness of the runtimes
    seen to end (none when they are not right-skewed). A percentile bootstrap of a
    small sample from a heavy tail rarely draws the rare long runs the sample lacks,
    and its interval falls short of the true mean above far more often than below
    (on benchmarks/estimates.py's Pareto, Weibull k 0.7 and lognormal σ 1 samples,
    8 of 80 above against 1 below; with the correction, 4 to 6 above)."""
    if len(ended) < 3 or sd <= 0:
        return 0.0
    spread = float(np.std(ended))
    if spread <= 0:
        return 0.0
    gamma = float(np.mean((ended - ended.mean()) ** 3)) / spread**3
    return max(0.0, gamma) * (2 * z * z + 1) / 6 * sd / n


@dataclass(frozen=True, slots=True)
class RuntimeEstimate:
    """What one type's runtimes are believed to be: mean, spread, and the mean's interval."""

    mean_s: float
    sd_s: float
    lo_s: float
    hi_s: float
    done: int
    censored: int
    open_s: float = 0.0  # how far the runs still going past every end may lift hi_s

    def widened(self, tasks: float, z: float) -> tuple[float, float]:
        """The interval for the mean of ``tasks`` more runs: the mean's own uncertainty
        and the spread of a finite number of runs around it, added in quadrature."""
        spread = z * self.sd_s / math.sqrt(max(tasks, 1.0))
        down = math.hypot(self.mean_s - self.lo_s, spread)
        up = math.hypot(self.hi_s - self.mean_s, spread)
        return max(self.mean_s - down, 1e-9), self.mean_s + up

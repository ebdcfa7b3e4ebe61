"""The ragged end of a run: how far past the fluid end its last task ends, on each
type's survival curve for the longest of many runs (``RuntimeStats.extreme_curve``)."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

from autoscaler.learn.stats import RuntimeStats
from autoscaler.learn.survival import Curve


@dataclass(frozen=True, slots=True)
class RaggedEnd:
    """How far past the fluid end the last task ends: expected, and a low and high
    quantile, in seconds (the fluid end shares all work evenly; really each task ends
    when its own runtime is over, and the run ends with the latest of them)."""

    mean_s: float
    lo_s: float
    hi_s: float


def _survival_and_area(c: Curve, t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """S(t) and ∫_0^t S on the curve (1 before the first time), with its tail, at ``t``
    (t ≥ 0)."""
    times = np.asarray(c.times)
    s_after = np.asarray(c.s_after)
    knots = np.concatenate([[0.0], times])
    s_on = np.concatenate([[1.0], s_after])  # S on [knots[j], knots[j+1])
    cum = np.concatenate([[0.0], np.cumsum(s_on[:-1] * np.diff(knots))])
    j = np.clip(np.searchsorted(knots, t, side="right") - 1, 0, len(knots) - 1)
    t_max, s_end, mrl = times[-1], s_on[-1], max(c.mrl, 1e-9)
    past = t > t_max
    beyond = np.maximum(t - t_max, 0.0)
    if math.isfinite(c.alpha):  # S(t_max)·(t/t_max)^−α
        ratio = np.maximum(t, t_max) / max(t_max, 1e-9)
        s_tail = s_end * ratio ** (-c.alpha)
        a_tail = cum[-1] + s_end * mrl * (1 - ratio ** (1 - c.alpha))
    else:
        s_tail = s_end * np.exp(-beyond / mrl)
        a_tail = cum[-1] + s_end * mrl * -np.expm1(-beyond / mrl)
    survival = np.where(past, s_tail, s_on[j])
    area = np.where(past, a_tail, cum[j] + s_on[j] * (t - knots[j]))
    return survival, area


def ragged_end(
    span_s: float,
    starting: Iterable[tuple[RuntimeStats, float]],
    running: Iterable[tuple[RuntimeStats, float]] = (),
    z: float = 1.96,
    points: int = 2048,
) -> RaggedEnd:
    """When the last task ends, against the fluid end F = now + ``span_s``.

    ``starting``: (a type's stats, tasks that will start on it). They start between
    now and F − E_eq,i (the bag runs empty when each machine still has, on average, the
    equilibrium rest E_eq = E[T²]/2E[T] of a task to do), uniformly as far as the
    model goes; a task starting at s ends by F + x with probability F_T(F + x − s).
    ``running``: (stats, age) of tasks running now, which end by F + x with probability
    1 − S(age + span + x)/S(age). The run ends with the latest of them all:
    P(end ≤ F + x) = Π of those. This is what the fluid end leaves out: the longest
    tasks, wherever in the run they start (on skewed runtimes the very longest of a
    bag decides the end), and the ragged finish. Tail replication can only shorten it.

    S is each type's curve for the longest of many runs, and there are two of it that
    the first plan's data cannot choose between (benchmarks/estimates.py, issue 11):
    on the ended runs alone (``extreme_curve()``), which is short where the hazard
    falls (lognormal, Weibull k < 1, Pareto: the long runs are the ones still going),
    and with the running tasks censored at their ages (``extreme_curve(ages)``), whose
    exponential tail is long where the hazard rises (bimodal: the runs still going are
    about to end). The expected end is the first's, the interval spans both.
    """
    started = [(s, n) for s, n in starting if n > 0 and s.done > 0]
    going = [(s, age) for s, age in running if s.done > 0]
    if not started and not going:
        return RaggedEnd(0.0, 0.0, 0.0)
    ages: dict[int, tuple[RuntimeStats, list[float]]] = {}
    for s, _ in started:
        ages.setdefault(id(s), (s, []))
    for s, age in going:
        ages.setdefault(id(s), (s, []))[1].append(age)
    span = max(span_s, 0.0)
    ended = {key: s.extreme_curve() for key, (s, _) in ages.items()}
    end = _end_of(
        span,
        [(ended[id(s)], n) for s, n in started],
        [(ended[id(s)], a) for s, a in going],
        z,
        points,
    )
    if not going:
        return end
    censored = {key: s.extreme_curve(a) for key, (s, a) in ages.items()}
    wide = _end_of(
        span,
        [(censored[id(s)], n) for s, n in started],
        [(censored[id(s)], a) for s, a in going],
        z,
        points,
    )
    return RaggedEnd(end.mean_s, min(end.lo_s, wide.lo_s), max(end.hi_s, wide.hi_s))


def _end_of(
    span: float,
    starts: list[tuple[Curve, float]],
    runs: list[tuple[Curve, float]],
    z: float,
    points: int,
) -> RaggedEnd:
    """The distribution of the end on given curves (``ragged_end``): its mean and the
    quantiles at ±``z``."""
    curves = [c for c, _ in starts] + [c for c, _ in runs]
    horizon = max(c.times[-1] + (40 if math.isfinite(c.alpha) else 8) * c.mrl for c in curves)
    horizon = max(horizon, 1.0)
    grid = np.linspace(-span, horizon, points)  # x: the end less F
    log_cdf = np.zeros(points)
    for c, n in starts:
        e_eq = (c.sd_s**2 + c.mean_s**2) / (2 * c.mean_s)
        width = span - e_eq
        hi_t = np.maximum(grid + span, 0.0)
        if width <= 1e-9:  # all start now
            cdf = 1.0 - _survival_and_area(c, hi_t)[0]
        else:
            lo_t = np.maximum(grid + e_eq, 0.0)
            # ∫ F_T over [x + E_eq, x + span] = width − (A(hi) − A(lo)), F_T = 0 below 0
            a_hi = hi_t - _survival_and_area(c, hi_t)[1]
            a_lo = lo_t - _survival_and_area(c, lo_t)[1]
            cdf = (a_hi - a_lo) / width
        log_cdf += n * np.log(np.clip(cdf, 1e-300, 1.0))
    for c, age in runs:
        s_age = float(_survival_and_area(c, np.asarray([age]))[0][0])
        if s_age <= 0:
            continue
        later = _survival_and_area(c, np.maximum(age + span + grid, 0.0))[0]
        log_cdf += np.log(np.clip(1.0 - later / s_age, 1e-300, 1.0))
    cdf_max = np.exp(log_cdf)
    step = grid[1] - grid[0]
    expected = float(grid[0] + np.sum(1.0 - cdf_max) * step)
    p = NormalDist().cdf(-z)

    def quantile(q: float) -> float:
        return float(grid[min(int(np.searchsorted(cdf_max, q)), points - 1)])

    return RaggedEnd(expected, quantile(p), quantile(1 - p))

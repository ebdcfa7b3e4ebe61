"""The survival curve of ended runs with a fitted tail past them (paper 000 §2.1, issue 22
§2), for the ragged end of a bag (``learn.ragged``): Kaplan–Meier up to a threshold, a
generalized Pareto tail past it, chosen among thresholds by how well each fits; and its
arrays, kept from tick to tick. The estimates' numerics (``learn.survival``) below it."""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from autoscaler.learn.gpd import Gpd, anderson_darling, fit_gpd_heavy, unbounded
from autoscaler.learn.survival import (
    RuntimeEstimate,
    _restricted,
    _sorted,
    kaplan_meier,
    merged_sorted,
    tail_moments,
)


@dataclass(frozen=True, slots=True)
class Curve:
    """The survival curve of ended runs, kept until the next run ends."""

    times: list[float]
    s_after: list[float]  # S just after each time
    area: list[float]  # ∫ S from each time to the last
    mrl: float  # mean residual life of the tail past the last time
    alpha: float  # the tail's Pareto index (inf: the tail is exponential)
    mean_s: float
    sd_s: float
    xi: float = 0.0  # with alpha inf: the tail is generalized Pareto of this shape (0: exp)
    heavy: Gpd | None = None  # the heavy end of the tails its exceedances allow (gpd)


TAIL_MIN = 4
"""Exceedances seen to end that a generalized Pareto tail is fitted on, at least."""

TAIL_MAX = 2000
"""And at most: past it the survival curve itself reaches the quantiles a bag's longest
task is drawn from, and the fit's cost would grow with the runs."""

THRESHOLDS = 12
"""Thresholds tried, spaced geometrically in the count of exceedances."""

HEAVY_P = 0.16
"""The heavy tail a curve keeps beside its fitted one: where the shapes' likelihood
weights leave this share (one standard deviation) on the heavier side
(``gpd.fit_gpd_heavy``), for the high end of a bag's end (``ragged.ragged_end``). On
benchmarks/estimates.py's first plans (seeds 0-19) it brought the makespan coverage of
Pareto per-second from 85 % to 95 % and of bimodal per-second 1.3 x B_min from 89 % to
94 %; at 0.025 the high ends reached 4.5 times the point on bimodal bags, whose long
mode is bounded."""

SMALL_TAIL_PENALTY = 5.0
"""Added to a threshold's Anderson–Darling statistic, over its k exceedances: a tail
fitted on a handful of runs fits them well and says little (its shape swings from
bounded to the heaviest believed between neighbouring samples), so a higher threshold
must fit clearly better to be chosen. On benchmarks/estimates.py's first plans (seeds
0-19, all rows) it moved the median makespan error of Weibull k 0.7 from −7.6 % to
−3.1 %, Pareto from −8.1 % to −2.6 %, lognormal σ 1 from −5.6 % to +2.8 %; a bimodal
sample's tail still starts in its long mode (tests/unit/test_tail_max.py)."""


def threshold_curve(
    t_arr: np.ndarray,
    e_arr: np.ndarray,
    times: list[float],
    s_after: list[float],
    whole: RuntimeEstimate,
) -> Curve | None:
    """The curve for the longest of many runs (peaks over threshold): Kaplan–Meier up to
    a threshold u, and past it a generalized Pareto tail (``gpd.fit_gpd``) on the
    exceedances, runs still going past u counted as censored ones. u is the (k+1)-th
    longest runtime seen to end, k from ``TAIL_MIN`` to half of them (at most
    ``TAIL_MAX``), the one whose tail fits its exceedances best (Anderson–Darling): on
    a bimodal bag the tail starts in the long mode, on a smooth one it takes about a
    third of the runs. The plain curve ends where the sample ends, so the longest task
    of a bag of thousands would never be longer than the longest of a sample of tens;
    an exponential tail past it (the model before this one) cut lognormal, Pareto and
    Weibull k < 1 bags short by a third and drew bimodal ones out twice too long. Where
    a run still goes past the longest end, nothing seen shows where runtimes stop, and
    the tail has none (``gpd.unbounded``). None with too few ends to fit above a
    threshold."""
    ended = np.sort(t_arr[e_arr])
    top = min(len(ended) // 2, TAIL_MAX)
    if top < TAIL_MIN:
        return None
    going = t_arr[~e_arr]
    best: tuple[float, float, Gpd, Gpd] | None = None
    for k in sorted(set(np.round(np.geomspace(TAIL_MIN, top, THRESHOLDS)).astype(int))):
        u = float(ended[-k - 1])
        excess = ended[-k:] - u
        excess = excess[excess > 0]
        if u <= 0 or len(excess) < TAIL_MIN - 1:
            continue
        g, heavy = fit_gpd_heavy(excess, going[going > u] - u, HEAVY_P)
        fit = anderson_darling(excess, g) + SMALL_TAIL_PENALTY / k
        if best is None or fit < best[0]:
            best = (fit, u, g, heavy)
    if best is None:
        return None
    _, u, g, heavy = best
    if not e_arr[-1]:  # runs still going past the longest end: no end shown
        g = unbounded(g, ended[ended > u] - u, going[going > u] - u)
    kept = bisect.bisect_right(times, u)
    cut_t, cut_s = times[:kept], s_after[:kept]
    if not cut_t or cut_t[-1] < u:
        cut_t, cut_s = [*cut_t, u], [*cut_s, cut_s[-1] if cut_s else 1.0]
    return Curve(cut_t, cut_s, [], g.mrl, math.inf, whole.mean_s, whole.sd_s, xi=g.xi, heavy=heavy)


def _km_whole(
    t_arr: np.ndarray, e_arr: np.ndarray, ended: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray, RuntimeEstimate]:
    """Kaplan–Meier on sorted runs (S after each), the tail's mean residual life and
    Pareto index, and T_i with its spread: ``km_moments`` and the curve in one pass
    (the same arithmetic, the same numbers)."""
    n_events = int(e_arr.sum()) if ended is None else len(ended)
    if n_events == 0:
        raise ValueError("no runtime has been seen to end yet")
    after, before = kaplan_meier(t_arr, e_arr)
    restricted, second = _restricted(t_arr, before)
    mrls, index, tail_second = tail_moments(t_arr, e_arr, None, restricted, ended)
    left = after[:, -1]
    m = float((restricted + left * mrls)[0])
    second_m = float((second + left * tail_second)[0])
    whole = RuntimeEstimate(
        m, math.sqrt(max(0.0, second_m - m**2)), m, m, n_events, len(t_arr) - n_events
    )
    return after[0], mrls, index, whole


KmPass = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, RuntimeEstimate]
"""Sorted times, S after each, the tail's mean residual life and Pareto index, and T_i
with its spread: one Kaplan–Meier pass over ended runs (``km_pass``)."""


def km_pass(done: Iterable[float], censored: Iterable[float]) -> KmPass:
    """Kaplan–Meier over ended runs (``done`` seen to end, ``censored`` ended without a
    result); its last item is T_i and its spread (``estimate_runtime`` without
    resamples). A caller may keep it to build the curve from (``curve_arrays``)."""
    return km_pass_sorted(_sorted(done), _sorted(censored))


def km_pass_sorted(done: np.ndarray, censored: np.ndarray) -> KmPass:
    """``km_pass`` of float arrays already sorted (kept ones: ``learn.times.SortedTimes``)."""
    t_arr, e_arr = merged_sorted(done, censored)
    return (t_arr, *_km_whole(t_arr, e_arr, done))


@dataclass(frozen=True, slots=True)
class CurveArrays:
    """The survival curve of ended runs as the arrays it was computed as
    (``curve_parts``): what τ_e of many ages at once reads (``learn.stats.tail_estimates``,
    at every tick). ``curve()`` is the same curve as lists (``Curve``), made only when
    something reads it so (τ_e of one age, a plan's ragged end): the lists of a curve
    of 500,000 runs take more time to make than its arrays."""

    times: np.ndarray
    s_after: np.ndarray  # S just after each time
    area: np.ndarray  # ∫ S from each time to the last
    mrl: float
    alpha: float
    mean_s: float
    sd_s: float

    def curve(self) -> Curve:
        return Curve(
            self.times.tolist(),
            self.s_after.tolist(),
            self.area.tolist(),
            self.mrl,
            self.alpha,
            self.mean_s,
            self.sd_s,
        )


def curve_parts(
    done: Iterable[float], censored: Iterable[float], km: KmPass | None = None
) -> CurveArrays:
    """The survival curve of ended runs (``done`` seen to end, ``censored`` ended without
    a result): times, S after each, ∫S from each time to the last, the tail past the
    last time, and T_i and its spread (``km_pass``), as arrays. ``km``: the
    Kaplan–Meier pass over the same runs, if one was made (``km_pass``). The curve for
    the longest of many runs (``threshold_curve``) is fitted when a plan asks for it,
    not on every end. Raises ValueError when nothing was seen to end."""
    t_arr, after, mrls, index, whole = km_pass(done, censored) if km is None else km
    # ∫ S from times[j] to times[-1]: S is s_after[j] on [times[j], times[j+1]); summed
    # from the end, one term at a time (as a loop would).
    pieces = after[:-1] * np.diff(t_arr)
    area = np.concatenate([np.cumsum(pieces[::-1])[::-1], [0.0]])
    return CurveArrays(
        t_arr, after, area, float(mrls[0]), float(index[0]), whole.mean_s, whole.sd_s
    )


def curve_arrays(
    done: Iterable[float], censored: Iterable[float], km: KmPass | None = None
) -> tuple[Curve, np.ndarray, np.ndarray, np.ndarray]:
    """``curve_parts``' curve as lists (``Curve``), with its times, S after each and ∫S
    as the arrays they were computed as."""
    parts = curve_parts(done, censored, km)
    return parts.curve(), parts.times, parts.s_after, parts.area

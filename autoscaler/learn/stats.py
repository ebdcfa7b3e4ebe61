"""Learning task runtimes per machine type (paper 000 §2.1).

* sample size n = ⌈N·z² / (z² + 2(N−1)Δ²)⌉, bounded above by ⌈z² / (2Δ²)⌉;
* initial workers per type iw = min(N/10, n);
* T_i, the mean runtime on type i. Not the mean of whatever finished first (on a
  skewed distribution that is the short tasks): a Kaplan–Meier survival estimate over
  every counted run, where runs that ended without a result or still run are
  right-censored at their age, with an exponential tail past the longest run seen;
  a bootstrap gives its interval. A running task of age τ is expected to take
  τ_e = E[T | T > τ] on that curve (paper 000's τ_e, without cutting off the tail).

``RuntimeStats`` keeps what is seen per type; the survival estimate itself is in
``learn.survival``, the end of a run on it in ``learn.ragged``, compact sampling's
affine map in ``learn.affine``.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from autoscaler.learn.affine import AffineFit
from autoscaler.learn.curve import (
    Curve,
    CurveArrays,
    KmPass,
    curve_parts,
    km_pass_sorted,
    threshold_curve,
)
from autoscaler.learn.survival import (
    RESAMPLES,
    RuntimeEstimate,
    Survival,
    estimate_arrays,
    estimate_runtime,
    kaplan_meier,
    km_moments,
    merged,
    merged_sorted,
    open_end,
)
from autoscaler.learn.times import SortedTimes

__all__ = [
    "SAMPLE_OPEN_SHARE",
    "RuntimeEstimate",
    "RuntimeStats",
    "derived_estimate",
    "initial_workers",
    "mapped_stats",
    "sample_size",
    "tasks_within",
]


def sample_size(n_tasks: int, z: float = 1.96, delta: float = 0.25) -> int:
    """Sample size for sampling with replacement (paper 000 §2.1)."""
    if n_tasks <= 0:
        raise ValueError(f"n_tasks must be positive (got {n_tasks})")
    z2 = z * z
    n = math.ceil(n_tasks * z2 / (z2 + 2 * (n_tasks - 1) * delta * delta) - 1e-9)
    return min(n, math.ceil(z2 / (2 * delta * delta) - 1e-9))


def initial_workers(n_tasks: int, n_sample: int) -> int:
    """Machines to start per type for sampling: min(N/10, n), at least one."""
    return max(1, min(n_tasks // 10, n_sample))


SAMPLE_OPEN_SHARE = 0.1
"""A type is sampled once all but this share of its sample set have ended."""

EXACT_UP_TO = 1024
"""Up to this many runs ended on a type, its survival curve is rebuilt after every one
(T_i, its spread and τ_e are those of every run seen, bit for bit)."""

STALE_SHARE = 1 / 64
"""Past ``EXACT_UP_TO``, the curve is rebuilt once the runs ended since it was built
exceed this share of those it was built on: a controller asks for T_i on every
dispatch, and a rebuild costs O(n log n), so the work per event would otherwise grow
with the tasks done. The curve then lags at most 1.6 % of the runs behind, and the
rebuilds of a run of N tasks cost O(N log N) in all."""


@dataclass
class RuntimeStats:
    """What has been learnt about task runtimes on one machine type.

    The sample set is the first ``sample_target`` tasks started on the type. Tasks leave
    the bag in a random order fixed before the run (``runs.new_state``), so the set is a
    random sample of the bag chosen independently of runtimes; planning waits until all
    but ``SAMPLE_OPEN_SHARE`` of it has ended, and counts the rest (and every other run
    still going) as right-censored, so long tasks are not left out of the estimate the
    way they are from "the first n to finish". Every later run updates the estimate.
    """

    sample_target: int
    # Runtimes seen to end, and ended without a result: appended, sorted when read
    # (``done_times``, ``censored_times``, or as arrays for the survival curve).
    _done: SortedTimes = field(default_factory=SortedTimes, repr=False)
    _censored: SortedTimes = field(default_factory=SortedTimes, repr=False)
    sample: list[int] = field(default_factory=list)  # the sample set, in start order
    sample_open: set[int] = field(default_factory=set)  # of it, still without an end
    done: int = 0
    version: int = 0  # bumped by every run that ends (``record``, ``censor``)
    # The survival curve as arrays (for ``tail_estimates``), and as lists once asked for
    _parts: CurveArrays | None = field(default=None, compare=False, repr=False)
    _curve: Curve | None = field(default=None, compare=False, repr=False)  # of _parts
    _extreme: Curve | None = field(default=None, compare=False, repr=False)  # of _parts's runs
    _whole: RuntimeEstimate | None = field(default=None, compare=False, repr=False)
    _built_version: int = field(default=0, compare=False, repr=False)  # of both
    _km: KmPass | None = field(default=None, compare=False, repr=False)  # of _whole, for _parts
    # (z, resamples) -> version and ended runs drawn on, the interval's ends less T_i
    _interval: dict[tuple[float, int], tuple[int, int, float, float]] = field(
        default_factory=dict, compare=False, repr=False
    )
    # Compact sampling: these runs mapped through a fit (``mapped_stats``), kept with
    # their own curves until a run ends here.
    _mapped: dict[AffineFit, RuntimeStats] = field(default_factory=dict, compare=False, repr=False)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, RuntimeStats):
            return NotImplemented
        return self._key() == other._key()

    def _key(self) -> tuple[object, ...]:
        return (
            self.sample_target,
            self.done_times,
            self.censored_times,
            self.sample,
            self.sample_open,
            self.done,
            self.version,
        )

    @property
    def done_times(self) -> list[float]:
        """Runtimes of the counted runs seen to end, sorted."""
        return self._done.as_list()

    @done_times.setter
    def done_times(self, times: list[float]) -> None:
        self._done = SortedTimes(times)

    @property
    def censored_times(self) -> list[float]:
        """Ages of the counted runs that ended without a result, sorted."""
        return self._censored.as_list()

    @censored_times.setter
    def censored_times(self, times: list[float]) -> None:
        self._censored = SortedTimes(times)

    def start(self, task: int) -> None:
        """A run of ``task`` starts on this type (replicas are not counted)."""
        if len(self.sample) < self.sample_target and task not in self.sample_open:
            self.sample.append(task)
            self.sample_open.add(task)

    def record(self, runtime_s: float, task: int | None = None) -> None:
        """A counted run ended with a result after ``runtime_s``."""
        self.done += 1
        self._done.add(runtime_s)
        if task is not None:
            self.sample_open.discard(task)
        self._changed()

    def censor(self, elapsed_s: float, task: int | None = None) -> None:
        """A counted run ended without a result after ``elapsed_s`` (it needed longer)."""
        self._censored.add(elapsed_s)
        if task is not None:
            self.sample_open.discard(task)
        self._changed()

    def _changed(self) -> None:
        """A run ended: drop the curve (and the runs mapped from this type), unless past
        ``EXACT_UP_TO`` it lags fewer runs than ``STALE_SHARE`` allows."""
        self.version += 1
        if self._whole is not None:
            lag = self.version - self._built_version
            built_on = len(self._done) + len(self._censored) - lag
            if built_on > EXACT_UP_TO and lag <= built_on * STALE_SHARE:
                return
        self._parts = None
        self._curve = None
        self._extreme = None
        self._whole = None
        self._mapped.clear()

    @property
    def sampled(self) -> bool:
        """True once the sample set has (mostly) ended, so T_i may be used for planning."""
        return (
            self.done > 0
            and len(self.sample) >= self.sample_target
            and len(self.sample_open) <= math.floor(SAMPLE_OPEN_SHARE * self.sample_target)
        )

    def survival(self, running_elapsed: Iterable[float] = ()) -> Survival:
        return Survival.of(self.done_times, [*self.censored_times, *running_elapsed])

    def estimate(
        self, running_elapsed: Iterable[float] = (), z: float = 1.96, resamples: int = RESAMPLES
    ) -> RuntimeEstimate:
        """T_i, its spread and interval, running tasks counted as censored at their age.

        Past ``EXACT_UP_TO`` ended runs, the bootstrap interval's distances from T_i
        are kept (T_i and its spread are not) until the runs ended since exceed
        ``STALE_SHARE`` of those it was drawn on: a monitor asks at every tick, and the
        resamples cost ``RESAMPLES`` times the estimate."""
        ended = len(self._done) + len(self._censored)
        if ended <= EXACT_UP_TO:
            return estimate_runtime(self.survival(running_elapsed), z, resamples)
        times, events = self._with_running(running_elapsed)
        e = estimate_arrays(times, events, z, 0, ended=self._done.as_array())
        if resamples <= 0:
            return e
        kept = self._interval.get((z, resamples))
        if kept is None or self.version - kept[0] > kept[1] * STALE_SHARE:
            full = estimate_arrays(times, events, z, resamples)
            kept = (self.version, ended, full.lo_s - full.mean_s, full.hi_s - full.mean_s)
            self._interval[z, resamples] = kept
        lo, hi = e.mean_s + kept[2], e.mean_s + kept[3]
        return RuntimeEstimate(
            e.mean_s,
            e.sd_s,
            min(lo, e.mean_s),
            max(hi, e.mean_s),
            e.done,
            e.censored,
            open_end(times, events, e.mean_s),
        )

    def _with_running(self, running_elapsed: Iterable[float]) -> tuple[np.ndarray, np.ndarray]:
        """The ended runs and the running ones (censored at their ages), merged."""
        running = np.asarray(
            running_elapsed if isinstance(running_elapsed, list) else list(running_elapsed),
            dtype=float,
        )
        censored = self._censored.as_array()
        if len(running):
            censored = np.sort(np.concatenate([censored, running]))
        return merged_sorted(self._done.as_array(), censored)

    def mean(self, running_elapsed: Iterable[float] = ()) -> float:
        """T_i: the survival-curve mean over ended runs and the running ones' ages."""
        running = list(running_elapsed)
        if not running:
            return self._moments().mean_s
        return self.estimate(running, resamples=0).mean_s

    def stddev(self, running_elapsed: Iterable[float] = ()) -> float:
        """Standard deviation of runtimes, from the same survival curve (0 before any end)."""
        if self.done == 0:
            return 0.0
        running = list(running_elapsed)
        if not running:
            return self._moments().sd_s
        return self.estimate(running, resamples=0).sd_s

    def _moments(self) -> RuntimeEstimate:
        """T_i and its spread over the ended runs (the curve's, without building it)."""
        if self._whole is None:
            if self.done == 0:
                raise ValueError("no runtime has been seen to end yet")
            km = km_pass_sorted(self._done.as_array(), self._censored.as_array())
            self._whole, self._km, self._built_version = km[4], km, self.version
        return self._whole

    def _curve_arrays(self) -> CurveArrays:
        """Kaplan–Meier over the ended runs as arrays: times, S after each, ∫S from each
        time to the last, and the tail past the last time (``curve.curve_parts``)."""
        if self._parts is None:
            if self.done == 0:
                raise ValueError("no runtime has been seen to end yet")
            # The pass ``_moments`` made, if no run has ended since: the same runs.
            km = self._km
            if km is None or self._whole is None or self._built_version != self.version:
                km = km_pass_sorted(self._done.as_array(), self._censored.as_array())
            p = curve_parts((), (), km)
            self._km = None
            # T_i as the curve has it (a lagging one is rebuilt with the curve).
            n_cens = len(self._censored)
            self._whole = RuntimeEstimate(p.mean_s, p.sd_s, p.mean_s, p.mean_s, self.done, n_cens)
            self._parts, self._curve, self._built_version = p, None, self.version
        return self._parts

    def _survival_curve(self) -> Curve:
        """The curve of ``_curve_arrays`` as lists."""
        parts = self._curve_arrays()
        if self._curve is None:
            self._curve = parts.curve()
        return self._curve

    def extreme_curve(self, running_elapsed: Sequence[float] = ()) -> Curve:
        """The curve for the longest of many runs (``threshold_curve``; the plain curve
        when too few runs ended), runs still going counted as censored at their ages, as
        in T_i (``estimate``): on skewed runtimes those are the long ones, and a tail
        fitted on ended runs alone leaves them out. Its mean and spread are T_i's, with
        the same runs censored. Kept with the curve when no run is going. Raises
        ValueError before any run has ended."""
        ended = self._survival_curve()
        if not running_elapsed:
            if self._extreme is None:
                t_arr, e_arr = merged(self._done.as_array(), self._censored.as_array())
                whole = RuntimeEstimate(ended.mean_s, ended.sd_s, ended.mean_s, ended.mean_s, 0, 0)
                self._extreme = (
                    threshold_curve(t_arr, e_arr, ended.times, ended.s_after, whole) or ended
                )
            return self._extreme
        n_done = len(self._done)
        t_arr = np.concatenate(
            [
                self._done.as_array(),
                self._censored.as_array(),
                np.asarray(running_elapsed, dtype=float),
            ]
        )
        e_arr = np.arange(len(t_arr)) < n_done
        order = np.lexsort((~e_arr, t_arr))  # by time, an end before a censoring
        t_arr, e_arr = t_arr[order], e_arr[order]
        after, _ = kaplan_meier(t_arr, e_arr)
        mean, second = (float(v[0]) for v in km_moments(t_arr, e_arr))
        sd = math.sqrt(max(0.0, second - mean**2))
        whole = RuntimeEstimate(mean, sd, mean, mean, n_done, len(t_arr) - n_done)
        curve = threshold_curve(t_arr, e_arr, t_arr.tolist(), after[0].tolist(), whole)
        return curve or replace(ended, mean_s=mean, sd_s=sd)

    def tail_estimate(self, elapsed_s: float) -> float:
        """τ_e: expected total runtime of a task already running for ``elapsed_s``.

        E[T | T > τ] = τ + ∫_τ^∞ S / S(τ) on the survival curve of ended runs, with the
        exponential tail past the longest one: a task that has outlived every run seen
        is expected to go on for the tail's mean residual life, not to end at once.
        """
        if self.done == 0:
            return elapsed_s
        c = self._survival_curve()
        times, s_after, area, mrl = c.times, c.s_after, c.area, c.mrl
        if elapsed_s > times[-1] and math.isfinite(c.alpha) and s_after[-1] > 0:
            return elapsed_s * c.alpha / (c.alpha - 1)  # a Pareto tail's residual grows
        i = bisect.bisect_right(times, elapsed_s) - 1
        if i < 0:
            s_tau, integral = 1.0, times[0] - elapsed_s + area[0]
        else:
            s_tau = s_after[i]
            nxt = times[i + 1] if i + 1 < len(times) else elapsed_s
            later = area[i + 1] if i + 1 < len(times) else 0.0
            integral = s_tau * max(0.0, nxt - elapsed_s) + later
        if s_tau <= 0.0:
            return elapsed_s
        s_end = s_after[-1]
        integral += s_end * mrl
        return elapsed_s + integral / s_tau


def tail_estimates(stats: RuntimeStats, ages: np.ndarray) -> np.ndarray:
    """``stats.tail_estimate`` of every age in ``ages`` at once, with the same arithmetic
    in the same order, so the same floats (tests/unit/test_tail_estimates.py): the tail
    phase asks it of every task running on every idle machine."""
    if stats.done == 0:
        return ages.astype(float, copy=True)
    c = stats._curve_arrays()
    times, s_after, area = c.times, c.s_after, c.area
    n = len(times)
    i = np.searchsorted(times, ages, side="right") - 1
    first = i < 0
    has_next = i + 1 < n
    s_tau = np.where(first, 1.0, s_after[np.maximum(i, 0)])
    nxt = np.where(has_next, times[np.minimum(i + 1, n - 1)], ages)
    later = np.where(has_next, area[np.minimum(i + 1, n - 1)], 0.0)
    integral = np.where(
        first, times[0] - ages + area[0], s_tau * np.maximum(0.0, nxt - ages) + later
    )
    integral = integral + s_after[-1] * c.mrl
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where(s_tau <= 0.0, ages, ages + integral / s_tau)
        if math.isfinite(c.alpha) and s_after[-1] > 0:
            out = np.where(ages > times[-1], ages * c.alpha / (c.alpha - 1), out)
    return out


def tasks_within(
    horizon_s: float, mean_s: float, sd_s: float, z: float, loss: float = 0.5
) -> float:
    """Tasks one machine is expected to finish in ``horizon_s`` (the final-unit cushion).

    m = x² − loss where T·x² + z·σ·x = h: m tasks take m·T on average with standard
    deviation √m·σ, and the task in progress when the horizon ends is half done on
    average (``loss`` = ½), so it counts for nothing (slides 001, "fluid vs discrete").
    Continuous in h and T, so a small change of the estimate never flips a plan.
    """
    if horizon_s <= 0 or mean_s <= 0:
        return 0.0
    b = z * sd_s
    root = (-b + math.sqrt(b * b + 4 * mean_s * horizon_s)) / (2 * mean_s)
    return max(0.0, root * root - loss)


# --- compact sampling (slides 001): one type's runtimes from another's ------------------


_MIN_MAPPED_S = 1.0


def mapped_stats(ref: RuntimeStats, fit: AffineFit) -> RuntimeStats:
    """The reference type's runs mapped through ``fit``: what they say of the other
    type's runtimes (an increasing map keeps the order, so censored runs stay censored
    at the mapped age). Its spread is the reference's times a; ``derived_estimate``
    adds the fit's own error. Kept on ``ref`` until a run ends there."""
    kept = ref._mapped.get(fit)
    if kept is not None:
        return kept
    out = RuntimeStats(ref.sample_target)
    out.done_times = [max(_MIN_MAPPED_S, fit(t)) for t in ref.done_times]
    out.censored_times = [max(_MIN_MAPPED_S, fit(t)) for t in ref.censored_times]
    out.done = ref.done
    ref._mapped[fit] = out
    return out


def derived_estimate(
    mapped: RuntimeStats,
    fit: AffineFit,
    ref_mean_s: float,
    running_elapsed: Iterable[float] = (),
    z: float = 1.96,
    resamples: int = RESAMPLES,
) -> RuntimeEstimate:
    """A type's T_i from the reference's runs (``mapped_stats``): a·T_ref + b, its
    runtimes' spread the mapped spread and the residuals' in quadrature, and its
    interval the mapped interval widened by z times the fitted line's standard error
    at T_ref, in quadrature."""
    e = mapped.estimate(running_elapsed, z, resamples)
    line = z * math.sqrt(fit.line_var(ref_mean_s))
    sd = math.hypot(e.sd_s, fit.resid_sd)
    lo = e.mean_s - math.hypot(e.mean_s - e.lo_s, line)
    hi = e.mean_s + math.hypot(e.hi_s - e.mean_s, line)
    return RuntimeEstimate(e.mean_s, sd, max(lo, 1e-9), hi, e.done, e.censored)

"""Learning task runtimes per machine type (paper 000 §2.1).

* sample size n = ⌈N·z² / (z² + 2(N−1)Δ²)⌉, bounded above by ⌈z² / (2Δ²)⌉;
* initial workers per type iw = min(N/10, n);
* T_i, the mean runtime on type i. Not the mean of whatever finished first (on a
  skewed distribution that is the short tasks): a Kaplan–Meier survival estimate over
  every counted run, where runs that ended without a result or still run are
  right-censored at their age, with an exponential tail past the longest run seen;
  a bootstrap gives its interval. A running task of age τ is expected to take
  τ_e = E[T | T > τ] on that curve (paper 000's τ_e, without cutting off the tail).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from statistics import NormalDist

import numpy as np


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

_RESAMPLES = 200


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
        pairs = sorted([(t, False) for t in done] + [(t, True) for t in censored])
        return cls(tuple(t for t, _ in pairs), tuple(not c for _, c in pairs))

    @property
    def n_events(self) -> int:
        return sum(self.events)


def _upper_quarter(times: np.ndarray, events: np.ndarray) -> tuple[np.ndarray, int]:
    """The runtimes seen to end, sorted, and k: a quarter of them, at least three. The
    tail models are fitted on the k longest (the piece the survival curve knows least)."""
    ended = np.sort(times[events])
    return ended, max(3, math.ceil(len(ended) / 4))


_MIN_ALPHA = 2.2
"""The heaviest Pareto tail believed (finite variance): the tail index never goes below."""


def hill_alpha(times: np.ndarray, events: np.ndarray) -> float:
    """Hill's estimate of the Pareto tail index from the upper quarter of the runtimes
    seen to end (at least three); inf when there are too few, or no spread among them.
    Floored at ``_MIN_ALPHA``."""
    ended, k = _upper_quarter(times, events & (times > 0))
    if len(ended) <= k:
        return math.inf
    spread = float(np.sum(np.log(ended[-k:] / ended[-k - 1])))
    return math.inf if spread <= 0 else max(_MIN_ALPHA, k / spread)


def _kaplan_meier(
    times: np.ndarray, events: np.ndarray, weights: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """S just after and just before each observation, one row per row of ``weights``
    (observations taken one by one: ties give the usual product)."""
    w = np.atleast_2d(weights).astype(float)
    at_risk = np.cumsum(w[:, ::-1], axis=1)[:, ::-1]
    with np.errstate(divide="ignore", invalid="ignore"):
        hazard = np.where(at_risk > 0, w * events / at_risk, 0.0)
    s_after = np.cumprod(1.0 - hazard, axis=1)
    s_before = np.concatenate([np.ones((w.shape[0], 1)), s_after[:, :-1]], axis=1)
    return s_after, s_before


def _tail(
    times: np.ndarray, events: np.ndarray, weights: np.ndarray, restricted: np.ndarray
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
    """
    w = np.atleast_2d(weights).astype(float)
    t_max = float(times[-1])
    ended, k = _upper_quarter(times, events)
    u = float(ended[-k]) if len(ended) > k else 0.0
    exposure = (w * np.maximum(0.0, times - u)).sum(axis=1)
    tail_events = (w * events * (times > u)).sum(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        mrl = np.where(tail_events > 0, exposure / tail_events, np.maximum(t_max, restricted))
    alpha = hill_alpha(times, events)
    heavy = t_max / (alpha - 1) > mrl
    second = np.where(
        heavy,
        alpha * t_max**2 / (alpha - 2) if math.isfinite(alpha) else 0.0,
        t_max**2 + 2 * t_max * mrl + 2 * mrl**2,
    )
    index = np.where(heavy, alpha, math.inf)
    return np.where(heavy, t_max / (alpha - 1), mrl), index, second


def km_moments(
    times: np.ndarray, events: np.ndarray, weights: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Mean and second moment of runtime, one per row of ``weights`` (a bootstrap):
    Kaplan–Meier up to the longest observation, then the survival left (runs still
    going, or cut off, longer than anything seen to end) on the tail of ``_tail``."""
    s_after, s_before = _kaplan_meier(times, events, weights)
    prev = np.concatenate([[0.0], times[:-1]])
    mean = (s_before * (times - prev)).sum(axis=1)
    second = (s_before * (times**2 - prev**2)).sum(axis=1)
    left = s_after[:, -1]
    mrl, _, tail_second = _tail(times, events, weights, mean)
    return mean + left * mrl, second + left * tail_second


def estimate_runtime(
    survival: Survival, z: float = 1.96, resamples: int = _RESAMPLES, seed: int = 0
) -> RuntimeEstimate:
    """T_i with its spread and a bootstrap percentile interval at confidence ``z``.

    The interval is for the mean runtime of the type (what a plan's makespan and cost
    scale with); observations are resampled whole, censored ones included. Seeded, so
    the same data always gives the same interval (a replayed run decides the same).
    """
    if survival.n_events == 0:
        raise ValueError("no runtime has been seen to end yet")
    times = np.asarray(survival.times, dtype=float)
    events = np.asarray(survival.events, dtype=bool)
    n = len(times)
    mean, second = km_moments(times, events, np.ones(n))
    m, sd = float(mean[0]), math.sqrt(max(0.0, float(second[0]) - float(mean[0]) ** 2))
    if resamples <= 0 or n < 2:
        return RuntimeEstimate(m, sd, m, m, survival.n_events, n - survival.n_events)
    rng = np.random.default_rng(seed)
    weights = rng.multinomial(n, np.full(n, 1.0 / n), size=resamples)
    boot, _ = km_moments(times, events, weights)
    boot = boot[np.isfinite(boot)]
    p = NormalDist().cdf(-z)
    lo, hi = (float(np.quantile(boot, q)) for q in (p, 1 - p))
    return RuntimeEstimate(m, sd, min(lo, m), max(hi, m), survival.n_events, n - survival.n_events)


@dataclass(frozen=True, slots=True)
class RuntimeEstimate:
    """What one type's runtimes are believed to be: mean, spread, and the mean's interval."""

    mean_s: float
    sd_s: float
    lo_s: float
    hi_s: float
    done: int
    censored: int

    def widened(self, tasks: float, z: float) -> tuple[float, float]:
        """The interval for the mean of ``tasks`` more runs: the mean's own uncertainty
        and the spread of a finite number of runs around it, added in quadrature."""
        spread = z * self.sd_s / math.sqrt(max(tasks, 1.0))
        down = math.hypot(self.mean_s - self.lo_s, spread)
        up = math.hypot(self.hi_s - self.mean_s, spread)
        return max(self.mean_s - down, 1e-9), self.mean_s + up


@dataclass(frozen=True, slots=True)
class _Curve:
    """The survival curve of ended runs, kept until the next run ends."""

    times: list[float]
    s_after: list[float]  # S just after each time
    area: list[float]  # ∫ S from each time to the last
    mrl: float  # mean residual life of the tail past the last time
    alpha: float  # the tail's Pareto index (inf: the tail is exponential)
    mean_s: float
    sd_s: float
    extreme: _Curve | None = None  # the same runs with a tail from a threshold (max-of-many)


def _threshold_curve(
    t_arr: np.ndarray,
    e_arr: np.ndarray,
    times: list[float],
    s_after: list[float],
    whole: RuntimeEstimate,
) -> _Curve | None:
    """The curve for the longest of many runs (peaks over threshold): Kaplan–Meier up to
    u, the (k+1)-th longest runtime seen to end (k a quarter of them, at least 3), and an
    exponential tail fitted above u after it, its rate the events per second of exposure
    above u. (A Pareto tail by Hill's index, chosen by likelihood, and a generalized
    Pareto by moments were tried: on benchmarks/estimates.py both did worse on the
    median makespan error, over-predicting bimodal bags.) The plain curve ends where
    the sample ends, so the longest task of a bag of thousands would never be longer
    than the longest of a sample of tens; None with too few ends to fit above a
    threshold."""
    ended, k = _upper_quarter(t_arr, e_arr)
    if len(ended) <= k or ended[-k - 1] <= 0:
        return None
    u = float(ended[-k - 1])
    exposure = float(np.maximum(0.0, t_arr - u).sum())
    mrl = exposure / k
    kept = bisect.bisect_right(times, u)
    cut_t, cut_s = times[:kept], s_after[:kept]
    if not cut_t or cut_t[-1] < u:
        cut_t, cut_s = [*cut_t, u], [*cut_s, cut_s[-1] if cut_s else 1.0]
    return _Curve(cut_t, cut_s, [], mrl, math.inf, whole.mean_s, whole.sd_s)


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
    done_times: list[float] = field(default_factory=list)  # sorted
    censored_times: list[float] = field(default_factory=list)  # sorted
    sample: list[int] = field(default_factory=list)  # the sample set, in start order
    sample_open: set[int] = field(default_factory=set)  # of it, still without an end
    done: int = 0
    _curve: _Curve | None = field(default=None, compare=False, repr=False)
    # Compact sampling: these runs mapped through a fit (``mapped_stats``), kept with
    # their own curves until a run ends here.
    _mapped: dict[AffineFit, RuntimeStats] = field(default_factory=dict, compare=False, repr=False)

    def start(self, task: int) -> None:
        """A run of ``task`` starts on this type (replicas are not counted)."""
        if len(self.sample) < self.sample_target and task not in self.sample_open:
            self.sample.append(task)
            self.sample_open.add(task)

    def record(self, runtime_s: float, task: int | None = None) -> None:
        """A counted run ended with a result after ``runtime_s``."""
        self.done += 1
        bisect.insort(self.done_times, runtime_s)
        if task is not None:
            self.sample_open.discard(task)
        self._curve = None
        self._mapped.clear()

    def censor(self, elapsed_s: float, task: int | None = None) -> None:
        """A counted run ended without a result after ``elapsed_s`` (it needed longer)."""
        bisect.insort(self.censored_times, elapsed_s)
        if task is not None:
            self.sample_open.discard(task)
        self._curve = None
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
        self, running_elapsed: Iterable[float] = (), z: float = 1.96, resamples: int = _RESAMPLES
    ) -> RuntimeEstimate:
        """T_i, its spread and interval, running tasks counted as censored at their age."""
        return estimate_runtime(self.survival(running_elapsed), z, resamples)

    def mean(self, running_elapsed: Iterable[float] = ()) -> float:
        """T_i: the survival-curve mean over ended runs and the running ones' ages."""
        running = list(running_elapsed)
        if not running:
            return self._survival_curve().mean_s
        return self.estimate(running, resamples=0).mean_s

    def stddev(self, running_elapsed: Iterable[float] = ()) -> float:
        """Standard deviation of runtimes, from the same survival curve (0 before any end)."""
        if self.done == 0:
            return 0.0
        running = list(running_elapsed)
        if not running:
            return self._survival_curve().sd_s
        return self.estimate(running, resamples=0).sd_s

    def _survival_curve(self) -> _Curve:
        """Kaplan–Meier over the ended runs: times, S after each, ∫S from each time to the
        last, and the mean residual life of the tail past the last time."""
        if self._curve is None:
            if self.done == 0:
                raise ValueError("no runtime has been seen to end yet")
            surv = self.survival()
            whole = estimate_runtime(surv, resamples=0)
            t_arr = np.asarray(surv.times, dtype=float)
            e_arr = np.asarray(surv.events, dtype=bool)
            ones = np.ones(len(t_arr))
            after, before = _kaplan_meier(t_arr, e_arr, ones)
            prev = np.concatenate([[0.0], t_arr[:-1]])
            restricted = (before * (t_arr - prev)).sum(axis=1)
            mrls, index, _ = _tail(t_arr, e_arr, ones, restricted)
            mrl, alpha = float(mrls[0]), float(index[0])
            times, s_after = list(surv.times), [float(v) for v in after[0]]
            # ∫ S from times[j] to times[-1]: S is s_after[i] on [times[i], times[i+1]).
            area = [0.0] * len(times)
            for j in range(len(times) - 2, -1, -1):
                area[j] = area[j + 1] + s_after[j] * (times[j + 1] - times[j])
            extreme = _threshold_curve(t_arr, e_arr, times, s_after, whole)
            self._curve = _Curve(
                times, s_after, area, mrl, alpha, whole.mean_s, whole.sd_s, extreme
            )
        return self._curve

    def extreme_curve(self, running_elapsed: Sequence[float] = ()) -> _Curve:
        """The curve for the longest of many runs (``_threshold_curve``; the plain curve
        when too few runs ended), runs still going counted as censored at their ages, as
        in T_i (``estimate``): on skewed runtimes those are the long ones, and a tail
        fitted on ended runs alone leaves them out (their exposure above the threshold,
        without an end, lengthens it). Its mean and spread are T_i's, with the same runs
        censored. Raises ValueError before any run has ended."""
        ended = self._survival_curve()
        if not running_elapsed:
            return ended.extreme or ended
        n_done = len(self.done_times)
        t_arr = np.concatenate(
            [self.done_times, self.censored_times, np.asarray(running_elapsed, dtype=float)]
        )
        e_arr = np.arange(len(t_arr)) < n_done
        order = np.lexsort((~e_arr, t_arr))  # by time, an end before a censoring
        t_arr, e_arr = t_arr[order], e_arr[order]
        ones = np.ones(len(t_arr))
        after, _ = _kaplan_meier(t_arr, e_arr, ones)
        mean, second = (float(v[0]) for v in km_moments(t_arr, e_arr, ones))
        sd = math.sqrt(max(0.0, second - mean**2))
        whole = RuntimeEstimate(mean, sd, mean, mean, n_done, len(t_arr) - n_done)
        curve = _threshold_curve(t_arr, e_arr, t_arr.tolist(), after[0].tolist(), whole)
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


@dataclass(frozen=True, slots=True)
class RaggedEnd:
    """How far past the fluid end the last task ends: expected, and a low and high
    quantile, in seconds (the fluid end shares all work evenly; really each task ends
    when its own runtime is over, and the run ends with the latest of them)."""

    mean_s: float
    lo_s: float
    hi_s: float


def _survival_and_area(c: _Curve, t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
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
    starts: list[tuple[_Curve, float]],
    runs: list[tuple[_Curve, float]],
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


# --- compact sampling (slides 001): one type's runtimes from another's ------------------


@dataclass(frozen=True, slots=True)
class AffineFit:
    """g(x) = a·x + b between two types' runtimes of the same tasks (slides 001, compact
    sampling), fitted by least squares on ``pairs`` pairs (x on the reference type).

    ``resid_sd`` is the residuals' standard deviation (k − 2 degrees of freedom): the
    part of a task's runtime the reference does not predict. A mean runtime T on the
    reference maps to a·T + b with the variance of the fitted line at T,
    σ²·(1/k + (T − x̄)²/Sxx) (the regression's own error, which a larger sample on the
    reference does not remove).
    """

    a: float
    b: float
    pairs: int
    x_mean: float
    sxx: float
    resid_sd: float

    def __call__(self, x: float) -> float:
        return self.a * x + self.b

    def line_var(self, x: float) -> float:
        """Variance of the fitted line's value at ``x``."""
        return self.resid_sd**2 * (1.0 / self.pairs + (x - self.x_mean) ** 2 / self.sxx)


def fit_affine(pairs: Iterable[tuple[float, float]]) -> AffineFit | None:
    """Least-squares g(x) = a·x + b through (reference runtime, other runtime) pairs;
    None with fewer than three pairs, no spread in x, or a slope that is not positive
    (runtimes that fall as the reference's rise cannot be mapped)."""
    xy = np.asarray(list(pairs), dtype=float).reshape(-1, 2)
    k = len(xy)
    if k < 3:
        return None
    x, y = xy[:, 0], xy[:, 1]
    x_mean, y_mean = float(x.mean()), float(y.mean())
    sxx = float(((x - x_mean) ** 2).sum())
    if sxx <= 0:
        return None
    a = float(((x - x_mean) * (y - y_mean)).sum()) / sxx
    if a <= 0:
        return None
    b = y_mean - a * x_mean
    resid = y - (a * x + b)
    resid_sd = math.sqrt(float((resid**2).sum()) / (k - 2)) if k > 2 else 0.0
    return AffineFit(a, b, k, x_mean, sxx, resid_sd)


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
    resamples: int = _RESAMPLES,
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

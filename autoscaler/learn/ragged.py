"""The ragged end of a run: how far past the fluid end its last task ends, on each
type's survival curve for the longest of many runs (``RuntimeStats.extreme_curve``)."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, replace
from statistics import NormalDist

import numpy as np

from autoscaler.learn.curve import Curve
from autoscaler.learn.gpd import Gpd
from autoscaler.learn.stats import RuntimeStats


@dataclass(frozen=True, slots=True)
class RaggedEnd:
    """How far past the fluid end the last task ends: expected, the median, and a low
    and high quantile, in seconds (the fluid end shares all work evenly; really each
    task ends when its own runtime is over, and the run ends with the latest of them).

    On heavy-tailed runtimes the expected end lies well past the median (the longest of
    a thousand Pareto α 2.5 runs has a mean 1.29 times its median): it counts the rare
    bag whose longest task runs very long, and most runs end before it."""

    mean_s: float
    median_s: float
    lo_s: float
    hi_s: float
    uncopied_s: float | None = None  # the median without tail replication's copies


def _tail(c: Curve) -> Gpd:
    """The generalized Pareto tail of ``c`` past its last time (alpha inf)."""
    return Gpd(c.xi, max(c.mrl, 1e-9) * (1.0 - c.xi))


def _horizon(c: Curve, tasks: float) -> float:
    """How far past 0 the last of ``tasks`` runs on ``c`` may still end: where the
    chance that any of them runs longer falls below 1e-6."""
    t_max, s_end = c.times[-1], c.s_after[-1]
    if s_end <= 0:
        return t_max
    p = min(1.0, 1e-6 / (max(tasks, 1.0) * s_end))
    if math.isfinite(c.alpha):
        return float(t_max * p ** (-1.0 / c.alpha))
    g = _tail(c)
    return t_max + min(g.endpoint(), g.quantile_excess(p))


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
    else:  # S(t_max)·P(Y > t − t_max), Y generalized Pareto (exponential at ξ = 0)
        g = _tail(c)
        s_tail = s_end * g.survival(beyond)
        a_tail = cum[-1] + s_end * g.area(beyond)
    survival = np.where(past, s_tail, s_on[j])
    area = np.where(past, a_tail, cum[j] + s_on[j] * (t - knots[j]))
    return survival, area


def ragged_end(
    span_s: float,
    starting: Iterable[tuple[RuntimeStats, float]],
    running: Iterable[tuple[RuntimeStats, float]] = (),
    z: float = 1.96,
    points: int = 2048,
    copies: Iterable[tuple[RuntimeStats, RuntimeStats, float]] = (),
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

    Its high quantile is the larger of this one's and the same on each curve's heavy
    tail (``Curve.heavy``: the heavy end of the shapes its exceedances allow): the
    first plan's tail stands on a handful of runs, and one fitted a little light puts
    the bag's longest task, and so its end, well short (Pareto α 2.5: 3 of 20 runs
    ended past the high end).

    S is each type's curve for the longest of many runs (``extreme_curve``, with that
    type's running tasks censored at their ages): Kaplan–Meier up to a threshold and a
    generalized Pareto tail past it, so a heavy tail (lognormal, Weibull k < 1,
    Pareto) reaches as far as the bag's longest task does, and a bounded one (normal,
    a bimodal bag's long mode) stops near where its runs do. The interval is the end's
    own spread, its quantiles at ±``z``.

    ``copies``: (a type's stats, a faster type's, share): tail replication (BaTS's tail
    phase, ``budget.tail``). Once the bag is empty, idle machines of the faster type
    copy the tasks still running on the slower one, which then end with the first of
    the two runs: a copy is taken to start at the fluid end on that share of the
    slower type's tasks. Replication can only shorten the end: the low end counts it,
    and so does the median where the runs seen look light-tailed (``light_tailed``);
    the high end does not. Left out of the median, the first plan's makespan on light
    tails was 5 to 13 % long (``benchmarks.estimates``: normal and lognormal σ 0.5, long
    boots, 60 machines a type). Counted on heavy tails it was 10 to 23 % short
    (lognormal σ 1, Pareto α 2.5, Weibull k 0.7): there the end without copies already
    matches runs that replicate and falls about 10 % short of runs that do not, as its
    tail, fitted to a first plan's few runs, reaches too short by about what the copies
    save.
    """
    started = [(s, n) for s, n in starting if n > 0 and s.done > 0]
    going = [(s, age) for s, age in running if s.done > 0]
    if not started and not going:
        return RaggedEnd(0.0, 0.0, 0.0, 0.0)
    ages: dict[int, tuple[RuntimeStats, list[float]]] = {}
    for s, _ in started:
        ages.setdefault(id(s), (s, []))
    for s, age in going:
        ages.setdefault(id(s), (s, []))[1].append(age)
    curves = {key: s.extreme_curve(a) for key, (s, a) in ages.items()}
    copies = list(copies)
    copy: dict[int, tuple[Curve, float]] = {}
    for slow, fast, share in copies:
        if id(slow) in curves and share > 0 and fast.done > 0:
            c = curves.get(id(fast)) or fast.extreme_curve([])
            copy[id(slow)] = (c, min(share, 1.0))
    span = max(span_s, 0.0)
    end = _end_of(
        span,
        [(curves[id(s)], n, None) for s, n in started],
        [(curves[id(s)], a, None) for s, a in going],
        z,
        points,
    )
    if copy:
        copied = _end_of(
            span,
            [(curves[id(s)], n, copy.get(id(s))) for s, n in started],
            [(curves[id(s)], a, copy.get(id(s))) for s, a in going],
            z,
            points,
        )
        end = replace(end, lo_s=min(end.lo_s, copied.lo_s))
        if light_tailed([*(s for s, _ in ages.values()), *(f for _, f, _ in copies)]):
            median = min(end.median_s, copied.median_s)
            end = replace(end, median_s=median, uncopied_s=end.median_s)
    heavy = {key: _heavy(c) for key, c in curves.items()}
    if all(heavy[key] is c for key, c in curves.items()):
        return end
    high = _end_of(
        span,
        [(heavy[id(s)], n, None) for s, n in started],
        [(heavy[id(s)], a, None) for s, a in going],
        z,
        points,
    )
    return replace(end, hi_s=max(end.hi_s, high.hi_s))


LIGHT_CV = 0.6
"""The most sd/mean of a bag whose end counts tail replication's copies in its median
(``light_tailed``): a normal bag's 0.4, a lognormal σ 0.5's 0.53; not an exponential's 1."""

LIGHT_SKEW_PER_CV = 4.0
"""The most skewness per unit of sd/mean of such a bag (``light_tailed``). A lognormal's
is 3 + cv² (3.28 at σ 0.5, 4 at cv 1), a gamma's 2, a normal's 0; a Pareto's is
unbounded, and at α 2.5 its pooled first-plan runs gave 4.2 to 10."""


def light_tailed(stats: Iterable[RuntimeStats]) -> bool:
    """Whether the runs seen on these types, each scaled to its type's mean (the types
    run one bag), look light-tailed: sd/mean at most ``LIGHT_CV`` and skewness at most
    ``LIGHT_SKEW_PER_CV`` times it.

    On such a bag the end counts the copies of tail replication in its median: a
    slower type's last tasks set the end, and copies on the faster one end them
    sooner. On a heavier one the bag's longest tasks set it, wherever they run, and the
    tail fitted to a first plan's few runs reaches short of them by about what the
    copies save (counting the copies there made the first plan's makespan 10 to 23 %
    short: lognormal σ 1, Pareto α 2.5, Weibull k 0.7). Each type's own sample does not
    tell the two apart (a slow type's 30 Pareto runs: sd/mean 0.23 to 0.32, as a
    normal bag's); all types' runs together do, as the fast type has run most of them.
    """
    scaled = []
    for s in {id(s): s for s in stats}.values():
        x = np.asarray(s.done_times)
        if len(x) > 1 and x.mean() > 0:
            scaled.append(x / x.mean())
    if not scaled:
        return False
    x = np.concatenate(scaled)
    cv = float(x.std())  # the mean is 1
    if cv == 0.0:
        return True
    skew = float(np.mean((x - x.mean()) ** 3)) / cv**3
    return cv <= LIGHT_CV and skew <= LIGHT_SKEW_PER_CV * cv


def _heavy(c: Curve) -> Curve:
    """``c`` with the heavy end of its tails (``Curve.heavy``), or ``c`` itself."""
    if c.heavy is None or math.isfinite(c.alpha) or c.heavy.xi <= c.xi:
        return c
    return replace(c, xi=c.heavy.xi, mrl=c.heavy.mrl, heavy=None)


Copy = tuple[Curve, float] | None
"""A faster type's curve and the share of a type's tasks copied onto it (``copies``)."""


def _grid(
    span: float,
    starts: list[tuple[Curve, float, Copy]],
    runs: list[tuple[Curve, float, Copy]],
    points: int,
) -> np.ndarray:
    """x, the end less the fluid end: even steps up to the longest run seen, then
    geometric ones out to where no task is left running (a heavy tail's far end is
    tens of times the longest run seen, and even steps there would be coarse where the
    end is likely)."""
    tasks: dict[int, tuple[Curve, float]] = {}
    for c, n, _ in [*starts, *((c, 1.0, None) for c, _, _ in runs)]:
        tasks[id(c)] = (c, tasks.get(id(c), (c, 0.0))[1] + n)
    seen = max(max(c.times[-1] for c, _ in tasks.values()), 1.0)
    far = max(_horizon(c, n) for c, n in tasks.values())
    far += max((age for _, age, _ in runs), default=0.0)
    if far <= 2 * seen:
        return np.linspace(-span, max(far, seen), points)
    even = np.linspace(-span, seen, points // 2)
    step = even[1] - even[0]
    return np.concatenate([even, seen + np.geomspace(step, far - seen, points - points // 2)])


def _copied(
    cdf: np.ndarray, grid: np.ndarray, copy: Copy, later: dict[int, np.ndarray]
) -> np.ndarray:
    """The log of a task's chance to have ended by each point of ``grid`` (its own run's
    ``cdf``), averaged over its chance to be copied at the fluid end (x = 0) onto a
    faster type, when it ends with the first of its two runs. ``later``: each copy
    curve's survival past the fluid end on ``grid``, worked out once per curve."""
    own: np.ndarray = np.log(np.clip(cdf, 1e-300, 1.0))
    if copy is None:
        return own
    c, share = copy
    if id(c) not in later:
        later[id(c)] = np.where(grid > 0, _survival_and_area(c, np.maximum(grid, 0.0))[0], 1.0)
    either = 1.0 - (1.0 - cdf) * later[id(c)]
    mixed: np.ndarray = share * np.log(np.clip(either, 1e-300, 1.0)) + (1.0 - share) * own
    return mixed


def _end_of(
    span: float,
    starts: list[tuple[Curve, float, Copy]],
    runs: list[tuple[Curve, float, Copy]],
    z: float,
    points: int,
) -> RaggedEnd:
    """The distribution of the end on given curves (``ragged_end``): its mean and the
    quantiles at ±``z``."""
    grid = _grid(span, starts, runs, points)
    log_cdf = np.zeros(len(grid))
    copies: dict[int, np.ndarray] = {}
    for c, n, copy in starts:
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
        log_cdf += n * _copied(cdf, grid, copy, copies)
    for c, age, copy in runs:
        s_age = float(_survival_and_area(c, np.asarray([age]))[0][0])
        if s_age <= 0:
            continue
        later = _survival_and_area(c, np.maximum(age + span + grid, 0.0))[0]
        log_cdf += _copied(1.0 - later / s_age, grid, copy, copies)
    cdf_max = np.exp(log_cdf)
    above = 1.0 - cdf_max
    expected = float(grid[0] + np.sum((above[1:] + above[:-1]) / 2 * np.diff(grid)))
    p = NormalDist().cdf(-z)

    def quantile(q: float) -> float:
        return float(grid[min(int(np.searchsorted(cdf_max, q)), len(grid) - 1)])

    return RaggedEnd(expected, quantile(0.5), quantile(p), quantile(1 - p))

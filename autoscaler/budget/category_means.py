"""Each type's mean time per task as the tasks it will be given (issue 21 §3, paper 004
§5): what the budget planner, the monitor and the prediction see of a type once
``categories:`` is set and sampled.

Without categories a type's mean T_j is over every task it ran. With them, the tasks
left are shared among the types by category (``categories.share``): given the mix
(machines a_j, lanes L_j = a_j·s_j), the mean time T[k][j] of a task of category k on
type j (``category_times``: the runs per (category, type), ``RunState.category_runs``;
a pair not measured filled by the paper's ratio rule, ``categories.metrics.fill``) and
the tasks left n_k, the LP

    min H  s.t.  Σ_k x[k][j]·T[k][j] <= H·L_j,  Σ_j x[k][j] = n_k,  x >= 0

gives the shares x, and the type's effective mean and spread are those of the tasks it
is given:

    T_j = Σ_k x[k][j]·T[k][j] / Σ_k x[k][j]
    σ_j² = Σ_k x[k][j]·(σ[k][j]² + T[k][j]²) / Σ_k x[k][j] − T_j²

A type given nothing (no lanes in the mix, or not needed) keeps the mean of its best
categories: those where its T[k][j] / min_i T[k][i] is least, weighted by their tasks
left. The mix itself comes from alternating this with the budget planner
(``category_mix``); the assignment (``budget.categories.CategoryChoice``) shares the
pending tasks among the machines alive with the same LP.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from autoscaler.budget.problem import TypeEstimate, first_tasks
from autoscaler.categories.deployment import Key, Metrics, fill, time_only
from autoscaler.categories.share import Share, share_makespan
from autoscaler.categories.sort import Category
from autoscaler.core.billing import BillingModel
from autoscaler.core.model import TaskState
from autoscaler.core.observations import Observations
from autoscaler.core.state import RunState
from autoscaler.core.task_ledger import Tasks

_OPEN = (TaskState.PENDING, TaskState.RUNNING)


@dataclass(frozen=True, slots=True)
class CategoryTimes:
    """What is known of the categories at a moment: tasks left and times per pair."""

    left: Mapping[int, int]  # n_k: tasks of category k not yet ended
    mean_s: Mapping[Key, float]  # T[k][j]
    sd_s: Mapping[Key, float]  # σ[k][j]: 0 where fewer than two runs give none

    def share(self, lanes: Mapping[str, int]) -> Share:
        """The LP above over ``lanes``; only the types with a time take part."""
        return share_makespan(self.left, self.mean_s, lanes)


def tasks_left(tasks: Tasks, pending_only: bool = False) -> Counter[int]:
    """Tasks per category not yet ended (or, ``pending_only``, not yet handed out)."""
    cat = tasks.task_category
    if pending_only:
        return Counter(cat[t] for t in tasks.pending if t < len(cat))
    return Counter(c for c, st in zip(cat, tasks.task_state, strict=False) if st in _OPEN)


def category_times(
    state: RunState,
    categories: Sequence[Category],
    types: Sequence[str],
    left: Mapping[int, int] | None = None,
) -> CategoryTimes | None:
    """T[k][j] and σ[k][j] for every category and each of ``types``, with the tasks left
    (``left``, or every task not ended); None unless each type has a category measured
    (the categories have not all been sampled yet)."""
    measured = {
        (c, t): time_only(runs[1] / runs[0])
        for (c, t), runs in state.observed.category_runs.items()
        if runs[0] > 0 and t in types
    }
    means = fill(measured, categories, types)
    if not types or {t for _, t in means} != set(types):
        return None
    cv = [
        sd / m for (k, t), m in _means(measured).items() if (sd := _sd(state.observed, (k, t))) > 0
    ]
    spread = sum(cv) / len(cv) if cv else 0.0  # a pair with no spread measured: the mean CV
    mean_s = {key: m.turnaround_s for key, m in means.items()}
    sd_s = {key: _sd(state.observed, key) or spread * mean_s[key] for key in mean_s}
    return CategoryTimes(tasks_left(state.tasks) if left is None else left, mean_s, sd_s)


def fleet(state: RunState) -> dict[str, int]:
    """Machines kept per type: alive and not marked to go, and launches in flight (the
    target while there are none)."""
    counts: Counter[str] = Counter()
    for m in state.fleet.alive_machines():
        if not m.marked:
            counts[m.type.name] += 1
    for tname, count in state.fleet.pending_launches.values():
        counts[tname] += count
    return dict(counts) if counts else dict(state.decisions.target)


def effective(
    billing: BillingModel,
    est: Mapping[str, TypeEstimate],
    times: CategoryTimes,
    counts: Mapping[str, int],
) -> dict[str, TypeEstimate]:
    """``est`` with each type's mean and spread those of the tasks the mix ``counts``
    gives it (the module's formula); p_i follows its mean."""
    lanes = {n: counts.get(n, 0) * e.slots for n, e in est.items() if counts.get(n, 0) > 0}
    share = times.share(lanes)
    out: dict[str, TypeEstimate] = {}
    for name, e in est.items():
        given = share.given(name) or _best(times, name)
        if not given:
            out[name] = e
            continue
        weight = sum(given.values())
        mean = sum(x * times.mean_s[k, name] for k, x in given.items()) / weight
        square = (
            sum(
                x * (times.sd_s[k, name] ** 2 + times.mean_s[k, name] ** 2)
                for k, x in given.items()
            )
            / weight
        )
        out[name] = replace(
            e,
            mean_s=mean,
            sd_s=math.sqrt(max(0.0, square - mean * mean)),
            first_tasks=first_tasks(billing, e.boot_s, e.slots, mean),
        )
    return out


def aware(
    state: RunState,
    est: Mapping[str, TypeEstimate],
    categories: Sequence[Category] | None,
    counts: Mapping[str, int] | None = None,
) -> dict[str, TypeEstimate]:
    """``est`` as the mix ``counts`` (the fleet kept, by default) would see it; ``est``
    itself without categories or before they are sampled."""
    if not categories or not est or not state.tasks.task_category:
        return dict(est)
    times = category_times(state, categories, sorted(est))
    if times is None:
        return dict(est)
    return effective(state.billing, est, times, fleet(state) if counts is None else counts)


def alone(
    state: RunState, est: Mapping[str, TypeEstimate], categories: Sequence[Category] | None
) -> dict[str, TypeEstimate]:
    """Each type of ``est`` as it would be alone: its mean over every task left (for a
    choice of one type, ``plans.best_effort``: as a type given nothing keeps its best
    categories, the type left out of the fleet would otherwise always look best)."""
    if not categories or not est or not state.tasks.task_category:
        return dict(est)
    times = category_times(state, categories, sorted(est))
    return dict(est) if times is None else alone_means(state.billing, est, times)


def alone_means(
    billing: BillingModel, est: Mapping[str, TypeEstimate], times: CategoryTimes
) -> dict[str, TypeEstimate]:
    """Each type's estimate as if it ran every task left alone."""
    return {n: effective(billing, {n: e}, times, {n: 1})[n] for n, e in est.items()}


def _best(times: CategoryTimes, name: str) -> dict[int, float]:
    """A type given no task: the categories it is best at, relative to the other
    types, weighted by their tasks left (every category when none is left)."""
    cats = sorted({k for k, t in times.mean_s if t == name})
    live = [k for k in cats if times.left.get(k, 0) > 0] or cats
    if not live:
        return {}
    ratio = {
        k: times.mean_s[k, name] / min(m for (kk, _), m in times.mean_s.items() if kk == k)
        for k in live
    }
    least = min(ratio.values())
    return {k: float(max(1, times.left.get(k, 0))) for k in live if ratio[k] <= least * (1 + 1e-9)}


def _sd(observed: Observations, key: Key) -> float:
    runs = observed.category_runs.get(key)
    if runs is None or runs[0] < 2:
        return 0.0
    n, total, squares = runs
    return math.sqrt(max(0.0, (squares - total * total / n) / (n - 1)))


def _means(measured: Mapping[Key, Metrics]) -> dict[Key, float]:
    return {key: m.turnaround_s for key, m in measured.items()}

"""Categories in deadline mode (issue 21 §3, paper 004 §4–5 with paper 002's planners).

With ``categories:`` in the config, a job whose tasks fall into several categories is
planned as one part per category it has in the bag, named ``<job>#c<id>`` (a *key*;
without categories a task's key is its job's name). Each part has its job's deadline
(``jobs.Deadlines``) and its own time per task on each type, so paper 002's multi-job
model (7) decides which types run which categories: a MILP over (category, type)
counts with the deadline and budget constraints. The queues the reassignment and the
forecasts see are keyed the same way, so a queue of mixed categories is estimated task
by task; what they say per key is said per job (``by_job``).

A category's time per task on a type (``category_times``), in this order:

1. measured: the runs of its tasks that ended there with a result
   (``RunState.category_runs``), mean + z·σ/√n as a sampled job's;
2. the paper's ratio rule (``categories.metrics.fill``) from the categories measured
   on the type;
3. with the job's declared ``task_s``: that time scaled by the category's mean
   estimate over the job's (``TaskSpec.estimate_s``, a bag's ``estimate_s`` column),
   or unchanged when the bag gives no estimates.

A type with none of these cannot run the part yet (a sampled job samples first:
``deadline.job_sampling`` takes the large categories first on each type).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Mapping, Sequence

from autoscaler.categories.deployment import fill, time_only
from autoscaler.categories.sample_order import shortfall
from autoscaler.categories.sort import Category
from autoscaler.core.job_ledger import Jobs
from autoscaler.core.model import JobSpec
from autoscaler.core.observations import Observations
from autoscaler.core.state import Machine, RunState
from autoscaler.core.task_ledger import Tasks
from autoscaler.deadline.jobs import (
    CATEGORY_SEP,
    DeadlineSettings,
    category_counts,
    job_categories,
    machine_task_s,
    planned_types,
    task_times,
)
from autoscaler.deadline.prior import mean_sd


def keyed(cfg: DeadlineSettings, tasks: Tasks) -> bool:
    """Whether this run plans by category."""
    return bool(cfg.categories) and bool(tasks.task_category)


def key_of(cfg: DeadlineSettings, tasks: Tasks, work: Jobs, tid: int) -> str:
    """The name ``tid`` is planned under: its job's, or its job's part of its category."""
    name = work.job_of(tid).name
    cat = tasks.task_category
    if not cfg.categories or tid >= len(cat) or cat[tid] < 0:
        return name
    return f"{name}{CATEGORY_SEP}{cat[tid]}"


def job_of_key(work: Jobs, key: str) -> JobSpec:
    return work.job_named(key.partition(CATEGORY_SEP)[0])


def category_of_key(key: str) -> int | None:
    _, sep, cat = key.partition(CATEGORY_SEP)
    return int(cat) if sep else None


def by_key(
    cfg: DeadlineSettings, state: RunState, tasks: Mapping[str, Sequence[int]]
) -> dict[str, list[int]]:
    """``tasks`` (by job name) by key: one part per (job, category) with categories."""
    if not keyed(cfg, state.tasks):
        return {name: list(tids) for name, tids in tasks.items()}
    out: dict[str, list[int]] = {}
    for tids in tasks.values():
        for tid in tids:
            out.setdefault(key_of(cfg, state.tasks, state.work, tid), []).append(tid)
    return out


def all_keys(cfg: DeadlineSettings, state: RunState) -> list[str]:
    """Every key of the run: each job's name, and with categories its parts, one per
    category it has."""
    out = [j.name for j in state.work.jobs]
    if keyed(cfg, state.tasks):
        for j in state.work.jobs:
            out += [f"{j.name}{CATEGORY_SEP}{c}" for c in sorted(job_categories(state, j))]
    return out


def by_job(state: RunState, keys: Iterable[str]) -> dict[str, list[str]]:
    """The keys of each job."""
    out: dict[str, list[str]] = {}
    for key in keys:
        out.setdefault(job_of_key(state.work, key).name, []).append(key)
    return out


def key_times(
    cfg: DeadlineSettings, state: RunState, key: str, every: bool = False
) -> dict[str, float]:
    """The planned time per task of ``key`` per type (``jobs.task_times`` for a job;
    ``every``: on its fallback types too, ``jobs.planned_types``)."""
    job = job_of_key(state.work, key)
    cat = category_of_key(key)
    if cat is None:
        return task_times(cfg, state, job, every)
    return category_times(cfg, state, job, cat, every)


def category_times(
    cfg: DeadlineSettings, state: RunState, job: JobSpec, cat: int, every: bool = False
) -> dict[str, float]:
    """The time per task of ``job``'s tasks of category ``cat`` on each type that can
    run them: measured, else by the ratio rule, else scaled from the declared time."""
    allowed = set(planned_types(state, job, every))
    types = [t for t in state.types if not job.task_s or t in allowed]
    filled = _ratio_rule(cfg, state.observed, types)
    out: dict[str, float] = {}
    for t in types:
        runs = state.observed.category_runs.get((cat, t))
        if runs is not None and runs[0] > 0:
            mean, sd = mean_sd(runs)
            out[t] = mean + cfg.z * sd / math.sqrt(runs[0])
        elif (cat, t) in filled:
            out[t] = filled[cat, t]
        elif t in job.task_s:
            out[t] = job.task_s[t] * _estimate_scale(cfg, state, job, cat)
    return out


def machine_key_s(cfg: DeadlineSettings, state: RunState, m: Machine, key: str) -> float | None:
    """``m``'s time per task of ``key``: for a category, what its type showed of it,
    else its planned time there; else (and for a job) ``jobs.machine_task_s``."""
    job = job_of_key(state.work, key)
    cat = category_of_key(key)
    if cat is not None:
        runs = state.observed.category_runs.get((cat, m.type.name))
        if runs is not None and runs[0] > 0:
            return runs[1] / runs[0]
        planned = category_times(cfg, state, job, cat).get(m.type.name)
        if planned is not None:
            return planned
    return machine_task_s(cfg, state, m, job)


def planned_s(cfg: DeadlineSettings, state: RunState, key: str, type_name: str) -> float:
    """The time per task of ``key`` on a machine of ``type_name`` not yet up (one of
    its fallback types too: the watch may launch one for it)."""
    if category_of_key(key) is not None:
        return key_times(cfg, state, key, every=True).get(type_name, 0.0)
    return task_times(cfg, state, job_of_key(state.work, key), every=True).get(type_name, 0.0)


def sample_first(
    cfg: DeadlineSettings, state: RunState, type_name: str, pending: Sequence[int]
) -> list[int]:
    """``pending`` in the order ``type_name`` samples it: first what the large
    categories still need there (``categories.sample_order``, as budget mode), then one
    task of each category in turn, the largest first (beyond the paper: samples beyond
    the large categories' measure the others rather than repeat them), the bag's order
    within a category."""
    if not keyed(cfg, state.tasks):
        return list(pending)
    need = shortfall(state, cfg.categories, type_name, cfg.category_per, cfg.category_share)
    cat = state.tasks.task_category
    per_cat: dict[int, list[int]] = {}
    for t in pending:
        per_cat.setdefault(cat[t] if t < len(cat) else -1, []).append(t)
    first: list[int] = []
    for c, n in need.items():
        got, per_cat[c] = per_cat.get(c, [])[:n], per_cat.get(c, [])[n:]
        first += got
    lanes = sorted(per_cat.values(), key=len, reverse=True)
    for i in range(max(map(len, lanes), default=0)):
        first += [lane[i] for lane in lanes if i < len(lane)]
    return first


def _ratio_rule(
    cfg: DeadlineSettings, observed: Observations, types: Sequence[str]
) -> dict[tuple[int, str], float]:
    """Each (category, type)'s mean time by the ratio rule, for the types in ``types``
    with some category measured."""
    runs = tuple(
        (c, t, n, total) for (c, t), (n, total, _) in observed.category_runs.items() if n > 0
    )
    return _ratio_table(cfg.categories, runs, tuple(types))


@functools.lru_cache(maxsize=256)
def _ratio_table(
    categories: tuple[Category, ...],
    runs: tuple[tuple[int, str, float, float], ...],
    types: tuple[str, ...],
) -> dict[tuple[int, str], float]:
    """``_ratio_rule`` of the runs (category, type, count, total seconds), kept: it is
    asked for every machine and part at every step, and changes only as runs end."""
    ids = {c.id for c in categories}
    measured = {(c, t): time_only(total / n) for c, t, n, total in runs if t in types and c in ids}
    if not measured:
        return {}
    return {key: m.turnaround_s for key, m in fill(measured, categories, types).items()}


def _estimate_scale(cfg: DeadlineSettings, state: RunState, job: JobSpec, cat: int) -> float:
    """The category's mean estimate over the job's mean estimate (1 without them)."""
    by_id = {c.id: c for c in cfg.categories}
    mine = by_id.get(cat)
    if mine is None or mine.avg_estimate_s is None:
        return 1.0
    counts = category_counts(state.tasks, job)
    total = weight = 0.0
    for c, n in counts.items():
        est = by_id[c].avg_estimate_s if c in by_id else None
        if est is not None:
            total += n * est
            weight += n
    if weight <= 0 or total <= 0:
        return 1.0
    return mine.avg_estimate_s / (total / weight)

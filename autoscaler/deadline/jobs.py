"""What the deadline controller knows of its jobs and machines: the settings, each job's
planned time per task (known, or sampled: mean + z·σ/√n), a machine's observed speed, the
samples it wants, the categories a job's tasks fall in, and the deadlines plans aim for
(a machine's queue as the reassignment sees it: ``deadline.queues``)."""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from typing import Literal

from autoscaler.categories.sample_order import large
from autoscaler.categories.sort import Category
from autoscaler.core.job_ledger import Jobs
from autoscaler.core.model import JobSpec
from autoscaler.core.observations import Moments, Observations
from autoscaler.core.solve import Solver
from autoscaler.core.state import Machine, RunState
from autoscaler.core.task_ledger import Tasks
from autoscaler.deadline.prior import Blend, blend, mean_sd, pooled

EPS = 1e-6


@dataclass(frozen=True, slots=True)
class DeadlineSettings:
    planner: Literal["multi", "single"] = "multi"  # Algorithm 2 (model 7) or 3 (model 10)
    reassign: bool = True  # Algorithm 4 every monitoring interval
    buy_when_late: bool = True  # beyond the paper: new machines for what is still late
    solver: Solver = "highs"
    # Declared task times are a prior (``deadline.prior``): planning blends them with the
    # runs of the job and of earlier jobs of its application; False: believed forever.
    learn_task_times: bool = True
    prior_cv: float = 0.25  # how far a declared time may be off, as a share of it (τ/μ₀)
    note_share: float = 0.2  # a learned time this far off the declared one is said (once)
    note_runs: int = 5  # ... once this many runs show it
    replan: bool = True  # ... slower: what it makes late moves at once (``replan``)
    sample: int = 5  # runs per type of a job without known times before it is planned
    z: float = 1.96  # a sampled job is planned on mean + z·σ/√n
    late_change: float = 0.1  # a lateness is said again when it changes by this share
    guard_z: float = 2.0  # plans and moves aim this many task-time sds before a deadline
    keep_open: bool = False  # a pool: no Stop when the work is done; jobs join (JobAdded)
    # Categories (paper 004; ``deadline.category_parts``): the bag's, none without
    # ``categories:``; sample runs of each large category per type, the share that is large.
    categories: tuple[Category, ...] = ()
    category_per: int = 2
    category_share: float = 0.2


def task_times(
    cfg: DeadlineSettings, state: RunState, job: JobSpec, every: bool = False
) -> dict[str, float]:
    """The planned time per task of ``job`` per type: known (the declared time blended
    with the runs seen, ``learned``), else sampled (mean + z·σ/√n, once ``sample`` runs
    ended there); types missing cannot run it (yet). Known times are given on the types
    it is planned on (``planned_types``; ``every``: its fallback too)."""
    if job.task_s:
        return {
            t: learned(cfg, state.work, state.observed, job, t).planned_s
            for t in planned_types(state, job, every)
        }
    out: dict[str, float] = {}
    for name in state.types:
        runs = state.observed.job_runs.get((job.name, name))
        if runs is None or runs[0] < min(cfg.sample, job.count):
            continue
        mean, sd = mean_sd(runs)
        out[name] = mean + cfg.z * sd / math.sqrt(runs[0])
    return out


def planned_types(state: RunState, job: JobSpec, every: bool = False) -> list[str]:
    """The types of ``job``'s ``task_s`` it is planned on: its own, and its fallback
    (``JobSpec.fallback``) too where none of its own can be launched now (refused,
    its provider held by a limit, or allowed no machines) and one of those can, or
    ``every`` (the watch, for tasks surely late: ``deadline.watch.buy_for_late``)."""
    known = [t for t in job.task_s if t in state.types]
    if every or not job.fallback:
        return known
    own = [t for t in known if t not in job.fallback]
    now = state.now

    def can(t: str) -> bool:
        return state.types[t].max_count > 0 and state.capacity.launchable(t, now)

    others = [t for t in known if t in job.fallback]
    return known if not any(map(can, own)) and any(map(can, others)) else own


def learned(
    cfg: DeadlineSettings, work: Jobs, observed: Observations, job: JobSpec, type_name: str
) -> Blend:
    """``job``'s declared time on ``type_name`` blended with the runs that ended there of
    its application's jobs (itself included; ``deadline.prior``); the declared time
    alone without ``learn_task_times``."""
    declared = job.task_s[type_name]
    if not cfg.learn_task_times:
        return blend(declared, None, cfg.prior_cv, cfg.z)
    app = job.application
    runs = [
        r
        for j in work.jobs
        if j.application == app and (r := observed.job_runs.get((j.name, type_name)))
    ]
    return blend(declared, pooled(runs), cfg.prior_cv, cfg.z)


def machine_task_s(
    cfg: DeadlineSettings, state: RunState, m: Machine, job: JobSpec
) -> float | None:
    """``m``'s time per task of ``job``: what it showed, else its type's, else planned."""
    for runs in (
        state.observed.machine_job_runs.get((m.id, job.name)),
        state.observed.job_runs.get((job.name, m.type.name)),
    ):
        if runs is not None and runs[0] > 0:
            return runs[1] / runs[0]
    if m.type.name in job.task_s:
        return learned(cfg, state.work, state.observed, job, m.type.name).planned_s
    return None


def is_sampling(cfg: DeadlineSettings, state: RunState, job: JobSpec) -> bool:
    """Whether ``job`` still waits for samples (no known times, some type short)."""
    if job.task_s:
        return False
    want = sample_want(cfg, state, job)
    return any(
        launchable(state, name) and (state.observed.job_runs.get((job.name, name)) or [0])[0] < want
        for name in state.types
    ) or not task_times(cfg, state, job)


def sample_want(cfg: DeadlineSettings, state: RunState, job: JobSpec) -> int:
    """Sample runs of ``job`` per type: ``sample``, or with categories enough to run
    ``category_per`` of each large category the job has (``deadline.job_sampling``)."""
    want = cfg.sample
    if cfg.categories and state.tasks.task_category:
        big = large(cfg.categories, cfg.category_share) & job_categories(state, job)
        want = max(want, cfg.category_per * len(big))
    return min(want, job.count)


def job_categories(state: RunState, job: JobSpec) -> set[int]:
    """The categories ``job``'s tasks fall in (none without categories)."""
    return {c for c in category_counts(state.tasks, job) if c >= 0}


_COUNTS: dict[tuple[int, int, int], tuple[tuple[int, ...], Counter[int]]] = {}


def category_counts(tasks: Tasks, job: JobSpec) -> Counter[int]:
    """How many of ``job``'s tasks fall in each category (-1: none). Kept per run's
    categories (an immutable tuple), as it is asked for every machine at every step."""
    cat = tasks.task_category
    key = (id(cat), job.first, job.count)
    hit = _COUNTS.get(key)
    if hit is not None and hit[0] is cat:
        return hit[1]
    if len(_COUNTS) > 1024:
        _COUNTS.clear()
    counts = Counter(cat[job.first : job.first + job.count])
    _COUNTS[key] = (cat, counts)
    return counts


def launchable(state: RunState, name: str) -> bool:
    return state.types[name].max_count > 0 and state.capacity.available(name, state.now)


class Deadlines(dict[str, float]):
    """Deadlines by job name; a part of a job planned by category (``job#c3``,
    ``deadline.category_parts``) has its job's."""

    def __missing__(self, key: str) -> float:
        job, sep, _ = key.partition(CATEGORY_SEP)
        if not sep:
            raise KeyError(key)
        return self[job]


CATEGORY_SEP = "#c"
"""Between a job's name and a category id in the name of the job's part of that category
(a job's name has no ``#``)."""


def job_deadlines(cfg: DeadlineSettings, state: RunState, guarded: bool = False) -> Deadlines:
    """Each job's deadline; ``guarded``: less ``guard_z`` times the spread of one of
    its tasks (the largest sd seen on a type), what plans and moves aim for, so the
    last task's own noise does not carry it past the deadline."""
    return Deadlines(
        {j.name: j.deadline - (guard(cfg, state, j) if guarded else 0.0) for j in state.work.jobs}
    )


def guard(cfg: DeadlineSettings, state: RunState, job: JobSpec) -> float:
    """With categories, the spread is that of a task of one of the job's categories on
    a type (a job of several categories is not one spread of times)."""
    if cfg.categories and state.tasks.task_category:
        mine = job_categories(state, job)
        seen = [r for (c, _), r in state.observed.category_runs.items() if c in mine]
    else:
        seen = _job_runs(state, job.name)
        if not any(r[0] >= 2 for r in seen):
            # None of its own yet (a recurring job planned from what its application's
            # earlier jobs ran): theirs, or the plan aims at the deadline itself and the
            # first runs' spread makes the watch buy a machine it did not forecast.
            app = job.application
            kin = [j.name for j in state.work.jobs if j.application == app and j is not job]
            seen = [r for name in kin for r in _job_runs(state, name)]
    worst = max((mean_sd(r)[1] for r in seen if r[0] >= 2), default=0.0)
    return cfg.guard_z * worst


def _job_runs(state: RunState, job: str) -> list[Moments]:
    """The moments of the runs of ``job`` seen on each type."""
    return [r for name in state.types if (r := state.observed.job_runs.get((job, name)))]

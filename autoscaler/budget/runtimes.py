"""What the controller knows of runtimes at ``now``: T_i per sampled type with its
spread and interval, the reserved runtimes a plan is made on, and N_e (paper 000 §2.2)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace

from autoscaler.budget.category_means import aware
from autoscaler.budget.outlook import expected_left
from autoscaler.budget.problem import TypeEstimate, first_tasks
from autoscaler.budget.sampling import derived, reference, stats
from autoscaler.budget.settings import ControllerSettings
from autoscaler.categories.sort import Category
from autoscaler.core.limits import max_alive
from autoscaler.core.machine_ledger import Fleet
from autoscaler.core.state import RunState
from autoscaler.learn.stats import RuntimeEstimate, derived_estimate, tail_estimates


def estimate(
    settings: ControllerSettings,
    state: RunState,
    name: str,
    ages: dict[str, list[float]],
    z: float = 1.96,
    resamples: int | None = None,
) -> RuntimeEstimate:
    """T_i with its spread and interval; running tasks counted as censored at their
    age (for a derived type, the reference's running tasks at their mapped age)."""
    d = derived(settings, state, name)
    if d is None:
        if resamples is None:
            return state.observed.stats[name].estimate(ages.get(name, ()), z=z)
        return state.observed.stats[name].estimate(ages.get(name, ()), z=z, resamples=resamples)
    fit, mapped = d
    ref_ages = ages.get(reference(settings, state), [])
    ref_mean = (
        state.observed.stats[reference(settings, state)].estimate(ref_ages, resamples=0).mean_s
    )
    mapped_ages = [max(1.0, fit(a)) for a in ref_ages]
    if resamples is None:
        return derived_estimate(mapped, fit, ref_mean, mapped_ages, z)
    return derived_estimate(mapped, fit, ref_mean, mapped_ages, z, resamples)


def n_eff(settings: ControllerSettings, state: RunState, name: str, e: TypeEstimate) -> float:
    """The runs T_i's standard error σ_i/√n stands on: the runs seen to end, or for
    a derived type the n for which σ_i/√n is the error of a·T_ref + b (the
    reference's mean's error times a, and the fitted line's, in quadrature)."""
    d = derived(settings, state, name)
    if d is None:
        return max(1, state.observed.stats[name].done)
    fit, _ = d
    base = state.observed.stats[reference(settings, state)]
    se_ref = base.stddev() / math.sqrt(max(1, base.done))
    var = (fit.a * se_ref) ** 2 + fit.line_var(base.mean())
    return max(1.0, e.sd_s**2 / var) if var > 0 else float(max(1, base.done))


def _sampled_types(state: RunState) -> list[str]:
    return [
        name
        for name in state.types
        if state.observed.stats[name].done > 0
        and any(m.type.name == name for m in state.fleet.machines.values())
    ]


def running_ages(fleet: Fleet, now: float) -> dict[str, list[float]]:
    """Ages of the counted runs going on, per type (replicas are not counted)."""
    ages: dict[str, list[float]] = {}
    for m in fleet.alive_machines():  # every tick of a big fleet: kept lean, the same order
        running = m.running
        if not running:
            continue
        mine = ages.get(m.type.name)
        if mine is None:
            mine = ages[m.type.name] = []
        if m.replicas:
            mine.extend(now - start for tid, start in running.items() if tid not in m.replicas)
        else:
            mine.extend(now - start for start in running.values())
    return {name: a for name, a in ages.items() if a}


def estimates(settings: ControllerSettings, state: RunState, now: float) -> dict[str, TypeEstimate]:
    """T_i per type with samples: ended runs, and running ones censored at their age."""
    ages = running_ages(state.fleet, now)
    billing = state.billing
    out: dict[str, TypeEstimate] = {}
    live = state.fleet.alive_counts()
    for name in _sampled_types(state):
        t = state.types[name]
        e = estimate(settings, state, name, ages, resamples=0)
        boot = state.fleet.boot_s(name)  # measured once a machine of the type came up
        out[name] = TypeEstimate(
            name=name,
            price=t.price,
            max_count=max_alive(state, name),
            boot_s=boot,
            mean_s=e.mean_s,
            sd_s=e.sd_s,
            live=live[name],
            first_cost=billing.cost(t.price, billing.first_step_s),
            first_tasks=first_tasks(billing, boot, t.slots, e.mean_s),
            slots=t.slots,
        )
    return out


def intervals(
    settings: ControllerSettings, state: RunState, now: float, est: Mapping[str, TypeEstimate]
) -> dict[str, RuntimeEstimate]:
    """Each type's mean runtime with its bootstrap interval (only when a plan is made).
    A mean the categories moved (``category_means``) keeps its interval's relative
    width about the moved mean, and the moved spread."""
    ages = running_ages(state.fleet, now)
    z = settings.confidence_z
    out = {}
    for name, e in est.items():
        r = estimate(settings, state, name, ages, z=z)
        if state.tasks.task_category and r.mean_s > 0 and e.mean_s != r.mean_s:
            f = e.mean_s / r.mean_s
            r = replace(
                r,
                mean_s=e.mean_s,
                sd_s=e.sd_s,
                lo_s=r.lo_s * f,
                hi_s=r.hi_s * f,
                open_s=r.open_s * f,
            )
        out[name] = r
    return out


def outlook(
    settings: ControllerSettings,
    state: RunState,
    now: float,
    categories: Sequence[Category] | None = None,
) -> tuple[dict[str, TypeEstimate], float]:
    """T_i per type and N_e, the tasks left once the time already paid is used. With
    ``categories`` (sampled), T_i is the mean of the tasks the fleet kept gives type i
    (``category_means.aware``)."""
    est = aware(state, estimates(settings, state, now), categories)
    n_e = expected_left(
        state,
        now,
        {n: e.mean_s for n, e in est.items()},
        lambda name, ages: tail_estimates(stats(settings, state, name), ages),
    )
    return est, n_e


def end_reserve(state: RunState, est: dict[str, TypeEstimate]) -> float:
    """Money a plan leaves unspent for the end of the bag: one more step for one
    machine of each type with an estimate. The last tasks of a skewed bag run long;
    the machine that has one may then extend, because the plan did not spend it."""
    if state.money.budget is None:
        return 0.0
    billing = state.billing
    return sum(billing.cost(e.price, billing.step_s) for e in est.values())


def reserved(
    settings: ControllerSettings, state: RunState, est: dict[str, TypeEstimate]
) -> dict[str, TypeEstimate]:
    """The estimates a plan is made on: each mean raised by ``reserve_z`` standard
    errors (σ_i/√n_i, n_i the runtimes seen to end). The plan then pays for a bag
    somewhat slower than the estimate, and what it does not need is the reserve for
    the end of the bag: it shrinks as the estimates firm up, and the monitor spends
    it (a faster mix) once it is clearly not needed."""
    z = settings.reserve_z
    if z <= 0:
        return est
    out = {}
    for name, e in est.items():
        mean = e.mean_s + z * e.sd_s / math.sqrt(n_eff(settings, state, name, e))
        out[name] = replace(
            e, mean_s=mean, first_tasks=first_tasks(state.billing, e.boot_s, e.slots, mean)
        )
    return out

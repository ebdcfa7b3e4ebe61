"""Where does the first plan's makespan error come from? A diagnostic for issue 11.

For each (distribution, billing, budget factor, seed) of ``benchmarks.estimates`` it
re-runs the dry run and takes the first plan's prediction P apart, against the run's
actual makespan A (all figures as a share of A; P − A = the sum of the parts):

* ``T_i``: the fluid end at the estimated means less the fluid end at the true means
  of the tasks not yet started (the realised bag, per type's speed);
* ``ragged``: ``ragged_end``'s median on each type's fitted curve less the same on the true
  runtimes of the tasks left (a curve with every one of them seen to end);
* ``model``: the prediction with both true (fluid + true ragged end) less the makespan
  of the same run with the first plan's mix frozen (no re-plan after it); this is
  what the fluid model and the ragged-end model leave out with perfect knowledge
  (boot, paid units, the tail phase, releases);
* ``replan``: the frozen run's makespan less the actual one (re-plans after the first).

It also gives the actual time the bag ran empty and what came after it (the ragged
end as it happened) against the predicted ones, and the makespan with tail
replication off. Run from the repository root::

    .venv/bin/python -m benchmarks.makespan_error --dists lognorm1,pareto --seeds 10
"""

from __future__ import annotations

import argparse
import copy
import math
import multiprocessing
import statistics
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from autoscaler.budget import monitor, plans
from autoscaler.budget.outlook import forecast
from autoscaler.budget.runtimes import running_ages
from autoscaler.budget.settings import planned
from autoscaler.learn.ragged import ragged_end
from autoscaler.learn.stats import RuntimeStats
from autoscaler.run.start import make_emulator, plan_dry
from benchmarks.bats_scenarios import render_table
from benchmarks.estimates import BILLINGS, DISTS, FACTORS, SPEED, _setup, with_budget


@dataclass(frozen=True, slots=True)
class Parts:
    dist: str
    billing: str
    factor: float
    seed: int
    actual_s: float
    predicted_s: float
    t_i: float
    ragged: float
    model: float
    replan: float
    inside: bool
    mean_err: float  # estimated / true mean of the tasks left, the fastest type in the mix
    empty_pred_s: float  # predicted time the bag runs empty (fluid end less E_eq)
    empty_actual_s: float  # the last first start of a task
    after_pred_s: float  # predicted end less predicted empty time
    after_actual_s: float
    no_rep_s: float  # makespan with tail replication off
    plans: int  # plans made in the actual run (1: no re-plan after the first)


def _first_plan_capture() -> tuple[list[dict[str, Any]], Any]:
    """Wrap ``plans.configure`` to keep what the first plan was made from."""
    seen: list[dict[str, Any]] = []
    original = plans.configure

    def wrapped(settings: Any, s: Any, counts: Any, est: Any, reason: Any, budget: Any = None):
        c = original(settings, s, counts, est, reason, budget)
        if not seen and c.predicted_makespan_s is not None:
            seen.append(
                {"state": copy.deepcopy(s.state), "now": s.now, "counts": dict(counts), "c": c}
            )
        return c

    return seen, wrapped


def _run(cfg: Any, n: int, seed: int, freeze: bool = False) -> tuple[Any, Any, list[Any]]:
    seen, wrapped = _first_plan_capture()
    original_configure, original_check = plans.configure, monitor.check

    def frozen(settings: Any, s: Any, tick: bool, categories: Any = None) -> bool:
        if planned(s.state.decisions):
            return False
        return original_check(settings, s, tick, categories)

    plans.configure = wrapped
    if freeze:
        monitor.check = frozen
    try:
        emulator = make_emulator(cfg, n, seed)
        state = emulator.run()
    finally:
        plans.configure = original_configure
        monitor.check = original_check
    return state, emulator.sim, seen


def _makespan(state: Any) -> float:
    return max((seg.end for seg in state.tasks.segments if seg.outcome == "done"), default=math.nan)


def _empty_at(state: Any) -> float:
    first: dict[int, float] = {}
    for seg in state.tasks.segments:
        first[seg.task] = min(first.get(seg.task, math.inf), seg.start)
    return max(first.values())


def one(job: tuple[str, str, float, int, int, float | None]) -> Parts | None:
    dist, billing, factor, seed, n, boot = job
    cfg, bag = _setup(dist, billing, n, boot)
    b_min = plan_dry(cfg, bag, seed=seed).minimum_budget
    if b_min is None:
        return None
    cfg = with_budget(cfg, round(factor * b_min, 2))
    state, sim, seen = _run(cfg, n, seed)
    if not seen or state.tasks.done < n:
        return None
    frozen_state, _, _ = _run(cfg, n, seed, freeze=True)
    no_rep_state, _, _ = _run(cfg.model_copy(update={"tail_replication": False}), n, seed)
    first = seen[0]
    s0, now, counts, c = first["state"], first["now"], first["counts"], first["c"]
    actual = _makespan(state)
    pending = list(s0.tasks.pending)
    ages = running_ages(s0.fleet, now)
    names = [
        name for name in counts if name in s0.observed.stats and s0.observed.stats[name].done > 0
    ]
    est = {
        name: s0.observed.stats[name].estimate(ages.get(name, ()), resamples=0) for name in names
    }
    true_runs = {name: [sim.runtimes[t] / SPEED[name] for t in pending] for name in names}
    true_mean = {name: statistics.fmean(true_runs[name]) for name in names}
    est_mean = {name: e.mean_s for name, e in est.items()}
    rate = {name: counts.get(name, 0) / est_mean[name] for name in names}
    total = sum(rate.values()) or 1.0
    running = sum(len(a) for a in ages.values())
    to_start = max(0, s0.tasks_left - running)

    def ragged(stats: dict[str, RuntimeStats], span: float) -> float:
        return ragged_end(
            span,
            ((stats[name], to_start * rate[name] / total) for name in names),
            ((stats[name], age) for name, a in ages.items() if name in stats for age in a),
        ).median_s

    oracle: dict[str, RuntimeStats] = {}
    for name in names:
        st = RuntimeStats(0)
        for r in true_runs[name]:
            st.record(r)
        # every task left is known: the empirical curve, no tail model past its longest
        st._extreme = st._survival_curve()
        oracle[name] = st
    fluid_est = forecast(s0, now, counts, est_mean).end_s
    fluid_true = forecast(s0, now, counts, true_mean).end_s
    r_fit = ragged(s0.observed.stats, fluid_est - now)
    r_true = ragged(oracle, fluid_true - now)
    frozen = _makespan(frozen_state)
    fastest = min((nm for nm in names if counts.get(nm)), key=lambda nm: est_mean[nm])
    e_eq = sum(
        rate[nm] / total * (est[nm].sd_s ** 2 + est[nm].mean_s ** 2) / (2 * est[nm].mean_s)
        for nm in names
    )
    lo, hi = c.makespan_interval_s
    return Parts(
        dist=dist,
        billing=billing,
        factor=factor,
        seed=seed,
        actual_s=actual,
        predicted_s=c.predicted_makespan_s,
        t_i=(fluid_est - fluid_true) / actual,
        ragged=(r_fit - r_true) / actual,
        model=(fluid_true + r_true - frozen) / actual,
        replan=(frozen - actual) / actual,
        inside=lo <= actual <= hi,
        mean_err=est_mean[fastest] / true_mean[fastest] - 1,
        empty_pred_s=fluid_est - e_eq,
        empty_actual_s=_empty_at(state),
        after_pred_s=c.predicted_makespan_s - (fluid_est - e_eq),
        after_actual_s=actual - _empty_at(state),
        no_rep_s=_makespan(no_rep_state),
        plans=sum(c.predicted_makespan_s is not None for _, c in state.decisions.configurations),
    )


def _med(xs: Sequence[float]) -> str:
    good = [x for x in xs if not math.isnan(x)]
    return "-" if not good else f"{100 * statistics.median(good):+.1f}%"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.makespan_error")
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--seed-offset", type=int, default=0)
    parser.add_argument("--tasks", type=int, default=1000)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--dists", default="lognorm1,pareto,weibull")
    parser.add_argument("--billing", default=",".join(BILLINGS))
    parser.add_argument(
        "--boot", type=float, help="both types' boot as a share of the ATU (default 120 s)"
    )
    args = parser.parse_args(argv)
    dists = [d for d in args.dists.split(",") if d in DISTS]
    billings = [b for b in args.billing.split(",") if b in BILLINGS]
    seeds = range(args.seed_offset, args.seed_offset + args.seeds)
    work = [
        (d, b, f, s, args.tasks, args.boot)
        for d in dists
        for b in billings
        for f in FACTORS
        for s in seeds
    ]
    with multiprocessing.get_context("fork").Pool(args.jobs) as pool:
        parts = [p for p in pool.map(one, work) if p is not None]
    header = [
        "dist", "billing", "xB", "n", "P/A-1", "T_i", "ragged", "model", "replan",
        "T_i mean err", "cov", "empty P/A-1", "after P", "after A", "A norep/A-1", "re-planned",
    ]  # fmt: skip
    body = []
    for d in dists:
        for b in billings:
            for f in FACTORS:
                ps = [p for p in parts if (p.dist, p.billing, p.factor) == (d, b, f)]
                if not ps:
                    continue
                body.append(
                    [
                        d,
                        b,
                        f"{f:g}",
                        str(len(ps)),
                        _med([p.predicted_s / p.actual_s - 1 for p in ps]),
                        _med([p.t_i for p in ps]),
                        _med([p.ragged for p in ps]),
                        _med([p.model for p in ps]),
                        _med([p.replan for p in ps]),
                        _med([p.mean_err for p in ps]),
                        f"{100 * sum(p.inside for p in ps) / len(ps):.0f}%",
                        _med([p.empty_pred_s / p.empty_actual_s - 1 for p in ps]),
                        f"{statistics.median(p.after_pred_s for p in ps):.0f}",
                        f"{statistics.median(p.after_actual_s for p in ps):.0f}",
                        _med([p.no_rep_s / p.actual_s - 1 for p in ps]),
                        f"{sum(p.plans > 1 for p in ps)}/{len(ps)}",
                    ]
                )
    print(render_table(header, body, left=3))
    print(
        "Medians over seeds. P/A-1: first plan's makespan error. T_i, ragged, model, replan:\n"
        "its parts as shares of the actual makespan A (they add up to P/A-1 run by run, not\n"
        "in the median). T_i mean err: the fastest type's estimated mean / true mean of the\n"
        "tasks left - 1. empty: predicted / actual time the bag ran empty - 1. after P / A:\n"
        "seconds from the bag running empty to the end, predicted and actual. A norep: the\n"
        "makespan with tail replication off against A."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

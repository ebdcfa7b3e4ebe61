"""Compact sampling (slides 001) against plain sampling (paper 000 §2.1), in the emulator.

Three machine types whose runtimes relate affinely, with noise (``emulator.affine``): a
task of drawn runtime x takes (a·x + b)·(1 + noise·ε) on a type, ε a standard normal per
task and type. Plain sampling runs a sample set of n tasks on every type; compact
sampling runs the first k (``sampling.replicated``) on every type, the rest of the n on
the reference type, and maps the reference's runtimes to the others through
g(x) = a·x + b fitted on the k pairs.

For each runtime distribution, budget and seed, one dry run per mode on the same bag
(a seed fixes the drawn runtimes, the noise and the order tasks leave the bag). Budgets
are factors of the fluid lower bound N·min_i c_i·T_i/ATU at the true means T_i = a·μ + b,
the same for both modes. Table: sampling cost (money committed when the first plan was
made, and as a share of the run's cost), when that plan was made, the error of each
type's estimated T_i at the first plan against the true mean (and how often the true
mean was inside the interval the plan assumed), makespan and cost. Run from the
repository root::

    .venv/bin/python -m benchmarks.compact_sampling --seeds 10
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

if __name__ == "__main__" and not __package__:  # ``python benchmarks/compact_sampling.py``
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from autoscaler.budget.controller import Controller
from autoscaler.config.bag import expand_bag
from autoscaler.config.schema import RunConfig
from autoscaler.core.model import TaskSpec
from autoscaler.core.state import RunState
from autoscaler.learn.stats import sample_size
from autoscaler.run.assemble import controller_settings
from autoscaler.run.start import dry_run
from benchmarks.bats_scenarios import (
    library_digest,
    library_state,
    pooled,
    quantile,
    render_table,
)
from benchmarks.estimates import _good, _median, _names, _p, _pct, _x

MEAN_S = 900.0
"""Mean drawn runtime (the reference's, a = 1, b = 0), as in paper 000's scenarios."""

DISTS: dict[str, dict[str, Any]] = {
    "normal": {"dist": "normal", "mean_s": MEAN_S, "sd_s": 300.0},
    "lognormal": {"dist": "lognormal", "mean_s": MEAN_S, "sd_s": 600.0},
}

NAMES = ("small", "mid", "fast")
PRICES: dict[str, dict[str, float]] = {
    "even": {"small": 1.0, "mid": 2.0, "fast": 3.0},
    "dear": {"small": 1.0, "mid": 6.0, "fast": 3.0},
}
"""$ per ATU per type set: ``even``, every type within 20 % of the best price per task;
``dear``, mid costs 3.6 times the best per task (as cluster1 of paper 000's S4-1), so
sampling it is money a plan will not spend there."""
AFFINE: dict[str, dict[str, float]] = {
    "small": {"a": 1.0, "b_s": 0.0, "noise": 0.1},
    "mid": {"a": 0.5, "b_s": 60.0, "noise": 0.15},
    "fast": {"a": 0.25, "b_s": 60.0, "noise": 0.15},
}
MODES = ("plain", "compact")
FACTORS = (1.2, 1.5)
"""Budgets, × the fluid bound. At 1.1 both modes sit at the edge of feasibility, where
budget mode's best-effort fallback flips between the two cheapest types on noise and a
dry run takes minutes; all 60 machines to the end cost about 1.27 × (even prices) and
2.1 × (dear)."""
ATU_S = 3600.0


def true_mean(name: str) -> float:
    """E[(a·x + b)(1 + noise·ε)] = a·μ + b (the factor's clipping at 0.05 is negligible)."""
    rel = AFFINE[name]
    return rel["a"] * MEAN_S + rel["b_s"]


def fluid_bound(prices: str, tasks: int) -> float:
    """N·min_i c_i·T_i/ATU: the bag on the most profitable type, paid by the second."""
    return tasks * min(c * true_mean(n) / ATU_S for n, c in PRICES[prices].items())


@cache
def _setup(
    prices: str, dist: str, mode: str, tasks: int, factor: float
) -> tuple[RunConfig, list[TaskSpec]]:
    types = [
        {"name": n, "price": PRICES[prices][n], "max_count": 20, "boot_s": 120.0} for n in NAMES
    ]
    cfg = RunConfig.model_validate(
        {
            "name": f"compact-{prices}-{dist}-{mode}",
            "bag": {"synthetic": tasks},
            "constraint": {"budget": round(factor * fluid_bound(prices, tasks), 2)},
            "machine_types": types,
            "billing": {"mode": "fixed", "atu_s": ATU_S},
            "emulator": {"seed": 0, "runtime": DISTS[dist], "affine": AFFINE},
            "sampling": {"mode": mode},
            "policy": "bats",
        }
    )
    return cfg, expand_bag(cfg)


@dataclass(frozen=True, slots=True)
class RunResult:
    prices: str
    dist: str
    factor: float
    mode: str
    seed: int
    budget: float
    cost: float
    makespan_s: float
    finished: bool
    within_budget: bool
    plan_at_s: float  # when the first plan was made (NaN: never)
    sampling_cost: float  # committed just before it (its own launches not counted)
    est_err: dict[str, float]  # per type: T_i at the first plan / true mean − 1
    inside: dict[str, bool]  # per type: the true mean inside the plan's assumed interval
    wall_s: float


Job = tuple[str, str, float, str, int, int]  # prices, dist, factor, mode, tasks, seed


def run_one(job: Job) -> RunResult:
    """One dry run; the estimates at the first plan are read in the step that made it."""
    prices, dist, factor, mode, tasks, seed = job
    cfg, bag = _setup(prices, dist, mode, tasks, factor)
    controller = Controller(controller_settings(cfg))
    seen: dict[str, Any] = {}
    before = [0.0]  # committed after the last step without a plan

    def progress(state: RunState) -> None:
        plan = state.decisions.plan()
        if seen:
            return
        if plan is None:
            before[0] = state.money.committed
            return
        est, _ = controller.outlook(state, state.now)
        seen["at"] = state.decisions.configurations[-1][0]
        seen["sampling"] = before[0]
        seen["est"] = {n: e.mean_s for n, e in est.items()}
        seen["lo"], seen["hi"] = dict(plan.assumed_lo_s), dict(plan.assumed_hi_s)

    d = dry_run(cfg, bag, seed=seed, plots=False, progress=progress)
    r = d.report
    at = seen.get("at", math.nan)
    names = NAMES
    est = seen.get("est", {})
    lo, hi = seen.get("lo", {}), seen.get("hi", {})
    return RunResult(
        prices=prices,
        dist=dist,
        factor=factor,
        mode=mode,
        seed=seed,
        budget=cfg.constraint.budget or math.nan,
        cost=r.cost,
        makespan_s=r.makespan_s,
        finished=r.tasks_done == r.tasks_total,
        within_budget=r.within_budget,
        plan_at_s=at,
        sampling_cost=seen.get("sampling", math.nan),
        est_err={n: est[n] / true_mean(n) - 1.0 for n in names if n in est},
        inside={n: lo[n] <= true_mean(n) <= hi[n] for n in names if n in lo and n in hi},
        wall_s=d.wall_s,
    )


# --- the table ---------------------------------------------------------------------------


def _abs_q(values: Iterable[float], q: float) -> float:
    return quantile(_good(abs(v) for v in values), q)


def table(results: Sequence[RunResult], prices: Sequence[str], dists: Sequence[str]) -> str:
    names = NAMES
    header = [
        "prices",
        "dist",
        "xfluid",
        "mode",
        "runs",
        "in budget",
        "finished",
        "sampl. $",
        "sampl/$",
        "plan at min",
        *(f"|T {n}| med/p90" for n in names),
        "T cov",
        "makespan min",
        "cost $",
    ]
    body = []
    for key in ((p, d, f, m) for p in prices for d in dists for f in FACTORS for m in MODES):
        rs = [r for r in results if (r.prices, r.dist, r.factor, r.mode) == key]
        if rs:
            errs = [
                f"{_p(_abs_q((r.est_err.get(n, math.nan) for r in rs), 0.5))}/"
                f"{_p(_abs_q((r.est_err.get(n, math.nan) for r in rs), 0.9))}"
                for n in names
            ]
            body.append(
                [
                    key[0],
                    key[1],
                    f"{key[2]:g}",
                    key[3],
                    str(len(rs)),
                    _pct([r.within_budget for r in rs]),
                    _pct([r.finished for r in rs]),
                    _x(_median(r.sampling_cost for r in rs)),
                    _p(_median(r.sampling_cost / r.cost for r in rs if r.cost > 0)),
                    _x(_median(r.plan_at_s / 60 for r in rs)),
                    *errs,
                    _pct([v for r in rs for v in r.inside.values()]),
                    _x(_median(r.makespan_s / 60 for r in rs if r.finished)),
                    _x(_median(r.cost for r in rs)),
                ]
            )
    return render_table(header, body, left=4)


# --- main ------------------------------------------------------------------------------


def run_all(work: Sequence[Job], jobs: int) -> list[RunResult]:
    results: list[RunResult] = []
    started = time.perf_counter()
    with pooled(run_one, work, jobs) as done:
        for i, r in enumerate(done, start=1):
            results.append(r)
            print(
                f"[{i:3d}/{len(work)}] {r.prices} {r.dist} x{r.factor:g} {r.mode} seed "
                f"{r.seed:2d}: "
                f"{r.wall_s:.2f} s, elapsed {time.perf_counter() - started:.0f} s",
                file=sys.stderr,
                flush=True,
            )
    return results


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.compact_sampling",
        description="Compact sampling against plain sampling: sampling cost, estimate error.",
    )
    parser.add_argument("--seeds", type=int, default=10, help="seeds 0..N-1 (default 10)")
    parser.add_argument("--tasks", type=int, default=2000, help="tasks in the bag (default 2000)")
    parser.add_argument("--jobs", type=int, default=2, help="worker processes (default 2)")
    parser.add_argument(
        "--dists", default=",".join(DISTS), help=f"comma-separated subset of {','.join(DISTS)}"
    )
    parser.add_argument(
        "--prices",
        default=",".join(PRICES),
        help=f"comma-separated subset of the type sets {','.join(PRICES)}",
    )
    args = parser.parse_args(argv)
    dists = _names(args.dists, DISTS, "distribution(s)", parser)
    prices = _names(args.prices, PRICES, "type set(s)", parser)
    if args.seeds < 1 or args.jobs < 1 or args.tasks < 1:
        parser.error("--seeds, --tasks and --jobs must be at least 1")

    started = time.perf_counter()
    state_before = library_state()
    work = [
        (p, d, f, m, args.tasks, s)
        for p in prices
        for d in dists
        for f in FACTORS
        for s in range(args.seeds)
        for m in MODES
    ]
    for p, d, f, m, tasks, _ in work:  # fail early, in this process, on a rejected config
        _setup(p, d, m, tasks, f)
    results = run_all(work, args.jobs)
    wall = time.perf_counter() - started

    n = sample_size(args.tasks)
    relations = "; ".join(
        f"{n}: a {AFFINE[n]['a']:g}, b {AFFINE[n]['b_s']:g} s, noise {AFFINE[n]['noise']:g}, "
        f"T {true_mean(n):g} s"
        for n in NAMES
    )
    price_text = "; ".join(
        f"{p}: " + ", ".join(f"{n} ${c:g}" for n, c in PRICES[p].items()) for p in prices
    )
    bounds = ", ".join(f"{p} {fluid_bound(p, args.tasks):.2f}" for p in prices)
    print("Compact sampling (slides 001) against plain sampling, in the emulator")
    print(
        f"{args.tasks} tasks; drawn runtimes normal (mean {MEAN_S:g} s, sd 300) or lognormal\n"
        f"(mean {MEAN_S:g} s, sd 600). Types (1-h ATU, max 20, boot 120 s) and their relation\n"
        f"(a·x + b)·(1 + noise·ε): {relations}.\nPrices per ATU: {price_text}.\n"
        f"n = {n}, iw = {min(n, 20)} (max_count 20); compact: k = 7 replicated tasks, "
        "reference small.\n"
        f"Budgets: factor × the fluid bound N·min c_i·T_i/ATU ({bounds})."
    )
    print(f"Library: {state_before}")
    if library_digest() not in state_before:
        print("WARNING: the library's sources changed while this benchmark ran")
    print()
    print(f"Results over seeds 0..{args.seeds - 1} (same bag and seed for both modes)")
    print(table(results, prices, dists))
    print(
        "sampl. $: median money committed when the first plan was made (before its own\n"
        "launches); sampl/$: that over the run's cost; plan at: when it was made (min).\n"
        "|T type| med/p90: absolute error of the type's mean runtime estimated at the first\n"
        "plan against the true a·μ + b. T cov: share of (run, type) whose true mean was\n"
        "inside the interval that plan assumed. makespan: median over finished runs (min);\n"
        "cost: median of what the run cost."
    )
    print()
    print(f"{len(results)} dry runs in {wall:.1f} s wall with {args.jobs} job(s).")
    return 0


if __name__ == "__main__":
    sys.exit(main())

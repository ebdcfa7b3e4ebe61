"""Paper 000 §3 replayed: BaTS against round robin on the five two-cluster scenarios.

For each scenario (S4-1, S4-3, S1-1, S3-4, S1-4) and each seed, four dry runs of the
same bag (a seed fixes the task runtimes and the order tasks leave the bag, the same
for every policy, as in the paper):

* ``RR``: round robin, every machine (32+32) from the start, FCFS, cost-oblivious;
* ``BaTS_RR``: BaTS with a budget equal to that seed's RR cost;
* ``BaTS 1.1xBmin`` and ``BaTS 1.2xBmin``: BaTS with 10 % and 20 % over B_min (paper §3).

It prints one table row per (scenario, run kind) with our makespan and cost against
the paper's, and the clairvoyant bound (the best mix had the true means been known
from the start). Run from the repository root::

    .venv/bin/python -m benchmarks.bats_scenarios --seeds 30
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import math
import multiprocessing
import statistics
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TypeVar

if __name__ == "__main__" and not __package__:  # ``python benchmarks/bats_scenarios.py``
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from autoscaler.budget.planner import plan_clairvoyant
from autoscaler.budget.problem import TypeEstimate
from autoscaler.config.bag import expand_bag
from autoscaler.config.load import load_config
from autoscaler.config.schema import NormalRuntime, RunConfig
from autoscaler.core.billing import BillingModel
from autoscaler.core.model import TaskSpec
from autoscaler.learn.stats import initial_workers, sample_size
from autoscaler.report.records import Report
from autoscaler.run.start import dry_run

REPO = Path(__file__).resolve().parent.parent
CONFIG_DIR = REPO / "config" / "examples"
LIBRARY_DIRS = ("autoscaler", "providers", "config")

BOOT_S = 120.0
"""Launch to ready, every machine type. Not in the paper: see ``BOOT_NOTE``."""

BOOT_NOTE = (
    "Boot time: 120 s for every machine (launch to ready; paid from launch). EC2 Linux\n"
    "instances are typically ready for SSH 1-2 min after launch; the paper's SGE-emulated\n"
    'clouds had "realistic, significant startup times" but it gives no number.'
)

W = TypeVar("W")
R = TypeVar("R")

# --- the scenarios of paper 000 §3 ------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Scenario:
    name: str
    config: str  # base config in config/examples
    price1: float  # cluster1's price per 60-min ATU (cluster0: $3)
    speed1: float  # cluster1's speed (cluster0: 1)


# In the paper's order (Figure 4: by the profitability of the faster type).
SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        Scenario("S4-1", "bats_s4_1.yaml", 12.0, 1.0),
        Scenario("S4-3", "bats_s4_3.yaml", 12.0, 3.0),
        Scenario("S1-1", "bats_s1_1.yaml", 3.0, 1.0),
        Scenario("S3-4", "bats_s3_4.yaml", 9.0, 4.0),
        Scenario("S1-4", "bats_s1_4.yaml", 3.0, 4.0),
    )
}

RR = "RR"
BATS_RR = "BaTS_RR"
BMIN_11 = "BaTS 1.1xBmin"
BMIN_12 = "BaTS 1.2xBmin"
ROWS = (RR, BATS_RR, BMIN_11, BMIN_12)
BMIN_FACTORS = {BMIN_11: 1.1, BMIN_12: 1.2}


@dataclass(frozen=True, slots=True)
class PaperRow:
    """One result as paper 000 §3 states it in its text (None: not stated)."""

    makespan: str | None = None  # as written in the paper, "246m16s"
    cost: float | None = None  # actual cost of the run
    budget: float | None = None  # the budget BaTS was given
    plan: str | None = None  # configuration after sampling, "cluster0+cluster1"
    note: str = ""


# Paper 000 (Oprescu & Kielmann, "Bag-of-Tasks Scheduling under Budget Constraints",
# CloudCom 2010), §3 "Performance Evaluation", text beside Figure 4 (seed file
# /work/shared/seeds/000_3fd055ba20e8516e.txt, lines 239-258). Costs in dollars.
# "-" where the text does not state a value; BaTS at 1.1xB_min "ran out of money" in
# S4-3 and S1-4, so the paper ran those two at 1.2xB_min instead (and only those).
PAPER_BMIN: dict[str, float] = {
    "S4-1": 1026.0,
    "S4-3": 846.0,
    "S1-1": 756.0,
    "S3-4": 594.0,
    "S1-4": 258.0,
}
PAPER_SAMPLING_COST: dict[str, float] = {
    "S4-1": 450.0,
    "S4-3": 450.0,
    "S1-1": 180.0,
    "S3-4": 360.0,
    "S1-4": 180.0,
}
_FAILED = "failed: ran out of money before the bag was empty"
_NOT_RUN = "not run"
PAPER: dict[str, dict[str, PaperRow]] = {
    "S4-1": {
        RR: PaperRow("246m16s", 2034.0),
        BATS_RR: PaperRow("279m48s", None, 2034.0, "32+25", "actual cost not stated"),
        BMIN_11: PaperRow("446m46s", 1116.0, 1128.0, "32+1"),
        BMIN_12: PaperRow(note=_NOT_RUN),
    },
    "S4-3": {
        RR: PaperRow("133m10s", 1062.0),
        BATS_RR: PaperRow("170m5s", None, 1062.0, "30+18", "actual cost not stated"),
        BMIN_11: PaperRow(note=_FAILED),
        BMIN_12: PaperRow("176m26s", 1014.0, 1015.0, "30+16"),
    },
    "S1-1": {
        RR: PaperRow("246m15s", 810.0),
        BATS_RR: PaperRow("293m17s", 804.0, 810.0, "32+20", "32 of one cluster, 20 of the other"),
        BMIN_11: PaperRow("284m23s", 828.0, 831.0, "32+22", "32 of one cluster, 22 of the other"),
        BMIN_12: PaperRow(note=_NOT_RUN),
    },
    "S3-4": {
        RR: PaperRow("110m6s", 768.0),
        BATS_RR: PaperRow("108m47s", 744.0, 768.0, "32+32"),
        BMIN_11: PaperRow("118m9s", 651.0, 653.0, "1+32"),
        BMIN_12: PaperRow(note=_NOT_RUN),
    },
    "S1-4": {
        RR: PaperRow("110m5s", 384.0),
        BATS_RR: PaperRow("111m28s", 372.0, 384.0, "32+32"),
        BMIN_11: PaperRow(note=_FAILED),
        BMIN_12: PaperRow("116m42s", None, 309.0, "11+32", "actual cost not stated"),
    },
}


def paper_minutes(text: str | None) -> float | None:
    """``"246m16s"`` -> 246.27 minutes."""
    if text is None:
        return None
    minutes, _, seconds = text.rstrip("s").partition("m")
    return int(minutes) + (int(seconds) if seconds else 0) / 60.0


# --- the configuration of a scenario ---------------------------------------------------


def scenario_config(name: str, tail_replication: bool = True) -> RunConfig:
    """The example config of ``name``, checked against paper 000 §3, boot time set."""
    sc = SCENARIOS[name]
    path = CONFIG_DIR / sc.config
    cfg = load_config(path)
    types = {t.name: t for t in cfg.machine_types}
    runtime = cfg.emulator.runtime
    problems = []
    if set(types) != {"cluster0", "cluster1"}:
        problems.append(f"machine types {sorted(types)} (want cluster0, cluster1)")
    else:
        want = {"cluster0": (3.0, 1.0), "cluster1": (sc.price1, sc.speed1)}
        for tname, (price, speed) in want.items():
            t = types[tname]
            got_speed = cfg.emulator.speed.get(tname, 1.0)
            if (t.price, got_speed, t.max_count) != (price, speed, 32):
                problems.append(
                    f"{tname}: price {t.price}, speed {got_speed}, max {t.max_count} "
                    f"(want {price}, {speed}, 32)"
                )
    if not (
        isinstance(runtime, NormalRuntime)
        and math.isclose(runtime.mean_s, 900.0)
        and math.isclose(runtime.sd_s, math.sqrt(5.0) * 60.0, rel_tol=1e-5)
    ):
        problems.append(f"runtime {runtime} (want normal, mean 900 s, sd sqrt(5) min)")
    if cfg.bag.synthetic != 1000:
        problems.append(f"bag {cfg.bag} (want synthetic: 1000)")
    if (cfg.billing.mode, cfg.billing.atu_s) != ("fixed", 3600.0):
        problems.append(f"billing {cfg.billing} (want fixed, 60 min)")
    if cfg.monitoring_interval_s != 300.0:
        problems.append(f"monitoring_interval_s {cfg.monitoring_interval_s} (want 300)")
    if (cfg.sampling.z, cfg.sampling.delta) != (1.96, 0.25):
        problems.append(f"sampling {cfg.sampling} (want z 1.96, delta 0.25)")
    if problems:
        raise SystemExit(f"{path} does not match paper 000 §3 {name}: " + "; ".join(problems))
    return cfg.model_copy(
        update={
            "machine_types": [t.model_copy(update={"boot_s": BOOT_S}) for t in cfg.machine_types],
            "tail_replication": tail_replication,
        }
    )


def true_means(cfg: RunConfig) -> dict[str, float]:
    """μ_i: the runtime distribution's mean divided by the type's speed."""
    runtime = cfg.emulator.runtime
    assert isinstance(runtime, NormalRuntime)
    return {t.name: runtime.mean_s / cfg.emulator.speed.get(t.name, 1.0) for t in cfg.machine_types}


def with_budget(cfg: RunConfig, budget: float) -> RunConfig:
    return cfg.model_copy(
        update={
            "constraint": cfg.constraint.model_copy(update={"budget": budget}),
            "policy": "bats",
        }
    )


# --- B_min (paper 000 §3) --------------------------------------------------------------

BMIN_FORMULA = (
    "B_min = iw·Σ_i c_i + ⌈rest·μ_best/ATU⌉·c_best,   rest = N − Σ_i iw·⌊(ATU − β)/μ_i⌋\n"
    "  sampling phase: iw = min(N/10, n) = 30 machines per type (capped by max_count) for\n"
    "  one ATU each, every one doing ⌊(ATU − β)/μ_i⌋ tasks after booting (β = 120 s);\n"
    "  the rest on one machine of the most profitable type, profitability_i =\n"
    "  (μ_m/μ_i)·(c_m/c_i) against the cheapest type m. True means μ_i = 900 s / speed_i."
)


@dataclass(frozen=True, slots=True)
class BMin:
    iw: dict[str, int]
    sampling_cost: float
    sampled_tasks: int  # done during the sampling ATU
    rest: int
    best: str
    profitability: dict[str, float]
    units: int
    value: float


def b_min(cfg: RunConfig) -> BMin:
    n_tasks = cfg.bag.synthetic
    assert n_tasks is not None
    atu = cfg.billing.atu_s
    mu = true_means(cfg)
    iw0 = initial_workers(n_tasks, sample_size(n_tasks, cfg.sampling.z, cfg.sampling.delta))
    iw = {t.name: min(iw0, t.max_count) for t in cfg.machine_types}
    sampling_cost = sum(iw[t.name] * t.price for t in cfg.machine_types)
    sampled = sum(
        iw[t.name] * max(0, math.floor((atu - t.boot_s) / mu[t.name])) for t in cfg.machine_types
    )
    rest = max(0, n_tasks - sampled)
    cheapest = min(cfg.machine_types, key=lambda t: t.price)
    profit = {
        t.name: (mu[cheapest.name] / mu[t.name]) * (cheapest.price / t.price)
        for t in cfg.machine_types
    }
    best = max(cfg.machine_types, key=lambda t: (profit[t.name], -t.price))
    units = math.ceil(rest * mu[best.name] / atu - 1e-9)
    return BMin(
        iw,
        sampling_cost,
        sampled,
        rest,
        best.name,
        profit,
        units,
        sampling_cost + units * best.price,
    )


def bmin_budget(bmin: BMin, factor: float) -> float:
    return round(factor * bmin.value, 2)


def paper_implied_rest(name: str, cfg: RunConfig, bmin: BMin) -> float:
    """The tasks left after sampling that the paper's own B_min implies."""
    best = cfg.type_named(bmin.best)
    per_unit = cfg.billing.atu_s / true_means(cfg)[bmin.best]
    return (PAPER_BMIN[name] - PAPER_SAMPLING_COST[name]) / best.price * per_unit


# --- the clairvoyant bound -------------------------------------------------------------

CLAIRVOYANT_FORMULA = (
    "Clairvoyant bound: T* = min_a N / Σ_i a_i/μ_i  s.t.  ⌈T*/ATU⌉·Σ_i a_i·c_i ≤ B,\n"
    "  0 ≤ a_i ≤ A_i integer (fluid: true means μ_i = 900 s/speed_i known from the start,\n"
    "  no sampling, no boot; autoscaler.budget.planner.plan_clairvoyant). B is the row's budget:\n"
    "  that seed's RR cost for RR and BaTS_RR, B_min×factor for the B_min rows. Column\n"
    "  'clairv' is the median over seeds; 'med/clv' = our median makespan / that."
)


@cache
def _clairvoyant_s(name: str, budget: float) -> float:
    cfg = scenario_config(name)
    mu = true_means(cfg)
    types = [TypeEstimate(t.name, t.price, t.max_count, 0.0, mu[t.name]) for t in cfg.machine_types]
    n_tasks = cfg.bag.synthetic
    assert n_tasks is not None
    billing = BillingModel(cfg.billing.mode, cfg.billing.atu_s)
    plan = plan_clairvoyant(n_tasks, budget, types, billing)
    return math.nan if plan is None else plan.makespan_s(n_tasks)


# --- one seed of one scenario ----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RunResult:
    scenario: str
    row: str
    seed: int
    budget: float | None  # None for RR (cost-oblivious)
    cost: float
    makespan_s: float
    tasks_done: int
    tasks_total: int
    within_budget: bool | None
    stop_reason: str | None
    predicted_cost: float | None
    predicted_makespan_s: float | None
    first_plan: str | None  # configuration after sampling, "cluster0+cluster1"
    clairvoyant_s: float
    wall_s: float

    @property
    def finished(self) -> bool:
        return self.tasks_done == self.tasks_total

    @property
    def makespan_vs_predicted(self) -> float:
        """Actual / predicted makespan; NaN without a prediction."""
        if not self.predicted_makespan_s:
            return math.nan
        return self.makespan_s / self.predicted_makespan_s


@cache
def _setup(name: str, tail_replication: bool) -> tuple[RunConfig, list[TaskSpec], BMin]:
    cfg = scenario_config(name, tail_replication)
    return cfg, expand_bag(cfg), b_min(cfg)


def _first_plan(report: Report, types: Sequence[str]) -> str | None:
    for c in report.configurations:
        if not c.reason.startswith("sampling"):
            return "+".join(str(c.counts.get(t, 0)) for t in types)
    return None


def run_seed(job: tuple[str, int, bool]) -> list[RunResult]:
    """RR, then BaTS at RR's cost, 1.1×B_min and 1.2×B_min, all on seed ``seed``."""
    name, seed, tail_replication = job
    cfg, tasks, bmin = _setup(name, tail_replication)
    types = [t.name for t in cfg.machine_types]

    def one(row: str, run_cfg: RunConfig, budget: float | None) -> RunResult:
        d = dry_run(run_cfg, tasks, seed=seed, out_dir=None, plots=False)
        r = d.report
        return RunResult(
            scenario=name,
            row=row,
            seed=seed,
            budget=budget,
            cost=r.cost,
            makespan_s=r.makespan_s,
            tasks_done=r.tasks_done,
            tasks_total=r.tasks_total,
            within_budget=None if budget is None else r.within_budget,
            stop_reason=r.stop_reason,
            predicted_cost=None if r.predicted is None else r.predicted.cost,
            predicted_makespan_s=None if r.predicted is None else r.predicted.makespan_s,
            first_plan=None if budget is None else _first_plan(r, types),
            clairvoyant_s=_clairvoyant_s(name, budget if budget is not None else r.cost),
            wall_s=d.wall_s,
        )

    rr = one(RR, cfg.model_copy(update={"policy": "round_robin"}), None)
    out = [rr, one(BATS_RR, with_budget(cfg, rr.cost), rr.cost)]
    for row, factor in BMIN_FACTORS.items():
        out.append(one(row, with_budget(cfg, bmin_budget(bmin, factor)), bmin_budget(bmin, factor)))
    return out


# --- statistics and printing -----------------------------------------------------------


def quantile(values: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default)."""
    xs = sorted(values)
    if not xs:
        return math.nan
    pos = q * (len(xs) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def _f(value: float | None, digits: int = 1) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:,.{digits}f}"


def _money(value: float | None) -> str:
    if value is None or math.isnan(value):
        return "-"
    return f"{value:,.0f}" if float(value).is_integer() else f"{value:,.2f}"


def render_table(header: Sequence[str], rows: Iterable[Sequence[str]], left: int = 2) -> str:
    """Plain aligned text: the first ``left`` columns left-aligned, the rest right-aligned."""
    body = [list(r) for r in rows]
    widths = [max(len(str(x)) for x in col) for col in zip(header, *body, strict=True)]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(
            c.ljust(w) if i < left else c.rjust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        ).rstrip()

    rule = "  ".join("-" * w for w in widths)
    return "\n".join([line(header), rule, *(line(r) for r in body)])


def scenario_block(names: Sequence[str]) -> str:
    header = [
        "scen.",
        "cluster1",
        "profit.",
        "sampl. $",
        "paper",
        "tasks in sampl.",
        "rest",
        "paper rest*",
        "best",
        "B_min",
        "paper",
        "1.1xB_min",
        "paper",
        "1.2xB_min",
        "paper",
    ]
    rows = []
    for name in names:
        cfg, _, bm = _setup(name, True)
        sc = SCENARIOS[name]
        paper11 = PAPER[name][BMIN_11].budget
        paper12 = PAPER[name][BMIN_12].budget
        rows.append(
            [
                name,
                f"${sc.price1:g}, speed {sc.speed1:g}",
                f"{bm.profitability['cluster1']:.2f}",
                _money(bm.sampling_cost),
                _money(PAPER_SAMPLING_COST[name]),
                str(bm.sampled_tasks),
                str(bm.rest),
                f"{paper_implied_rest(name, cfg, bm):.0f}",
                bm.best,
                _money(bm.value),
                _money(PAPER_BMIN[name]),
                _money(bmin_budget(bm, 1.1)),
                _money(paper11) if paper11 else "-",
                _money(bmin_budget(bm, 1.2)),
                _money(paper12) if paper12 else "-",
            ]
        )
    return render_table(header, rows)


def _pct(flags: Sequence[bool]) -> str:
    return "-" if not flags else f"{100.0 * sum(flags) / len(flags):.0f}%"


def _ratio(values: Sequence[float]) -> str:
    good = [v for v in values if not math.isnan(v)]
    return "-" if not good else f"{statistics.median(good):.2f}"


def results_table(results: Sequence[RunResult], names: Sequence[str]) -> str:
    header = [
        "scen.",
        "run",
        "budget",
        "mk med",
        "mk p90",
        "$ med",
        "$ max",
        "in budget",
        "finished",
        "paper mk",
        "paper $",
        "clairv",
        "med/clv",
        "act/pred mk",
        "act/pred $",
    ]
    rows = []
    for name in names:
        for row in ROWS:
            rs = [r for r in results if r.scenario == name and r.row == row]
            if not rs:
                continue
            done = [r for r in rs if r.finished]
            mk = [r.makespan_s / 60.0 for r in done]
            costs = [r.cost for r in rs]
            budgets = [r.budget for r in rs if r.budget is not None]
            if row == RR:
                budget = "-"
            elif row == BATS_RR:
                budget = f"~{_money(statistics.median(budgets))}"
            else:
                budget = _money(budgets[0])
            paper = PAPER[name][row]
            clairv = statistics.median(r.clairvoyant_s for r in rs) / 60.0
            mk_med = statistics.median(mk) if mk else math.nan
            rows.append(
                [
                    name,
                    row,
                    budget,
                    _f(mk_med),
                    _f(quantile(mk, 0.9)),
                    _money(statistics.median(costs)),
                    _money(max(costs)),
                    "-" if row == RR else _pct([bool(r.within_budget) for r in rs]),
                    _pct([r.finished for r in rs]),
                    _f(paper_minutes(paper.makespan))
                    if paper.makespan
                    else ("failed" if paper.note == _FAILED else paper.note or "-"),
                    _money(paper.cost),
                    _f(clairv),
                    _ratio([mk_med / clairv]) if mk else "-",
                    _ratio([r.makespan_vs_predicted for r in done]),
                    _ratio([r.cost / r.predicted_cost for r in rs if r.predicted_cost]),
                ]
            )
    return render_table(header, rows)


def plans_table(results: Sequence[RunResult], names: Sequence[str]) -> str:
    header = ["scen.", "run", "our plan after sampling (seeds)", "paper"]
    rows = []
    for name in names:
        for row in ROWS[1:]:
            rs = [r for r in results if r.scenario == name and r.row == row]
            if not rs:
                continue
            by_seed = sorted(rs, key=lambda r: r.seed)  # ties: the lower seed's plan first
            common = Counter(r.first_plan or "none" for r in by_seed).most_common(3)
            ours = ", ".join(f"{plan} ({n})" for plan, n in common)
            paper = PAPER[name][row]
            rows.append([name, row, ours, paper.plan or paper.note or "-"])
    return render_table(header, rows, left=4)


def anomalies(results: Sequence[RunResult], names: Sequence[str]) -> list[str]:
    """Runs worth a look: unfinished, over budget, or far from their own prediction."""
    lines: list[str] = []
    for name in names:
        for row in ROWS:
            rs = [r for r in results if r.scenario == name and r.row == row]
            unfinished = [r for r in rs if not r.finished]
            over = [r for r in rs if r.within_budget is False]
            off = [
                r
                for r in rs
                if r.finished
                and not math.isnan(r.makespan_vs_predicted)
                and not 0.8 <= r.makespan_vs_predicted <= 1.25
            ]
            if unfinished:
                reasons = Counter((r.stop_reason or "?").split(":")[0] for r in unfinished)
                worst = min(unfinished, key=lambda r: r.tasks_done)
                lines.append(
                    f"{name} {row}: bag not finished in {len(unfinished)}/{len(rs)} runs, "
                    f"seeds {_seeds(unfinished)}; reasons {dict(reasons)}; worst seed "
                    f"{worst.seed}: {worst.tasks_done}/{worst.tasks_total} tasks, cost "
                    f"{_money(worst.cost)} of {_money(worst.budget)}: {worst.stop_reason}"
                )
            if over:
                lines.append(
                    f"{name} {row}: OVER BUDGET in {len(over)}/{len(rs)} runs, seeds "
                    f"{_seeds(over)}; e.g. seed {over[0].seed}: cost {_money(over[0].cost)} "
                    f"> budget {_money(over[0].budget)}"
                )
            if off:
                r = max(off, key=lambda r: abs(math.log(r.makespan_vs_predicted)))
                lines.append(
                    f"{name} {row}: makespan off its prediction by more than -20%/+25% in "
                    f"{len(off)}/{len(rs)} runs, seeds {_seeds(off)}; worst seed {r.seed}: "
                    f"actual {r.makespan_s / 60:.1f} min, predicted "
                    f"{(r.predicted_makespan_s or math.nan) / 60:.1f} min"
                )
    return lines


def _seeds(rs: Sequence[RunResult], limit: int = 12) -> str:
    seeds = sorted(r.seed for r in rs)
    text = ",".join(str(s) for s in seeds[:limit])
    return text + (",..." if len(seeds) > limit else "")


# --- what was measured ----------------------------------------------------------------


def library_digest() -> str:
    """A hash of the library's sources, to notice them changing during a benchmark."""
    h = hashlib.sha256()
    for d in LIBRARY_DIRS:
        for path in sorted((REPO / d).rglob("*.py")):
            h.update(str(path.relative_to(REPO)).encode())
            h.update(path.read_bytes())
    return h.hexdigest()[:12]


def library_state() -> str:
    """The git commit and any uncommitted changes to the library, for the record."""
    try:
        head = subprocess.run(
            ["git", "-C", str(REPO), "log", "-1", "--format=%h %cI"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(REPO), "status", "--porcelain", "--", *LIBRARY_DIRS],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split("\n")
    except (OSError, subprocess.CalledProcessError):
        return f"not a git checkout; sources {library_digest()}"
    changed = [line[3:] for line in dirty if line.strip()]
    text = f"git {head}"
    if changed:
        text += f", uncommitted changes in {', '.join(changed)}"
    return f"{text}; sources {library_digest()}"


# --- main ------------------------------------------------------------------------------


def run_all(
    names: Sequence[str],
    seeds: int,
    jobs: int,
    tail_replication: bool,
    progress: Callable[[str], None],
) -> list[RunResult]:
    work = [(name, seed, tail_replication) for name in names for seed in range(seeds)]
    results: list[RunResult] = []
    started = time.perf_counter()
    with pooled(run_seed, work, jobs) as chunks:
        for i, chunk in enumerate(chunks, start=1):
            results.extend(chunk)
            first = chunk[0]
            walls = " ".join(f"{r.wall_s:.2f}" for r in chunk)
            progress(
                f"[{i:3d}/{len(work)}] {first.scenario} seed {first.seed:2d}: "
                f"runs {walls} s, elapsed {time.perf_counter() - started:.0f} s"
            )
    return results


@contextlib.contextmanager
def pooled(fn: Callable[[W], R], work: Sequence[W], jobs: int) -> Iterator[Iterable[R]]:
    """``fn`` over ``work``, in ``jobs`` forked processes (results as they come) or,
    with one job, in this process and in order."""
    if jobs <= 1:
        yield map(fn, work)
        return
    pool = multiprocessing.get_context("fork").Pool(jobs)
    try:
        yield pool.imap_unordered(fn, work)
    finally:
        pool.close()
        pool.join()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.bats_scenarios",
        description="Paper 000 §3 replayed: BaTS against round robin, many seeds.",
    )
    parser.add_argument("--seeds", type=int, default=30, help="seeds 0..N-1 (default 30)")
    parser.add_argument(
        "--scenarios",
        default=",".join(SCENARIOS),
        help=f"comma-separated subset of {','.join(SCENARIOS)}",
    )
    parser.add_argument("--jobs", type=int, default=2, help="worker processes (default 2)")
    parser.add_argument(
        "--no-tail-replication",
        action="store_true",
        help="the paper's BaTS, without the slides' tail replication",
    )
    args = parser.parse_args(argv)
    names = [s.strip() for s in args.scenarios.split(",") if s.strip()]
    unknown = [n for n in names if n not in SCENARIOS]
    if unknown or not names:
        parser.error(f"unknown scenario(s) {unknown}; choose from {', '.join(SCENARIOS)}")
    if args.seeds < 1 or args.jobs < 1:
        parser.error("--seeds and --jobs must be at least 1")
    tail = not args.no_tail_replication

    started = time.perf_counter()
    state_before = library_state()
    for name in names:  # fail early, in this process, on a config that does not match
        _setup(name, tail)

    def progress(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    results = run_all(names, args.seeds, args.jobs, tail, progress)
    wall = time.perf_counter() - started

    print("Paper 000 §3 replayed (BaTS, Oprescu & Kielmann, CloudCom 2010) in the emulator")
    print(
        "1000 tasks, runtimes N(15 min, σ²), σ = √5 min, on cluster0; on cluster1 a task\n"
        "takes runtime/speed. cluster0: $3 per 60-min ATU, speed 1, max 32; cluster1 as below,\n"
        "max 32. BaTS: monitoring every 5 min, z = 1.96, Δ = 0.25 (n = 30, iw = 30 per type),\n"
        f"tail replication {'on (slides 001; not in the paper)' if tail else 'off (as the paper)'}."
    )
    print(BOOT_NOTE)
    print(f"Library: {state_before}")
    if library_digest() not in state_before:
        print("WARNING: the library's sources changed while this benchmark ran")
    print(
        f"Seeds 0..{args.seeds - 1}: a seed fixes the runtimes and the order tasks leave the\n"
        "bag, the same for all four runs of that seed (as in the paper). RR = round robin:\n"
        "all 32+32 machines from the start, FCFS, cost-oblivious. BaTS_RR = BaTS with that\n"
        "seed's RR cost as budget. Paper values: §3 text (Figure 4 is bars only)."
    )
    print()
    print("B_min per scenario (ours from true means; paper's as stated in §3)")
    print(scenario_block(names))
    print(BMIN_FORMULA)
    print(
        "  paper rest*: tasks left after sampling that the paper's B_min implies,\n"
        "  (paper B_min − paper sampling cost)/c_best · ATU/μ_best. Paper budgets are\n"
        "  its B_min × factor rounded down; '-' where the paper did not run that budget."
    )
    print()
    plural = "s" if args.seeds != 1 else ""
    print(f"Results over {args.seeds} seed{plural} (makespans in minutes, money in $)")
    print(results_table(results, names))
    print(
        "mk med/p90: makespan median / 90th percentile over the runs that finished the bag;\n"
        "$ med/max: cost over all runs; in budget: cost ≤ budget; finished: every task done.\n"
        "act/pred: median of actual / BaTS's first prediction after sampling (report.json\n"
        "'predicted'). paper mk/$: the paper's single run ('-': not stated)."
    )
    print(CLAIRVOYANT_FORMULA)
    print()
    print("Configuration after sampling, machines cluster0+cluster1 (most common over seeds)")
    print(plans_table(results, names))
    print()
    found = anomalies(results, names)
    print("Anomalies" + ("" if found else ": none"))
    for line in found:
        print(f"- {line}")
    print()
    runs = len(results)
    emulated = sum(r.wall_s for r in results)
    print(
        f"{runs} dry runs ({len(names)} scenarios × {args.seeds} seeds × 4) in {wall:.1f} s wall "
        f"with {args.jobs} job(s); {emulated:.1f} s inside dry_run, "
        f"{emulated / max(runs, 1):.3f} s per run."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""How the dry run and the budget planner scale.

(a) Wall time of a dry run, BaTS against round robin on the same config in the same
    process, with and without writing the run directory (journal, logs, report, plots):
    1,000 tasks on 32+32 machines (config/examples/bats_s4_1.yaml as is) and 100,000
    tasks on 250+250 machines (S4-3's two types, scaled up).
(b) Solve time of the budget planner (``plan_budget``) for 2, 5, 10 and 20 machine
    types with up to 1,000 machines each, HiGHS against CBC.
(c) A million tasks on 2,500 + 2,500 machines (S4-3's types), round robin and BaTS, each
    a dry run with report and plots in a process of its own: wall and CPU time, peak
    memory (``resource.getrusage``), and the size of what it wrote (``--quick`` skips it).
(d) The estimate kept between runs' ends against the old path (rebuilt after every end:
    ``learn.stats.EXACT_UP_TO`` raised), round robin on 10,000 tasks.

Run from the repository root::

    .venv/bin/python -m benchmarks.scale [--quick]
"""

from __future__ import annotations

import argparse
import math
import multiprocessing
import random
import resource
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

if __name__ == "__main__" and not __package__:  # ``python benchmarks/scale.py``
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from autoscaler.budget.planner import plan_budget
from autoscaler.budget.problem import BudgetProblem, Plan, TypeEstimate
from autoscaler.config.bag import expand_bag
from autoscaler.config.load import load_config
from autoscaler.config.schema import Bag, RunConfig
from autoscaler.core.billing import BillingModel
from autoscaler.core.model import Action, Event, TaskSpec
from autoscaler.core.solve import Solver
from autoscaler.core.state import RunState
from autoscaler.report.records import Report
from autoscaler.run.start import dry_run, make_emulator
from benchmarks.bats_scenarios import library_digest, library_state, render_table

CONFIG_DIR = Path(__file__).resolve().parent.parent / "config" / "examples"
SEED = 0
BIG_TASKS = 100_000
BIG_PER_TYPE = 250
BIG_BUDGET_FACTOR = 1.2  # BaTS's budget on the 100k bag: 120 % of RR's cost there
TARGETS_S = {("1k", False): 2.0, ("1k", True): 2.0, ("100k", False): 5.0, ("100k", True): 60.0}
MILLION = 1_000_000
MILLION_PER_TYPE = 2_500
MILLION_TARGET_S = 60.0
MILLION_TARGET_MB = 2_000.0
PLOT_TARGET_S = 1.0  # the Gantt chart and the spend plot, per 100,000 tasks

# --- (a) dry runs ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Setup:
    key: str  # "1k" or "100k"
    label: str
    cfg: RunConfig  # policy bats, with its budget
    tasks: list[TaskSpec]


def small_setup() -> Setup:
    cfg = load_config(CONFIG_DIR / "bats_s4_1.yaml")
    return Setup("1k", "1k tasks, 32+32 (S4-1)", cfg, expand_bag(cfg))


def big_setup() -> Setup:
    """S4-3's types ($3 speed 1, $12 speed 3) with 250 machines each and 100,000 tasks.

    The budget is set once RR's cost on this bag is known (see ``run_setup``).
    """
    base = load_config(CONFIG_DIR / "bats_s4_3.yaml")
    cfg = base.model_copy(
        update={
            "name": "scale_100k",
            "bag": Bag(synthetic=BIG_TASKS),
            "machine_types": [
                t.model_copy(update={"max_count": BIG_PER_TYPE}) for t in base.machine_types
            ],
        }
    )
    return Setup("100k", "100k tasks, 250+250 (S4-3 types)", cfg, expand_bag(cfg))


@dataclass(frozen=True, slots=True)
class Timing:
    setup: str
    key: str
    policy: str
    write: bool
    tasks: int
    max_machines: int
    launched: int
    budget: float | None
    cost: float
    makespan_s: float
    done: int
    steps: int
    events: int
    actions: int
    wall_s: list[float]  # around dry_run, writing included
    inner_s: list[float]  # DryRun.wall_s: emulation only
    out_mb: float | None
    cpu_s: list[float]  # process CPU time around dry_run
    plot_s: tuple[float, float] | None  # wall, CPU: both plots drawn again after the runs


def count_events(cfg: RunConfig, n_tasks: int) -> tuple[int, int, int, RunState]:
    """Steps, events and actions of one run (untimed; the same run as the timed ones)."""
    counts = [0, 0, 0]

    def hook(now: float, events: list[Event], actions: list[Action], state: RunState) -> None:
        counts[0] += 1
        counts[1] += len(events)
        counts[2] += len(actions)

    state = make_emulator(cfg, n_tasks, seed=SEED, on_step=hook).run()
    return counts[0], counts[1], counts[2], state


def _dir_mb(path: Path) -> float:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) / 1e6


def time_policy(setup: Setup, cfg: RunConfig, repeats: int, tmp: Path) -> list[Timing]:
    steps, events, actions, state = count_events(cfg, len(setup.tasks))
    out: list[Timing] = []
    for write in (False, True):
        walls: list[float] = []
        inners: list[float] = []
        cpus: list[float] = []
        report: Report | None = None
        size = None
        for rep in range(repeats):
            out_dir = tmp / f"{setup.key}-{cfg.policy}-{rep}" if write else None
            started, cpu = time.perf_counter(), time.process_time()
            d = dry_run(cfg, setup.tasks, seed=SEED, out_dir=out_dir, plots=write)
            walls.append(time.perf_counter() - started)
            cpus.append(time.process_time() - cpu)
            inners.append(d.wall_s)
            report = d.report
            if out_dir is not None:
                size = _dir_mb(out_dir)
        plot_s = plot_seconds(d.state, d.report, tmp) if write else None
        assert report is not None
        if not math.isclose(report.makespan_s, _makespan(state), abs_tol=1e-3):
            print(
                f"warning: {setup.key} {cfg.policy}: dry_run makespan {report.makespan_s} "
                f"differs from the counting run's {_makespan(state):.3f}",
                file=sys.stderr,
            )
        out.append(
            Timing(
                setup=setup.label,
                key=setup.key,
                policy=cfg.policy,
                write=write,
                tasks=len(setup.tasks),
                max_machines=sum(t.max_count for t in cfg.machine_types),
                launched=len(state.fleet.machines),
                budget=None if cfg.policy == "round_robin" else cfg.constraint.budget,
                cost=report.cost,
                makespan_s=report.makespan_s,
                done=report.tasks_done,
                steps=steps,
                events=events,
                actions=actions,
                wall_s=walls,
                inner_s=inners,
                out_mb=size,
                cpu_s=cpus,
                plot_s=plot_s,
            )
        )
    return out


def plot_seconds(state: RunState, report: Report, tmp: Path) -> tuple[float, float]:
    """Wall and CPU time to draw and save both plots of a finished run (as
    ``write_report``; matplotlib is imported already, by the written run before)."""
    from autoscaler.report.plots import gantt_figure, spend_figure

    started, cpu = time.perf_counter(), time.process_time()
    gantt_figure(state).savefig(tmp / "plot-gantt.png", dpi=100)
    spend_figure(state, report.budget).savefig(tmp / "plot-spend.png", dpi=100)
    return time.perf_counter() - started, time.process_time() - cpu


def _makespan(state: RunState) -> float:
    if not state.finished:
        return state.now
    return max((s.end for s in state.tasks.segments if s.outcome == "done"), default=0.0)


def run_setup(setup: Setup, repeats: int, tmp: Path, log: bool = True) -> list[Timing]:
    rr_cfg = setup.cfg.model_copy(update={"policy": "round_robin"})
    if log:
        print(f"  {setup.label}: round robin ...", file=sys.stderr, flush=True)
    rr = time_policy(setup, rr_cfg, repeats, tmp)
    cfg = setup.cfg
    if setup.key == "100k":
        budget = round(BIG_BUDGET_FACTOR * rr[0].cost, 2)
        cfg = cfg.model_copy(
            update={"constraint": cfg.constraint.model_copy(update={"budget": budget})}
        )
    if log:
        print(f"  {setup.label}: BaTS ...", file=sys.stderr, flush=True)
    return rr + time_policy(setup, cfg, repeats, tmp)


def _hm(seconds: float) -> str:
    m = round(seconds / 60)
    return f"{m // 60}h{m % 60:02d}m"


def dry_run_table(timings: Sequence[Timing]) -> str:
    header = [
        "setup",
        "policy",
        "write",
        "tasks",
        "machines",
        "budget",
        "cost",
        "done",
        "makespan",
        "events",
        "actions",
        "wall s",
        "CPU s",
        "emul. s",
        "events/s",
        "target (wall)",
    ]
    rows = []
    for t in timings:
        wall = statistics.median(t.wall_s)
        inner = statistics.median(t.inner_s)
        target = TARGETS_S[t.key, t.write]
        rows.append(
            [
                t.setup,
                "RR" if t.policy == "round_robin" else "BaTS",
                f"yes ({t.out_mb:.1f} MB)" if t.write and t.out_mb is not None else "no",
                f"{t.tasks:,}",
                f"{t.max_machines}/{t.launched}",
                "-" if t.budget is None else f"{t.budget:,.0f}",
                f"{t.cost:,.0f}",
                f"{t.done:,}",
                _hm(t.makespan_s),
                f"{t.events:,}",
                f"{t.actions:,}",
                f"{wall:.2f}",
                f"{statistics.median(t.cpu_s):.2f}",
                f"{inner:.2f}",
                f"{t.events / wall:,.0f}",
                f"<{target:g} s {'PASS' if wall < target else 'FAIL'}",
            ]
        )
    return render_table(header, rows, left=3)


# --- (b) the planner -------------------------------------------------------------------

PLANNER_TASKS = 100_000
PLANNER_BUDGET_SHARE = 0.3


@dataclass(frozen=True, slots=True)
class Instance:
    types: list[TypeEstimate]
    budget: float
    billing: BillingModel


def planner_instance(n_types: int, seed: int) -> Instance:
    """Random types: price 1..20, speed 0.5..4 (mean 900 s/speed), 100..1000 machines.

    Budget: 30 % of running every machine for the fluid time N/Σ A_i/μ_i (rounded up to
    whole ATUs), raised to 1.25× the cheapest conceivable cost N·min c_i·μ_i/ATU if below.
    """
    rng = random.Random(seed)
    billing = BillingModel("fixed", 3600.0)
    margin = billing.boundary_margin_s()
    types = []
    for i in range(n_types):
        price = round(rng.uniform(1.0, 20.0), 2)
        speed = rng.uniform(0.5, 4.0)
        mean = 900.0 / speed
        boot = 120.0
        types.append(
            TypeEstimate(
                name=f"t{i}",
                price=price,
                max_count=rng.randint(100, 1000),
                boot_s=boot,
                mean_s=mean,
                sd_s=mean * 0.15,
                first_cost=price,
                first_tasks=max(0, math.floor((billing.atu_s - margin - boot) / mean)),
            )
        )
    fluid_s = PLANNER_TASKS / sum(t.max_count / t.mean_s for t in types)
    everything = math.ceil(fluid_s / billing.atu_s) * sum(t.max_count * t.price for t in types)
    cheapest = PLANNER_TASKS * min(t.price * t.mean_s for t in types) / billing.atu_s
    budget = round(max(PLANNER_BUDGET_SHARE * everything, 1.25 * cheapest), 2)
    return Instance(types, budget, billing)


@dataclass(frozen=True, slots=True)
class Solve:
    solver: Solver
    seconds: float
    plan: Plan | None


def solve(inst: Instance, solver: Solver) -> Solve:
    problem = BudgetProblem(PLANNER_TASKS, inst.budget, inst.types, inst.billing, cushion_z=0.0)
    started = time.perf_counter()
    plan = plan_budget(problem, solver)
    return Solve(solver, time.perf_counter() - started, plan)


def _same(a: Plan | None, b: Plan | None) -> bool:
    if a is None or b is None:
        return a is b
    return math.isclose(a.speed, b.speed, rel_tol=1e-6) and a.units == b.units


def planner_table(sizes: Sequence[int], instances: int) -> str:
    solve(planner_instance(2, 0), "highs")  # warm up imports and solver start-up
    solve(planner_instance(2, 0), "cbc")
    header = [
        "types",
        "inst.",
        "feasible",
        "HiGHS med ms",
        "HiGHS max ms",
        "CBC med ms",
        "CBC max ms",
        "same speed",
        "units k (med)",
        "types used (med)",
        "machines (med)",
        "speed gap max",
    ]
    rows = []
    for n in sizes:
        highs: list[Solve] = []
        cbc: list[Solve] = []
        for i in range(instances):
            inst = planner_instance(n, 1000 * n + i)
            highs.append(solve(inst, "highs"))
            cbc.append(solve(inst, "cbc"))
            print(
                f"  planner: {n} types, instance {i + 1}/{instances}: HiGHS "
                f"{highs[-1].seconds * 1e3:.0f} ms, CBC {cbc[-1].seconds * 1e3:.0f} ms",
                file=sys.stderr,
                flush=True,
            )
        plans = [s.plan for s in highs if s.plan is not None]
        same = sum(_same(h.plan, c.plan) for h, c in zip(highs, cbc, strict=True))
        gaps = [
            abs(h.plan.speed - c.plan.speed) / h.plan.speed
            for h, c in zip(highs, cbc, strict=True)
            if h.plan is not None and c.plan is not None and h.plan.speed > 0
        ]
        rows.append(
            [
                str(n),
                str(instances),
                f"{len(plans)}/{instances}",
                f"{statistics.median(s.seconds for s in highs) * 1e3:.0f}",
                f"{max(s.seconds for s in highs) * 1e3:.0f}",
                f"{statistics.median(s.seconds for s in cbc) * 1e3:.0f}",
                f"{max(s.seconds for s in cbc) * 1e3:.0f}",
                f"{same}/{instances}",
                f"{statistics.median(p.units for p in plans):g}" if plans else "-",
                f"{statistics.median(sum(1 for c in p.counts.values() if c) for p in plans):g}"
                if plans
                else "-",
                f"{statistics.median(sum(p.counts.values()) for p in plans):g}" if plans else "-",
                f"{max(gaps):.1e}" if gaps else "-",
            ]
        )
    return render_table(header, rows, left=1)


# --- (c) a million tasks ----------------------------------------------------------------


def million_config(policy: str, budget: float | None) -> RunConfig:
    """S4-3's types with 2,500 machines each and a million tasks."""
    base = load_config(CONFIG_DIR / "bats_s4_3.yaml")
    cfg = base.model_copy(
        update={
            "name": "scale_1m",
            "policy": policy,
            "bag": Bag(synthetic=MILLION),
            "machine_types": [
                t.model_copy(update={"max_count": MILLION_PER_TYPE}) for t in base.machine_types
            ],
        }
    )
    if budget is not None:
        cfg = cfg.model_copy(
            update={"constraint": cfg.constraint.model_copy(update={"budget": budget})}
        )
    return cfg


@dataclass(frozen=True, slots=True)
class Million:
    policy: str
    budget: float | None
    cost: float
    done: int
    makespan_s: float
    machines: int
    wall_s: float
    emul_s: float
    cpu_s: float
    peak_mb: float
    files: dict[str, int]  # name -> bytes written
    plot_s: tuple[float, float]  # wall, CPU: both plots drawn again after the run (not in wall_s)


def million_row(policy: str, budget: float | None, out_dir: str) -> Million:
    """One dry run of the million, report and plots written (run in a fresh process, so
    its peak resident memory is its own)."""
    cfg = million_config(policy, budget)
    tasks = expand_bag(cfg)
    out = Path(out_dir)
    started, cpu = time.perf_counter(), time.process_time()
    d = dry_run(cfg, tasks, seed=SEED, out_dir=out, plots=True)
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e3  # KiB on Linux
    files = {p.name: p.stat().st_size for p in sorted(out.iterdir()) if p.is_file()}
    plot_s = plot_seconds(d.state, d.report, out.parent)
    return Million(
        policy,
        budget,
        d.report.cost,
        d.report.tasks_done,
        d.report.makespan_s,
        len(d.state.fleet.machines),
        wall,
        d.wall_s,
        cpu,
        peak,
        files,
        plot_s,
    )


def in_child(policy: str, budget: float | None, out_dir: Path) -> Million:
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        return pool.apply(million_row, (policy, budget, str(out_dir)))


def million_table(rows: Sequence[Million]) -> str:
    header = ["policy", "budget", "cost", "done", "makespan", "machines", "wall s", "emul. s"]
    header += ["CPU s", "CPU µs/task", "journal B/task", "peak MB", "written MB", "target"]
    out = []
    for r in rows:
        ok = r.wall_s < MILLION_TARGET_S and r.peak_mb < MILLION_TARGET_MB
        out.append(
            [
                "RR" if r.policy == "round_robin" else "BaTS",
                "-" if r.budget is None else f"{r.budget:,.0f}",
                f"{r.cost:,.0f}",
                f"{r.done:,}",
                _hm(r.makespan_s),
                f"{r.machines:,}",
                f"{r.wall_s:.1f}",
                f"{r.emul_s:.1f}",
                f"{r.cpu_s:.1f}",
                f"{r.cpu_s / MILLION * 1e6:,.0f}",
                f"{r.files.get('journal.jsonl', 0) / MILLION:,.0f}",
                f"{r.peak_mb:,.0f}",
                f"{sum(r.files.values()) / 1e6:,.1f}",
                f"<{MILLION_TARGET_S:g} s, <{MILLION_TARGET_MB:,.0f} MB {'PASS' if ok else 'FAIL'}",
            ]
        )
    return render_table(header, out, left=1)


def files_table(rows: Sequence[Million]) -> str:
    names = sorted({n for r in rows for n in r.files})
    header = ["file", *("RR bytes" if r.policy == "round_robin" else "BaTS bytes" for r in rows)]
    header += ["bytes/task (last)"]
    out = [
        [n, *(f"{r.files.get(n, 0):,}" for r in rows), f"{rows[-1].files.get(n, 0) / MILLION:.1f}"]
        for n in names
    ]
    return render_table(header, out, left=1)


# --- the targets -----------------------------------------------------------------


def _verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def targets_table(timings: Sequence[Timing], millions: Sequence[Million]) -> str:
    """Issue 22 §3's targets, each with what was measured and PASS or FAIL."""
    header = ["target", "measured", "limit", "verdict"]
    rows = []
    for t in timings:
        if t.key == "100k" and t.policy == "bats" and not t.write:
            wall, cpu = statistics.median(t.wall_s), statistics.median(t.cpu_s)
            rows.append(
                [
                    "100k BaTS dry run, no writing: wall (CPU)",
                    f"{wall:.1f} s ({cpu:.1f} s)",
                    "< 5 s",
                    _verdict(wall < TARGETS_S["100k", False]),
                ]
            )
    for t in timings:
        if t.key == "100k" and t.write and t.plot_s is not None:
            per, per_cpu = (v / (t.tasks / 100_000) for v in t.plot_s)
            rows.append(
                [
                    "plots per 100k tasks, 100k "
                    f"{'RR' if t.policy == 'round_robin' else 'BaTS'}: wall (CPU)",
                    f"{per:.2f} s ({per_cpu:.2f} s)",
                    f"< {PLOT_TARGET_S:g} s",
                    _verdict(per < PLOT_TARGET_S),
                ]
            )
    for r in millions:
        name = "RR" if r.policy == "round_robin" else "BaTS"
        rows.append(
            [
                f"1M {name} with report and plots: wall (CPU)",
                f"{r.wall_s:.1f} s ({r.cpu_s:.1f} s)",
                f"< {MILLION_TARGET_S:g} s",
                _verdict(r.wall_s < MILLION_TARGET_S),
            ]
        )
        rows.append(
            [
                f"1M {name}: peak memory",
                f"{r.peak_mb:,.0f} MB",
                f"< {MILLION_TARGET_MB:,.0f} MB",
                _verdict(r.peak_mb < MILLION_TARGET_MB),
            ]
        )
        per, per_cpu = (v / (MILLION / 100_000) for v in r.plot_s)
        rows.append(
            [
                f"plots per 100k tasks, 1M {name}: wall (CPU)",
                f"{per:.2f} s ({per_cpu:.2f} s)",
                f"< {PLOT_TARGET_S:g} s",
                _verdict(per < PLOT_TARGET_S),
            ]
        )
        for label, names in (
            ("report.json", ("report.json",)),
            ("report.md", ("report.md",)),
            ("journal.jsonl", ("journal.jsonl",)),
            ("log.jsonl", ("log.jsonl",)),
            ("plots (gantt.png + spend.png)", ("gantt.png", "spend.png")),
        ):
            size = sum(r.files.get(n, 0) for n in names)
            rows.append([f"1M {name}: {label}", f"{size / 1e6:,.1f} MB", "-", "(size)"])
    return render_table(header, rows, left=2)


# --- (d) the old path ------------------------------------------------------------------

OLD_TASKS = 10_000


def old_path_table() -> str:
    """Round robin on 10,000 tasks, 250 + 250 machines: the estimate kept (as the
    controller runs now) and rebuilt after every end (as it did before)."""
    from autoscaler.learn import stats as stats_module

    setup = big_setup()
    cfg = setup.cfg.model_copy(update={"policy": "round_robin", "bag": Bag(synthetic=OLD_TASKS)})
    tasks = expand_bag(cfg)
    rows = []
    kept = stats_module.EXACT_UP_TO
    results = []
    for label, exact in (("kept (now)", kept), ("rebuilt after every end (old)", 10**12)):
        stats_module.EXACT_UP_TO = exact
        try:
            started, cpu = time.perf_counter(), time.process_time()
            d = dry_run(cfg, tasks, seed=SEED, plots=False)
            wall, cpu = time.perf_counter() - started, time.process_time() - cpu
        finally:
            stats_module.EXACT_UP_TO = kept
        results.append((d.report.cost, d.report.makespan_s))
        cost, makespan = f"{d.report.cost:,.0f}", f"{d.report.makespan_s:,.1f}"
        rows.append([label, f"{OLD_TASKS:,}", cost, makespan, f"{wall:.2f}", f"{cpu:.2f}"])
    same = "yes" if results[0] == results[1] else "NO"
    header = ["T_i", "tasks", "cost", "makespan s", "wall s", "CPU s"]
    return render_table(header, rows, left=1) + f"\nsame cost and makespan: {same}"


# --- main ------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.scale",
        description="Wall time of dry runs at 1k and 100k tasks; planner solve time.",
    )
    parser.add_argument(
        "--repeats", type=int, default=3, help="runs per 1k measurement, median shown (default 3)"
    )
    parser.add_argument(
        "--instances", type=int, default=10, help="random planner instances per size (10)"
    )
    parser.add_argument("--skip-100k", action="store_true", help="only the 1k dry runs")
    parser.add_argument(
        "--quick", action="store_true", help="skip the million-task rows (several minutes)"
    )
    args = parser.parse_args(argv)
    started = time.perf_counter()
    state_before = library_state()

    print(f"Library: {state_before}")
    print()
    print("(a) Dry run wall time: BaTS against round robin (RR) on the same config, seed 0")
    print("  progress:", file=sys.stderr)
    timings: list[Timing] = []
    with tempfile.TemporaryDirectory(prefix="autoscaler-scale-") as tmp_name:
        tmp = Path(tmp_name)
        timings += run_setup(small_setup(), args.repeats, tmp)
        if not args.skip_100k:
            timings += run_setup(big_setup(), 1, tmp)
    print(dry_run_table(timings))
    big_budget = next((t.budget for t in timings if t.key == "100k" and t.budget), None)
    print(
        "1k: config/examples/bats_s4_1.yaml as is (cluster0 $3 speed 1, cluster1 $12 speed 1,\n"
        f"  32 each, budget $2034), median of {args.repeats} runs per row.\n"
        f"100k: {BIG_TASKS:,} tasks N(15 min, (√5 min)²), cluster0 $3 speed 1 and cluster1 $12\n"
        f"  speed 3, {BIG_PER_TYPE} each (S4-3 types scaled up), one run per row; BaTS budget\n"
        f"  = {BIG_BUDGET_FACTOR:g} × RR's cost on the same bag"
        + (f" = ${big_budget:,.2f}." if big_budget else ".")
        + "\n"
        "machines: maximum (Σ max_count) / launched during the run. makespan: virtual.\n"
        "events/actions: counted in a separate, untimed run of the same seed (make_emulator\n"
        "  with an on_step hook). wall s: around dry_run, writing the run directory included\n"
        "  when write = yes (config, journal.jsonl, log.jsonl, report.json/.md, gantt.png,\n"
        "  spend.png; size in brackets); emul. s: DryRun.wall_s, the emulation alone.\n"
        "events/s = events / wall s; CPU s: this process's CPU time (the machine may be\n"
        "  shared: wall time counts others' load too). Targets: 1k < 2 s, 100k < 5 s without\n"
        "  writing and < 60 s with it (printed, not asserted)."
    )
    print()
    print("(d) T_i kept between runs' ends against the old path, round robin, seed 0")
    print("  progress: (d) old path ...", file=sys.stderr, flush=True)
    print(old_path_table())
    print(
        "The old path: learn.stats.EXACT_UP_TO raised, so the survival curve is rebuilt\n"
        "  after every run that ends (as before); kept: exact up to EXACT_UP_TO runs per\n"
        "  type, then rebuilt once it lags STALE_SHARE of the runs."
    )
    print()
    print(f"(b) Budget planner solve time, plan_budget, {PLANNER_TASKS:,} tasks, fixed 60-min ATU")
    print("  progress:", file=sys.stderr)
    print(planner_table((2, 5, 10, 20), args.instances))
    print(
        "Random instances (seeded): price 1..20 per ATU, speed 0.5..4 (mean 900 s/speed,\n"
        "  sd 15 %), 100..1000 machines per type, boot 120 s, nothing live (a first plan).\n"
        "  Budget = 30 % of running every machine for the fluid time N/Σ A_i/μ_i rounded\n"
        "  up to whole ATUs, at least 1.25 × N·min_i c_i·μ_i/ATU.\n"
        "ms: wall time of plan_budget (PuLP model building + solves over k), median and\n"
        "  max over the instances. same speed: both solvers' plans have the same objective\n"
        "  Σ a_i/T_i (rel. 1e-6) and the same k; speed gap: largest relative difference."
    )
    millions: list[Million] = []
    if not args.quick:
        print()
        print(
            f"(c) A million tasks on {MILLION_PER_TYPE:,} + {MILLION_PER_TYPE:,} machines, "
            "dry run with report and plots, seed 0"
        )
        with tempfile.TemporaryDirectory(prefix="autoscaler-scale-1m-") as tmp_name:
            print("  progress: (c) 1M round robin ...", file=sys.stderr, flush=True)
            millions.append(in_child("round_robin", None, Path(tmp_name) / "rr"))
            budget = round(BIG_BUDGET_FACTOR * millions[0].cost, 2)
            print("  progress: (c) 1M BaTS ...", file=sys.stderr, flush=True)
            millions.append(in_child("bats", budget, Path(tmp_name) / "bats"))
        print(million_table(millions))
        print(files_table(millions))
        print(
            "plots: both drawn and saved again after the run in the same process, "
            f"{millions[-1].plot_s[0]:.1f} s wall for the BaTS row (not in its wall s)."
        )
        print(
            f"S4-3's types, {MILLION:,} tasks N(15 min, (√5 min)²); BaTS's budget = "
            f"{BIG_BUDGET_FACTOR:g} × RR's cost. Each row in a fresh process: peak MB its\n"
            "  ru_maxrss. wall s around dry_run (emulation, journal, log, report, plots);\n"
            "  emul. s the emulation with the journal and log written as it goes.\n"
            "journal.jsonl: every event and action, one JSON object a line (grep, jq, or\n"
            "  `autoscaler report`); report.md/report.json: per machine type and machine, not\n"
            "  per task; log.jsonl: the controller's decisions; gantt.png: buckets per machine."
        )
    print()
    print("Targets (issue 22 §3; wall time counts the machine's other load, CPU does not)")
    print(targets_table(timings, millions))
    print()
    if library_digest() not in state_before:
        print("WARNING: the library's sources changed while this benchmark ran")
    print(f"Total wall time {time.perf_counter() - started:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Three recurring jobs of one application through the service's dry run
(``autoscaler run SERVICE --dry-run --job A --job B@AT --job C@AT``), as the service
runs them: in its deadline pool, each admitted at its arrival with what the dry run
remembers of the application by then (``service.memory``). Job A samples (nothing is
remembered yet); B and C should not, and their first forecasts, made at their arrival
from the remembered times, should be within 10 % of what happened.

Per scenario (billing, spacing of the arrivals) and seed: the first forecast of each
job's cost and makespan (its first ``Forecast`` in the pool's journal: cost, finish
minus arrival) against its outcome (the cost attributed to it, its last task's end
minus its arrival), and its sample tasks (its tasks given to machines before its first
forecast). The last lines hold the second and third jobs against the targets. Run from
the repository root::

    .venv/bin/python -m benchmarks.recurring --seeds 10
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

if __name__ == "__main__" and not __package__:  # ``python benchmarks/recurring.py``
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from autoscaler.config.service_schema import load_service_config
from autoscaler.core.journal import JOURNAL_JSONL, JsonlJournal
from autoscaler.core.model import Assign, AssignGroup, Forecast, JobAdded, Launch
from autoscaler.report.records import read_report
from autoscaler.service.arrivals import dry_run_jobs, load_jobs
from benchmarks.bats_scenarios import pooled, quantile, render_table

TASKS = 60
"""Tasks per job."""

DEADLINE_S = 1500.0
"""Each job's deadline after its arrival (25 min): one job ends before the next comes."""

SCENARIOS: dict[str, dict[str, Any]] = {
    "fixed/30m": {"billing": {"mode": "fixed", "atu_s": 3600.0}, "every_s": 1800.0},
    "fixed/2h": {"billing": {"mode": "fixed", "atu_s": 3600.0}, "every_s": 7200.0},
    "per_second/30m": {
        "billing": {"mode": "per_second", "atu_s": 3600.0, "min_charge_s": 60.0},
        "every_s": 1800.0,
    },
}
"""Billing and the time between arrivals: 30 min (the machines A bought still have paid
time when B comes) or 2 h (they are gone)."""


def service(billing: dict[str, Any]) -> dict[str, Any]:
    """A service config: two types, tasks of about 2 min on the slow one."""
    return {
        "name": "recurring",
        "machine_types": [
            {"name": "small", "price": 1.0, "max_count": 10, "boot_s": 120.0},
            {"name": "fast", "price": 3.0, "max_count": 10, "boot_s": 120.0},
        ],
        "billing": billing,
        "provider": "local",
        "monitoring_interval_s": 300.0,
        "emulator": {
            "seed": 0,
            "runtime": {"dist": "normal", "mean_s": 120.0, "sd_s": 30.0},
            "speed": {"small": 1.0, "fast": 3.0},
        },
    }


def job(name: str) -> dict[str, Any]:
    return {
        "name": name,
        "app": "sweep",
        "bag": {"synthetic": TASKS},
        "constraint": {"deadline_s": DEADLINE_S},
    }


@dataclass(frozen=True, slots=True)
class JobResult:
    scenario: str
    seed: int
    index: int  # 1: A, 2: B, 3: C
    sampled: int  # tasks given to machines before its first forecast
    from_memory: bool  # its task times came from the dry run's memory
    cost_forecast: float
    cost: float
    makespan_forecast: float
    makespan: float
    met_deadline: bool

    @property
    def cost_err(self) -> float:
        return _err(self.cost_forecast, self.cost)

    @property
    def makespan_err(self) -> float:
        return _err(self.makespan_forecast, self.makespan)


def _err(predicted: float, actual: float) -> float:
    """predicted / actual − 1; nothing forecast for nothing spent is exact (a job run in
    time another job had paid for costs it nothing), something forecast for nothing is
    infinitely wrong."""
    if actual <= 0:
        return 0.0 if abs(predicted) < 1e-9 else math.inf
    return predicted / actual - 1.0


def pool_jobs(pool_dir: Path) -> list[tuple[str, int, int, Forecast | None, int]]:
    """Per job of a pool run, in order: name, first task, count, first forecast, and the
    tasks given to machines before it."""
    jobs: dict[str, list[Any]] = {}
    report = read_report(pool_dir)
    first = 0
    for j in getattr(report, "jobs", ())[:1]:
        jobs[j.name] = [j.name, first, j.tasks, None, 0]
    journal = JsonlJournal(pool_dir / JOURNAL_JSONL)
    try:
        records = list(journal.records())
    finally:
        journal.close()
    forecast_at: dict[str, float] = {}
    given: list[tuple[float, int]] = []
    for r in records:
        item = r.item
        if isinstance(item, JobAdded):
            jobs[item.job.name] = [item.job.name, item.job.first, item.job.count, None, 0]
        elif isinstance(item, Forecast) and item.job not in forecast_at:
            forecast_at[item.job] = r.t
            jobs[item.job][3] = item
        elif isinstance(item, Launch):
            given += [(r.t, t) for q in item.queues for t in q]
        elif isinstance(item, Assign):
            given.append((r.t, item.task))
        elif isinstance(item, AssignGroup):
            given += [(r.t, t) for t in item.tasks]
    for entry in jobs.values():
        name, lo, count = entry[0], entry[1], entry[2]
        until = forecast_at.get(name, math.inf)
        entry[4] = len({t for at, t in given if lo <= t < lo + count and at < until})
    return [tuple(e) for e in jobs.values()]  # type: ignore[misc]


def run_seed(work: tuple[str, int]) -> list[JobResult]:
    name, seed = work
    scenario = SCENARIOS[name]
    with tempfile.TemporaryDirectory(prefix="recurring-") as tmp:
        root = Path(tmp)
        (root / "service.yaml").write_text(yaml.safe_dump(service(scenario["billing"])))
        given = []
        for i, n in enumerate(("a", "b", "c")):
            path = root / f"{n}.yaml"
            path.write_text(yaml.safe_dump(job(f"sweep-{n}")))
            given.append((path, i * scenario["every_s"]))
        svc = load_service_config(root / "service.yaml")
        lines = dry_run_jobs(svc, load_jobs(svc, given), seed=seed, out=root / "out")
        report = read_report(root / "out" / "pool")
        outcomes = {j.name: j for j in getattr(report, "jobs", ())}
        out = []
        for index, (job_name, _, _, fc, sampled) in enumerate(pool_jobs(root / "out" / "pool")):
            o = outcomes[job_name]
            line = lines[index]
            out.append(
                JobResult(
                    name,
                    seed,
                    index + 1,
                    sampled,
                    line.task_times is not None,
                    fc.cost if fc else math.nan,
                    o.cost,
                    fc.finish - o.at_s if fc else math.nan,
                    (o.finish_s or math.nan) - o.at_s,
                    o.met_deadline,
                )
            )
        return out


def _p(value: float, signed: bool = False) -> str:
    if math.isnan(value):
        return "-"
    return f"{100.0 * value:+.1f}%" if signed else f"{100.0 * value:.1f}%"


def _median(values: Sequence[float]) -> float:
    good = [v for v in values if not math.isnan(v)]
    return statistics.median(good) if good else math.nan


def _abs_q(values: Sequence[float], q: float) -> float:
    good = [abs(v) for v in values if not math.isnan(v)]
    return quantile(good, q) if good else math.nan


@dataclass(frozen=True, slots=True)
class Row:
    scenario: str
    index: int
    runs: tuple[JobResult, ...]

    def cells(self) -> list[str]:
        rs = self.runs
        cost = [r.cost_err for r in rs]
        mk = [r.makespan_err for r in rs]
        return [
            self.scenario,
            "ABC"[self.index - 1],
            str(len(rs)),
            f"{sum(r.from_memory for r in rs)}",
            f"{_median([float(r.sampled) for r in rs]):.0f}",
            str(max((r.sampled for r in rs), default=0)),
            _p(_median(cost), signed=True),
            _p(_abs_q(cost, 0.5)),
            _p(_abs_q(cost, 0.9)),
            _p(_median(mk), signed=True),
            _p(_abs_q(mk, 0.5)),
            _p(_abs_q(mk, 0.9)),
            f"{100.0 * sum(r.met_deadline for r in rs) / len(rs):.0f}%",
        ]


def rows_of(results: Sequence[JobResult], scenarios: Sequence[str]) -> list[Row]:
    return [
        Row(s, i, tuple(r for r in results if r.scenario == s and r.index == i))
        for s in scenarios
        for i in (1, 2, 3)
    ]


def target_lines(rows: Sequence[Row]) -> list[str]:
    """The second and third jobs: no sampling, first forecasts within 10 % (median)."""
    later = [r for r in rows if r.index > 1 and r.runs]
    checks = [
        ("B, C: no sample task", lambda r: max(x.sampled for x in r.runs) == 0),
        ("B, C: from memory", lambda r: all(x.from_memory for x in r.runs)),
        (
            "B, C: median |first cost err| <= 10%",
            lambda r: _abs_q([x.cost_err for x in r.runs], 0.5) <= 0.10,
        ),
        (
            "B, C: median |first makespan err| <= 10%",
            lambda r: _abs_q([x.makespan_err for x in r.runs], 0.5) <= 0.10,
        ),
        ("B, C: every deadline met", lambda r: all(x.met_deadline for x in r.runs)),
    ]
    lines = []
    for name, ok in checks:
        failed = [r for r in later if not ok(r)]
        where = ", ".join(f"{r.scenario}/{'ABC'[r.index - 1]}" for r in failed)
        lines.append(
            f"{name:42s} PASS {len(later) - len(failed):2d}  FAIL {len(failed):2d}"
            + (f"  failing: {where}" if failed else "")
        )
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.recurring",
        description="Recurring jobs of one application through the service's dry run.",
    )
    parser.add_argument("--seeds", type=int, default=10, help="how many seeds (default 10)")
    parser.add_argument("--jobs", type=int, default=2, help="worker processes (default 2)")
    parser.add_argument(
        "--scenarios", default=",".join(SCENARIOS), help=f"subset of {','.join(SCENARIOS)}"
    )
    args = parser.parse_args(argv)
    scenarios = [s for s in args.scenarios.split(",") if s]
    unknown = [s for s in scenarios if s not in SCENARIOS]
    if unknown or not scenarios or args.seeds < 1 or args.jobs < 1:
        parser.error(f"choose scenarios from {', '.join(SCENARIOS)}; --seeds, --jobs >= 1")
    started = time.perf_counter()
    work = [(s, seed) for s in scenarios for seed in range(args.seeds)]
    results: list[JobResult] = []
    with pooled(run_seed, work, args.jobs) as done:
        for got in done:
            results += got
    rows = rows_of(results, scenarios)
    print("Three recurring jobs of one application through the service's dry run")
    print(
        f"{TASKS} tasks a job, deadline {DEADLINE_S:g} s after arrival; normal runtimes of\n"
        "mean 120 s, sd 30 s on small ($1 per 1-h ATU, speed 1), fast ($3, speed 3), boot\n"
        "120 s. A arrives at 0, B and C every 30 min or 2 h; no task_s: A samples, B and C\n"
        "start from what the dry run remembers of application 'sweep'."
    )
    header = [
        "scenario",
        "job",
        "runs",
        "memory",
        "sampled med",
        "max",
        "$ err med",
        "|$| med",
        "|$| p90",
        "mk err med",
        "|mk| med",
        "|mk| p90",
        "on time",
    ]
    print(render_table(header, [r.cells() for r in rows]))
    print(
        "err = the job's first forecast / outcome − 1 (cost: attributed to the job;\n"
        "makespan: its last task's end − its arrival). memory: runs whose task times came\n"
        "from memory. sampled: its tasks given to machines before its first forecast."
    )
    print()
    print("Targets (second and third jobs)")
    for line in target_lines(rows):
        print(line)
    print(f"\n{len(work)} dry runs in {time.perf_counter() - started:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())

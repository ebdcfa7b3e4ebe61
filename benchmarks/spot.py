"""Spot beside on-demand, against on-demand alone (issue 37's first figure).

Dry runs of one EC2 setup: ``od`` on-demand (0.085 an hour, up to 20 machines) and
``spot`` (the same machine, capped at the on-demand price, up to 20), per-second billing,
600 tasks of about 4 minutes (lognormal, sd 1 min). Two jobs, each run on its own:

* **budget**: finish as fast as ``--budget`` (6) allows;
* **deadline**: done within ``--deadline`` (3 h) as cheaply as can be.

Each runs with spot taken back at every rate of ``--rates`` an hour
(``emulator.reclaim_per_hour``), under two spot price traces (``emulator.spot_prices``,
read each monitoring interval as the market would be): ``flat`` (0.026 throughout) and
``rising`` (0.026, then 0.04 from 30 min, the cap 0.085 from 1 h: the one of
``config/examples/spot_market.yaml``). The baseline, in the same run and on the same
seeds, is the same job on ``od`` alone. Per row, over the seeds: the mean cost and
makespan and their ratio to on-demand alone, runs within budget (budget job) or with
every deadline met (deadline job), runs with every task done, machines taken back, and
runs in which the spot type was held after repeated reclaims.
Targets: every run within its budget, every deadline met, every task done::

    .venv/bin/python -m benchmarks.spot [--seeds 3] [--rates 0,0.05,0.2]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

if __name__ == "__main__" and not __package__:  # ``python benchmarks/spot.py``
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from autoscaler.config.bag import expand_bag
from autoscaler.config.load import load_config
from autoscaler.core.model import NOTICE_REASON
from autoscaler.report.records import DeadlineReport
from autoscaler.run.start import dry_run

TRACES = {
    "flat": "[[0, 0.026]]",
    "rising": "[[0, 0.026], [30m, 0.04], [1h, 0.085]]",
}
"""The spot price traces (USD per ATU over run time) compared."""


def scenario(
    job: str, spot: bool, trace: str, rate: float, seed: int, args: argparse.Namespace
) -> str:
    """The config of one run: ``job`` (budget or deadline), with the spot type or not."""
    constraint = f"budget: {args.budget}" if job == "budget" else f"deadline_s: {args.deadline}"
    spot_type = "\n  - {name: spot, price: 0.085, max_count: 20, boot_s: 2m}" if spot else ""
    spot_ec2 = "\n    spot: {instance_type: c5.large, spot: true}" if spot else ""
    speed = "{od: 1, spot: 1}" if spot else "{od: 1}"
    market = (
        f"\n  spot_prices: {{spot: {TRACES[trace]}}}\n  reclaim_per_hour: {{spot: {rate}}}"
        if spot
        else ""
    )
    return f"""
name: spot-{job}
bag:
  command: "python3 simulate.py --seed {{seed}}"
  sweep: {{seed: {{start: 0, stop: {args.tasks}}}}}
constraint: {{{constraint}}}
machine_types:
  - {{name: od, price: 0.085, max_count: 20, boot_s: 2m}}{spot_type}
billing: {{mode: per_second, atu_s: 1h, min_charge_s: 60}}
provider: ec2
ec2:
  region: us-east-1
  ami: ami-0123456789abcdef0
  spot_prices: market
  types:
    od: {{instance_type: c5.large}}{spot_ec2}
  subnets: [subnet-aaaa, subnet-bbbb]
  bootstrap: user-data
  controller_url: https://10.0.0.1:8080
monitoring_interval_s: 5m
emulator:
  seed: {seed}
  runtime: {{dist: lognormal, mean_s: 4m, sd_s: 1m}}
  speed: {speed}{market}
"""


@dataclass(frozen=True)
class Run:
    cost: float
    makespan_s: float
    kept: bool  # within budget (budget job) or every deadline met (deadline job)
    all_done: bool
    taken: int  # machines taken back
    held: bool  # the spot type held after repeated reclaims


def one(
    tmp: Path, job: str, spot: bool, trace: str, rate: float, seed: int, args: argparse.Namespace
) -> Run:
    path = tmp / f"{job}-{spot}-{trace}-{rate}-{seed}.yaml"
    path.write_text(scenario(job, spot, trace, rate, seed, args), encoding="utf-8")
    cfg = load_config(path)
    report = dry_run(cfg, expand_bag(cfg), seed=seed, plots=False).report
    if isinstance(report, DeadlineReport):
        kept = report.jobs_met_deadline == len(report.jobs)
    else:
        kept = report.within_budget
    return Run(
        report.cost,
        report.makespan_s,
        kept,
        report.tasks_done == report.tasks_total,
        sum(NOTICE_REASON in (m.end_reason or "") for m in report.machines),
        bool(report.reclaim_holds),
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m benchmarks.spot", description=__doc__.split("\n\n")[0]
    )
    ap.add_argument("--seeds", type=int, default=3, help="emulator seeds 1..N (3)")
    ap.add_argument("--rates", default="0,0.05,0.2", help="spot reclaims an hour (0,0.05,0.2)")
    ap.add_argument("--tasks", type=int, default=600, help="tasks (600)")
    ap.add_argument("--budget", type=float, default=6.0, help="the budget job's budget (6)")
    ap.add_argument("--deadline", default="3h", help="the deadline job's deadline (3h)")
    args = ap.parse_args(argv)
    rates = [float(x) for x in args.rates.split(",")]
    seeds = range(1, args.seeds + 1)
    print(
        f"{args.tasks} tasks of about 4 min; od 0.085/h ×20, spot capped at 0.085 ×20, "
        f"per-second billing; budget {args.budget:g}, deadline {args.deadline}; "
        f"seeds 1-{args.seeds}"
    )
    head = (
        f"{'job':<8} {'machines':<10} {'trace':<7} {'reclaims/h':>10} {'cost':>6} {'× od':>5} "
        f"{'makespan':>9} {'× od':>5} {'kept':>5} {'all done':>8} {'taken back':>10} {'held':>5}"
    )
    print(head)
    print("-" * len(head))
    failures: list[str] = []
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        for job in ("budget", "deadline"):
            base = [one(tmp, job, False, "flat", 0.0, s, args) for s in seeds]
            od_cost = statistics.mean(r.cost for r in base)
            od_span = statistics.mean(r.makespan_s for r in base)
            rows = [("od alone", "-", 0.0, base)]
            for trace in TRACES:
                for rate in rates:
                    runs = [one(tmp, job, True, trace, rate, s, args) for s in seeds]
                    rows.append(("od + spot", trace, rate, runs))
            for machines, trace, rate, runs in rows:
                cost = statistics.mean(r.cost for r in runs)
                span = statistics.mean(r.makespan_s for r in runs)
                kept = sum(r.kept for r in runs)
                done = sum(r.all_done for r in runs)
                taken = statistics.mean(r.taken for r in runs)
                held = sum(r.held for r in runs)
                print(
                    f"{job:<8} {machines:<10} {trace:<7} {rate * 100:>9.0f}% {cost:6.2f} "
                    f"{cost / od_cost:5.2f} {span / 3600:8.2f}h {span / od_span:5.2f} "
                    f"{kept:>2}/{len(runs):<2} {done:>5}/{len(runs):<2} {taken:10.1f} "
                    f"{held:>2}/{len(runs)}"
                )
                where = f"{job}, {machines}, {trace}, {rate:g}/h"
                if kept < len(runs):
                    what = "over budget" if job == "budget" else "a deadline missed"
                    failures.append(f"{where}: {len(runs) - kept} run(s) {what}")
                if done < len(runs):
                    failures.append(f"{where}: {len(runs) - done} run(s) left tasks undone")
    print("kept: runs within budget (budget job) or with the deadline met (deadline job)")
    for line in failures:
        print(f"target missed: {line}")
    print("targets: " + ("all met" if not failures else f"{len(failures)} missed"))
    return 0 if not failures else 1


if __name__ == "__main__":
    raise SystemExit(main())

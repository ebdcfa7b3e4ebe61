"""What reclaims cost a run, and what the learned reclaim rate does about them.

Dry runs of ``config/examples/rehearse.yaml`` (2000 tasks, budget 12, on-demand m5 and
c5 beside c5_spot) without its capacity outage, with c5_spot taken back at each rate of
``--rates`` an hour (``emulator.reclaim_per_hour``), seeds ``--seeds``; ``--task-min``
scales the tasks (4 minutes on m5 in the example) and ``--tasks`` their number, the
budget with both. Each rate
runs under three rules, side by side:

* **price**: reclaims priced into the plans, no type ever held;
* **hold at k**: every 3rd reclaim within an hour holds the type (``hold_below: 1``);
* **default**: the 3rd reclaim holds it only if its machines keep at most half their
  work (``reclaims.hold_below``).

Per rate and rule: the mean cost and makespan, runs with a hold, machines taken back;
every task done and the budget held in every run (else said)::

    .venv/bin/python -m benchmarks.reclaims [--rates 0,0.2,1,3] [--seeds 1,2,3] [--task-min 4]
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Sequence
from pathlib import Path

from autoscaler.config.bag import expand_bag
from autoscaler.config.load import load_config
from autoscaler.core.model import NOTICE_REASON
from autoscaler.run.start import dry_run

EXAMPLE = Path(__file__).resolve().parents[1] / "config" / "examples" / "rehearse.yaml"


RULES = {"price": {"hold_after": 10**6}, "hold at k": {"hold_below": 1.0}, "default": {}}
"""The ``reclaims:`` settings of each rule compared."""


def one(
    rate: float, seed: int, rule: str, task_min: float, tasks: int = 2000
) -> tuple[float, float, int, bool, bool, bool]:
    """(cost, makespan, reclaims, held, every task done, within budget) of one dry run."""
    cfg = load_config(EXAMPLE)
    scale = task_min / 4.0
    runtime = cfg.emulator.runtime.model_copy(
        update={"mean_s": 240.0 * scale, "sd_s": 60.0 * scale}
    )
    emulator = cfg.emulator.model_copy(
        update={
            "refusals": [],
            "reclaim_per_hour": {"c5_spot": rate},
            "seed": seed,
            "runtime": runtime,
        }
    )
    budget = cfg.constraint.budget * scale * tasks / 2000
    constraint = cfg.constraint.model_copy(update={"budget": budget})
    reclaims = cfg.reclaims.model_copy(update=RULES[rule])
    cfg = cfg.model_copy(
        update={"emulator": emulator, "constraint": constraint, "reclaims": reclaims}
    )
    done = dry_run(cfg, expand_bag(cfg)[:tasks], seed=seed, plots=False)
    r = done.report
    taken = sum(NOTICE_REASON in (m.end_reason or "") for m in r.machines)
    return (
        r.cost,
        r.makespan_s,
        taken,
        bool(r.reclaim_holds),
        r.tasks_done == r.tasks_total,
        r.within_budget,
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.reclaims")
    parser.add_argument("--rates", default="0,0.2,1,3", help="reclaims an hour (0,0.2,1,3)")
    parser.add_argument("--seeds", default="1,2,3", help="emulator seeds (1,2,3)")
    parser.add_argument("--task-min", type=float, default=4.0, help="mean task on m5 (4)")
    parser.add_argument("--tasks", type=int, default=2000, help="tasks, budget in step (2000)")
    args = parser.parse_args(argv)
    rates = [float(x) for x in args.rates.split(",")]
    seeds = [int(x) for x in args.seeds.split(",")]
    print(
        f"rehearse.yaml without its outage, tasks of {args.task_min:g} min on m5, "
        f"seeds {args.seeds}"
    )
    print("| reclaims/h | rule | cost | makespan | held | reclaimed |")
    print("| ---: | --- | ---: | ---: | ---: | ---: |")
    for rate in rates:
        for rule in RULES:
            runs = [one(rate, seed, rule, args.task_min, args.tasks) for seed in seeds]
            cost = statistics.mean(r[0] for r in runs)
            makespan = statistics.mean(r[1] for r in runs) / 60
            taken = statistics.mean(r[2] for r in runs)
            held = sum(r[3] for r in runs)
            said = "" if all(r[4] and r[5] for r in runs) else " (NOT every task done in budget)"
            print(
                f"| {rate:g} | {rule} | {cost:.2f} | {makespan:.1f} min | {held}/{len(runs)} "
                f"| {taken:.1f}{said} |"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Whether a change to the controller moved a decision, and what it cost in CPU.

One BaTS dry run of ``benchmarks.scale``'s big bag (S4-3's two types, 250 + 250
machines, N(15 min, (√5 min)²) tasks, seed 0) at a fixed budget, without writing: its
cost, makespan and tasks done, the CPU time of the run, and a digest of every step's
time, events and actions (their reprs, in order). Run it from two checkouts (say main
and a branch) and compare: the same digest is the same run, decision for decision.

    .venv/bin/python -m benchmarks.same_decisions [--tasks 100000] [--repeats 3]

The budget is ``scale.BIG_BUDGET_FACTOR`` × round robin's cost on the bag, worked out
once (round robin first), as ``benchmarks.scale`` does; ``--budget`` skips that.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import replace

from autoscaler.config.bag import expand_bag
from autoscaler.config.schema import Bag, RunConfig
from autoscaler.core.model import Action, Configure, Event
from autoscaler.core.state import RunState
from autoscaler.run.start import dry_run, make_emulator
from benchmarks.scale import BIG_BUDGET_FACTOR, SEED, big_setup


def with_budget(cfg: RunConfig, budget: float) -> RunConfig:
    return cfg.model_copy(
        update={"constraint": cfg.constraint.model_copy(update={"budget": budget})}
    )


def digest(cfg: RunConfig, n_tasks: int) -> tuple[int, str, str]:
    """Steps, the digest of every step's (time, events, actions), and the same with each
    plan's forecast left out (``Configure``'s predicted cost and makespan and their
    intervals: what the run tells, not what it does)."""
    h = hashlib.sha256()
    decided = hashlib.sha256()
    steps = 0

    def hook(now: float, events: list[Event], actions: list[Action], state: RunState) -> None:
        nonlocal steps
        steps += 1
        h.update(repr((now, events, actions)).encode())
        done = [unforecast(a) for a in actions]
        decided.update(repr((now, events, done)).encode())

    make_emulator(cfg, n_tasks, seed=SEED, on_step=hook).run()
    return steps, h.hexdigest()[:16], decided.hexdigest()[:16]


def unforecast(action: Action) -> Action:
    """``action`` without a plan's forecast, if it is a ``Configure``."""
    if not isinstance(action, Configure):
        return action
    return replace(
        action,
        predicted_cost=None,
        predicted_makespan_s=None,
        cost_interval=None,
        makespan_interval_s=None,
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.same_decisions")
    parser.add_argument("--tasks", type=int, default=100_000, help="bag size (100000)")
    parser.add_argument("--budget", type=float, default=None, help="skip round robin's run")
    parser.add_argument("--repeats", type=int, default=1, help="timed runs (1)")
    args = parser.parse_args(argv)
    base = big_setup().cfg.model_copy(update={"bag": Bag(synthetic=args.tasks)})
    tasks = expand_bag(base)
    budget = args.budget
    if budget is None:
        rr = dry_run(base.model_copy(update={"policy": "round_robin"}), tasks, seed=SEED)
        budget = round(BIG_BUDGET_FACTOR * rr.report.cost, 2)
    cfg = with_budget(base, budget)
    for _ in range(args.repeats):
        started, cpu = time.perf_counter(), time.process_time()
        d = dry_run(cfg, tasks, seed=SEED, plots=False)
        wall, cpu = time.perf_counter() - started, time.process_time() - cpu
        r = d.report
        print(
            f"tasks {args.tasks:,} budget {budget:.2f}: cost {r.cost!r} makespan "
            f"{r.makespan_s!r} done {r.tasks_done:,}; wall {wall:.2f} s, CPU {cpu:.2f} s, "
            f"load {os.getloadavg()[0]:.2f}",
            flush=True,
        )
    steps, hexdigest, decided = digest(cfg, len(tasks))
    print(f"steps {steps:,}; digest of every step's events and actions {hexdigest}")
    print(f"without the plans' forecasts (Configure's predictions): {decided}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Categories in deadline mode (issue 21 §3) in the emulator: cost and lateness of a job
planned by category against the same job planned as one, on the same seeds.

Two types at the same price ($1 per hourly ATU, boot 60 s, at most ``--max-count``
each), each four times faster at one of two kinds of task (``emulator.category_speed``:
``cpu`` 4× on ``a``, ``io`` 4× on ``b``); tasks of ~10 minutes (normal, sd 1 minute)
at speed 1, 2.5 minutes on the type they suit. One job of a bag file whose
``category`` column labels each task (half each, shuffled), its task times unknown:
the controller samples it. Without ``categories:`` it samples 5 tasks per type and
plans one time per type (the mean of both kinds); with ``categories: {by: label}``
it samples each category on each type and plans one part per category (paper 002's
model (7) over (category, type)). Settings: ``--tasks`` per job, deadlines (``2h``:
roomy, ``45m``: tight, ``20m``: not feasible, lateness reported).

Per setting × mode over the seeds: mean cost, runs that met the deadline, tasks late
(mean), seconds late (mean), wall time per run; then the check that planning by
category costs less on average in every setting and is late no more often. Run from
the repository root::

    .venv/bin/python -m benchmarks.deadline_categories --seeds 10
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

if __name__ == "__main__" and not __package__:  # ``python benchmarks/deadline_categories.py``
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from autoscaler.config.bag import expand_bag
from autoscaler.config.load import load_config
from autoscaler.run.start import dry_run
from benchmarks.bats_scenarios import library_digest, library_state

CONFIG = """
jobs:
  - {{name: j, at: 0, bag: {{file: bag.csv}}, constraint: {{deadline_s: {deadline}}}}}
billing: {{mode: fixed, atu_s: 1h}}
machine_types:
  - {{name: a, price: 1, max_count: {count}, boot_s: 60}}
  - {{name: b, price: 1, max_count: {count}, boot_s: 60}}
monitoring_interval_s: 60
emulator:
  seed: {seed}
  runtime: {{dist: normal, mean_s: 10m, sd_s: 1m}}
  category_speed: {{cpu: {{a: 4, b: 1}}, io: {{a: 1, b: 4}}}}
"""


@dataclass(frozen=True)
class Outcome:
    cost: float
    met: bool
    tasks_late: int
    seconds_late: float
    wall_s: float


def write_scenario(
    tmp: Path,
    labels: list[str],
    *,
    deadline: str,
    count: int,
    seed: int,
    categories: str | None,
    name: str = "run.yaml",
) -> Path:
    """The scenario's bag (one task per label) and config (``categories:`` as given,
    None: none) in ``tmp``; the config's path."""
    rows = ["command,category", *(f"true {i},{x}" for i, x in enumerate(labels))]
    (tmp / "bag.csv").write_text("\n".join(rows) + "\n")
    path = tmp / name
    text = CONFIG.format(deadline=deadline, count=count, seed=seed)
    path.write_text(text + (f"categories: {categories}\n" if categories else ""))
    return path


def one(tmp: Path, tasks: int, deadline: str, count: int, seed: int, by: bool) -> Outcome:
    labels = ["cpu"] * (tasks // 2) + ["io"] * (tasks - tasks // 2)
    random.Random(seed).shuffle(labels)
    by_label = "{by: label}" if by else None
    path = write_scenario(
        tmp, labels, deadline=deadline, count=count, seed=seed, categories=by_label
    )
    cfg = load_config(path)
    started = time.perf_counter()
    done = dry_run(cfg, expand_bag(cfg), plots=False)
    wall = time.perf_counter() - started
    if done.report.tasks_done != tasks:
        raise SystemExit(f"seed {seed}: {done.report.tasks_done} of {tasks} tasks done")
    job = done.report.jobs[0]
    return Outcome(done.report.cost, job.met_deadline, job.tasks_late, job.seconds_late, wall)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--tasks", type=int, default=200)
    ap.add_argument("--max-count", type=int, default=12)
    ap.add_argument("--deadlines", nargs="+", default=["2h", "45m", "20m"])
    args = ap.parse_args(argv)
    state_before = library_state()
    print(f"Library: {state_before}")
    print(
        f"{args.tasks} tasks (half cpu, half io), {args.seeds} seeds, "
        f"types a and b at most {args.max_count} each\n"
    )
    head = f"{'deadline':>8} {'mode':>10} {'cost':>7} {'met':>5} {'late tasks':>10} "
    print(head + f"{'late s':>8} {'wall s':>7}")
    ok = True
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        for deadline in args.deadlines:
            means: dict[bool, tuple[float, int]] = {}
            for by in (False, True):
                runs = [
                    one(tmp, args.tasks, deadline, args.max_count, seed, by)
                    for seed in range(1, args.seeds + 1)
                ]
                cost = statistics.mean(r.cost for r in runs)
                met = sum(r.met for r in runs)
                means[by] = (cost, met)
                print(
                    f"{deadline:>8} {'categories' if by else 'one time':>10} {cost:7.2f} "
                    f"{met:>2}/{len(runs):<2} {statistics.mean(r.tasks_late for r in runs):10.1f} "
                    f"{statistics.mean(r.seconds_late for r in runs):8.0f} "
                    f"{statistics.mean(r.wall_s for r in runs):7.2f}"
                )
            cheaper = means[True][0] < means[False][0]
            no_later = means[True][1] >= means[False][1]
            ok &= cheaper and no_later
            print(
                f"{'':>8} check: by category {means[True][0] / means[False][0]:.0%} of the cost "
                f"({'less' if cheaper else 'NOT less'}), met {means[True][1]} vs "
                f"{means[False][1]} ({'ok' if no_later else 'WORSE'})"
            )
    if library_digest() not in state_before:
        print("WARNING: the library's sources changed while this benchmark ran")
    print("\nall checks hold" if ok else "\nsome check FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())

"""Slots: one bag of single-core tasks on a type of 8 slots against the same type with 1.

The machine type costs the same either way (price P per hour, per-second billing with a
minimum of 60 s, so the cost follows machine time, not the rounding of a last hour); a
machine of 8 slots runs 8 tasks at once. Without contention the bag should cost about an
eighth on 8 slots. With ``share_slowdown`` σ a task that starts beside n − 1 others takes
1 + σ·(n − 1)/7 times as long (memory bandwidth): the planner learns that time per task
from the samples (they run 8 at a time too) and the saving shrinks accordingly.

Rows: budget mode and deadline mode in the emulator (dry runs), with and without a
slowdown, and a real run on local worker agents (real processes, time-scaled). Each row
prints the actual cost and makespan, the first plan's predicted cost and makespan, and
the cost against the 1-slot row of its group (target about 1/8 = 0.125 without a
slowdown). Run from the repository root::

    .venv/bin/python -m benchmarks.slots            # emulator rows and local rows
    .venv/bin/python -m benchmarks.slots --no-local # emulator rows only
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

if __name__ == "__main__" and not __package__:  # ``python benchmarks/slots.py``
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from autoscaler.config.bag import expand_bag
from autoscaler.config.schema import RunConfig
from autoscaler.report.records import DeadlineReport, Report
from autoscaler.run.start import dry_run

PRICE = 2.0  # per hour, the same for both slot counts
SLOTS = (8, 1)


def _config(
    slots: int,
    slowdown: float,
    tasks: int,
    constraint: dict[str, float],
    max_count: int,
    **more: Any,
) -> RunConfig:
    """The bag on type ``big`` of ``slots`` at price P (per-second billing)."""
    data = {
        "name": f"slots{slots}",
        "bag": {"synthetic": tasks},
        "constraint": constraint,
        "machine_types": [
            {"name": "big", "price": PRICE, "max_count": max_count, "boot_s": 60, "slots": slots}
        ],
        "billing": {"mode": "per_second", "atu_s": "1h", "min_charge_s": 60},
        "monitoring_interval_s": "2m",
        "emulator": {
            "seed": 0,
            "runtime": {"dist": "normal", "mean_s": "5m", "sd_s": "30s"},
            "share_slowdown": slowdown,
        },
        **more,
    }
    return RunConfig.model_validate(data)


def budget_config(slots: int, slowdown: float, tasks: int, budget: float) -> RunConfig:
    return _config(slots, slowdown, tasks, {"budget": budget}, max_count=16)


def deadline_config(slots: int, slowdown: float, tasks: int, deadline_s: float) -> RunConfig:
    return _config(slots, slowdown, tasks, {"deadline_s": deadline_s}, max_count=64)


def local_config(slots: int, slowdown: float, tasks: int, budget: float) -> RunConfig:
    return _config(
        slots,
        slowdown,
        tasks,
        {"budget": budget},
        max_count=4,
        provider="local",
        local={"time_scale": 300},  # a 5-minute task sleeps 1 s
        tail_replication=False,
        daemon={"heartbeat_s": 0.5, "lost_after_s": 5, "orphan_after_s": 30},
    )


@dataclass(frozen=True)
class Row:
    group: str
    slots: int
    slowdown: float
    machines: int
    tasks_done: int
    tasks: int
    cost: float
    makespan_s: float | None
    predicted_cost: float | None
    predicted_makespan_s: float | None
    wall_s: float


def _row(group: str, slots: int, slowdown: float, report: Report, wall: float) -> Row:
    if isinstance(report, DeadlineReport):
        job = report.jobs[0]
        p_cost, p_end = job.predicted_cost, job.predicted_finish_s
    else:
        p_cost, p_end = report.predicted.cost, report.predicted.makespan_s
    return Row(
        group,
        slots,
        slowdown,
        len(report.machines),
        report.tasks_done,
        report.tasks_total,
        report.cost,
        report.makespan_s,
        p_cost,
        p_end,
        wall,
    )


def emulated(cfg: RunConfig, group: str, slots: int, slowdown: float) -> Row:
    tasks = expand_bag(cfg, source="<benchmark>")
    started = time.perf_counter()
    d = dry_run(cfg, tasks, out_dir=None, plots=False)
    return _row(group, slots, slowdown, d.report, time.perf_counter() - started)


def local(cfg: RunConfig, group: str, slots: int, slowdown: float) -> Row:
    from autoscaler.providers.local import run_processes, terminate_tagged
    from autoscaler.run.assemble import new_run_id
    from autoscaler.run.daemon import Daemon
    from autoscaler.run.rundir import RunFiles

    tasks = expand_bag(cfg, source="<benchmark>")
    with tempfile.TemporaryDirectory(prefix="slots-bench-") as tmp:
        files = RunFiles.create(cfg, tasks, Path(tmp) / "run", new_run_id(cfg), 0)
        started = time.perf_counter()
        try:
            outcome = Daemon(files).run()
        finally:
            terminate_tagged([pid for pid, _ in run_processes(files.run_id)])
        wall = time.perf_counter() - started
    return _row(group, slots, slowdown, outcome.report, wall)


def _f(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _min(value: float | None) -> str:
    return "-" if value is None else f"{value / 60:.1f}"


def table(rows: Sequence[Row]) -> str:
    header = (
        "group",
        "slots",
        "slowdown",
        "machines",
        "done",
        "cost",
        "pred. cost",
        "makespan min",
        "pred. min",
        "cost ratio",
        "wall s",
    )
    base = {(r.group, r.slowdown): r.cost for r in rows if r.slots == 1}
    body = []
    for r in rows:
        one = base.get((r.group, r.slowdown))
        ratio = "-" if not one else f"{r.cost / one:.3f}"
        body.append(
            (
                r.group,
                str(r.slots),
                f"{r.slowdown:g}",
                str(r.machines),
                f"{r.tasks_done}/{r.tasks}",
                _f(r.cost),
                _f(r.predicted_cost),
                _min(r.makespan_s),
                _min(r.predicted_makespan_s),
                ratio,
                f"{r.wall_s:.1f}",
            )
        )
    widths = [max(len(h), *(len(b[i]) for b in body)) for i, h in enumerate(header)]
    lines = ["  ".join(h.rjust(w) for h, w in zip(header, widths, strict=True))]
    lines += ["  ".join(c.rjust(w) for c, w in zip(b, widths, strict=True)) for b in body]
    return "\n".join(lines)


def checks(rows: Sequence[Row]) -> list[str]:
    """The targets: every bag finished; 8 slots cost at most 1/8 + 25 % of 1 slot
    without a slowdown (boot time and the last tasks' ragged end are paid per machine)."""
    out = []
    base = {(r.group, r.slowdown): r.cost for r in rows if r.slots == 1}
    for r in rows:
        finished = r.tasks_done == r.tasks
        out.append(f"{'ok ' if finished else 'NO '} {r.group} slots {r.slots}: bag finished")
        one = base.get((r.group, r.slowdown))
        if r.slots == 8 and r.slowdown == 0 and one:
            ok = r.cost / one <= 0.125 * 1.25
            out.append(
                f"{'ok ' if ok else 'NO '} {r.group}: 8 slots cost {r.cost / one:.3f} of 1 slot "
                "(target about 1/8, at most 0.156)"
            )
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tasks", type=int, default=400, help="tasks of the emulated bags")
    parser.add_argument("--local-tasks", type=int, default=96, help="tasks of the local bags")
    parser.add_argument("--slowdown", type=float, default=0.5, help="the share_slowdown row")
    parser.add_argument("--no-local", action="store_true", help="emulator rows only")
    args = parser.parse_args(argv)
    rows: list[Row] = []
    # Budget: ample for the 1-slot bag (400 x 5 min = 33 machine-hours at 2/h = 67).
    budget = args.tasks * 5 / 60 * PRICE * 2
    for slowdown in (0.0, args.slowdown):
        for slots in SLOTS:
            cfg = budget_config(slots, slowdown, args.tasks, budget)
            rows.append(emulated(cfg, "budget, emulator", slots, slowdown))
    for slowdown in (0.0, args.slowdown):
        for slots in SLOTS:
            cfg = deadline_config(slots, slowdown, args.tasks, deadline_s=3 * 3600)
            rows.append(emulated(cfg, "deadline, emulator", slots, slowdown))
    if not args.no_local:
        budget = args.local_tasks * 5 / 60 * PRICE * 2
        for slowdown in (0.0, args.slowdown):
            for slots in SLOTS:
                cfg = local_config(slots, slowdown, args.local_tasks, budget)
                rows.append(local(cfg, "budget, local agents", slots, slowdown))
    print(table(rows))
    print()
    print("\n".join(checks(rows)))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Issue 22 §1's rows beside ``benchmarks.deadline_cloud``: declared task times that
are wrong, learned as the run goes (``deadline.prior``) against believed forever::

    .venv/bin/python -m benchmarks.deadline_learn --seeds 30 --noises 0.1,0.3

The cloud experiment of ``deadline_cloud`` (three types, applications A, B, C, two
batches of three jobs; jobs A1 and A2 are one application, and so on), with the
machines' true speed off the declared ``task_s`` on one type: ``slow`` (medium, the
type the declared plan buys most, runs every application 30 % slower than declared),
``fast`` (medium 30 % faster) and ``unseen`` (large 30 % faster: a type the declared
plan does not buy in the first batch, so no run shows its speed before the second
batch is planned; a row without targets, showing what learning cannot reach: runs
teach only the types that run).
Each seed runs three ways, the multi-job planner with reassignment:

* ``learned``: the declared times, learned from the runs (the default);
* ``believed``: the declared times believed forever (``learn_task_times: false``,
  the baseline: what the controller did before issue 22);
* ``truth``: the true times declared, learned as well (what a user who knew would pay).

Targets, checked on ``slow`` (the declared time 30 % optimistic for one type) and
``fast`` (30 % pessimistic) at every noise (issue 22 §1 asked them at ±10 %, issue 38
at every noise): zero late tasks for ``learned``; its cost at most 1.10 × ``truth``'s
and below ``believed``'s (means over the seeds). The ``x truth`` column is each way's
cost over ``truth``'s.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass

from autoscaler.core.model import JobSpec, TypeSpec
from autoscaler.core.state import RunState
from autoscaler.deadline.deadline_controller import DeadlineController, DeadlineSettings
from autoscaler.providers.base import Capabilities
from autoscaler.run.emulator import Emulator
from benchmarks.bats_scenarios import pooled, render_table
from benchmarks.deadline_cloud import (
    APP_SETS,
    ATU_S,
    BATCHES,
    BOOT_S,
    DEADLINE_S,
    HOURLY,
    MAX_COUNT,
    MONITOR_S,
    TYPES,
    NoisySim,
    lateness,
)

OFF: dict[str, dict[str, float]] = {
    "slow": {"medium": 1.3},
    "fast": {"medium": 0.7},
    "unseen": {"large": 0.7},
}
"""True time over declared time per type, per row (types not named: as declared)."""
CHECKED = ("slow", "fast")
ASKED = {"slow": "declared 30 % optimistic", "fast": "declared 30 % pessimistic"}
"""What issue 38 calls the checked rows: the declared medium time against the truth."""
WAYS = ("learned", "believed", "truth")


def learn_jobs(off: dict[str, float], true: bool) -> list[JobSpec]:
    """Both batches, each job of its application (``app``), with the declared times or
    (``true``) the true ones."""
    out: list[JobSpec] = []
    first = 0
    for b, (at, n) in enumerate(BATCHES, start=1):
        for app, times in APP_SETS["ecu"].items():
            task_s = {t: s * (off.get(t, 1.0) if true else 1.0) for t, s in times.items()}
            out.append(JobSpec(f"{app}{b}", first, n, at, at + DEADLINE_S, None, task_s, app))
            first += n
    return out


@dataclass(frozen=True, slots=True)
class LearnResult:
    row: str
    way: str
    noise: float
    seed: int
    done: int
    tasks: int
    cost: float
    late_tasks: int
    said: int  # learned times said (``Learned``)


def learn_one(work: tuple[str, str, float, int]) -> LearnResult:
    row, way, noise, seed = work
    off = OFF[row]
    declared = learn_jobs(off, true=way == "truth")
    types = [TypeSpec(n, p, MAX_COUNT, BOOT_S) for n, p in TYPES]
    n = sum(j.count for j in declared)
    state = RunState.new(types, HOURLY, None, n, list(range(n)), jobs=declared)
    caps = Capabilities(
        billing=HOURLY,
        max_counts={t.name: t.max_count for t in types},
        boot_estimate_s={t.name: t.boot_s for t in types},
    )
    holder: list[Emulator] = []
    sim = NoisySim(caps, learn_jobs(off, true=True), noise, lambda: holder[0].now, seed)
    settings = DeadlineSettings(learn_task_times=way != "believed")
    emulator = Emulator(DeadlineController(settings), state, sim, MONITOR_S, max_time_s=6 * ATU_S)
    holder.append(emulator)
    state = emulator.run()
    late, _, _ = lateness(state)
    return LearnResult(
        row,
        way,
        noise,
        seed,
        state.tasks.done,
        state.n_tasks,
        state.money.committed,
        late,
        len(state.work.learned),
    )


def learn_work(seeds: int, noises: Sequence[float]) -> list[tuple[str, str, float, int]]:
    return [(row, way, e, s) for row in OFF for e in noises for s in range(seeds) for way in WAYS]


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else math.nan


def learn_table(results: Sequence[LearnResult]) -> str:
    header = [
        "row",
        "±ε",
        "way",
        "runs",
        "done",
        "cost $",
        "x truth",
        "late tasks",
        "max",
        "0 late",
        "said",
    ]
    body = []
    for row in OFF:
        for noise in sorted({r.noise for r in results}):
            truth = [r.cost for r in results if (r.row, r.way, r.noise) == (row, "truth", noise)]
            for way in WAYS:
                rs = [r for r in results if (r.row, r.way, r.noise) == (row, way, noise)]
                if not rs:
                    continue
                cost = _mean([r.cost for r in rs])
                body.append(
                    [
                        row,
                        f"{noise:g}",
                        way,
                        str(len(rs)),
                        str(sum(r.done == r.tasks for r in rs)),
                        f"{cost:.3f}",
                        f"{cost / _mean(truth):.3f}" if truth else "-",
                        f"{_mean([r.late_tasks for r in rs]):.1f}",
                        str(max(r.late_tasks for r in rs)),
                        str(sum(r.late_tasks == 0 for r in rs)),
                        f"{_mean([r.said for r in rs]):.1f}",
                    ]
                )
    return render_table(header, body, left=3)


def learn_checks(results: Sequence[LearnResult]) -> list[tuple[bool, str]]:
    """Issue 22 §1's and issue 38's targets, per checked row and ε: (met, what was
    measured). Issue 38 asks them at every ε: a declared time 30 % optimistic
    (``slow``) or pessimistic (``fast``) for one type costs at most 1.10 × the plan
    made with the true time, with no deadline missed."""
    out: list[tuple[bool, str]] = []
    for row in CHECKED:
        for noise in sorted({r.noise for r in results}):
            out.extend(_row_checks(results, row, noise))
    return out


def _row_checks(results: Sequence[LearnResult], row: str, noise: float) -> list[tuple[bool, str]]:
    sel = {w: [r for r in results if (r.row, r.way, r.noise) == (row, w, noise)] for w in WAYS}
    if not all(sel.values()):
        return []
    name = f"{row} ({ASKED[row]}) ±{noise:g}"
    late = [r.seed for r in sel["learned"] if r.late_tasks > 0]
    cost = {w: _mean([r.cost for r in rs]) for w, rs in sel.items()}
    return [
        (
            not late,
            f"{name} learned: zero late tasks in "
            f"{len(sel['learned']) - len(late)}/{len(sel['learned'])} runs"
            + (f" (late seeds {late})" if late else ""),
        ),
        (
            cost["learned"] <= 1.10 * cost["truth"] + 1e-9,
            f"{name} learned ${cost['learned']:.3f} <= 1.10 x truth "
            f"${cost['truth']:.3f} ({cost['learned'] / cost['truth']:.3f}x)",
        ),
        (
            cost["learned"] < cost["believed"],
            f"{name} learned ${cost['learned']:.3f} < believed ${cost['believed']:.3f} "
            f"({100 * (1 - cost['learned'] / cost['believed']):+.1f}% cheaper)",
        ),
    ]


def learn_rows(seeds: int, noises: Sequence[float], jobs_n: int) -> None:
    """Run and print issue 22 §1's rows and checks."""
    results = []
    started = time.perf_counter()
    with pooled(learn_one, learn_work(seeds, noises), jobs_n) as done:
        results.extend(done)
    wall = time.perf_counter() - started
    print("Declared task times off the truth (issue 22 §1), multi.dyna, 'ecu' times")
    print(
        "Rows: true/declared "
        + "; ".join(
            f"{row} {', '.join(f'{t} x{f:g}' for t, f in o.items())}" for row, o in OFF.items()
        )
        + ".\nWays: learned (declared, learned from the runs), believed (declared, "
        "learn_task_times false),\ntruth (the true times declared)."
    )
    print(learn_table(results))
    print("said: learned task times said per run (Learned: large, confident deviations).")
    print()
    print("Checks against issue 22 §1's and issue 38's targets (x truth: learned over truth)")
    for ok, text in learn_checks(results):
        print(f"  {'PASS' if ok else 'MISS'}  {text}")
    print()
    print(f"{len(results)} dry runs, seeds 0..{seeds - 1}, {wall:.1f} s wall, {jobs_n} job(s).")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.deadline_learn",
        description="Issue 22 §1: declared task times off the truth, learned or believed.",
    )
    parser.add_argument("--seeds", type=int, default=30, help="seeds 0..N-1 (default 30)")
    parser.add_argument("--jobs", type=int, default=2, help="worker processes (default 2)")
    parser.add_argument("--noises", default="0.1,0.3", help="comma-separated ε (default 0.1,0.3)")
    args = parser.parse_args(argv)
    noises = [float(x) for x in args.noises.split(",") if x.strip()]
    if args.seeds < 1 or args.jobs < 1 or not noises:
        parser.error("--seeds and --jobs must be at least 1, --noises not empty")
    learn_rows(args.seeds, noises, args.jobs)
    return 0


if __name__ == "__main__":
    sys.exit(main())

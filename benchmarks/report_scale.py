"""A run's report and plots at scale (issue 36 §5): under 10 s for 5,000 machines and a
million tasks.

The run is the emulator's (``make_emulator``, round robin on S4-3's two types with
``--per-type`` machines each and ``--tasks`` synthetic tasks: ``benchmarks.scale``'s
million), so the state holds what a real run's would: every machine's life and billing,
every run's segment, the spend log. Its time is printed but not counted. Then each part
of the report is timed on its own, in the order ``build_report`` and ``write_report``
do them (matplotlib imported before, as a daemon that drew a plot has it): the report
built from the state, its JSON, its markdown, the unfinished list, the Gantt chart and
the spend plot (each figure made and saved as a PNG), and ``write_report`` whole.

Run from the repository root::

    .venv/bin/python -m benchmarks.report_scale [--tasks 1000000] [--per-type 2500]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

if __name__ == "__main__" and not __package__:  # ``python benchmarks/report_scale.py``
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from autoscaler.config.bag import expand_bag
from autoscaler.config.schema import Bag
from autoscaler.report.build import build_report
from autoscaler.report.markdown import render_markdown, unfinished_text
from autoscaler.report.plots import gantt_figure, spend_figure
from autoscaler.report.write import write_report
from autoscaler.run.start import make_emulator
from benchmarks.bats_scenarios import library_state, render_table
from benchmarks.scale import MILLION, MILLION_PER_TYPE, SEED, million_config

TARGET_S = 10.0


T = TypeVar("T")


def timed(fn: Callable[[], T]) -> tuple[float, T]:
    started = time.perf_counter()
    out = fn()
    return time.perf_counter() - started, out


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--tasks", type=int, default=MILLION)
    p.add_argument("--per-type", type=int, default=MILLION_PER_TYPE)
    args = p.parse_args(argv)
    print(library_state())
    cfg = million_config("round_robin", None)
    cfg = cfg.model_copy(
        update={
            "bag": Bag(synthetic=args.tasks),
            "machine_types": [
                t.model_copy(update={"max_count": args.per_type}) for t in cfg.machine_types
            ],
        }
    )
    tasks = expand_bag(cfg)
    emul_s, state = timed(lambda: make_emulator(cfg, len(tasks), seed=SEED).run())
    import matplotlib.figure  # noqa: F401  (imported once, as a daemon that drew has it)

    rows: list[list[str]] = []
    seconds: list[float] = []

    def part(name: str, fn: Callable[[], T]) -> T:
        took, out = timed(fn)
        seconds.append(took)
        rows.append([name, f"{took:.2f}"])
        return out

    with tempfile.TemporaryDirectory(prefix="report-scale-") as tmp:
        out = Path(tmp)
        report = part(
            "build_report",
            lambda: build_report(cfg, state, tasks=tasks, run_id="scale", seed=SEED, wall_s=1.0),
        )
        part("report.json", lambda: json.dumps(report.to_json(), indent=2))
        part("report.md", lambda: render_markdown(report))
        part("unfinished.txt", lambda: unfinished_text(report))
        part("gantt.png", lambda: gantt_figure(state).savefig(out / "gantt.png", dpi=100))
        part(
            "spend.png",
            lambda: spend_figure(state, report.budget).savefig(out / "spend.png", dpi=100),
        )
        whole, _ = timed(lambda: write_report(report, state, out, plots=True))
    parts = sum(seconds)
    rows.append(["parts, in all", f"{parts:.2f}"])
    rows.append(["write_report (again, whole)", f"{whole:.2f}"])
    print(
        f"{len(state.fleet.machines):,} machines, {state.tasks.done:,} tasks done, "
        f"{len(state.tasks.segments):,} runs; emulated in {emul_s:.1f} s (not counted)"
    )
    print(render_table(["part", "seconds"], rows, left=1))
    ok = parts <= TARGET_S
    print(f"report and plots: {parts:.2f} s, target {TARGET_S:.0f} s: {'met' if ok else 'MISSED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

"""The real daemon at thousands of agents: dispatcher and journal, measured (issue 22 §3).

Each row is one run of the real daemon (``autoscaler.run.daemon.Daemon``, as
``autoscaler run`` starts it) in a process of its own (``benchmarks/daemon_scale_run.py``):
round robin on one machine type of A machines, a budget that never binds, a 1-hour ATU,
``tail_replication`` off, the daemon's settings at their defaults (heartbeat 2 s, task
groups of ``group_s`` 2 s, ``report_s`` 0.25 s), synthetic tasks of ``--task-s`` real
seconds (normal, sd 10 %), ``--tasks-per-agent`` of them per machine. Its machines are
simulated agents (``benchmarks/sim_agents.py``, ``--per-process`` of them in each asyncio
load-generator process, one keep-alive HTTP connection each), which speak the agent's
protocol and "run" a task by a timer of its ``sleep_s``.

Per row:

* tasks/s: tasks done / (last ``TaskDone`` − first ``MachineReady``), from the journal;
  ideal: A / task_s (every agent always busy); steady: between 5 % and 95 % of the bag
  done (samples of the daemon's progress hook);
* daemon CPU µs/task: the daemon process's CPU (``RUSAGE_SELF``: controller, dispatcher
  threads, journal; start-up, shutdown, report and plots) / tasks, and in the steady
  window (what a task costs), with the main thread's share (``time.thread_time``);
* generators' CPU µs/task in the steady window (``/proc/<pid>/stat``);
* journal B/task: ``journal.sqlite`` (its WAL checkpointed at close) / tasks; outputs
  B/task: ``outputs.jsonl`` (a line per result) / tasks;
* agents' latencies (merged log histograms, to 2 %): rtt, the round trip of requests
  that may not be held (``wait_s`` 0); gap, how long a slot stood free with nothing
  queued before its next task came (the dispatch latency an agent sees per task);
* peak RSS of the daemon process (``ru_maxrss``, report and plots included) and the
  highest resident size sampled in the steady window.

Baselines in the same run: the same per-agent load at ``--baseline-agents`` (16) agents,
and the emulator (``autoscaler.run.start.dry_run``, the same config and bag as the
largest row, in a process of its own) with and without writing its run directory: the
controller's own CPU per task, without HTTP, threads or SQLite. The last lines
extrapolate the largest row to ``--extrapolate`` (1,000,000) tasks at its steady rate
and costs. ``--profile S`` adds one run of the largest row under ``py-spy record`` (S
seconds from 10 % of the bag done, the thread holding the GIL, 50 samples a second) and
prints where the interpreter's time goes: by thread (main loop, HTTP handler threads,
other), the top frames by own time, and the top frames by time inside them below the
main loop.

Every process a row starts is ended by pid: the daemon (SIGTERM, then SIGKILL after
60 s), then any generator or profiler it started that is still alive (their pids are in
the row's ``generators.pids``; the generators also end when the daemon does, as their
input closes).

Run from the repository root::

    .venv/bin/python -m benchmarks.daemon_scale [--agents 500 --agents 5000 ...] \\
        [--tasks-per-agent 20] [--task-s 2] [--per-process 1250] [--profile 20]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import os
import pstats
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

if __name__ == "__main__" and not __package__:  # ``python benchmarks/daemon_scale.py``
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from autoscaler.config.bag import expand_bag
from autoscaler.core.journal import JOURNAL_DB
from autoscaler.run.rundir import OUTPUTS_FILE
from benchmarks.bats_scenarios import REPO, library_state, render_table
from benchmarks.daemon_scale_run import Spec, run_config
from benchmarks.sim_agents import H_BUCKETS, quantile

DEFAULT_AGENTS = (500, 1000, 2500, 5000)
STEADY = (0.05, 0.95)
STOP_WAIT_S = 60.0
EXTRAPOLATE = 1_000_000
RAMP_S = 10.0

# --- one row ---------------------------------------------------------------------------------


@dataclass
class Row:
    label: str
    spec: Spec
    figures: dict[str, Any]
    done: int  # TaskDone records
    distinct: int  # tasks with a TaskDone record
    counted: int  # tasks done as the run's state counted them (report.json)
    lost: int  # MachineLost records
    span_s: float
    journal_b: int
    outputs_b: int
    steady: dict[str, float]
    rtt: list[int]
    gap: list[int]
    generators: int
    leftovers: list[int]

    @property
    def tasks(self) -> int:
        return self.spec.tasks

    @property
    def rate(self) -> float:
        return self.done / self.span_s if self.span_s > 0 else 0.0


def alive_pids(pids_file: Path, words: Sequence[str]) -> list[int]:
    """Pids listed in ``pids_file`` still running a command line that holds one of ``words``
    (never a recycled pid of something else)."""
    if not pids_file.exists():
        return []
    out = []
    for line in pids_file.read_text(encoding="ascii").split():
        with contextlib.suppress(OSError, ValueError):
            cmdline = Path(f"/proc/{int(line)}/cmdline").read_bytes()
            state = Path(f"/proc/{int(line)}/stat").read_text().rpartition(")")[2].split()[0]
            if state not in ("Z", "X") and any(w.encode() in cmdline for w in words):
                out.append(int(line))
    return out


def run_child(spec: Spec) -> tuple[dict[str, Any], list[int]]:
    """The row's daemon in a process of its own; its figures and the pids it left alive
    (killed)."""
    out = Path(spec.out)
    out.mkdir(parents=True, exist_ok=True)
    spec_file = out / "spec.json"
    spec_file.write_text(json.dumps(asdict(spec)), encoding="utf-8")
    argv = [sys.executable, "-m", "benchmarks.daemon_scale_run", str(spec_file)]
    with (out / "daemon.log").open("ab") as log:
        proc = subprocess.Popen(argv, cwd=REPO, stdout=log, stderr=log, stdin=subprocess.DEVNULL)
        try:
            proc.wait()
        finally:
            if proc.poll() is None:  # interrupted: the daemon releases its machines first
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(STOP_WAIT_S)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            time.sleep(0.5)  # generators end as their input closes
            left = alive_pids(out / "generators.pids", ("benchmarks.sim_agents", "py-spy"))
            for pid in left:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
    if proc.returncode != 0:
        tail = (out / "daemon.log").read_text(errors="replace")[-3000:]
        raise RuntimeError(f"the daemon of {spec.agents} agents exited {proc.returncode}:\n{tail}")
    figures: dict[str, Any] = json.loads((out / "figures.json").read_text(encoding="utf-8"))
    return figures, left


def steady_figures(samples: Sequence[Sequence[float]], n: int) -> dict[str, float]:
    lo, hi = STEADY[0] * n, STEADY[1] * n
    inside = [s for s in samples if lo <= s[1] <= hi]
    if len(inside) < 2 or inside[-1][1] == inside[0][1]:
        return {}
    a, b = inside[0], inside[-1]
    done, dt, ticks = b[1] - a[1], b[0] - a[0], b[7] - a[7]
    return {
        "rate": done / dt,
        "cpu_us": 1e6 * (b[2] - a[2]) / done,
        "main_us": 1e6 * (b[3] - a[3]) / done,
        "gen_us": 1e6 * (b[5] - a[5]) / done,
        "daemon_cores": (b[2] - a[2]) / dt,
        "gen_cores": (b[5] - a[5]) / dt,
        "host_busy": (b[6] - a[6]) / ticks if ticks > 0 else float("nan"),
        "rss_mb": max(s[4] for s in inside),
        "sys_share": (b[8] - a[8]) / (b[2] - a[2]) if b[2] > a[2] else float("nan"),
    }


def measure(label: str, spec: Spec) -> Row:
    figures, left = run_child(spec)
    run_dir = Path(figures["run_dir"])
    db = sqlite3.connect(f"file:{run_dir / JOURNAL_DB}?mode=ro", uri=True)
    try:
        done, distinct, last = db.execute(
            "SELECT COUNT(*), COUNT(DISTINCT json_extract(data, '$.task')), MAX(t) FROM journal"
            " WHERE type = 'TaskDone'"
        ).fetchone()
        (first,) = db.execute("SELECT MIN(t) FROM journal WHERE type = 'MachineReady'").fetchone()
        (lost,) = db.execute("SELECT COUNT(*) FROM journal WHERE type = 'MachineLost'").fetchone()
    finally:
        db.close()
    journal_b = sum(p.stat().st_size for p in run_dir.iterdir() if p.name.startswith(JOURNAL_DB))
    gens = figures.get("generators", [])
    rtt, gap = [0] * H_BUCKETS, [0] * H_BUCKETS
    for g in gens:
        rtt = [a + b for a, b in zip(rtt, g["rtt"], strict=True)]
        gap = [a + b for a, b in zip(gap, g["gap"], strict=True)]
    return Row(
        label,
        spec,
        figures,
        int(done),
        int(distinct),
        int(json.loads((run_dir / "report.json").read_text(encoding="utf-8"))["tasks_done"]),
        int(lost),
        (last - first) if first is not None and last is not None else 0.0,
        journal_b,
        (run_dir / OUTPUTS_FILE).stat().st_size,
        steady_figures(figures["samples"], spec.tasks),
        rtt,
        gap,
        len(gens),
        left,
    )


# --- the emulator's baseline -----------------------------------------------------------------


def emulator_cpu(spec_json: str, write_to: str | None) -> tuple[float, int]:
    """CPU seconds of a dry run of ``spec``'s config and bag (in a fresh process), and
    the tasks it finished."""
    from autoscaler.run.start import dry_run

    spec = Spec(**json.loads(spec_json))
    cfg = run_config(spec)
    tasks = expand_bag(cfg)
    cpu = time.process_time()
    d = dry_run(cfg, tasks, seed=0, out_dir=Path(write_to) if write_to else None)
    return time.process_time() - cpu, d.report.tasks_done


def emulator_row(spec: Spec, write_to: Path | None) -> tuple[float, int]:
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        return pool.apply(
            emulator_cpu, (json.dumps(asdict(spec)), str(write_to) if write_to else None)
        )


# --- tables ------------------------------------------------------------------------------------


def ms(seconds: float) -> str:
    return f"{1e3 * seconds:.1f}" if seconds == seconds else "-"


def main_table(rows: Sequence[Row]) -> str:
    header = ["row", "agents (gens)", "tasks", "done once", "lost", "tasks/s", "ideal"]
    header += ["steady/s", "daemon µs/task", "steady", "main thr.", "kernel", "gens µs/task"]
    header += ["daemon cores", "host busy", "journal B/task", "outputs B/task", "polls/task"]
    header += ["rtt p50 ms", "p99", "gap p50 ms", "p99", "peak RSS MB", "steady RSS"]
    out = []
    for r in rows:
        s, f = r.steady, r.figures
        once = r.counted == r.distinct == r.tasks
        late = r.done - r.distinct  # results journaled in the step that lost their machine
        out.append(
            [
                r.label,
                f"{r.spec.agents:,} ({r.generators})",
                f"{r.tasks:,}",
                ("yes" if once else f"NO ({r.counted:,}/{r.distinct:,})")
                + (f" (+{late:,} late)" if late else ""),
                str(r.lost),
                f"{r.rate:,.0f}",
                f"{r.spec.agents / r.spec.task_s:,.0f}",
                f"{s['rate']:,.0f}" if s else "-",
                f"{1e6 * f['cpu_s'] / r.tasks:,.0f}",
                f"{s['cpu_us']:,.0f}" if s else "-",
                f"{s['main_us']:,.0f}" if s else "-",
                f"{100 * s['sys_share']:.0f} %" if s else "-",
                f"{s['gen_us']:,.0f}" if s else "-",
                f"{s['daemon_cores']:.2f}" if s else "-",
                f"{100 * s['host_busy']:.0f} %" if s else "-",
                f"{r.journal_b / r.tasks:,.0f}",
                f"{r.outputs_b / r.tasks:,.0f}",
                f"{f['polls'] / r.tasks:.2f}",
                ms(quantile(r.rtt, 0.5)),
                ms(quantile(r.rtt, 0.99)),
                ms(quantile(r.gap, 0.5)),
                ms(quantile(r.gap, 0.99)),
                f"{f['peak_rss_mb']:,.0f}",
                f"{s['rss_mb']:,.0f}" if s else "-",
            ]
        )
    return render_table(header, out, left=2)


def extrapolation(r: Row, n: int) -> str:
    s = r.steady
    if not s:
        return "No steady window in the largest row: nothing to extrapolate."
    rate = s["rate"]
    return (
        f"{n:,} tasks on {r.spec.agents:,} agents at the largest row's steady figures: "
        f"{n / rate / 60:,.1f} min of dispatch ({rate:,.0f} tasks/s; ideal "
        f"{n * r.spec.task_s / r.spec.agents / 60:,.1f} min), daemon CPU "
        f"{s['cpu_us'] * n / 1e6 / 60:,.1f} min ({s['cpu_us']:,.0f} µs/task), journal "
        f"{r.journal_b / r.tasks * n / 1e6:,.0f} MB, outputs "
        f"{r.outputs_b / r.tasks * n / 1e6:,.0f} MB (bytes per task as measured; the "
        "report and plots at the end not included)."
    )


def profile_lines(path: Path, top: int) -> str:
    """Where the sampled time went: by thread, own time by frame, time inside frames of
    the main loop. ``path``: py-spy's raw output (``frame;frame;... count`` per stack)."""
    if not path.exists():
        return f"No profile ({path} missing: see profile.log beside it)."
    threads: Counter[str] = Counter()
    own: Counter[str] = Counter()
    inside: Counter[str] = Counter()
    total = 0
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        frames = [_frame(f) for f in stack.split(";")]
        total += n
        loop = next((i for i, f in enumerate(frames) if f.startswith("Daemon._loop ")), None)
        if loop is not None:
            who = "main loop"
            for f in set(frames[loop + 1 :]):
                inside[f] += n
        elif any("process_request_thread" in f or "_Handler." in f for f in frames):
            who = "HTTP handler threads"
        else:
            who = "other threads"
        threads[who] += n
        own[frames[-1]] += n
    if total == 0:
        return "The profile holds no samples."
    lines = [
        "Samples by thread: " + ", ".join(f"{k} {v / total:.0%}" for k, v in threads.most_common())
    ]
    lines.append(f"Top {top} frames by own time (all threads):")
    lines += [f"  {v / total:6.1%}  {k}" for k, v in own.most_common(top)]
    lines.append(
        f"Top {top} frames by time inside them, below the main loop (share of all samples):"
    )
    lines += [f"  {v / total:6.1%}  {k}" for k, v in inside.most_common(top)]
    return "\n".join(lines)


def main_thread_lines(path: Path, tasks: int, top: int) -> str:
    """The main thread's cProfile (its CPU time): the top functions by own time."""
    if not path.exists():
        return f"No main-thread profile ({path} missing)."
    stats = pstats.Stats(str(path))
    rows = sorted(stats.stats.items(), key=lambda kv: -kv[1][2])  # type: ignore[attr-defined]
    total = sum(v[2] for _, v in rows)
    lines = [
        f"Main thread under cProfile: {1e6 * total / tasks:,.0f} µs/task; top {top} by own time:"
    ]
    for (file, line, name), (_, calls, own, _, _) in rows[:top]:
        where = "/".join(file.split("/")[-2:])
        lines.append(
            f"  {own / total:6.1%}  {1e6 * own / tasks:6.1f} µs/task  "
            f"{calls / tasks:5.2f} calls/task  {name} ({where}:{line})"
        )
    return "\n".join(lines)


def _frame(text: str) -> str:
    """``func (path/to/file.py:123)`` as ``func (file.py)``: lines of one function merged."""
    name, _, where = text.partition(" (")
    file = where.rstrip(")").rpartition(":")[0]
    return f"{name} ({'/'.join(file.split('/')[-2:])})" if file else name


# --- main ------------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--agents", type=int, action="append", help=f"repeat; {DEFAULT_AGENTS}")
    p.add_argument("--tasks-per-agent", type=int, default=20)
    p.add_argument("--task-s", type=float, default=2.0)
    p.add_argument("--per-process", type=int, default=1250, help="agents per generator")
    p.add_argument(
        "--ramp-s", type=float, default=RAMP_S, help="agents come up over S s (0: at once)"
    )
    p.add_argument(
        "--switch-interval", type=float, default=0.0, help="the daemon's GIL switch interval"
    )
    p.add_argument("--baseline-agents", type=int, default=16, help="0: no such row")
    p.add_argument("--no-emulator", action="store_true", help="skip the emulator's rows")
    p.add_argument("--profile", type=float, default=0.0, metavar="S", help="py-spy for S s")
    p.add_argument("--top", type=int, default=15)
    p.add_argument("--extrapolate", type=int, default=EXTRAPOLATE)
    p.add_argument("--keep", action="store_true", help="keep the run directories")
    args = p.parse_args(argv)
    agents = sorted(args.agents or DEFAULT_AGENTS)
    started = time.perf_counter()
    print(f"Library: {library_state()}")
    print(
        f"Host: {os.cpu_count()} cores; load average at the start "
        f"{' '.join(Path('/proc/loadavg').read_text().split()[:3])}"
    )
    tmp = Path(tempfile.mkdtemp(prefix="daemon-scale-"))
    rows: list[Row] = []
    profiled: Path | None = None
    try:

        def spec(a: int, tag: str, profile_s: float = 0.0) -> Spec:
            """Row ``tag`` of ``a`` agents; profiled (py-spy, and cProfile on the main
            thread) if ``profile_s``."""
            n = a * args.tasks_per_agent
            out = str(tmp / f"{tag}-{a}")
            return Spec(
                a,
                n,
                args.task_s,
                args.per_process,
                out,
                profile_s=profile_s,
                ramp_s=args.ramp_s,
                switch_s=args.switch_interval,
                main_profile=profile_s > 0,
            )

        plan = [("baseline", args.baseline_agents)] if args.baseline_agents else []
        plan += [("row", a) for a in agents]
        for tag, a in plan:
            row = measure(tag, spec(a, tag))
            rows.append(row)
            print(
                f"{tag} {a:,} agents: {row.done:,} done, {row.rate:,.0f} tasks/s", file=sys.stderr
            )
        print()
        print(
            f"The real daemon on simulated agents: {args.task_s:g} s tasks, "
            f"{args.tasks_per_agent} per agent, up to {args.per_process:,} agents per "
            "generator process"
        )
        print(main_table(rows))
        if not args.no_emulator:
            big = spec(agents[-1], "emulator")
            cpu, done = emulator_row(big, None)
            cpu_w, _ = emulator_row(big, tmp / "emulator-written")
            print()
            print(
                f"Emulator baseline (dry run, same config and bag as the {agents[-1]:,}-agent "
                f"row, {done:,} tasks): controller CPU {1e6 * cpu / big.tasks:,.0f} µs/task "
                f"without writing, {1e6 * cpu_w / big.tasks:,.0f} µs/task with journal, "
                "report and plots."
            )
        print()
        print(extrapolation(rows[-1], args.extrapolate))
        if args.profile > 0:
            row = measure("profiled", spec(agents[-1], "profiled", args.profile))
            profiled = Path(row.spec.out) / "profile.txt"
            print()
            print(
                f"Profile: one more run of the {agents[-1]:,}-agent row under py-spy and "
                "cProfile (main thread) "
                f"({args.profile:g} s from 10 % done; {row.rate:,.0f} tasks/s, "
                f"{1e6 * row.figures['cpu_s'] / row.tasks:,.0f} daemon µs/task under it)"
            )
            print(profile_lines(profiled, args.top))
            print(main_thread_lines(Path(row.spec.out) / "main.prof", row.tasks, args.top))
        left = [(r.label, r.spec.agents, r.leftovers) for r in rows if r.leftovers]
        print()
        for label, a, pids in left:
            print(f"WARNING: {label} {a} left processes {pids} behind (killed)")
        if not left:
            print("No process of any row was left behind.")
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            print(f"Run directories kept in {tmp}")
    print(
        f"Total wall time {time.perf_counter() - started:.0f} s; load average at the end "
        f"{' '.join(Path('/proc/loadavg').read_text().split()[:3])}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

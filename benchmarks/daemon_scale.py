"""The real daemon at thousands of agents: dispatcher and journal, measured (issues 22 §3, 36).

Each row (``--row A:S:N``: A agents, S-second tasks, N tasks; by default issue 36's
10,000 × 10 s, 5,000 × 2 s and a million tasks on 5,000 agents) is one run of the real
daemon (``autoscaler.run.daemon.Daemon``, as ``autoscaler run`` starts it) in a process
of its own (``benchmarks/daemon_scale_run.py``): round robin on one machine type of A
machines, a budget that never binds, a 1-hour ATU, ``tail_replication`` off, the
daemon's settings at their defaults (heartbeat 2 s, stretched past 1,000 machines; task
groups of ``group_s`` 2 s, ``report_s`` 0.25 s), synthetic tasks of S real seconds
(normal, sd 10 %). Its machines are simulated agents (``benchmarks/sim_agents.py``,
``--per-process`` of them in each asyncio load-generator process, one keep-alive HTTP
connection each), which speak the agent's protocol and "run" a task by a timer of its
``sleep_s``.

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
and for each row the emulator (``autoscaler.run.start.dry_run``, the row's config and
bag, in a process of its own) with and without writing its run directory: the
controller's own CPU per task, without HTTP, threads or SQLite. Then each row against
issue 36's targets (``target_lines``), each ``ok`` or ``MISSED`` with its numbers.
``--profile S`` runs ``py-spy record`` inside the run of the row of most agents (S
seconds from 10 % of the bag done, the thread holding the GIL, 50 samples a second) and
prints where the interpreter's time goes: by thread (main loop, dispatcher, other), the
top frames by own time, and the top frames by time inside them below the main loop;
``--main-profile`` adds one more run of that row with cProfile on its main thread.

Every process a row starts is ended by pid: the daemon (SIGTERM, then SIGKILL after
60 s), then any generator or profiler it started that is still alive (their pids are in
the row's ``generators.pids``; the generators also end when the daemon does, as their
input closes).

Run from the repository root::

    .venv/bin/python -m benchmarks.daemon_scale [--row 10000:10:100k --row 5000:2:1M ...] \\
        [--per-process 1250] [--profile 20]
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
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

if __name__ == "__main__" and not __package__:  # ``python benchmarks/daemon_scale.py``
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from autoscaler.config.bag import expand_bag
from autoscaler.core.journal import JOURNAL_DB
from autoscaler.run.rundir import OUTPUTS_FILE
from benchmarks.bats_scenarios import REPO, library_state, render_table
from benchmarks.daemon_scale_run import Spec, py_spy, run_config
from benchmarks.sim_agents import H_BUCKETS, quantile

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


def run_child(
    spec: Spec,
    during: Callable[[subprocess.Popen[bytes]], None] | None = None,
    limit_s: float | None = None,
) -> tuple[dict[str, Any], list[int]]:
    """The row's daemon in a process of its own; its figures and the pids it left alive
    (killed). ``during``: what to do to the running daemon before waiting for its end (a
    test's stall); ``limit_s``: how long to wait for that end before ending it."""
    out = Path(spec.out)
    out.mkdir(parents=True, exist_ok=True)
    spec_file = out / "spec.json"
    spec_file.write_text(json.dumps(asdict(spec)), encoding="utf-8")
    argv = [sys.executable, "-m", "benchmarks.daemon_scale_run", str(spec_file)]
    with (out / "daemon.log").open("ab") as log:
        proc = subprocess.Popen(argv, cwd=REPO, stdout=log, stderr=log, stdin=subprocess.DEVNULL)
        try:
            if during is not None:
                during(proc)
            proc.wait(limit_s)
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
    header += ["full GCs", "their s", "longest s"]
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
                *[
                    f"{v:,.2f}" if i else f"{v:,.0f}"
                    for i, v in enumerate(f.get("gc_full", [0, 0.0, 0.0]))
                ],
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
        elif any("(run/dispatch.py)" in f or "process_request_thread" in f for f in frames):
            who = "dispatcher"
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


# --- targets (issue 36) -----------------------------------------------------------------------

CPU_TIMES_EMULATOR = 2.0  # steady daemon CPU per task at most this × the emulator's with journal
RATE_SHARE = 0.90  # steady tasks/s at least this share of the lesser of ideal and CPU bound
RTT_P99_S = 0.25
RSS_MB = 2000.0
WALL_TIMES_BOUND = 1.25  # a run to the end: wall time within this × its ideal or CPU bound


@dataclass(frozen=True)
class RowSpec:
    """One row as asked for: agents, mean task seconds, tasks in the bag."""

    agents: int
    task_s: float
    tasks: int

    @classmethod
    def parse(cls, text: str) -> RowSpec:
        """``AGENTS:TASK_S:TASKS`` (TASKS may end in k or M), e.g. ``5000:2:1M``."""
        try:
            a, t, n = text.split(":")
            scale = {"k": 1_000, "M": 1_000_000}.get(n[-1:], 1)
            tasks = int(float(n.rstrip("kM").replace("_", "")) * scale)
            row = cls(int(a.replace("_", "")), float(t), tasks)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"--row {text!r}: expected AGENTS:TASK_S:TASKS, e.g. 5000:2:1M"
            ) from None
        if row.agents < 1 or row.task_s <= 0 or row.tasks < 1:
            raise argparse.ArgumentTypeError(f"--row {text!r}: every part must be positive")
        return row


DEFAULT_ROWS = (
    RowSpec(10_000, 10.0, 100_000),
    RowSpec(5_000, 2.0, 100_000),
    RowSpec(5_000, 2.0, 1_000_000),
)


def cores_rate(r: Row) -> float:
    """Tasks/s the host's cores allow at the row's steady CPU per task (daemon and
    generators, which share the cores)."""
    s = r.steady
    per_task = (s.get("cpu_us", 0.0) + s.get("gen_us", 0.0)) / 1e6
    return (os.cpu_count() or 1) / per_task if per_task > 0 else float("inf")


def target_lines(rows: Sequence[Row], emulator_us: dict[str, float]) -> str:
    """Each row's figures against the issue's targets, checked."""
    header = ["row", "lost = 0", f"µs/task ≤ {CPU_TIMES_EMULATOR:g}× emulator"]
    header += ["tasks/s ≥ 90 % of min(ideal, cores)", "rtt p99 ≤ 250 ms", "peak RSS ≤ 2 GB"]
    header += ["wall ≤ 1.25× max(ideal, CPU)"]
    out = []
    for r in rows:
        s, f = r.steady, r.figures
        name = f"{r.label} {r.spec.agents:,} × {r.spec.task_s:g} s, {r.tasks:,}"
        emu = emulator_us.get(r.label)
        cells = [name, _check(r.lost == 0, str(r.lost))]
        if s and emu:
            limit = CPU_TIMES_EMULATOR * emu
            cells.append(_check(s["cpu_us"] <= limit, f"{s['cpu_us']:,.0f} vs {limit:,.0f}"))
        else:
            cells.append("-")
        if s:
            ideal = r.spec.agents / r.spec.task_s
            bound = min(ideal, cores_rate(r))
            cells.append(
                _check(
                    s["rate"] >= RATE_SHARE * bound,
                    f"{s['rate']:,.0f} vs {bound:,.0f} (ideal {ideal:,.0f}, "
                    f"cores {cores_rate(r):,.0f})",
                )
            )
        else:
            cells.append("-")
        p99 = quantile(r.rtt, 0.99)
        cells.append(_check(p99 <= RTT_P99_S, f"{1e3 * p99:,.0f} ms"))
        cells.append(_check(f["peak_rss_mb"] <= RSS_MB, f"{f['peak_rss_mb']:,.0f} MB"))
        if r.tasks >= 1_000_000:
            ideal_s = r.tasks * r.spec.task_s / r.spec.agents
            gen_s = sum(g.get("cpu_s", 0.0) for g in f.get("generators", []))
            cpu_s = (f["cpu_s"] + gen_s) / (os.cpu_count() or 1)
            bound_s = max(ideal_s, cpu_s)
            cells.append(
                _check(
                    f["wall_s"] <= WALL_TIMES_BOUND * bound_s,
                    f"{f['wall_s']:,.0f} s vs {bound_s:,.0f} s (ideal {ideal_s:,.0f}, "
                    f"CPU {cpu_s:,.0f})",
                )
            )
        else:
            cells.append("-")
        out.append(cells)
    return render_table(header, out, left=1)


def _check(ok: bool, text: str) -> str:
    return f"{'ok' if ok else 'MISSED'} ({text})"


# --- main ------------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument(
        "--row",
        type=RowSpec.parse,
        action="append",
        metavar="A:S:N",
        help="a row of A agents, S s tasks, N tasks (repeat; default "
        + ", ".join(f"{r.agents}:{r.task_s:g}:{r.tasks}" for r in DEFAULT_ROWS)
        + ")",
    )
    p.add_argument("--agents", type=int, action="append", help="rows of --task-s tasks, repeat")
    p.add_argument("--tasks-per-agent", type=int, default=20, help="with --agents")
    p.add_argument("--task-s", type=float, default=2.0, help="with --agents")
    p.add_argument("--per-process", type=int, default=1250, help="agents per generator")
    p.add_argument(
        "--ramp-s", type=float, default=RAMP_S, help="agents come up over S s (0: at once)"
    )
    p.add_argument(
        "--switch-interval", type=float, default=0.0, help="the daemon's GIL switch interval"
    )
    p.add_argument("--baseline-agents", type=int, default=16, help="0: no such row")
    p.add_argument("--no-emulator", action="store_true", help="skip the emulator's rows")
    p.add_argument(
        "--profile",
        type=float,
        default=0.0,
        metavar="S",
        help="py-spy on the row of most agents for S s (in the row's own run)",
    )
    p.add_argument(
        "--main-profile", action="store_true", help="and one more run of it under cProfile"
    )
    p.add_argument("--top", type=int, default=15)
    p.add_argument("--extrapolate", type=int, default=EXTRAPOLATE)
    p.add_argument("--keep", action="store_true", help="keep the run directories")
    args = p.parse_args(argv)
    if args.profile and py_spy() is None:
        p.error("--profile needs py-spy: .venv/bin/pip install -e '.[bench]'")
    asked: list[RowSpec] = list(args.row or [])
    asked += [RowSpec(a, args.task_s, a * args.tasks_per_agent) for a in args.agents or []]
    asked = asked or list(DEFAULT_ROWS)
    started = time.perf_counter()
    print(f"Library: {library_state()}")
    print(
        f"Host: {os.cpu_count()} cores; load average at the start "
        f"{' '.join(Path('/proc/loadavg').read_text().split()[:3])}"
    )
    tmp = Path(tempfile.mkdtemp(prefix="daemon-scale-"))
    rows: list[Row] = []
    emulator_us: dict[str, float] = {}
    emulated: dict[RowSpec, tuple[float, float, int]] = {}
    biggest = max(asked, key=lambda r: (r.agents, r.tasks))
    try:

        def spec(r: RowSpec, tag: str, profile_s: float = 0.0, main: bool = False) -> Spec:
            """Row ``tag`` of ``r``; py-spy for ``profile_s`` s, cProfile of the main thread
            if ``main``."""
            out = str(tmp / f"{tag}-{r.agents}-{r.task_s:g}-{r.tasks}")
            return Spec(
                r.agents,
                r.tasks,
                r.task_s,
                args.per_process,
                out,
                profile_s=profile_s,
                ramp_s=args.ramp_s,
                switch_s=args.switch_interval,
                main_profile=main,
            )

        plan: list[tuple[str, RowSpec]] = []
        if args.baseline_agents:
            b = args.baseline_agents
            plan.append(("baseline", RowSpec(b, min(r.task_s for r in asked), b * 20)))
        plan += [(f"row{i + 1}", r) for i, r in enumerate(asked)]
        profiled: Row | None = None
        for tag, r in plan:
            profile_s = args.profile if r is biggest and tag != "baseline" else 0.0
            row = measure(tag, spec(r, tag, profile_s))
            rows.append(row)
            if profile_s:
                profiled = row
            print(
                f"{tag} {r.agents:,} agents x {r.task_s:g} s: {row.done:,} done, "
                f"{row.rate:,.0f} tasks/s",
                file=sys.stderr,
            )
            if not args.no_emulator and tag != "baseline" and r not in emulated:
                cpu, done = emulator_row(spec(r, "emulated"), None)
                cpu_w, _ = emulator_row(spec(r, "emulated"), tmp / f"emulator-{tag}")
                emulated[r] = (cpu, cpu_w, done)
            if r in emulated:
                emulator_us[tag] = 1e6 * emulated[r][1] / r.tasks
        print()
        print(
            f"The real daemon on simulated agents, up to {args.per_process:,} agents per "
            "generator process"
        )
        print(main_table(rows))
        if emulated:
            print()
            print("Emulator baseline (dry run, the same config and bag as the row):")
            emu_rows = [
                [
                    f"{r.agents:,} × {r.task_s:g} s",
                    f"{done:,}",
                    f"{1e6 * cpu / r.tasks:,.0f}",
                    f"{1e6 * cpu_w / r.tasks:,.0f}",
                ]
                for r, (cpu, cpu_w, done) in emulated.items()
            ]
            print(
                render_table(
                    ["row", "tasks done", "µs/task", "with journal, report and plots"],
                    emu_rows,
                    left=1,
                )
            )
        print()
        print("Targets (issue 36):")
        print(target_lines([r for r in rows if r.label != "baseline"], emulator_us))
        if all(r.tasks < args.extrapolate for r in rows):
            print()
            print(extrapolation(rows[-1], args.extrapolate))
        if profiled is not None:
            print()
            print(
                f"Profile of the {profiled.spec.agents:,}-agent row, in its own run (py-spy, "
                f"{args.profile:g} s from 10 % done, 50 samples a second):"
            )
            print(profile_lines(Path(profiled.spec.out) / "profile.txt", args.top))
        if args.main_profile:
            row = measure("cprofiled", spec(biggest, "cprofiled", main=True))
            print()
            print(
                f"One more run of the {biggest.agents:,}-agent row, its main thread under "
                f"cProfile ({row.rate:,.0f} tasks/s, "
                f"{1e6 * row.figures['cpu_s'] / row.tasks:,.0f} daemon µs/task under it):"
            )
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

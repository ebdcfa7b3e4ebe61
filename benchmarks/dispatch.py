"""Dispatch throughput: no-op tasks through the real daemon against ``xargs -P``.

A real run (``autoscaler.run.daemon.Daemon``, in this process) of N no-op tasks (``true``
by default) on 16 local agents (``providers/local.py``: worker-agent processes on this
host, long-polling the stdlib HTTP dispatcher), against ``xargs -P 16`` running the very
same command lines from the same file, one ``/bin/sh -c <line>`` each, as the agent
runs them (``Popen(command, shell=True)``). Daemon and xargs runs alternate,
``--repeats`` times each; medians and spreads are shown.

* daemon tasks/s = tasks done / (time of the last ``TaskDone`` − time of the first
  ``MachineReady``), both from the run's journal (run time, real seconds);
* daemon CPU per task = CPU time of this process (``RUSAGE_SELF``: the controller, the
  dispatcher's threads, the journal, start-up and shutdown) over the run / N; the
  agents and their shells are child processes, reported apart (``RUSAGE_CHILDREN``);
* xargs tasks/s = N / wall time around ``subprocess.run``.

Targets (printed, not asserted): at least 500 tasks/s, under 2 ms of daemon CPU per task.

Where the CPU goes: the daemon's progress hook samples this process's CPU, the agents'
(``/proc/<pid>/stat``, their reaped shells included) and the whole host's
(``/proc/stat``) between 5 % and 95 % of the bag done, which gives CPU per task of each
side in the steady state and the rate the host's cores allow at that cost. The run
shares the cores with everything else on the host: the load average is printed at the
start and the end. ``--profile`` adds one run with the daemon's main thread under
cProfile (its CPU time).

Run from the repository root::

    .venv/bin/python -m benchmarks.dispatch [--tasks 5000] [--repeats 3] [--profile]
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import hashlib
import os
import pstats
import resource
import secrets
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if __name__ == "__main__" and not __package__:  # ``python benchmarks/dispatch.py``
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from autoscaler.bootstrap.agent_start import AGENT
from autoscaler.config.load import expand_bag
from autoscaler.config.schema import RunConfig
from autoscaler.core.journal import JOURNAL_DB
from autoscaler.core.state import RunState
from autoscaler.providers.local import RUN_TAG
from autoscaler.run.daemon import Daemon
from autoscaler.run.rundir import OUTPUTS_FILE, RunFiles
from benchmarks.bats_scenarios import REPO, library_digest, library_state, render_table

TARGET_RATE = 500.0  # tasks per second, at least
TARGET_CPU_MS = 2.0  # daemon CPU per task, less than
STEADY = (0.05, 0.95)  # the steady window: from 5 % of the bag done to 95 %
WARMUP_TASKS = 200

# --- measuring ------------------------------------------------------------------------


def cpu_s(who: int) -> float:
    r = resource.getrusage(who)
    return r.ru_utime + r.ru_stime


def host_ticks() -> tuple[int, int]:
    """(busy, total) jiffies of the whole host, from /proc/stat (every core, every user)."""
    try:
        with open("/proc/stat", encoding="ascii") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return 0, 0
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    total = sum(fields[:8])  # guest time is counted in user already
    return total - idle, total


TICK_S = 1.0 / os.sysconf("SC_CLK_TCK")


def proc_cpu_s(pids: Sequence[int]) -> float:
    """utime + stime + cutime + cstime of ``pids`` (seconds), those still readable."""
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat", encoding="ascii") as f:
                fields = f.read().rpartition(")")[2].split()
        except OSError:
            continue
        total += sum(int(x) for x in fields[11:15])  # fields 14-17 of proc(5)
    return total * TICK_S


def n_cores() -> int:
    return len(os.sched_getaffinity(0))


@dataclass(frozen=True, slots=True)
class Sample:
    """Taken by the daemon's progress hook (main thread, every 0.2 s or so)."""

    mono: float
    done: int
    cpu_self: float
    cpu_main: float
    cpu_agents: float  # the agents' own CPU and their reaped shells', from /proc
    host_busy: int
    host_total: int


@dataclass
class DaemonRun:
    label: str
    run_id: str
    tasks: int
    done: int = 0
    outputs: int = 0
    wall_s: float = 0.0  # end to end: run directory, start-up, dispatch, shutdown, report
    span_s: float = 0.0  # first MachineReady to last TaskDone (journal run time)
    startup_s: float = 0.0  # Daemon.run called to first MachineReady
    shutdown_s: float = 0.0  # last TaskDone to Daemon.run returned (report, plots included)
    cpu_self_s: float = 0.0
    cpu_main_s: float = 0.0  # the main thread alone (controller, journal, answers)
    cpu_children_s: float = 0.0  # agents and their shells, once reaped
    steady: dict[str, float] = field(default_factory=dict)
    leftovers: list[int] = field(default_factory=list)
    stop_reason: str | None = None
    profile: pstats.Stats | None = None

    @property
    def rate(self) -> float:
        return self.done / self.span_s if self.span_s > 0 else 0.0

    @property
    def e2e_rate(self) -> float:
        return self.done / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def cpu_ms(self) -> float:
        return 1e3 * self.cpu_self_s / self.tasks


@dataclass
class XargsRun:
    tasks: int
    wall_s: float
    cpu_children_s: float
    returncode: int

    @property
    def rate(self) -> float:
        return self.tasks / self.wall_s


def bench_config(bag_file: Path, agents: int, heartbeat_s: float) -> RunConfig:
    return RunConfig.model_validate(
        {
            "name": "dispatch-bench",
            "provider": "local",
            "policy": "round_robin",
            "machine_types": [{"name": "w", "price": 1, "max_count": agents, "boot_s": 0}],
            "billing": {"mode": "fixed", "atu_s": "1h"},
            "constraint": {"budget": 1000.0 * agents},
            "bag": {"file": str(bag_file)},
            "tail_replication": False,
            "daemon": {"heartbeat_s": heartbeat_s},
        }
    )


def write_bag(path: Path, n: int, command: str) -> None:
    path.write_text(f"{command}\n" * n, encoding="utf-8")


def run_pids(run_id: str) -> list[int]:
    """Every process on this host whose environment carries ``AUTOSCALER_RUN=run_id``."""
    needle = f"{RUN_TAG}={run_id}".encode()
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if needle in environ.split(b"\0"):
            out.append(int(entry.name))
    return out


def agent_pids_of(run_id: str) -> list[int]:
    """The run's agents (its shells carry the tag too, but not the agent's command line)."""
    out = []
    for pid in run_pids(run_id):
        with contextlib.suppress(OSError):
            if AGENT.name.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                out.append(pid)
    return out


def check_leftovers(run_id: str) -> list[int]:
    """Processes of the run still alive shortly after it ended; killed (they are ours)."""
    deadline = time.monotonic() + 2.0
    pids = run_pids(run_id)
    while pids and time.monotonic() < deadline:
        time.sleep(0.05)
        pids = run_pids(run_id)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    return pids


def journal_times(db_path: Path) -> tuple[int, float | None, float | None]:
    """(TaskDone count, t of the first MachineReady, t of the last TaskDone)."""
    db = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    try:
        done, last = db.execute(
            "SELECT COUNT(*), MAX(t) FROM journal WHERE kind = 'event' AND type = 'TaskDone'"
        ).fetchone()
        (first,) = db.execute(
            "SELECT MIN(t) FROM journal WHERE kind = 'event' AND type = 'MachineReady'"
        ).fetchone()
    finally:
        db.close()
    return int(done), first, last


def steady_figures(samples: Sequence[Sample], n: int) -> dict[str, float]:
    """Rates and CPU between the samples at 5 % and 95 % of the bag done."""
    lo, hi = STEADY[0] * n, STEADY[1] * n
    inside = [s for s in samples if lo <= s.done <= hi]
    if len(inside) < 2 or inside[-1].done == inside[0].done:
        return {}
    a, b = inside[0], inside[-1]
    done = b.done - a.done
    dt = b.mono - a.mono
    ticks = b.host_total - a.host_total
    return {
        "rate": done / dt,
        "cpu_ms": 1e3 * (b.cpu_self - a.cpu_self) / done,
        "main_ms": 1e3 * (b.cpu_main - a.cpu_main) / done,
        "agents_ms": 1e3 * (b.cpu_agents - a.cpu_agents) / done,
        "daemon_cores": (b.cpu_self - a.cpu_self) / dt,
        "agents_cores": (b.cpu_agents - a.cpu_agents) / dt,
        "host_busy": (b.host_busy - a.host_busy) / ticks if ticks > 0 else float("nan"),
    }


def run_daemon(
    label: str,
    n: int,
    command: str,
    agents: int,
    heartbeat_s: float,
    tmp: Path,
    profile: bool = False,
) -> DaemonRun:
    run_id = f"dispatch-bench-{os.getpid()}-{label}-{secrets.token_hex(2)}"
    base = tmp / run_id
    base.mkdir(parents=True)
    bag = base / "bag.txt"
    write_bag(bag, n, command)
    cfg = bench_config(bag, agents, heartbeat_s)
    tasks = expand_bag(cfg, source=str(bag))
    result = DaemonRun(label, run_id, n)
    samples: list[Sample] = []
    agent_pids: list[int] = []

    def hook(state: RunState, estimate: float | None) -> None:
        if len(agent_pids) < agents and state.done > 0:
            agent_pids[:] = agent_pids_of(run_id)
        busy, total = host_ticks()
        samples.append(
            Sample(
                time.monotonic(),
                state.done,
                cpu_s(resource.RUSAGE_SELF),
                time.thread_time(),
                proc_cpu_s(agent_pids) if len(agent_pids) >= agents else float("nan"),
                busy,
                total,
            )
        )

    started = time.perf_counter()
    files = RunFiles.create(cfg, tasks, base / "run", run_id, seed=0)
    # CPU time of the main thread: waiting for polls is not a cost
    profiler = cProfile.Profile(time.thread_time) if profile else None
    self0, main0, child0 = (
        cpu_s(resource.RUSAGE_SELF),
        time.thread_time(),
        cpu_s(resource.RUSAGE_CHILDREN),
    )
    wall0 = time.time()
    try:
        daemon = Daemon(files, progress=hook, install_signals=False)
        if profiler is not None:
            profiler.enable()
        try:
            outcome = daemon.run()
        finally:
            if profiler is not None:
                profiler.disable()
    finally:
        wall1 = time.time()
        result.wall_s = time.perf_counter() - started
        result.cpu_self_s = cpu_s(resource.RUSAGE_SELF) - self0
        result.cpu_main_s = time.thread_time() - main0
        result.cpu_children_s = cpu_s(resource.RUSAGE_CHILDREN) - child0
        result.leftovers = check_leftovers(run_id)
    result.stop_reason = outcome.report.stop_reason
    done, first_ready, last_done = journal_times(files.run_dir / JOURNAL_DB)
    result.done = done
    with (files.run_dir / OUTPUTS_FILE).open(encoding="utf-8") as f:
        result.outputs = sum(1 for _ in f)
    if first_ready is not None and last_done is not None:
        result.span_s = last_done - first_ready
        result.startup_s = files.start_wall + first_ready - wall0
        result.shutdown_s = wall1 - (files.start_wall + last_done)
    result.steady = steady_figures(samples, n)
    if profiler is not None:
        result.profile = pstats.Stats(profiler)
    return result


def run_xargs(bag: Path, agents: int) -> XargsRun:
    """``/bin/sh -c <line>`` for every line of ``bag``, ``agents`` at a time."""
    n = sum(1 for _ in bag.open(encoding="utf-8"))
    args = ["xargs", "-P", str(agents), "-d", "\\n", "-n", "1", "/bin/sh", "-c"]
    child0 = cpu_s(resource.RUSAGE_CHILDREN)
    with bag.open("rb") as stdin:
        started = time.perf_counter()
        proc = subprocess.run(args, stdin=stdin, stdout=subprocess.DEVNULL, check=False)
        wall = time.perf_counter() - started
    return XargsRun(n, wall, cpu_s(resource.RUSAGE_CHILDREN) - child0, proc.returncode)


# --- reporting ------------------------------------------------------------------------


def med(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def spread(values: Sequence[float], fmt: str = ".0f") -> str:
    if not values:
        return "-"
    return f"{min(values):{fmt}}-{max(values):{fmt}}"


def yes_no(ok: bool) -> str:
    return "yes" if ok else "NO"


def main_table(daemon: Sequence[DaemonRun], xargs: Sequence[XargsRun], n: int, agents: int) -> str:
    header = [
        "method",
        "tasks",
        "wall s",
        "tasks/s (med)",
        "spread",
        "ratio to xargs",
        "daemon CPU ms/task",
        f"target ≥{TARGET_RATE:g}/s",
        f"target <{TARGET_CPU_MS:g} ms",
    ]
    x_rate = med([x.rate for x in xargs])
    d_rate = med([d.rate for d in daemon])
    e_rate = med([d.e2e_rate for d in daemon])
    cpu = med([d.cpu_ms for d in daemon])

    def daemon_row(label: str, seconds: str, rate: float, rates: list[float]) -> list[str]:
        return [
            f"daemon, {agents} agents: {label}",
            f"{med([d.done for d in daemon]):,.0f}",
            f"{med([getattr(d, seconds) for d in daemon]):.2f}",
            f"{rate:,.0f}",
            spread(rates),
            f"{rate / x_rate:.2f}",
            f"{cpu:.2f}",
            yes_no(rate >= TARGET_RATE),
            yes_no(cpu < TARGET_CPU_MS),
        ]

    rows = [
        [
            f"xargs -P {agents}, sh -c",
            f"{n:,}",
            f"{med([x.wall_s for x in xargs]):.2f}",
            f"{x_rate:,.0f}",
            spread([x.rate for x in xargs]),
            "1.00",
            "-",
            "-",
            "-",
        ],
        daemon_row("dispatch", "span_s", d_rate, [d.rate for d in daemon]),
        daemon_row("end to end", "wall_s", e_rate, [d.e2e_rate for d in daemon]),
    ]
    return render_table(header, rows, left=1)


def runs_table(order: Sequence[DaemonRun | XargsRun], n: int) -> str:
    header = [
        "#",
        "method",
        "done",
        "wall s",
        "start s",
        "span s",
        "stop s",
        "tasks/s",
        "steady/s",
        "daemon ms/task",
        "main thr.",
        "children ms/task",
        "steady: daemon",
        "agents",
        "daemon cores",
        "agents cores",
        "host busy",
        "left",
    ]
    rows = []
    for i, r in enumerate(order, 1):
        if isinstance(r, XargsRun):
            rows.append(
                [str(i), "xargs" + ("" if r.returncode == 0 else f" (exit {r.returncode})")]
                + [f"{r.tasks:,}", f"{r.wall_s:.2f}", "-", "-", "-", f"{r.rate:,.0f}"]
                + ["-"] * 3
                + [f"{1e3 * r.cpu_children_s / r.tasks:.2f}"]
                + ["-"] * 6
            )
            continue
        s = r.steady
        rows.append(
            [
                str(i),
                "daemon" + (f" ({r.stop_reason})" if r.stop_reason else ""),
                f"{r.done:,}" + ("" if r.outputs == r.done else f" ({r.outputs} out)"),
                f"{r.wall_s:.2f}",
                f"{r.startup_s:.2f}",
                f"{r.span_s:.2f}",
                f"{r.shutdown_s:.2f}",
                f"{r.rate:,.0f}",
                f"{s['rate']:,.0f}" if s else "-",
                f"{r.cpu_ms:.2f}",
                f"{1e3 * r.cpu_main_s / n:.2f}",
                f"{1e3 * r.cpu_children_s / n:.2f}",
                f"{s['cpu_ms']:.2f}" if s else "-",
                f"{s['agents_ms']:.2f}" if s else "-",
                f"{s['daemon_cores']:.2f}" if s else "-",
                f"{s['agents_cores']:.2f}" if s else "-",
                f"{100 * s['host_busy']:.0f} %" if s else "-",
                str(len(r.leftovers)),
            ]
        )
    return render_table(header, rows, left=2)


def capacity_lines(daemon: Sequence[DaemonRun], xargs: Sequence[XargsRun], cores: int) -> str:
    """Where the CPU goes per task in the steady window, and the rate the cores allow."""
    steady = [d.steady for d in daemon if d.steady]
    if not steady:
        return "No steady window (too few progress samples): use more --tasks."
    d_ms = med([s["cpu_ms"] for s in steady])
    main_ms = med([s["main_ms"] for s in steady])
    agents_ms = med([s["agents_ms"] for s in steady])
    shell_ms = med([1e3 * x.cpu_children_s / x.tasks for x in xargs])
    total_ms = d_ms + agents_ms
    busy = med([s["host_busy"] for s in steady])
    rate = med([s["rate"] for s in steady])
    return "\n".join(
        [
            f"Steady window, CPU per task (medians, ms): daemon {d_ms:.2f} (main thread "
            f"{main_ms:.2f}, other threads {d_ms - main_ms:.2f});",
            f"  agents with their shells {agents_ms:.2f}, of which the shell itself (xargs's "
            f"children) about {shell_ms:.2f},",
            f"  so the agent's own overhead is about {agents_ms - shell_ms:.2f}. All processes: "
            f"{total_ms:.2f} ms per task.",
            f"  {cores} cores at that cost allow at most {1e3 * cores / total_ms:,.0f} tasks/s; "
            f"the steady rate was {rate:,.0f}/s,",
            f"  with the host {100 * busy:.0f} % busy (all its processes, /proc/stat) and "
            f"{rate * total_ms / 10 / cores:.0f} % used by this run.",
        ]
    )


def profile_table(stats: pstats.Stats, tasks: int, top: int) -> str:
    """The top functions of the daemon's main thread by own CPU time, then by cumulative."""
    raw: dict[tuple[str, int, str], tuple[int, int, float, float, Any]] = stats.stats  # type: ignore[attr-defined]
    total = sum(v[2] for v in raw.values())

    def where(key: tuple[str, int, str]) -> str:
        path, line, name = key
        if path == "~":
            return name
        with contextlib.suppress(ValueError):
            path = str(Path(path).resolve().relative_to(REPO))
        if "site-packages/" in path:
            path = path.split("site-packages/", 1)[1]
        elif "/lib/python3" in path:
            path = "stdlib/" + path.split("/lib/python3", 1)[1].split("/", 1)[1]
        return f"{path}:{line} {name}"

    def rows(key_index: int, only_ours: bool) -> list[list[str]]:
        items = sorted(raw.items(), key=lambda kv: kv[1][key_index], reverse=True)
        out = []
        for key, (_cc, nc, tt, ct, _callers) in items:
            label = where(key)
            if only_ours and not label.startswith(("autoscaler/", "providers/", "config/")):
                continue
            out.append(
                [
                    label[:90],
                    f"{nc:,}",
                    f"{tt:.3f}",
                    f"{ct:.3f}",
                    f"{1e6 * (tt if key_index == 2 else ct) / tasks:.0f}",
                ]
            )
            if len(out) == top:
                break
        return out

    own = render_table(
        ["function (own time)", "calls", "own s", "cum s", "µs/task"], rows(2, False)
    )
    cum = render_table(
        ["function (cumulative, ours)", "calls", "own s", "cum s", "µs/task"], rows(3, True)
    )
    return f"main thread, {total:.2f} s of CPU profiled in all\n{own}\n\n{cum}"


def agent_state() -> str:
    """The agent's source (not in LIBRARY_DIRS), for the record."""
    digest = hashlib.sha256(AGENT.read_bytes()).hexdigest()[:12]
    try:
        status = subprocess.run(
            ["git", "-C", str(REPO), "status", "--porcelain", "--", str(AGENT)],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        status = ""
    note = {"??": " (untracked)", "M": " (modified)"}.get(status[:2].strip(), "")
    return f"bootstrap/agent.py {digest}{note}"


# --- main ------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.dispatch",
        description="No-op tasks through the real dispatcher with local agents, against xargs.",
    )
    parser.add_argument("--tasks", type=int, default=5000, help="tasks per run (default 5000)")
    parser.add_argument("--repeats", type=int, default=3, help="runs of each method (default 3)")
    parser.add_argument("--agents", type=int, default=16, help="agents and xargs -P (16)")
    parser.add_argument("--command", default="true", help="the no-op command (default: true)")
    parser.add_argument("--heartbeat-s", type=float, default=2.0, help="daemon.heartbeat_s (2)")
    parser.add_argument(
        "--profile", action="store_true", help="one more daemon run under cProfile (main thread)"
    )
    parser.add_argument("--top", type=int, default=20, help="profile rows shown (default 20)")
    parser.add_argument(
        "--no-warmup", action="store_true", help=f"skip the untimed {WARMUP_TASKS}-task run"
    )
    parser.add_argument("--keep", action="store_true", help="keep the run directories")
    args = parser.parse_args(argv)
    if args.tasks < 1 or args.repeats < 1 or args.agents < 1:
        parser.error("--tasks, --repeats and --agents must be positive")
    started = time.perf_counter()
    state_before = library_state()
    cores = n_cores()
    print(f"Library: {state_before}; {agent_state()}")
    print(
        f"Host: {cores} cores available (of {os.cpu_count()}), Python {sys.version.split()[0]}, "
        f"load average {' '.join(Path('/proc/loadavg').read_text().split()[:3])}"
    )
    print()
    tmp_obj = tempfile.TemporaryDirectory(prefix="autoscaler-dispatch-")
    tmp = Path(tmp_obj.name)
    daemon_runs: list[DaemonRun] = []
    xargs_runs: list[XargsRun] = []
    order: list[DaemonRun | XargsRun] = []
    profiled: DaemonRun | None = None
    bag = tmp / "bag.txt"
    write_bag(bag, args.tasks, args.command)
    leftovers: list[tuple[str, list[int]]] = []
    try:
        print("  progress:", file=sys.stderr)
        if not args.no_warmup:
            print(f"  warm-up: daemon, {WARMUP_TASKS} tasks", file=sys.stderr, flush=True)
            w = run_daemon("warmup", WARMUP_TASKS, args.command, args.agents, args.heartbeat_s, tmp)
            if w.leftovers:
                leftovers.append((w.run_id, w.leftovers))
            run_xargs(bag, args.agents)
        for rep in range(args.repeats):
            d = run_daemon(f"r{rep}", args.tasks, args.command, args.agents, args.heartbeat_s, tmp)
            daemon_runs.append(d)
            order.append(d)
            if d.leftovers:
                leftovers.append((d.run_id, d.leftovers))
            x = run_xargs(bag, args.agents)
            xargs_runs.append(x)
            order.append(x)
            print(
                f"  repeat {rep + 1}/{args.repeats}: daemon {d.rate:,.0f} tasks/s "
                f"({d.done}/{d.tasks} done, {d.cpu_ms:.2f} ms CPU/task), "
                f"xargs {x.rate:,.0f} tasks/s",
                file=sys.stderr,
                flush=True,
            )
        if args.profile:
            print("  profile: daemon under cProfile", file=sys.stderr, flush=True)
            profiled = run_daemon(
                "profile",
                args.tasks,
                args.command,
                args.agents,
                args.heartbeat_s,
                tmp,
                profile=True,
            )
            if profiled.leftovers:
                leftovers.append((profiled.run_id, profiled.leftovers))
    finally:
        if args.keep:
            print(f"run directories kept in {tmp}", file=sys.stderr)
        else:
            tmp_obj.cleanup()

    print(
        f"Dispatch throughput: {args.tasks:,} × `{args.command}`, {args.agents} local agents "
        f"against xargs -P {args.agents}, {args.repeats} runs each (alternating)"
    )
    print(main_table(daemon_runs, xargs_runs, args.tasks, args.agents))
    print(
        "dispatch: tasks done / (last TaskDone − first MachineReady), journal run time.\n"
        "end to end: around RunFiles.create + Daemon.run (agents' start, release, report\n"
        "  and plots included). xargs: tasks / wall around subprocess.run of\n"
        f"  `xargs -P {args.agents} -d '\\n' -n 1 /bin/sh -c` fed the same bag file (the\n"
        "  agent runs `/bin/sh -c <line>` too, via Popen(shell=True)).\n"
        "daemon CPU: RUSAGE_SELF of this process over Daemon.run / tasks (controller,\n"
        "  dispatcher threads, journal, start-up, shutdown, report)."
    )
    print()
    print("Runs, in the order they ran")
    print(runs_table(order, args.tasks))
    print(
        "start: Daemon.run called to first MachineReady; span: to last TaskDone; stop: to\n"
        "  Daemon.run returned. steady/s, steady (ms/task), daemon cores, host busy: between\n"
        f"  {STEADY[0]:.0%} and {STEADY[1]:.0%} of the bag done, from samples the daemon's "
        "progress hook took.\n"
        "main thr.: the main thread's CPU (time.thread_time) per task; the rest of daemon\n"
        "  ms/task is the dispatcher's handler threads, the scheduler and provider threads.\n"
        "children: RUSAGE_CHILDREN over the run / tasks: the agents (our children, reaped\n"
        "  when they end) with their shells; for xargs, xargs and its shells.\n"
        "left: processes with the run's AUTOSCALER_RUN still alive 2 s after the run\n"
        "  (killed)."
    )
    print()
    print(capacity_lines(daemon_runs, xargs_runs, cores))
    if profiled is not None and profiled.profile is not None:
        print()
        print(
            f"Profile of the daemon's main thread (cProfile on its CPU time, time.thread_time;\n"
            f"  one more run of {args.tasks:,} tasks: "
            f"{profiled.rate:,.0f} tasks/s, {profiled.cpu_ms:.2f} ms CPU/task under the "
            "profiler)"
        )
        print(profile_table(profiled.profile, args.tasks, args.top))
    print()
    for run_id, pids in leftovers:
        print(f"WARNING: run {run_id} left processes {pids} behind (killed)")
    if not leftovers:
        print("No process of any run was left behind.")
    if library_digest() not in state_before:
        print("WARNING: the library's sources changed while this benchmark ran")
    print(
        f"Total wall time {time.perf_counter() - started:.1f} s; load average at the end "
        f"{' '.join(Path('/proc/loadavg').read_text().split()[:3])}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

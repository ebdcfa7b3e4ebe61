"""Dispatch throughput: small tasks through the real daemon against ``xargs -P``.

A real run (``autoscaler.run.daemon.Daemon``, in this process) of N small tasks on local
agents (``providers/local.py``: worker-agent processes on this host, long-polling the
stdlib HTTP dispatcher, each running its type's slots at once), against ``xargs -P 16``
running the very
same command lines from the same file, one ``/bin/sh -c <line>`` each, as the agent
runs them (``os.posix_spawn`` of ``/bin/sh -c command``). Daemon and xargs runs alternate,
``--repeats`` times each; medians and spreads are shown.

* daemon tasks/s = tasks done / (time of the last ``TaskDone`` − time of the first
  ``MachineReady``), both from the run's journal (run time, real seconds);
* daemon CPU per task = CPU time of this process (``RUSAGE_SELF``: the controller, the
  dispatcher's threads, the journal, start-up, shutdown and report) over the run / N; the
  agents and their shells are child processes, reported apart (``RUSAGE_CHILDREN``);
* xargs tasks/s = N / wall time around ``subprocess.run``.

Rows (issue 21): for each command (``true`` and ``sleep 0.01`` by default), xargs, the
baseline (16 agents x 1 slot, one task at a time: one round trip per task) and layouts
with slots and task groups (``--layout 2x8g``: 2 agents of 8 slots, groups), where the
agent reports many results per request. Targets (printed, not asserted): with groups,
at least 1.0 x the rate of ``xargs -P 16`` and at most half the baseline's daemon CPU
per task (steady window).

Where the CPU goes: the daemon's progress hook samples this process's CPU, the agents'
(``/proc/<pid>/stat``, their reaped shells included) and the whole host's
(``/proc/stat``) between 5 % and 95 % of the bag done, which gives CPU per task of each
side in the steady state and the rate the host's cores allow at that cost. The run
shares the cores with everything else on the host: the load average is printed at the
start and the end. ``--profile`` adds one run with the daemon's main thread under
cProfile (its CPU time).

Run from the repository root::

    .venv/bin/python -m benchmarks.dispatch [--tasks 3000] [--repeats 2] [--profile] \
        [--command 'sleep 0.01' ...] [--layout 16x1 --layout 2x8g ...] [--agent FILE ...]

``--agent FILE`` (e.g. ``git show main:bootstrap/agent.py > FILE``) runs the rows with
groups with that agent too, alternating with ours: before and after under the same load.
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
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

if __name__ == "__main__" and not __package__:  # ``python benchmarks/dispatch.py``
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from autoscaler.bootstrap.agent_start import AGENT
from autoscaler.config.bag import expand_bag
from autoscaler.config.schema import RunConfig
from autoscaler.core.journal import JOURNAL_DB
from autoscaler.core.state import RunState
from autoscaler.providers.local import RUN_TAG
from autoscaler.run.daemon import Daemon
from autoscaler.run.rundir import OUTPUTS_FILE, RunFiles
from benchmarks.bats_scenarios import REPO, library_digest, library_state, render_table

TARGET_RATIO = 1.0  # tasks/s against xargs -P, at least (issue 21)
TARGET_CPU_RATIO = 0.5  # daemon CPU per task against the one-by-one row, at most
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
    polls: int = 0  # agents' requests the dispatcher took
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


@dataclass(frozen=True)
class Layout:
    """How the daemon's side of a row is laid out: agents, slots each, and how tasks go."""

    agents: int
    slots: int
    groups: bool  # task groups (the controller sizes them) or one task per free slot
    agent: Path | None = None  # another agent.py than ours (``--agent``)

    @property
    def label(self) -> str:
        how = "groups" if self.groups else "one by one"
        other = f", agent {self.agent}" if self.agent else ""
        return f"{self.agents} agents x {self.slots} slot{'s' * (self.slots > 1)}, {how}{other}"


GROUPS_OFF = {"group_s": 0}
"""``daemon`` config that makes the controller hand out one task per free slot (groups of
1, the baseline: one round trip per task)."""


def bench_config(
    bag_file: Path,
    agents: int,
    heartbeat_s: float,
    slots: int = 1,
    groups: bool = True,
    report_s: float = 0.25,
    python: Path | None = None,
) -> RunConfig:
    machine_type = {"name": "w", "price": 1, "max_count": agents, "boot_s": 0, "slots": slots}
    return RunConfig.model_validate(
        {
            "name": "dispatch-bench",
            "provider": "local",
            **({"local": {"python": str(python)}} if python else {}),
            "policy": "round_robin",
            "machine_types": [machine_type],
            "billing": {"mode": "fixed", "atu_s": "1h"},
            "constraint": {"budget": 1000.0 * agents},
            "bag": {"file": str(bag_file)},
            "tail_replication": False,
            "daemon": {
                "heartbeat_s": heartbeat_s,
                "report_s": report_s,
                **({} if groups else GROUPS_OFF),
            },
        }
    )


def write_bag(path: Path, n: int, command: str) -> None:
    path.write_text(f"{command}\n" * n, encoding="utf-8")


def agent_wrapper(agent: Path, tmp: Path) -> Path:
    """An "interpreter" for ``local.python`` that runs ``agent`` (copied as ``agent.py``,
    the name the benchmark finds agents by) in place of ours: before and after a change
    to the agent, in one run of the benchmark."""
    where = tmp / f"agent-{hashlib.sha256(agent.read_bytes()).hexdigest()[:12]}"
    where.mkdir(exist_ok=True)
    (where / AGENT.name).write_bytes(agent.read_bytes())
    wrapper = where / "python"
    python, ours = sys.executable, where / AGENT.name
    wrapper.write_text(  # $@: [one option of python's, as -S] our agent.py, its flags
        f'#!/bin/sh\ncase $1 in -*) o=$1; shift 2; exec {python} "$o" {ours} "$@";; esac\n'
        f'shift\nexec {python} {ours} "$@"\n'
    )
    wrapper.chmod(0o755)
    return wrapper


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
    slots: int = 1,
    groups: bool = True,
    report_s: float = 0.25,
    agent: Path | None = None,
) -> DaemonRun:
    run_id = f"dispatch-bench-{os.getpid()}-{label}-{secrets.token_hex(2)}"
    base = tmp / run_id
    base.mkdir(parents=True)
    bag = base / "bag.txt"
    write_bag(bag, n, command)
    python = agent_wrapper(agent, tmp) if agent else None
    cfg = bench_config(bag, agents, heartbeat_s, slots, groups, report_s, python)
    tasks = expand_bag(cfg, source=str(bag))
    result = DaemonRun(label, run_id, n)
    samples: list[Sample] = []
    agent_pids: list[int] = []

    def hook(state: RunState, estimate: float | None) -> None:
        if len(agent_pids) < agents and state.tasks.done > 0:
            agent_pids[:] = agent_pids_of(run_id)
        busy, total = host_ticks()
        samples.append(
            Sample(
                time.monotonic(),
                state.tasks.done,
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
        daemon = Daemon(files, progress=hook)
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
        with contextlib.suppress(AttributeError):  # no dispatcher: the daemon failed early
            result.polls = daemon.dispatcher.polls
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


Key = tuple[str, "Layout"]


def daemon_cpu_ms(d: DaemonRun) -> float:
    """CPU per task in the steady window (start-up, report and plots left out), else whole."""
    return d.steady["cpu_ms"] if d.steady else d.cpu_ms


def main_table(
    daemon: dict[Key, list[DaemonRun]],
    xargs: dict[str, list[XargsRun]],
    baseline: Layout,
    agents: int,
) -> tuple[str, bool]:
    """One row per command and method; the targets checked; whether all were met."""
    header = [
        "command",
        "method",
        "tasks/s (med)",
        "spread",
        "x xargs",
        "tasks/request",
        "daemon CPU ms/task",
        "steady",
        "x one by one",
        f"target ≥{TARGET_RATIO:g} x xargs",
        f"target CPU ≤{TARGET_CPU_RATIO:g} x",
    ]
    rows: list[list[str]] = []
    met = True
    for command, runs in xargs.items():
        x_rate = med([x.rate for x in runs])
        rows.append(
            [
                command,
                f"xargs -P {agents}",
                f"{x_rate:,.0f}",
                spread([x.rate for x in runs]),
                "1.00",
            ]
            + ["-"] * 6
        )
        base = daemon.get((command, baseline), [])
        base_cpu = med([daemon_cpu_ms(d) for d in base])
        for (cmd, layout), ds in daemon.items():
            if cmd != command:
                continue
            rate = med([d.rate for d in ds])
            cpu = med([daemon_cpu_ms(d) for d in ds])
            ratio = rate / x_rate
            is_base = layout == baseline
            rate_ok = ratio >= TARGET_RATIO
            cpu_ok = is_base or cpu <= TARGET_CPU_RATIO * base_cpu
            if layout.groups and layout.agent is None:  # ours, not a --agent row
                met = met and rate_ok and cpu_ok
            rows.append(
                [
                    command,
                    f"daemon, {layout.label}",
                    f"{rate:,.0f}",
                    spread([d.rate for d in ds]),
                    f"{ratio:.2f}",
                    f"{med([d.done / d.polls if d.polls else 0.0 for d in ds]):.1f}",
                    f"{med([d.cpu_ms for d in ds]):.2f}",
                    f"{cpu:.2f}",
                    "1.00 (baseline)" if is_base else f"{cpu / base_cpu:.2f}",
                    yes_no(rate_ok),
                    "-" if is_base else yes_no(cpu_ok),
                ]
            )
    return render_table(header, rows, left=2), met


def runs_table(order: Sequence[DaemonRun | XargsRun], n: int, labels: Sequence[str]) -> str:
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
    for i, (r, label) in enumerate(zip(order, labels, strict=True), 1):
        if isinstance(r, XargsRun):
            rows.append(
                [str(i), label + ("" if r.returncode == 0 else f" (exit {r.returncode})")]
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
                label + (f" ({r.stop_reason})" if r.stop_reason else ""),
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
            f"  agents with their tasks' processes {agents_ms:.2f}; xargs's children (sh -c "
            f"and what it runs) {shell_ms:.2f},",
            f"  a difference of {agents_ms - shell_ms:.2f} (below 0 where the agent runs a "
            f"plain line with no sh). All processes: {total_ms:.2f} ms per task.",
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


def parse_layout(text: str) -> Layout:
    """``16x1`` (one by one) or ``2x8g`` (groups): agents x slots."""
    groups = text.endswith("g")
    agents, _, slots = text.rstrip("g").partition("x")
    try:
        layout = Layout(int(agents), int(slots or 1), groups)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a layout is AGENTSxSLOTS[g], got {text!r}") from None
    if layout.agents < 1 or layout.slots < 1:
        raise argparse.ArgumentTypeError(f"agents and slots must be positive in {text!r}")
    return layout


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.dispatch",
        description="Small tasks through the real dispatcher with local agents, against xargs.",
    )
    parser.add_argument("--tasks", type=int, default=3000, help="tasks per run (default 3000)")
    parser.add_argument("--repeats", type=int, default=2, help="runs of each method (default 2)")
    parser.add_argument("--agents", type=int, default=16, help="xargs -P, and the baseline (16)")
    parser.add_argument(
        "--command",
        dest="commands",
        action="append",
        default=None,
        help="a task's command line; repeat for several (default: true, sleep 0.01)",
    )
    parser.add_argument(
        "--layout",
        dest="layouts",
        action="append",
        type=parse_layout,
        default=None,
        help="AGENTSxSLOTS, g for groups; repeat (default: the baseline AGENTSx1, AGENTSx1g, 2x8g)",
    )
    parser.add_argument(
        "--agent",
        dest="agents_other",
        type=Path,
        action="append",
        default=[],
        help="another agent.py (e.g. git show REV:bootstrap/agent.py > FILE): the rows "
        "with groups run with it too, alternating with ours; repeat",
    )
    parser.add_argument("--heartbeat-s", type=float, default=2.0, help="daemon.heartbeat_s (2)")
    parser.add_argument("--report-s", type=float, default=0.25, help="daemon.report_s (0.25)")
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
    commands: list[str] = args.commands or ["true", "sleep 0.01"]
    baseline = Layout(args.agents, 1, False)
    layouts: list[Layout] = args.layouts or [
        baseline,
        Layout(args.agents, 1, True),
        Layout(2, 8, True),
    ]
    if baseline not in layouts:
        layouts.insert(0, baseline)
    layouts += [
        replace(x, agent=a.resolve()) for a in args.agents_other for x in layouts if x.groups
    ]
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
    daemon_runs: dict[Key, list[DaemonRun]] = {}
    xargs_runs: dict[str, list[XargsRun]] = {}
    order: list[tuple[str, str, DaemonRun | XargsRun]] = []
    profiled: DaemonRun | None = None
    leftovers: list[tuple[str, list[int]]] = []

    def daemon(
        label: str, command: str, layout: Layout, n: int, profile: bool = False
    ) -> DaemonRun:
        d = run_daemon(
            label,
            n,
            command,
            layout.agents,
            args.heartbeat_s,
            tmp,
            profile=profile,
            slots=layout.slots,
            groups=layout.groups,
            report_s=args.report_s,
            agent=layout.agent,
        )
        if d.leftovers:
            leftovers.append((d.run_id, d.leftovers))
        return d

    try:
        print("  progress:", file=sys.stderr)
        for c, command in enumerate(commands):
            bag = tmp / f"bag-{c}.txt"
            write_bag(bag, args.tasks, command)
            if not args.no_warmup and c == 0:
                print(f"  warm-up: daemon, {WARMUP_TASKS} tasks", file=sys.stderr, flush=True)
                daemon("warmup", command, baseline, WARMUP_TASKS)
                run_xargs(bag, args.agents)
            for rep in range(args.repeats):
                for i, layout in enumerate(layouts):
                    d = daemon(f"c{c}-l{i}-r{rep}", command, layout, args.tasks)
                    daemon_runs.setdefault((command, layout), []).append(d)
                    order.append((command, layout.label, d))
                    print(
                        f"  {command!r}, {layout.label}, repeat {rep + 1}/{args.repeats}: "
                        f"{d.rate:,.0f} tasks/s ({d.done}/{d.tasks} done, "
                        f"{daemon_cpu_ms(d):.2f} ms CPU/task)",
                        file=sys.stderr,
                        flush=True,
                    )
                x = run_xargs(bag, args.agents)
                xargs_runs.setdefault(command, []).append(x)
                order.append((command, f"xargs -P {args.agents}", x))
                print(f"  {command!r}, xargs: {x.rate:,.0f} tasks/s", file=sys.stderr, flush=True)
        if args.profile:
            print("  profile: daemon under cProfile", file=sys.stderr, flush=True)
            profiled = daemon("profile", commands[0], layouts[-1], args.tasks, profile=True)
    finally:
        if args.keep:
            print(f"run directories kept in {tmp}", file=sys.stderr)
        else:
            tmp_obj.cleanup()

    print(
        f"Dispatch throughput: {args.tasks:,} tasks a run, {args.repeats} runs of each row "
        f"(alternating), against xargs -P {args.agents}"
    )
    table, met = main_table(daemon_runs, xargs_runs, baseline, args.agents)
    print(table)
    print(
        "tasks/s: tasks done / (last TaskDone − first MachineReady), journal run time; xargs:\n"
        f"  tasks / wall around `xargs -P {args.agents} -d '\\n' -n 1 /bin/sh -c` fed the same\n"
        "  bag file. The agent runs a plain line (words only: `true`, `sleep 0.01`) as its\n"
        "  program with no shell between, as make does, other lines with `/bin/sh -c`; an\n"
        "  `--agent` given older than that runs every line with `/bin/sh -c`, as xargs.\n"
        "daemon CPU: RUSAGE_SELF of this process over Daemon.run / tasks (controller,\n"
        "  dispatcher threads, journal, start-up, shutdown, report and plots); steady: the\n"
        f"  same between {STEADY[0]:.0%} and {STEADY[1]:.0%} of the bag done (what a task "
        "costs; the targets use it).\n"
        f"x one by one: steady CPU per task against the {baseline.label} row of the command.\n"
        "tasks/request: tasks done / agents' requests the dispatcher took (heartbeats and\n"
        "  long polls included)."
    )
    print("Targets (rows with groups): " + ("all met" if met else "NOT all met"))
    print()
    print("Runs, in the order they ran")
    print(runs_table([r for _, _, r in order], args.tasks, [f"{c}, {m}" for c, m, _ in order]))
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
    for (command, layout), ds in daemon_runs.items():
        print()
        print(f"{command!r}, {layout.label}:")
        print(capacity_lines(ds, xargs_runs[command], cores))
    if profiled is not None and profiled.profile is not None:
        print()
        print(
            f"Profile of the daemon's main thread (cProfile on its CPU time, time.thread_time;\n"
            f"  one more run of {args.tasks:,} × {commands[0]!r}, {layouts[-1].label}: "
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

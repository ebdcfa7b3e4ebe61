"""The worker agent's own CPU per task, one task at a time against a group.

One agent process (``bootstrap/agent.py``, or another copy given with ``--agent``, e.g.
an older version from ``git show REV:bootstrap/agent.py``) against a minimal stdlib
controller in this process that hands it N tasks ``true`` (or ``--command``): one by one
(a task in each answer to a poll that shows the agent idle: one round trip per task) or
as one group (all N in the first answer, ``slots`` given), each agent in turn. When
every result is in, the agent's CPU is read from ``/proc/<pid>/stat``: its own (utime +
stime) and its reaped shells' (cutime + cstime). The controller decides nothing and costs
the agent nothing.

Start-up: the CPU an agent has used when its first poll arrives (``/proc/<pid>/stat``,
read before the answer), started as our providers start it (``python -S agent.py``,
``agent_start.agent_command``) and without ``-S``; many agents start at once on a
host of local agents, so this is paid once per agent per core.

Run from the repository root::

    .venv/bin/python -m benchmarks.agent_cpu [--tasks 2000] [--repeats 2] [--agent PATH]
        [--command 'sleep 0.01']
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

if __name__ == "__main__" and not __package__:  # ``python benchmarks/agent_cpu.py``
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from autoscaler.bootstrap.agent_start import AGENT, agent_command
from benchmarks.bats_scenarios import render_table

TOKEN = "agent-cpu-bench"


class Controller:
    """Hands out ``n`` tasks ``true``, one by one or as one group, and counts results."""

    def __init__(self, n: int, mode: str, slots: int, command: str = "true") -> None:
        self.n, self.mode, self.slots, self.command = n, mode, slots, command
        self.next_run = 1
        self.polls = 0
        self.done: set[int] = set()
        self.finished = threading.Event()
        self.lock = threading.Lock()
        self.pid = 0  # the agent's, set once started
        self.started = threading.Event()
        self.first_poll_cpu_s: float | None = None

    def answer(self, body: dict[str, Any]) -> dict[str, Any]:
        with self.lock:
            if self.polls == 0 and self.started.wait(60):
                self.first_poll_cpu_s = cpu_s(self.pid)[0]
            self.polls += 1
            self.done.update(r["run"] for r in body["results"])
            tasks: list[dict[str, Any]] = []
            if self.mode == "group" and self.next_run == 1:
                tasks = [task(run, self.command) for run in range(1, self.n + 1)]
                self.next_run = self.n + 1
            elif self.mode == "one" and not body["running"] and self.next_run <= self.n:
                tasks = [task(self.next_run, self.command)]
                self.next_run += 1
            if len(self.done) >= self.n:
                self.finished.set()
        return {"epoch": "e", "ack": True, "tasks": tasks, "slots": self.slots, "heartbeat_s": 5}


def task(run: int, command: str) -> dict[str, Any]:
    return {"run": run, "task": run, "command": command}


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], ConnectionError):  # the agent ended mid-poll
            super().handle_error(request, client_address)


def serve(controller: Controller) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            data = json.dumps(controller.answer(body)).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    server = _Server(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}).start()
    return server


def cpu_s(pid: int) -> tuple[float, float]:
    """A process's own CPU seconds (utime + stime) and its reaped children's."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    tick = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / tick, (int(fields[13]) + int(fields[14])) / tick


def measure(
    agent: Path, n: int, mode: str, slots: int, command: str = "true", site: bool = False
) -> dict[str, float]:
    """One agent run of ``n`` tasks: its CPU and its shells' per task (ms), polls, rate,
    and its CPU when its first poll came (ms). ``site``: start python without -S."""
    controller = Controller(n, mode, slots, command)
    server = serve(controller)
    url = f"http://127.0.0.1:{server.server_address[1]}"
    start = agent_command(
        sys.executable, agent, url=url, machine="m", flags=["--heartbeat-s", "5"], token=TOKEN
    )
    args = [a for a in start.argv if not (site and a == "-S")]
    env = {**os.environ, **start.env}
    proc = subprocess.Popen(args, env=env, stdin=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    controller.pid = proc.pid
    controller.started.set()
    try:
        started = time.perf_counter()
        if not controller.finished.wait(600):
            raise RuntimeError(f"{agent}: {len(controller.done)} of {n} results in 600 s")
        wall = time.perf_counter() - started
        own, shells = cpu_s(proc.pid)
    finally:
        proc.terminate()
        proc.wait()
        server.shutdown()
        server.server_close()
    return {
        "agent_ms": 1e3 * own / n,
        "shells_ms": 1e3 * shells / n,
        "polls": controller.polls,
        "rate": n / wall,
        "startup_ms": 1e3 * (controller.first_poll_cpu_s or math.nan),
    }


def startup_table(agents: Sequence[Path], repeats: int) -> str:
    """Each agent's CPU until its first poll, with -S and without (a 1-task run each)."""
    rows_spec = [(agent, site) for agent in agents for site in (False, True)]
    got: dict[int, list[float]] = {i: [] for i in range(len(rows_spec))}
    for _ in range(max(repeats, 1) * 10):  # a few ms each: many runs for a steady median
        for i, (agent, site) in enumerate(rows_spec):
            got[i].append(measure(agent, 1, "one", 1, "true", site)["startup_ms"])
    rows = [
        [
            str(agent),
            "python agent.py" if site else "python -S agent.py (as providers start it)",
            f"{statistics.median(got[i]):.0f}",
            f"{min(got[i]):.0f}-{max(got[i]):.0f}",
        ]
        for i, (agent, site) in enumerate(rows_spec)
    ]
    header = ["agent", "started as", "CPU ms to first poll (median)", "spread"]
    return render_table(header, rows)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.agent_cpu", description=__doc__)
    parser.add_argument("--tasks", type=int, default=2000, help="tasks a run (2000)")
    parser.add_argument("--repeats", type=int, default=2, help="runs of each row (2)")
    parser.add_argument("--command", default="true", help="every task's command (true)")
    parser.add_argument(
        "--agent", type=Path, action="append", help="an agent to compare (repeat)", default=[]
    )
    args = parser.parse_args(argv)
    agents: list[Path] = [*args.agent, AGENT]
    modes = [("one", 1), ("group", 1), ("group", 8)]
    rows_spec = [(agent, mode, slots) for mode, slots in modes for agent in agents]
    results: dict[int, list[dict[str, float]]] = {i: [] for i in range(len(rows_spec))}
    load = " ".join(Path("/proc/loadavg").read_text().split()[:3])
    print(
        f"{args.tasks:,} tasks `{args.command}` a run, {args.repeats} runs a row; "
        f"load average {load}"
    )
    for _ in range(args.repeats):
        for i, (agent, mode, slots) in enumerate(rows_spec):
            results[i].append(measure(agent, args.tasks, mode, slots, args.command))
    rows = []
    for i, (agent, mode, slots) in enumerate(rows_spec):
        rs = results[i]

        def med(key: str, rs: list[dict[str, float]] = rs) -> float:
            return statistics.median(r[key] for r in rs)

        rows.append(
            [
                str(agent),
                "one by one" if mode == "one" else f"one group, slots {slots}",
                f"{med('agent_ms'):.2f}",
                f"{med('shells_ms'):.2f}",
                f"{med('polls'):,.0f}",
                f"{med('rate'):,.0f}",
            ]
        )
    header = ["agent", "tasks given", "agent CPU ms/task", "shells ms/task", "polls", "tasks/s"]
    print(render_table(header, rows))
    print(
        "agent CPU: the agent process's utime + stime over the run / tasks; shells: its\n"
        "  reaped children's (cutime + cstime); medians over the runs."
    )
    print()
    print(startup_table(agents, args.repeats))
    print(
        "CPU to first poll: the agent's utime + stime (clock ticks) when its first poll\n"
        "  arrives, before it is answered; 10 runs per repeat."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The floor under the daemon's CPU per task: one thread that only speaks the agents' protocol.

Issue 36 asks the real daemon to cost at most twice the emulator per task. The emulator
pays for deciding; the daemon pays for deciding and for the exchange that hands a task
to an agent and takes its result back. This measures the exchange alone: a server on
one asyncio loop, in one thread, that frames each poll with the dispatcher's own HTTP/1.1
code (``run/http1.take_head``), checks its body with the dispatcher's own parser
(``run/polls.parse_poll``), and answers at once with the next task of a counter, encoded
as the daemon encodes its answers. No controller, no journal, no outputs, no second
thread, no timer per poll, no long poll held (a busy agent is asked to report as often
as the daemon asks it, ``run/agents.heartbeat_s``): less than any controller speaking the
protocol must do. Its agents are the same load generators ``daemon_scale`` drives
(``benchmarks/sim_agents.py``), so the kernel's share of a loopback exchange is counted
as it is there. Its loop gathers requests as the dispatcher's does past the fleet where
the heartbeat stretches (``run/gathering.Gathering``).

    python -m benchmarks.dispatch_floor                       # 5,000 agents × 2 s, 100,000 tasks
    python -m benchmarks.dispatch_floor --row 2500:2:50000 --daemon

With ``--daemon`` the same row also runs on the real daemon (``daemon_scale``'s row, in
its own process), and the two print side by side: what the exchange costs, what the
daemon costs, and the emulator's figure the target is set against.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

if __name__ == "__main__" and not __package__:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from autoscaler.bootstrap.agent_start import TOKEN_ENV
from autoscaler.config.schema import Daemon as DaemonSettings
from autoscaler.run.agents import heartbeat_s, stretch_from
from autoscaler.run.gathering import Gathering
from autoscaler.run.http1 import head_bytes, take_head
from autoscaler.run.polls import BadRequest, parse_poll
from benchmarks.bats_scenarios import render_table
from benchmarks.daemon_scale import STEADY, RowSpec, emulator_row, measure
from benchmarks.daemon_scale_run import Spec

REPO = Path(__file__).resolve().parent.parent
_JSON = b"application/json"
_ENCODE = json.JSONEncoder(separators=(",", ":")).encode


class Floor:
    """Hands out ``tasks`` synthetic tasks of ``task_s`` ± 10 % one per result, and
    samples its own CPU time as the results come in."""

    def __init__(self, tasks: int, task_s: float, agents: int) -> None:
        self.tasks = tasks
        self.task_s = task_s
        # a busy agent reports as often as the daemon asks a fleet this size to
        self.heartbeat_s = heartbeat_s(DaemonSettings(), agents)
        self.given = 0
        self.done = 0
        self.rng = random.Random(0)
        self.marks: dict[float, tuple[float, float, float]] = {}  # share done: cpu, wall, sys
        self.finished = asyncio.get_running_loop().create_future()

    def answer(self, body: bytes) -> bytes:
        poll = parse_poll(body, 0.0)
        self.done += len(poll.results)
        for share in STEADY:
            if share not in self.marks and self.done >= share * self.tasks:
                r = resource.getrusage(resource.RUSAGE_SELF)
                self.marks[share] = (r.ru_utime + r.ru_stime, time.monotonic(), r.ru_stime)
        if self.done >= self.tasks and not self.finished.done():
            self.finished.set_result(None)
        busy = len(poll.running)
        tasks = []
        if busy == 0 and self.given < self.tasks:
            self.given += 1
            sleep = self.task_s * (1 + 0.1 * self.rng.uniform(-1.7, 1.7))
            tasks.append(
                {
                    "run": self.given,
                    "task": self.given,
                    "command": None,
                    "sleep_s": sleep,
                    "env": {},
                    "cwd": None,
                    "timeout_s": None,
                }
            )
        release = busy == 0 and not tasks
        return _ENCODE(
            {
                "ack": True,
                "tasks": tasks,
                "cancel": [],
                "release": release,
                "lease_s": 3600.0,
                "renew_in_s": 3000.0,
                "heartbeat_s": self.heartbeat_s,
                "slots": 1,
                "report_s": 10.0,
            }
        ).encode()


class _Conn(asyncio.BufferedProtocol):
    """One agent's keep-alive connection: each request framed and answered at once."""

    def __init__(self, floor: Floor, shared: bytearray) -> None:
        self.floor = floor
        self.shared = shared
        self.buf = bytearray()
        self.searched = 0
        self.want = -1  # body bytes of the request whose head came
        self.transport: asyncio.Transport

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def get_buffer(self, sizehint: int) -> memoryview:
        return memoryview(self.shared)

    def buffer_updated(self, nbytes: int) -> None:
        self.buf += self.shared[:nbytes]
        while True:
            if self.want < 0:
                request = take_head(self.buf, self.searched)
                if request is None:
                    self.searched = len(self.buf)
                    return
                self.searched = 0
                self.want = int(request.headers.get("content-length", "0"))
            if len(self.buf) < self.want:
                return
            body = bytes(self.buf[: self.want])
            del self.buf[: self.want]
            self.want = -1
            try:
                out = self.floor.answer(body)
                status = 200
            except BadRequest as exc:
                out, status = _ENCODE({"error": str(exc)}).encode(), 400
            self.transport.write(head_bytes(status, len(out), False, _JSON) + out)


async def serve(floor_args: tuple[int, float], agents: int, per_process: int, out: Path) -> dict:
    loop = asyncio.get_running_loop()
    floor = Floor(*floor_args, agents)
    shared = bytearray(65536)
    server = await loop.create_server(lambda: _Conn(floor, shared), "127.0.0.1", 0, backlog=4096)
    port = server.sockets[0].getsockname()[1]
    env = {**os.environ, TOKEN_ENV: "floor", "PYTHONPATH": str(REPO)}
    gens = []
    try:
        for g in range(0, agents, per_process):
            stats = out / f"gen{g}.json"
            proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "benchmarks.sim_agents",
                    "--url",
                    f"http://127.0.0.1:{port}",
                    "--stats",
                    str(stats),
                ],
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                text=True,
                cwd=REPO,
                env=env,
            )
            gens.append(proc)
            assert proc.stdin is not None
            for i in range(g, min(agents, g + per_process)):
                proc.stdin.write(f"start m{i}\n")
            proc.stdin.flush()
        t0 = time.monotonic()
        while not floor.finished.done():
            await asyncio.sleep(0.5)
            if any(p.poll() is not None for p in gens):
                raise RuntimeError("a load generator ended before the bag was done")
        wall = time.monotonic() - t0
    finally:
        for p in gens:
            with contextlib.suppress(OSError):
                assert p.stdin is not None
                p.stdin.close()
        for p in gens:
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        server.close()
    (c0, w0, s0), (c1, w1, s1) = floor.marks[STEADY[0]], floor.marks[STEADY[1]]
    n = (STEADY[1] - STEADY[0]) * floor.tasks
    return {
        "us": 1e6 * (c1 - c0) / n,
        "sys": (s1 - s0) / (c1 - c0) if c1 > c0 else float("nan"),
        "rate": n / (w1 - w0),
        "wall": wall,
        "results": floor.done,
    }


def floor_run(floor_args: tuple[int, float], agents: int, per_process: int, out: Path) -> dict:
    """``serve`` on a loop that gathers requests as the dispatcher's does at this fleet."""
    crowd = agents > stretch_from(DaemonSettings())

    def loop() -> asyncio.AbstractEventLoop:
        return asyncio.SelectorEventLoop(Gathering(lambda: crowd))

    with asyncio.Runner(loop_factory=loop) as runner:
        return runner.run(serve(floor_args, agents, per_process, out))


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--row", type=RowSpec.parse, action="append", help="A:S:N (default 5000:2:100000)"
    )
    p.add_argument("--per-process", type=int, default=1250, help="agents per generator")
    p.add_argument("--daemon", action="store_true", help="also the real daemon on the row")
    args = p.parse_args(argv)
    rows = args.row or [RowSpec.parse("5000:2:100000")]
    out_rows = []
    with tempfile.TemporaryDirectory(prefix="floor-") as tmp:
        for r in rows:
            agents, task_s, tasks = r.agents, r.task_s, r.tasks
            label = f"{agents:,} × {task_s:g} s, {tasks:,}"
            print(f"{label}: the floor ...", file=sys.stderr, flush=True)
            f = floor_run((tasks, task_s), agents, args.per_process, Path(tmp))
            line: list[Any] = [
                label,
                str(f["results"]),
                f"{f['us']:,.0f}",
                f"{100 * f['sys']:.0f} %",
                f"{f['rate']:,.0f}",
            ]
            if args.daemon:
                print(f"{label}: the daemon ...", file=sys.stderr, flush=True)
                spec = Spec(
                    agents,
                    tasks,
                    task_s,
                    args.per_process,
                    str(Path(tmp) / f"daemon-{len(out_rows)}"),
                )
                row = measure(label, spec)
                emulated_s, _ = emulator_row(spec, Path(tmp) / f"emulator-{len(out_rows)}")
                emu_us = 1e6 * emulated_s / tasks
                d = row.steady
                line += [f"{d['cpu_us']:,.0f}", f"{d['main_us']:,.0f}", f"{emu_us:,.0f}"]
                line += [f"{2 * emu_us:,.0f}", f"{d['cpu_us'] / f['us']:.1f}×"]
            out_rows.append(line)
    head = ["row", "results", "floor µs/task", "kernel", "floor tasks/s"]
    if args.daemon:
        head += ["daemon µs/task", "main thr.", "emulator µs", "target (2×)", "daemon/floor"]
    print(
        "The exchange alone (one thread, our framing and parser, no controller or journal),"
        f" steady window {STEADY[0]:.0%}–{STEADY[1]:.0%} of the bag:"
    )
    print(render_table(head, out_rows, left=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

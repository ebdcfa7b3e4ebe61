"""Simulated worker agents: many agents in one process, speaking the agent's protocol.

A load generator for the real daemon (``benchmarks/daemon_scale.py``): one asyncio loop
holds up to a few thousand agents, each with its own keep-alive HTTP/1.1 connection to
the dispatcher, doing what ``bootstrap/agent.py`` does on the wire (its docstring is the
protocol): ``POST /v1/poll`` with the run's token; results kept until acknowledged and
sent many per request; up to ``slots`` runs at once and a local queue; cancels, release,
lease and renewal times, heartbeats and long polls when idle; 503 and errors retried with
backoff, 401/403 and 410 end the agent. A run is a ``sleep_s`` task "run" by a timer (no
process); a task with a command fails as ``bad task`` (these agents run synthetic tasks
only). The set-up, if asked for, is done at once.

Driven by its standard input, one line per order::

    start <machine>     # an agent for that machine id starts polling (at most
                        # --start-rate a second: a launch's machines come up over time)
    stop <machine>      # its agent ends now (the provider terminated the machine)

End of input stops every agent and ends the process (so it never outlives whoever started
it). Each agent that ends by itself (released, unknown to the controller, lease expired,
token refused, controller unreachable) prints ``ended <machine> <exit code>`` on standard
output, with the agent's exit codes. At the end it writes its figures as JSON to
``--stats``: requests, results, errors by status, and two latency histograms (log-spaced
buckets, merged by the caller): ``rtt``, the round trip of requests that may not be held
(``wait_s`` 0), and ``gap``, how long a slot stood free with nothing queued before its
next task arrived (what dispatch costs an agent per task).

    AUTOSCALER_TOKEN=... python -m benchmarks.sim_agents --url http://127.0.0.1:PORT \\
        --stats stats.json
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import socket
import sys
import time
from collections import deque
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit

TOKEN_ENV = "AUTOSCALER_TOKEN"
POLL_PATH = "/v1/poll"
HTTP_GRACE_S = 10.0
BACKOFF_FIRST_S = 0.05
BACKOFF_MAX_S = 2.0
EXIT_OK, EXIT_USAGE, EXIT_LEASE, EXIT_ORPHAN = 0, 2, 3, 4
_ENCODER = json.JSONEncoder(separators=(",", ":"))

# --- latency histograms ----------------------------------------------------------------------

H_MIN_S = 1e-5  # the first bucket's lower edge
H_RATIO = 1.02  # each bucket 2 % wider than the one before
H_BUCKETS = 1000  # up to 1e-5 × 1.02^1000 ≈ 4e3 s


def bucket(seconds: float) -> int:
    if seconds <= H_MIN_S:
        return 0
    return min(H_BUCKETS - 1, int(math.log(seconds / H_MIN_S, H_RATIO)))


def bucket_mid(i: int) -> float:
    return float(H_MIN_S * H_RATIO ** (i + 0.5))


def quantile(counts: Sequence[int], q: float) -> float:
    """The ``q`` quantile of a histogram (to 2 %); nan if it is empty."""
    total = sum(counts)
    if total == 0:
        return float("nan")
    rank = q * (total - 1)
    seen = 0
    for i, c in enumerate(counts):
        seen += c
        if seen > rank:
            return bucket_mid(i)
    return bucket_mid(len(counts) - 1)


class Stats:
    def __init__(self) -> None:
        self.requests = 0
        self.held = 0  # requests that could be held (long polls)
        self.results = 0  # results acknowledged
        self.tasks = 0  # tasks received
        self.statuses: dict[str, int] = {}  # non-200 answers and failed requests
        self.ended: dict[str, int] = {}  # agents ended, by exit code
        self.rtt = [0] * H_BUCKETS
        self.gap = [0] * H_BUCKETS
        self.errors: list[tuple[float, str, float]] = []  # the first: (s from start, what, wait_s)

    def as_json(self) -> dict[str, Any]:
        return dict(vars(self))


# --- one keep-alive connection ---------------------------------------------------------------


class HttpError(Exception):
    pass


class Connection:
    """A keep-alive HTTP/1.1 connection for ``POST /v1/poll`` (reconnected after errors)."""

    def __init__(self, host: str, port: int, token: str) -> None:
        self.host, self.port = host, port
        self.head = (
            f"POST {POLL_PATH} HTTP/1.1\r\nHost: {host}:{port}\r\n"
            f"Authorization: Bearer {token}\r\nContent-Type: application/json\r\n"
            "Content-Length: "
        ).encode()
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def post(self, body: bytes) -> tuple[int, bytes]:
        reader, writer = self.reader, self.writer
        if reader is None or writer is None:
            reader, writer = await asyncio.open_connection(self.host, self.port)
            sock = writer.get_extra_info("socket")
            if sock is not None:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.reader, self.writer = reader, writer
        writer.write(self.head + str(len(body)).encode() + b"\r\n\r\n" + body)
        head = await reader.readuntil(b"\r\n\r\n")
        status_line, _, rest = head.partition(b"\r\n")
        parts = status_line.split(None, 2)
        if len(parts) < 2 or not parts[1].isdigit():
            raise HttpError(f"bad status line {status_line[:80]!r}")
        length = 0
        close = False
        for line in rest.lower().split(b"\r\n"):
            name, _, value = line.partition(b":")
            if name == b"content-length":
                length = int(value)
            elif name == b"connection" and value.strip() == b"close":
                close = True
        data = await reader.readexactly(length) if length else b""
        if close:
            self.close()
        return int(parts[1]), data

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None


# --- one agent -------------------------------------------------------------------------------


class Agent:
    """One simulated machine's agent (``bootstrap/agent.py``'s loop, runs as timers)."""

    def __init__(self, gen: Generator, machine: str) -> None:
        self.gen = gen
        self.machine = machine
        self.loop = asyncio.get_running_loop()
        self.conn = Connection(gen.host, gen.port, gen.token)
        self.wake = asyncio.Event()
        self.epoch: str | None = None
        self.slots = 1
        self.heartbeat_s = gen.heartbeat_s
        self.report_s = 0.25
        self.lease_at: float | None = None  # monotonic
        self.renew_by: float | None = None
        self.unacked: list[dict[str, Any]] = []  # results, oldest first
        self.unsent_since: float | None = None  # when the oldest result not yet sent ended
        self.running: dict[int, asyncio.TimerHandle] = {}  # run -> its end
        self.queue: deque[dict[str, Any]] = deque()
        self.free_since: float | None = None  # a slot free, nothing queued, since
        self.setup: dict[str, Any] | None = None
        self.stopped = False
        self.stopped_by_order = False  # by a ``stop`` line: nobody needs to hear of its end
        self.idle_early = False  # the last long poll came back early with nothing
        self.last_sent = 0.0
        self.last_ok = time.monotonic()

    # runs

    def _start_runs(self) -> None:
        while self.queue and len(self.running) < self.slots:
            task = self.queue.popleft()
            run, sleep_s = task["run"], task.get("sleep_s")
            if task.get("command") is not None or not isinstance(sleep_s, int | float):
                self._result(
                    run,
                    task["task"],
                    None,
                    0.0,
                    "bad task: simulated agents run sleep_s tasks only",
                )
                continue
            started = time.monotonic()
            self.running[run] = self.loop.call_later(
                max(0.0, sleep_s), self._ended, run, task["task"], started
            )
        if len(self.running) < self.slots and not self.queue:
            if self.free_since is None:
                self.free_since = time.monotonic()
        else:
            self.free_since = None

    def _ended(self, run: int, task: int, started: float) -> None:
        self.running.pop(run, None)
        self._result(run, task, 0, time.monotonic() - started, None)
        self._start_runs()
        self.wake.set()

    def _result(
        self, run: int, task: int, code: int | None, runtime: float, error: str | None
    ) -> None:
        result = {
            "run": run,
            "task": task,
            "exit_code": code,
            "runtime_s": runtime,
            "stdout": "",
            "stderr": "",
            "error": error,
        }
        self.unacked.append(result)
        if self.unsent_since is None:
            self.unsent_since = time.monotonic()

    def stop(self) -> None:
        self.stopped = True
        for handle in self.running.values():
            handle.cancel()
        self.running.clear()
        self.queue.clear()
        self.conn.close()
        self.wake.set()

    # polls

    def _due(self, now: float) -> float:
        """When the next request is due (monotonic)."""
        busy = bool(self.running or self.queue)
        if not busy:
            if self.unacked:
                return now
            due = self.last_sent + self.heartbeat_s if self.idle_early else now
        else:
            due = self.last_sent + self.heartbeat_s
            if self.unsent_since is not None:
                free_slot = len(self.running) < self.slots and not self.queue
                due = min(due, now if free_slot else self.unsent_since + self.report_s)
        if self.renew_by is not None:
            due = min(due, self.renew_by)
        return due

    def _wait_s(self, now: float) -> float:
        if self.running or self.queue or self.unacked:
            return 0.0
        wait = self.heartbeat_s
        if self.renew_by is not None:
            wait = min(wait, max(0.0, self.renew_by - now - 0.5))
        if self.lease_at is not None:
            wait = min(wait, max(0.0, (self.lease_at - now) / 2))
        return wait

    async def run(self) -> int:
        backoff = BACKOFF_FIRST_S
        while not self.stopped:
            now = time.monotonic()
            if self.lease_at is not None and now >= self.lease_at:
                return EXIT_LEASE
            due = self._due(now)
            if self.lease_at is not None:
                due = min(due, self.lease_at)
            if due > now:
                self.wake.clear()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(due - now):  # no task per wait, as wait_for
                        await self.wake.wait()
                continue
            code = await self._poll()
            if code is None:
                backoff = BACKOFF_FIRST_S
                continue
            if code >= 0:
                return code
            if time.monotonic() - self.last_ok > self.gen.orphan_after_s:
                return EXIT_ORPHAN
            await asyncio.sleep(backoff)
            backoff = min(2 * backoff, BACKOFF_MAX_S)
        return EXIT_OK

    async def _poll(self) -> int | None:
        """One request: None if answered, an exit code to end with, or -1 to retry."""
        now = time.monotonic()
        wait_s = self._wait_s(now)
        sent = list(self.unacked)
        body: dict[str, Any] = {
            "machine": self.machine,
            "pid": self.gen.pid,
            "host": self.gen.hostname,
            "epoch": self.epoch,
            "results": sent,
            "running": [*self.running, *(t["run"] for t in self.queue)],
            "wait_s": wait_s,
        }
        if self.setup is not None:
            body["setup"] = self.setup
        self.last_sent = now
        self.unsent_since = None
        stats = self.gen.stats
        stats.requests += 1
        stats.held += wait_s > 0
        timeout = wait_s + HTTP_GRACE_S
        try:
            async with asyncio.timeout(timeout):
                status, data = await self.conn.post(_ENCODER.encode(body).encode())
        except (
            OSError,
            TimeoutError,
            HttpError,
            asyncio.IncompleteReadError,
            asyncio.LimitOverrunError,
            ValueError,
        ) as exc:
            self.conn.close()
            key = type(exc).__name__
            stats.statuses[key] = stats.statuses.get(key, 0) + 1
            if len(stats.errors) < 200:
                stats.errors.append((round(time.monotonic() - self.gen.t0, 3), key, wait_s))
            self._unsend(sent)
            return -1
        if self.stopped:
            return EXIT_OK
        if status != 200:
            stats.statuses[str(status)] = stats.statuses.get(str(status), 0) + 1
            if status in (401, 403):
                return EXIT_USAGE
            if status == 410:
                return EXIT_OK
            self._unsend(sent)
            return -1
        got = time.monotonic()
        if wait_s == 0:
            stats.rtt[bucket(got - now)] += 1
        try:
            answer = json.loads(data)
        except ValueError:
            stats.statuses["bad body"] = stats.statuses.get("bad body", 0) + 1
            self._unsend(sent)
            return -1
        self.last_ok = got
        return self._take(answer, sent, now, got)

    def _unsend(self, sent: list[dict[str, Any]]) -> None:
        if sent and self.unsent_since is None:
            self.unsent_since = time.monotonic()

    def _take(
        self, answer: dict[str, Any], sent: list[dict[str, Any]], sent_at: float, got: float
    ) -> int | None:
        self.epoch = answer.get("epoch", self.epoch)
        if answer.get("ack"):
            ids = {id(r) for r in sent}
            self.unacked = [r for r in self.unacked if id(r) not in ids]
            self.gen.stats.results += len(sent)
        if answer.get("release"):
            return EXIT_OK
        for key, attr in (("heartbeat_s", "heartbeat_s"), ("report_s", "report_s")):
            if isinstance(answer.get(key), int | float):
                setattr(self, attr, float(answer[key]))
        if isinstance(answer.get("slots"), int) and answer["slots"] > 0:
            self.slots = answer["slots"]
        lease = answer.get("lease_s")
        self.lease_at = sent_at + lease if isinstance(lease, int | float) else None
        renew = answer.get("renew_in_s")
        self.renew_by = sent_at + renew if isinstance(renew, int | float) else None
        if answer.get("setup") and self.setup is None:
            self.setup = {"state": "done", "seconds": 0.0}
        known = (
            set(self.running) | {t["run"] for t in self.queue} | {r["run"] for r in self.unacked}
        )
        tasks = [t for t in answer.get("tasks") or [] if t.get("run") not in known]
        cancel = set(answer.get("cancel") or [])
        if tasks and self.free_since is not None:
            self.gen.stats.gap[bucket(got - self.free_since)] += 1
        self.gen.stats.tasks += len(tasks)
        self.queue.extend(tasks)
        for run in cancel:
            handle = self.running.pop(run, None)
            if handle is not None:
                handle.cancel()
        if cancel:
            self.queue = deque(t for t in self.queue if t["run"] not in cancel)
        self.idle_early = not (tasks or cancel or self.running or self.queue) and (
            got - sent_at < self.heartbeat_s * 0.9
        )
        self._start_runs()
        return None


# --- the process -----------------------------------------------------------------------------


class Generator:
    """The agents of this process and what they share."""

    def __init__(
        self,
        url: str,
        token: str,
        heartbeat_s: float,
        orphan_after_s: float,
        start_rate: float = 0.0,
    ) -> None:
        parts = urlsplit(url)
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 80
        self.token = token
        self.heartbeat_s = heartbeat_s
        self.orphan_after_s = orphan_after_s
        self.pid = os.getpid()
        self.t0 = time.monotonic()
        self.hostname = socket.gethostname()
        self.stats = Stats()
        self.agents: dict[str, Agent] = {}
        self.tasks: set[asyncio.Task[None]] = set()
        self.start_rate = start_rate  # agents started a second (0: each at once)
        self.to_start: dict[str, None] = {}  # ordered, not started yet
        self.ramp: asyncio.Task[None] | None = None

    def start(self, machine: str) -> None:
        """Start ``machine``'s agent now, or once the ones ordered before it have started,
        at most ``start_rate`` a second."""
        if machine in self.agents or machine in self.to_start:
            return
        if self.start_rate <= 0:
            self._start(machine)
            return
        self.to_start[machine] = None
        if self.ramp is None or self.ramp.done():
            self.ramp = asyncio.get_running_loop().create_task(self._ramp())

    async def _ramp(self) -> None:
        while self.to_start:
            machine = next(iter(self.to_start))
            del self.to_start[machine]
            self._start(machine)
            await asyncio.sleep(1.0 / self.start_rate)

    def _start(self, machine: str) -> None:
        agent = Agent(self, machine)
        self.agents[machine] = agent
        task = asyncio.get_running_loop().create_task(self._life(agent))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _life(self, agent: Agent) -> None:
        try:
            code = await agent.run()
        finally:
            agent.stop()
        key = str(code)
        self.stats.ended[key] = self.stats.ended.get(key, 0) + 1
        if not agent.stopped_by_order:
            sys.stdout.write(f"ended {agent.machine} {code}\n")
            sys.stdout.flush()

    def stop(self, machine: str) -> None:
        self.to_start.pop(machine, None)
        agent = self.agents.get(machine)
        if agent is not None and not agent.stopped:
            agent.stopped_by_order = True
            agent.stop()

    async def serve(self) -> None:
        """Read orders until end of input; then stop every agent."""
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader()
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
        while True:
            line = await reader.readline()
            if not line:
                break
            verb, _, machine = line.decode().strip().partition(" ")
            if verb == "start":
                self.start(machine)
            elif verb == "stop":
                self.stop(machine)
        self.to_start.clear()
        for machine in list(self.agents):
            self.stop(machine)
        if self.tasks:
            await asyncio.wait(list(self.tasks), timeout=5)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--url", required=True)
    p.add_argument("--stats", required=True, help="write the figures here (JSON) at the end")
    p.add_argument("--heartbeat-s", type=float, default=2.0)
    p.add_argument("--orphan-after-s", type=float, default=60.0)
    p.add_argument("--start-rate", type=float, default=0.0, help="agents a second (0: at once)")
    args = p.parse_args(argv)
    token = os.environ.pop(TOKEN_ENV, "")
    gen = Generator(args.url, token, args.heartbeat_s, args.orphan_after_s, args.start_rate)
    started = time.process_time()
    try:
        asyncio.run(gen.serve())
    finally:
        figures = gen.stats.as_json()
        figures["cpu_s"] = time.process_time() - started
        figures["agents"] = len(gen.agents)
        with open(args.stats, "w", encoding="utf-8") as f:
            json.dump(figures, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())

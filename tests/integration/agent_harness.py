"""A harness for the worker agent (bootstrap/agent.py) as a real process against a
scripted controller.

The controller is a stdlib HTTP server in a thread: it records every request and answers
from the test's script (queued replies first, then a script function). The fixtures are
taken into a test module by assignment (``controller = agent_harness.controller``).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from autoscaler.bootstrap.agent_start import AGENT

TOKEN = "s3cret-test-token-0f9a"
NO_SIGWAIT = (
    "import runpy, signal; del signal.sigtimedwait; "
    f"runpy.run_path({str(AGENT)!r}, run_name='__main__')"
)
"""The agent where Python has no ``signal.sigtimedwait`` (macOS): ``python -c`` this."""


@dataclass(frozen=True)
class Request:
    """One poll as the controller received it."""

    at: float
    headers: dict[str, str]
    body: dict[str, Any]

    def results(self) -> list[dict[str, Any]]:
        results: list[dict[str, Any]] = self.body["results"]
        return results

    def carries(self, run: int) -> bool:
        return any(result["run"] == run for result in self.results())


@dataclass(frozen=True)
class Reply:
    """What the controller answers: a status, fields over the default body, a hold."""

    status: int = 200
    fields: dict[str, Any] = field(default_factory=dict)
    hold_s: float = 0.0


Script = Callable[[Request], Reply]


class FakeController:
    """A scripted controller; ``replies`` are used first, then ``script``."""

    def __init__(self) -> None:
        self.requests: list[Request] = []
        self.replies: deque[Reply] = deque()
        self.script: Script = lambda request: Reply()
        self.heartbeat_s = 0.2
        self.epoch = "epoch-1"
        self.closing = threading.Event()
        self._changed = threading.Condition()
        self._server = _Server(self)
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self.closing.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def handle(self, path: str, headers: dict[str, str], body: dict[str, Any]) -> tuple[int, bytes]:
        request = Request(time.monotonic(), headers, body)
        with self._changed:
            self.requests.append(request)
            self._changed.notify_all()
            reply = self.replies.popleft() if self.replies else None
        if path != "/v1/poll":
            return 404, b"{}"
        if reply is None:
            reply = self.script(request)
        if reply.hold_s:
            self.closing.wait(reply.hold_s)
        if reply.status != 200:
            return reply.status, b'{"error": "scripted"}'
        answer = {
            "epoch": self.epoch,
            "ack": True,
            "tasks": [],
            "cancel": [],
            "release": False,
            "lease_s": None,
            "renew_in_s": None,
            "heartbeat_s": self.heartbeat_s,
            **reply.fields,
        }
        return 200, json.dumps(answer).encode()

    def wait_for(self, predicate: Callable[[Request], bool], timeout: float = 5.0) -> Request:
        """The first request that satisfies ``predicate``, waiting for it if need be."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                for request in self.requests:
                    if predicate(request):
                        return request
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise AssertionError(f"no such request within {timeout}s")
                self._changed.wait(remaining)

    def snapshot(self) -> list[Request]:
        with self._changed:
            return list(self.requests)


class _Server(ThreadingHTTPServer):
    def __init__(self, controller: FakeController) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.controller = controller

    def handle_error(self, request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True

    def do_POST(self) -> None:
        server = self.server
        assert isinstance(server, _Server)
        length = int(self.headers.get("Content-Length", "0"))
        body = json.loads(self.rfile.read(length))
        status, payload = server.controller.handle(self.path, dict(self.headers), body)
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@dataclass
class Agent:
    """A running agent process and the file its stderr goes to."""

    proc: subprocess.Popen[bytes]
    log_path: Path
    started: float

    def wait(self, timeout: float) -> int:
        return self.proc.wait(timeout=timeout)

    def log(self) -> str:
        return self.log_path.read_text()


StartAgent = Callable[..., Agent]


@pytest.fixture
def controller() -> Iterator[FakeController]:
    ctl = FakeController()
    ctl.start()
    yield ctl
    ctl.stop()


@pytest.fixture
def start_agent(tmp_path: Path) -> Iterator[StartAgent]:
    agents: list[Agent] = []

    def start(
        url: str,
        *args: str,
        token: str | None = TOKEN,
        heartbeat_s: float = 0.2,
        orphan_after_s: float = 10.0,
        sigtimedwait: bool = True,
    ) -> Agent:
        env = dict(os.environ)
        env.pop("AUTOSCALER_TOKEN", None)
        if token is not None:
            env["AUTOSCALER_TOKEN"] = token
        log_path = tmp_path / f"agent-{len(agents)}.log"
        # without signal.sigtimedwait (as on macOS) the agent waits on a wake-up pipe
        run = [sys.executable, str(AGENT)] if sigtimedwait else [sys.executable, "-c", NO_SIGWAIT]
        command = [
            *run,
            "--url",
            url,
            "--machine",
            "m-1",
            "--heartbeat-s",
            str(heartbeat_s),
            "--orphan-after-s",
            str(orphan_after_s),
            *args,
        ]
        with log_path.open("wb") as stderr:
            proc = subprocess.Popen(
                command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=stderr, env=env
            )
        agent = Agent(proc, log_path, time.monotonic())
        agents.append(agent)
        return agent

    yield start
    for agent in agents:
        if agent.proc.poll() is None:
            agent.proc.send_signal(signal.SIGTERM)
            try:
                agent.proc.wait(timeout=3)
            except subprocess.TimeoutExpired:
                agent.proc.kill()
                agent.proc.wait()


@pytest.fixture
def task_pids() -> Iterator[list[int]]:
    """Pids of task processes; any still alive at the end is killed."""
    pids: list[int] = []
    yield pids
    for pid in pids:
        if alive(pid):
            os.kill(pid, signal.SIGKILL)


def task(
    run: int,
    command: str | None = None,
    *,
    sleep_s: float | None = None,
    env: dict[str, str] | None = None,
    cwd: str | None = None,
    timeout_s: float | None = None,
) -> dict[str, Any]:
    return {
        "run": run,
        "task": run + 100,
        "command": command,
        "sleep_s": sleep_s,
        "env": env or {},
        "cwd": cwd,
        "timeout_s": timeout_s,
    }


def give(*tasks: dict[str, Any]) -> Reply:
    return Reply(fields={"tasks": list(tasks)})


def alive(pid: int) -> bool:
    """Whether a process exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def gone_within(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def read_pid(path: Path, pids: list[int], timeout: float = 5.0) -> int:
    """The pid a task wrote to ``path``, registered for clean-up."""
    deadline = time.monotonic() + timeout
    while True:
        text = path.read_text().strip() if path.exists() else ""
        if text:
            pid = int(text)
            pids.append(pid)
            return pid
        assert time.monotonic() < deadline, f"no pid in {path}"
        time.sleep(0.02)


def sleeper(pid_file: Path) -> str:
    """A command whose child ``sleep 30`` writes its pid to ``pid_file``."""
    return f"sleep 30 & echo $! > {pid_file}.tmp && mv {pid_file}.tmp {pid_file}; wait"


def result_of(request: Request, run: int) -> dict[str, Any]:
    return next(result for result in request.results() if result["run"] == run)

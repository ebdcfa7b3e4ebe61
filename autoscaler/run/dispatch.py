"""The dispatcher: the HTTP endpoint worker agents talk to (protocol: ``bootstrap/agent.py``).

Standard library ``ThreadingHTTPServer`` with HTTP/1.1 keep-alive: one thread per agent
connection, which suits long polls from tens to hundreds of agents, and adds no
dependency to the one process that must stay up. The handler decides nothing: it
checks the run's token, parses the request into a ``Poll`` and puts it on the daemon's
queue, then waits for the daemon's answer (``Reply``). The daemon answers once the
results the poll carried are journaled, so an acknowledged result is never lost; it
may hold an idle agent's poll until there is work for it (a long poll).
"""

from __future__ import annotations

import json
import os
import queue
import secrets
import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from socket import SOMAXCONN
from typing import Any

from autoscaler.run.auth import bearer_token, token_matches

POLL_PATH = "/v1/poll"
FILES_PATH = "/v1/files"
MAX_BODY = 8 << 20
MAX_WAIT_S = 60.0
_ENCODER = json.JSONEncoder(separators=(",", ":"))  # json.dumps would build one per call
PROCESS_TIMEOUT_S = 5.0
"""How long a handler waits for the daemon to take its poll before it answers 503: well
inside the agent's own patience (``wait_s`` + 10 s), so the agent hears the 503."""


class Reply:
    """The answer to one poll, written by the daemon and sent by the handler thread.

    ``send`` gives the full answer. ``hold`` says the results are stored but there is
    nothing to say yet: the handler keeps the request open until ``hold_until`` and then
    sends ``base``. Once the handler has given up, ``send`` returns False: the agent did
    not get that answer, and the daemon sends its tasks again when the agent's next poll
    shows it does not run them.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self.body: dict[str, Any] | None = None
        self.base: dict[str, Any] | None = None
        self.hold_until = 0.0
        self.closed = False

    def send(self, body: dict[str, Any]) -> bool:
        with self._cond:
            if self.closed or self.body is not None:
                return False
            self.body = body
            self._cond.notify()
            return True

    def hold(self, base: dict[str, Any], until: float) -> None:
        with self._cond:
            self.base = base
            self.hold_until = until
            self._cond.notify()

    def wait(self, give_up_at: float) -> dict[str, Any] | None:
        """The answer, or the held base answer at its time; None if the daemon never took it."""
        with self._cond:
            while self.body is None:
                limit = self.hold_until if self.base is not None else give_up_at
                left = limit - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(left)
            self.closed = True
            return self.body if self.body is not None else self.base


@dataclass(frozen=True, slots=True)
class AgentResult:
    """One task run's result as an agent reports it (``Result`` in ``bootstrap/agent.py``)."""

    run: int
    task: int
    exit_code: int | None  # None: killed by the timeout, or never started
    runtime_s: float  # real seconds
    error: str | None  # why it failed, if the agent knows
    stdout: str = ""  # the tail of the output
    stderr: str = ""
    stored: Any = None  # a task with files: [[path, bytes]] the agent stored

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.error


@dataclass
class Poll:
    """One agent request as the daemon sees it."""

    machine: str
    results: list[AgentResult]
    running: list[int]
    wait_s: float
    arrived: float  # monotonic
    reply: Reply = field(default_factory=Reply)
    notice: Notice | None = None  # the machine's provider said it will take it back
    setup: dict[str, Any] | None = None  # how far the machine's set-up is (agent.py)


@dataclass(frozen=True, slots=True)
class Notice:
    """An interruption notice an agent read (EC2 spot: ``spot/instance-action``)."""

    action: str  # terminate, stop, hibernate
    time: str  # when, as the provider wrote it (ISO 8601 on EC2)


class BadRequest(ValueError):
    pass


def parse_poll(body: bytes, arrived: float) -> Poll:
    """Check an agent's request body; raise ``BadRequest`` naming the bad field."""
    try:
        data = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BadRequest(f"body is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise BadRequest("body must be a JSON object")
    machine = data.get("machine")
    if not isinstance(machine, str) or not machine:
        raise BadRequest("machine: must be a non-empty string")
    results = data.get("results", [])
    if not isinstance(results, list):
        raise BadRequest("results: must be a list of {run, task, exit_code, runtime_s, ...}")
    running = data.get("running", [])
    if not isinstance(running, list) or not all(
        isinstance(r, int) and not isinstance(r, bool) for r in running
    ):
        raise BadRequest("running: must be a list of run numbers")
    wait = data.get("wait_s", 0.0)
    if not isinstance(wait, int | float) or wait < 0:
        raise BadRequest("wait_s: must be a number ≥ 0")
    parsed = [parse_result(r, i) for i, r in enumerate(results)]
    notice = data.get("notice")
    said: Notice | None = None
    if notice is not None:
        if not isinstance(notice, dict) or not all(
            isinstance(notice.get(k), str) for k in ("action", "time")
        ):
            raise BadRequest("notice: must be {action: str, time: str}")
        said = Notice(notice["action"][:40], notice["time"][:40])
    setup = data.get("setup")
    if setup is not None and (
        not isinstance(setup, dict) or setup.get("state") not in ("running", "done", "failed")
    ):
        raise BadRequest("setup: must be {state: running|done|failed, ...}")
    wait_s = min(float(wait), MAX_WAIT_S)
    return Poll(machine, parsed, running, wait_s, arrived, notice=said, setup=setup)


def parse_result(r: object, index: int = 0) -> AgentResult:
    """Check one result of an agent's request; ``BadRequest`` naming the bad field."""
    where = f"results[{index}]"
    if not isinstance(r, dict):
        raise BadRequest(f"{where}: must be an object {{run, task, exit_code, runtime_s, ...}}")
    for key in ("run", "task"):
        if not isinstance(r.get(key), int):
            raise BadRequest(f"{where}.{key}: must be an integer")
    runtime = r.get("runtime_s")
    if not isinstance(runtime, int | float):
        raise BadRequest(f"{where}.runtime_s: must be a number")
    code = r.get("exit_code")
    if code is not None and not isinstance(code, int):
        raise BadRequest(f"{where}.exit_code: must be an integer or null")
    error = r.get("error")
    if error is not None and not isinstance(error, str):
        raise BadRequest(f"{where}.error: must be a string or null")
    stdout, stderr = r.get("stdout", ""), r.get("stderr", "")
    if not isinstance(stdout, str) or not isinstance(stderr, str):
        raise BadRequest(f"{where}: stdout and stderr must be strings")
    return AgentResult(r["run"], r["task"], code, runtime, error, stdout, stderr, r.get("stored"))


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = SOMAXCONN
    """Connections waiting to be accepted (the kernel caps it at ``net.core.somaxconn``).
    The standard library's 5 dropped the connections of a big launch's agents, which
    retried for seconds: at 5,000 agents most were lost as never reported in."""

    def handle_error(self, request: Any, client_address: Any) -> None:
        """An agent that goes mid-request (released, killed) is normal; anything else is not."""
        import sys

        exc = sys.exc_info()[1]
        if isinstance(exc, ConnectionError | TimeoutError):
            return
        super().handle_error(request, client_address)


class Dispatcher:
    """Serves ``POST /v1/poll`` for the machines the daemon lets in; everything else is 4xx.

    ``on_tick``, if set before ``start``, is called with the monotonic time every
    ``TICK_S`` from the dispatcher's side while it runs: how the daemon learns when the
    dispatcher could not hear its agents (``run.hearing``)."""

    TICK_S = 0.25

    def __init__(
        self,
        token: str,
        inbox: queue.SimpleQueue[object],
        host: str = "127.0.0.1",
        port: int = 0,
        log: Any = None,
    ):
        self.token = token
        self.inbox = inbox
        self.log = log
        self.epoch = secrets.token_hex(8)
        self.allowed: set[str] = set()  # machines of the run that may ask for work
        self.gone: set[str] = set()  # released or lost: told to exit
        self.last_seen: dict[str, float] = {}
        self.refused = 0
        self.polls = 0  # polls taken to the daemon (a statistic: counted without a lock)
        self.files: Any = None  # task files (``run.staging.Staging``), if the run has any
        self.on_tick: Callable[[float], None] | None = None
        self._closed = threading.Event()
        handler = type("Handler", (_Handler,), {"dispatcher": self})
        self._server = _Server((host, port), handler)
        self._thread: threading.Thread | None = None

    @property
    def address(self) -> tuple[str, int]:
        host, port = self._server.server_address[:2]
        return str(host), int(port)

    @property
    def url(self) -> str:
        host, port = self.address
        return f"http://{host}:{port}"

    def start(self) -> None:
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True
        )
        self._thread.start()
        if self.on_tick is not None:
            threading.Thread(target=self._tick, args=(self.on_tick,), daemon=True).start()

    def _tick(self, on_tick: Callable[[float], None]) -> None:
        while not self._closed.wait(self.TICK_S):
            on_tick(time.monotonic())

    def close(self) -> None:
        self._closed.set()
        self._server.shutdown()
        self._server.server_close()

    def authorised(self, header: str | None) -> bool:
        return token_matches(bearer_token(header), self.token)


class _Handler(BaseHTTPRequestHandler):
    dispatcher: Dispatcher
    protocol_version = "HTTP/1.1"
    server_version = "autoscaler"
    disable_nagle_algorithm = True  # headers and body go in two writes: no 40 ms stall

    def log_message(self, format: str, *args: Any) -> None:
        pass  # requests are logged by the daemon where they matter, never per poll

    def _send(self, status: int, body: dict[str, Any]) -> None:
        data = _ENCODER.encode(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        try:
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True  # the agent went (released, or killed) meanwhile

    def do_GET(self) -> None:
        files = self._files()
        path = files.input_file(self.path) if files is not None else None
        if path is None:
            self._send(HTTPStatus.NOT_FOUND, {"error": "agents POST to " + POLL_PATH})
            return
        try:
            stream = path.open("rb")
        except OSError as exc:
            self._send(HTTPStatus.NOT_FOUND, {"error": f"input: {exc.strerror}"})
            return
        with stream:
            self.send_response(HTTPStatus.OK)
            self.send_header("Content-Length", str(os.fstat(stream.fileno()).st_size))
            self.end_headers()
            shutil.copyfileobj(stream, self.wfile, 1 << 20)

    def do_PUT(self) -> None:
        files = self._files()
        if files is not None:
            length = int(self.headers.get("Content-Length") or 0)
            seen = self.dispatcher.last_seen
            status, body = files.receive(
                self.path, self.rfile, length, lambda m: seen.__setitem__(m, time.monotonic())
            )
            self.close_connection = status != HTTPStatus.OK  # the body may be unread
            self._send(status, body)

    def _files(self) -> Any:
        """The task files' handler if this authorised request is for it; else answered."""
        d = self.dispatcher
        if d.files is None:
            self.close_connection = True
            self._send(HTTPStatus.NOT_FOUND, {"error": "this run has no task files"})
            return None
        if not d.authorised(self.headers.get("Authorization")):
            self.close_connection = True
            self._send(HTTPStatus.UNAUTHORIZED, {"error": "wrong or missing token"})
            return None
        return d.files

    def do_POST(self) -> None:
        d = self.dispatcher
        arrived = time.monotonic()
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY:
            self.close_connection = True
            self._send(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, {"error": "body too large"})
            return
        body = self.rfile.read(length)
        if self.path == FILES_PATH:
            files = self._files()
            if files is not None:
                self._send(*files.plan(body))
            return
        if self.path != POLL_PATH:
            self._send(HTTPStatus.NOT_FOUND, {"error": f"no such endpoint {self.path}"})
            return
        if not d.authorised(self.headers.get("Authorization")):
            d.refused += 1
            if d.log is not None:
                d.log.warning(
                    "agent refused: wrong or missing token",
                    peer=self.client_address[0],
                    machine=_claimed_machine(body),
                )
            self._send(HTTPStatus.UNAUTHORIZED, {"error": "wrong or missing token"})
            return
        try:
            poll = parse_poll(body, arrived)
        except BadRequest as exc:
            self._send(HTTPStatus.BAD_REQUEST, {"error": str(exc)})
            return
        if poll.machine not in d.allowed:
            if poll.machine in d.gone:
                self._send(HTTPStatus.GONE, {"error": f"machine {poll.machine!r} was released"})
            else:  # launched a moment ago: the daemon has not heard of it yet
                self._send(HTTPStatus.SERVICE_UNAVAILABLE, {"error": "machine not known yet"})
            return
        d.last_seen[poll.machine] = arrived
        d.polls += 1
        d.inbox.put(poll)
        answer = poll.reply.wait(arrived + poll.wait_s + PROCESS_TIMEOUT_S)
        if answer is None:
            self._send(HTTPStatus.SERVICE_UNAVAILABLE, {"error": "controller busy, try again"})
            return
        self._send(HTTPStatus.OK, {"epoch": d.epoch, **answer})


def _claimed_machine(body: bytes) -> str | None:
    try:
        data = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None
    machine = data.get("machine") if isinstance(data, dict) else None
    return machine[:100] if isinstance(machine, str) else None

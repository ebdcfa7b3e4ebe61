"""The dispatcher: the HTTP endpoint worker agents talk to (protocol: ``bootstrap/agent.py``).

One asyncio event loop, on one thread of its own, holds every agent's keep-alive
connection and reads their requests (``run.http1``). One loop because an agent's
connection is idle or held most of the time (a long poll): with a thread per connection
(the standard library's ``ThreadingHTTPServer``, before) thousands of threads took turns
at the GIL and ``http.server`` parsed every header through ``email``, 2.8 ms of the
daemon's CPU per task at 2,000 agents. On the loop a request costs what its bytes and its
JSON cost, and a held poll a future and a timer.

The handler decides nothing: it checks the run's token, parses the request into a
``Poll`` and puts it on the daemon's queue, then waits for the daemon's answer
(``Reply``), written on the daemon's thread and handed to the loop in batches. The daemon
answers once the results the poll carried are journaled, so an acknowledged result is
never lost; it may hold an idle agent's poll until there is work for it (a long poll).
Nothing queues without bound: a connection past ``max_connections``, a poll while
``max_backlog`` polls wait for the daemon to take them and a body past ``MAX_BODY`` are
answered at once (503, 503, 413), and the agent tries again after its backoff. Task
files are read and written on a few threads of their own, off the loop.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import os
import queue
import resource
import secrets
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from socket import SOMAXCONN
from typing import IO, Any

from autoscaler.run.auth import bearer_token, token_matches
from autoscaler.run.http1 import (
    STREAM_LIMIT,
    HttpError,
    Request,
    head_bytes,
    interim,
    read_body,
    read_request,
)

POLL_PATH = "/v1/poll"
FILES_PATH = "/v1/files"
MAX_BODY = 8 << 20
MAX_WAIT_S = 60.0
_ENCODER = json.JSONEncoder(separators=(",", ":"))  # json.dumps would build one per call
PROCESS_TIMEOUT_S = 5.0
"""How long a poll waits for the daemon to take it before it is answered 503: well
inside the agent's own patience (``wait_s`` + 10 s), so the agent hears the 503."""
MAX_CONNECTIONS = 20_000
"""Agents' connections held at once, at most; fewer if the process may not open that many
files (``RLIMIT_NOFILE``, less ``FD_RESERVE`` for the journal, logs and providers)."""
FD_RESERVE = 256
MAX_BACKLOG = 10_000
"""Polls on the daemon's queue not yet taken, past which a new poll is answered 503 at
once: a daemon that fell behind is not handed more work to fall further behind with."""
TICK_S = 0.25
FILE_THREADS = 8
CLOSE_S = 5.0
_BLOCK = 1 << 20
_JSON = b"application/json"


class Reply:
    """The answer to one poll, written on the daemon's thread and sent by the dispatcher's
    loop.

    ``send`` gives the full answer. ``hold`` says the results are stored but there is
    nothing to say yet: the loop keeps the request open until ``hold_until`` and then
    sends ``base``. Once the loop has given up (the daemon took the poll too late, or the
    dispatcher closed), ``send`` returns False: the agent did not get that answer, and the
    daemon sends its tasks again when the agent's next poll shows it does not run them.
    The lock makes a late ``send`` and the loop's giving up one or the other, never both.
    """

    __slots__ = (
        "_answer",
        "_lock",
        "_taken",
        "_timer",
        "_to",
        "base",
        "body",
        "closed",
        "hold_until",
    )

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.body: dict[str, Any] | None = None
        self.base: dict[str, Any] | None = None
        self.hold_until = 0.0
        self.closed = False
        self._taken = False  # the daemon has sent or held it
        self._to: Dispatcher | None = None  # set before the poll goes on the daemon's queue
        self._answer: asyncio.Future[dict[str, Any] | None] | None = None  # the loop's
        self._timer: asyncio.TimerHandle | None = None  # the loop's: give up, or end a hold

    def send(self, body: dict[str, Any]) -> bool:
        with self._lock:
            first, self._taken = not self._taken, True
            sent = not self.closed and self.body is None
            if sent:
                self.body = body
        if self._to is not None:
            self._to._wake(self, first, sent)
        return sent

    def hold(self, base: dict[str, Any], until: float) -> None:
        with self._lock:
            first, self._taken = not self._taken, True
            held = not self.closed and self.body is None
            if held:
                self.base = base
                self.hold_until = until
        if self._to is not None:
            self._to._wake(self, first, held)

    def _close(self) -> dict[str, Any] | None:
        """Give up: the answer sent, or the held base answer; None if the daemon never
        answered."""
        with self._lock:
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


class Dispatcher:
    """Serves ``POST /v1/poll`` for the machines the daemon lets in, and the task files'
    endpoints; everything else is 4xx. The socket is bound here, so a port in use fails
    at once; ``start`` serves it."""

    def __init__(
        self,
        token: str,
        inbox: queue.SimpleQueue[object],
        host: str = "127.0.0.1",
        port: int = 0,
        log: Any = None,
        *,
        max_connections: int | None = None,
        max_backlog: int = MAX_BACKLOG,
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
        self.busy = 0  # polls answered 503 at once: the daemon was max_backlog behind
        self.crowded = 0  # requests answered 503 on a connection past max_connections
        self.files: Any = None  # task files (``run.staging.Staging``), if the run has any
        self.on_tick: Callable[[float], None] | None = None
        """Called on the loop every ``TICK_S`` with ``time.monotonic()``: how late the
        loop runs shows in the gaps between calls."""
        self.max_connections = max_connections or _connection_limit()
        self.max_backlog = max_backlog
        self._sock = _listen(host, port)
        self._address: tuple[str, int] = self._sock.getsockname()[:2]
        self._loop = asyncio.new_event_loop()
        self._loop.set_exception_handler(self._loop_error)
        self._pool = concurrent.futures.ThreadPoolExecutor(FILE_THREADS, "dispatcher-files")
        self._thread: threading.Thread | None = None
        self._server: asyncio.Server | None = None
        self._ticker: asyncio.TimerHandle | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._put = 0  # polls put on the daemon's queue (the loop's count)
        self._taken = 0  # of them, sent or held by the daemon (counted under _lock)
        self._lock = threading.Lock()
        self._pending: list[Reply] = []  # sent or held since the loop last looked
        self._flush_due = False
        self._closing = threading.Event()

    @property
    def address(self) -> tuple[str, int]:
        return str(self._address[0]), int(self._address[1])

    @property
    def url(self) -> str:
        host, port = self.address
        return f"http://{host}:{port}"

    def authorised(self, header: str | None) -> bool:
        return token_matches(bearer_token(header), self.token)

    def start(self) -> None:
        """Serve on the loop's thread; returns once the socket is served."""
        ready: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._thread = threading.Thread(target=self._run, args=(ready,), name="dispatcher")
        self._thread.daemon = True
        self._thread.start()
        ready.result()

    def close(self) -> None:
        """Stop serving: every connection closed at once, the polls still held unanswered
        (a ``send`` to them returns False)."""
        if self._closing.is_set():
            return
        self._closing.set()
        loop, thread = self._loop, self._thread
        if thread is not None and thread.is_alive():
            with contextlib.suppress(concurrent.futures.TimeoutError):
                asyncio.run_coroutine_threadsafe(self._stop(), loop).result(CLOSE_S)
            loop.call_soon_threadsafe(loop.stop)
            thread.join(CLOSE_S)
        self._sock.close()
        if not loop.is_running():
            loop.close()
        self._pool.shutdown(wait=False, cancel_futures=True)

    # --- the loop's thread ------------------------------------------------------------------

    def _run(self, ready: concurrent.futures.Future[None]) -> None:
        loop = self._loop
        asyncio.set_event_loop(loop)
        try:
            self._server = loop.run_until_complete(
                asyncio.start_server(
                    self._serve, sock=self._sock, limit=STREAM_LIMIT, backlog=SOMAXCONN
                )
            )
        except BaseException as exc:  # the caller of start raises it
            ready.set_exception(exc)
            return
        self._tick()
        ready.set_result(None)
        loop.run_forever()

    async def _stop(self) -> None:
        if self._server is not None:
            self._server.close()
        if self._ticker is not None:
            self._ticker.cancel()
        for writer in self._writers:
            writer.transport.abort()
        tasks = asyncio.all_tasks() - {asyncio.current_task()}
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=CLOSE_S)

    def _tick(self) -> None:
        now = time.monotonic()
        self._ticker = self._loop.call_at(now + TICK_S, self._tick)
        if self.on_tick is not None:
            self.on_tick(now)

    def _loop_error(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        """An agent that goes mid-request (released, killed) is normal; anything else is not."""
        exc = context.get("exception")
        if isinstance(exc, ConnectionError | TimeoutError):
            return
        if self.log is None:
            loop.default_exception_handler(context)
            return
        self.log.error(
            "dispatcher error", error=repr(exc) if exc is not None else context.get("message")
        )

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """One connection: its requests one after the other, until either side closes it."""
        crowded = len(self._writers) >= self.max_connections
        self._writers.add(writer)
        try:
            keep = True
            while keep:
                try:
                    request = await read_request(reader)
                    if request is None:
                        break
                    interim(writer, request)
                    keep = await self._answer(request, reader, writer, crowded)
                except HttpError as exc:
                    data = _ENCODER.encode({"error": exc.message}).encode()
                    writer.write(head_bytes(exc.status, len(data), True, _JSON) + data)
                    keep = False
                if writer.transport.get_write_buffer_size() > _BLOCK:
                    await writer.drain()  # a client that reads slowly is not written past that
        except (ConnectionError, asyncio.CancelledError):
            pass  # the agent went (released, killed) meanwhile, or the dispatcher closes
        finally:
            self._writers.discard(writer)
            writer.close()

    def _send(
        self,
        writer: asyncio.StreamWriter,
        request: Request,
        status: int,
        body: dict[str, Any],
        keep: bool = True,
    ) -> bool:
        """Write a JSON answer; whether the connection stays open for the next request."""
        keep = keep and request.keep_alive
        data = _ENCODER.encode(body).encode()
        writer.write(head_bytes(status, len(data), not keep, _JSON) + data)
        return keep

    async def _answer(
        self,
        request: Request,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        crowded: bool,
    ) -> bool:
        """Answer one request; whether the connection stays open for the next."""
        method = request.method
        if method == "POST":
            if request.length > MAX_BODY:
                too_big = f"body of {request.length} bytes: more than {MAX_BODY}"
                return self._send(writer, request, 413, {"error": too_big}, keep=False)
            arrived = time.monotonic()
            body = await read_body(reader, request)
            if body is None:
                return False
            if crowded:
                return self._crowded(writer, request)
            if request.target == FILES_PATH:
                return await self._plan(request, writer, body)
            if request.target != POLL_PATH:
                no_such = {"error": f"no such endpoint {request.target[:100]}"}
                return self._send(writer, request, 404, no_such)
            return await self._poll(request, writer, body, arrived)
        if crowded:
            return self._crowded(writer, request)
        if method == "GET":
            return await self._input(request, writer)
        if method == "PUT":
            return await self._receive(request, reader, writer)
        unknown = {"error": f"method {method} is not served: agents POST to {POLL_PATH}"}
        return self._send(writer, request, 405, unknown, keep=False)

    def _crowded(self, writer: asyncio.StreamWriter, request: Request) -> bool:
        self.crowded += 1
        busy = {"error": f"more than {self.max_connections} connections: try again"}
        return self._send(writer, request, 503, busy, keep=False)

    # --- polls ------------------------------------------------------------------------------

    async def _poll(
        self, request: Request, writer: asyncio.StreamWriter, body: bytes, arrived: float
    ) -> bool:
        if not self.authorised(request.headers.get("authorization")):
            self.refused += 1
            if self.log is not None:
                peer = writer.get_extra_info("peername")
                self.log.warning(
                    "agent refused: wrong or missing token",
                    peer=peer[0] if peer else None,
                    machine=_claimed_machine(body),
                )
            return self._send(writer, request, 401, {"error": "wrong or missing token"})
        try:
            poll = parse_poll(body, arrived)
        except BadRequest as exc:
            return self._send(writer, request, 400, {"error": str(exc)})
        if poll.machine in self.allowed:
            self.last_seen[poll.machine] = arrived
            if self._put - self._taken >= self.max_backlog:
                self.busy += 1
                return self._send(writer, request, 503, {"error": "controller busy, try again"})
        elif poll.machine not in self.gone:  # launched a moment ago: not known to us yet
            return self._send(writer, request, 503, {"error": "machine not known yet"})
        elif not poll.results:
            gone = {"error": f"machine {poll.machine!r} was released"}
            return self._send(writer, request, 410, gone)
        # (a machine given up on whose poll carries results: they still count,
        # ``Agents.poll_events``, and the daemon's answer releases its agent)
        self.polls += 1
        answer = await self._handed(poll)
        if answer is None:
            return self._send(writer, request, 503, {"error": "controller busy, try again"})
        return self._send(writer, request, 200, {"epoch": self.epoch, **answer})

    async def _handed(self, poll: Poll) -> dict[str, Any] | None:
        """The daemon's answer to ``poll``; None if it did not take it in time."""
        reply = poll.reply
        loop = self._loop
        answer: asyncio.Future[dict[str, Any] | None] = loop.create_future()
        reply._answer = answer
        give_up_at = poll.arrived + poll.wait_s + PROCESS_TIMEOUT_S
        reply._timer = loop.call_at(give_up_at, self._expire, reply)
        reply._to = self
        self._put += 1
        self.inbox.put(poll)
        try:
            return await answer
        finally:
            reply._timer.cancel()
            reply._close()

    def _wake(self, reply: Reply, first: bool, settle: bool) -> None:
        """(The daemon's thread.) ``reply`` was sent or held: the loop settles it, with
        every other reply of the daemon's step, on one wake-up."""
        with self._lock:
            if first:
                self._taken += 1
            if not settle:
                return
            self._pending.append(reply)
            if self._flush_due:
                return
            self._flush_due = True
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits
            self._loop.call_soon_threadsafe(self._flush)

    def _flush(self) -> None:
        with self._lock:
            replies, self._pending = self._pending, []
            self._flush_due = False
        for reply in replies:
            answer = reply._answer
            if answer is None or answer.done() or reply._timer is None:
                continue
            if reply.body is not None:
                answer.set_result(reply._close())
            else:  # held: the timer moves to the hold's end
                reply._timer.cancel()
                reply._timer = self._loop.call_at(reply.hold_until, self._expire, reply)

    def _expire(self, reply: Reply) -> None:
        """A poll's time is up: the daemon's answer if it came meanwhile, the held base
        answer at its time, else None."""
        answer = reply._answer
        if answer is None or answer.done():
            return
        if reply.body is None and reply.base is not None and reply.hold_until > self._loop.time():
            # held just now; the flush that moves the timer has not run yet
            reply._timer = self._loop.call_at(reply.hold_until, self._expire, reply)
            return
        answer.set_result(reply._close())

    # --- task files (their I/O on the file threads) -----------------------------------------

    def _files_refused(self, request: Request) -> tuple[int, dict[str, Any]] | None:
        if self.files is None:
            return 404, {"error": "this run has no task files"}
        if not self.authorised(request.headers.get("authorization")):
            return 401, {"error": "wrong or missing token"}
        return None

    async def _plan(self, request: Request, writer: asyncio.StreamWriter, body: bytes) -> bool:
        refused = self._files_refused(request)
        if refused is not None:
            return self._send(writer, request, *refused, keep=False)
        status, answer = await self._loop.run_in_executor(self._pool, self.files.plan, body)
        return self._send(writer, request, status, answer)

    async def _input(self, request: Request, writer: asyncio.StreamWriter) -> bool:
        """``GET`` an input file, streamed block by block."""
        refused = self._files_refused(request)
        if refused is not None:
            return self._send(writer, request, *refused, keep=False)
        keep = request.length == 0  # a body sent with a GET is not read
        path = self.files.input_file(request.target)
        if path is None:
            missing = {"error": "agents POST to " + POLL_PATH}
            return self._send(writer, request, 404, missing, keep)
        loop = self._loop
        try:
            stream, size = await loop.run_in_executor(self._pool, _open_input, path)
        except OSError as exc:
            return self._send(writer, request, 404, {"error": f"input: {exc.strerror}"}, keep)
        keep = keep and request.keep_alive
        sent = 0
        try:
            writer.write(head_bytes(200, size, not keep, None))
            while sent < size:
                block = await loop.run_in_executor(
                    self._pool, stream.read, min(_BLOCK, size - sent)
                )
                if not block:
                    break  # the file shrank: the answer is cut short, the connection closed
                writer.write(block)
                sent += len(block)
                await writer.drain()
        finally:
            stream.close()
        return keep and sent == size

    async def _receive(
        self, request: Request, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> bool:
        """``PUT`` an output file: ``Staging.receive`` on a file thread, reading the body
        from the loop a block at a time (a file is never held whole in memory)."""
        refused = self._files_refused(request)
        if refused is not None:
            return self._send(writer, request, *refused, keep=False)
        seen = self.last_seen
        status, answer = await self._loop.run_in_executor(
            self._pool,
            self.files.receive,
            request.target,
            _Body(reader, self._loop, self._closing),
            request.length,
            lambda machine: seen.__setitem__(machine, time.monotonic()),
        )
        return self._send(writer, request, status, answer, keep=status == 200)  # else unread


class _Body:
    """A request's body, read on the loop, as the blocking stream a file thread reads."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        loop: asyncio.AbstractEventLoop,
        closing: threading.Event,
    ) -> None:
        self._reader = reader
        self._loop = loop
        self._closing = closing

    def read(self, size: int) -> bytes:
        """Up to ``size`` bytes (fewer only at the end of the connection); b"" once the
        dispatcher closes."""
        try:
            future = asyncio.run_coroutine_threadsafe(self._read(size), self._loop)
        except RuntimeError:  # the loop is closed
            return b""
        while True:
            try:
                return future.result(1.0)
            except concurrent.futures.TimeoutError:
                if self._closing.is_set():
                    future.cancel()
                    return b""
            except concurrent.futures.CancelledError:
                return b""

    async def _read(self, size: int) -> bytes:
        try:
            return await self._reader.readexactly(size)
        except asyncio.IncompleteReadError as exc:
            return exc.partial
        except ConnectionError:
            return b""


def _open_input(path: Path) -> tuple[IO[bytes], int]:
    stream = path.open("rb")
    try:
        return stream, os.fstat(stream.fileno()).st_size
    except OSError:
        stream.close()
        raise


def _listen(host: str, port: int) -> socket.socket:
    """A socket listening on ``host:port``, its backlog the kernel's largest
    (``net.core.somaxconn``): a small one dropped the connections of a big launch's agents,
    which retried for seconds, and at 5,000 agents most were lost as never reported in."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(SOMAXCONN)
        sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    return sock


def _connection_limit() -> int:
    """How many agents' connections this process may hold. A soft file limit under what
    ``MAX_CONNECTIONS`` needs is raised as far as the hard limit allows (no privilege
    needed): the common soft limit of 1,024 would otherwise serve 768 agents."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = MAX_CONNECTIONS + FD_RESERVE
    if soft != resource.RLIM_INFINITY and soft < want:
        raised = want if hard == resource.RLIM_INFINITY else min(want, hard)
        if raised > soft:
            try:
                resource.setrlimit(resource.RLIMIT_NOFILE, (raised, hard))
                soft = raised
            except (ValueError, OSError):
                pass  # kept as it was: the limit below says how many are served
    if soft == resource.RLIM_INFINITY:
        return MAX_CONNECTIONS
    return max(1, min(MAX_CONNECTIONS, soft - FD_RESERVE))


def _claimed_machine(body: bytes) -> str | None:
    try:
        data = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None
    machine = data.get("machine") if isinstance(data, dict) else None
    return machine[:100] if isinstance(machine, str) else None

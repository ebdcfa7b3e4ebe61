"""The dispatcher: the HTTP endpoint worker agents talk to (protocol: ``bootstrap/agent.py``).

One asyncio event loop, on one thread of its own, holds every agent's keep-alive
connection and reads their requests (``run.http1``). One loop because an agent's
connection is idle or held most of the time (a long poll): with a thread per connection
(the standard library's ``ThreadingHTTPServer``, before) thousands of threads took turns
at the GIL and ``http.server`` parsed every header through ``email``, 2.8 ms of the
daemon's CPU per task at 2,000 agents. On the loop a request costs what its bytes and its
JSON cost, and a held poll a timer: each connection is a protocol whose callbacks frame
and answer its requests (``_Connection``), not asyncio streams with a coroutine, a future
per read and a future per poll: at 5,000 agents on 2 s tasks the dispatcher's thread
took about 135 µs a task, kernel included, against about 160 with streams, and the p99
round trip fell from 40-200 ms to 15-33 ms (``benchmarks.daemon_scale``).

The handler decides nothing: it checks the agent's token (its machine's, derived from the
run's secret: ``bootstrap.credentials``; a token of another machine is refused), parses
the request into a ``Poll`` and puts it on the daemon's queue, then waits for the daemon's answer
(``Reply``), written on the daemon's thread and handed to the loop in batches. The daemon
answers once the results the poll carried are journaled, so an acknowledged result is
never lost; it may hold an idle agent's poll until there is work for it (a long poll).
Nothing queues without bound: a connection past ``max_connections``, a poll while
``max_backlog`` polls wait for the daemon to take them and a body past ``MAX_BODY`` are
answered at once (503, 503, 413), and the agent tries again after its backoff. Task
files are read and written on a few threads of their own, off the loop; each is its
machine's only (its attempt's machine, checked against the token).

An agent started from EC2 user data holds its launch's token, not its machine's: it
registers its instance id once (``POST /v1/register``, ``register``) and is answered its
machine token, if that instance is one of the launch's and no other agent registered it.
With ``tls`` (a ``ssl.SSLContext``) the dispatcher serves HTTPS.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import hashlib
import json
import os
import queue
import resource
import secrets
import socket
import ssl
import threading
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from socket import SOMAXCONN
from typing import IO, Any, cast

from autoscaler.bootstrap.credentials import launch_of, machine_token
from autoscaler.run import wire
from autoscaler.run.auth import bearer_token, token_matches
from autoscaler.run.gathering import Gathering
from autoscaler.run.http1 import CONTINUE, STREAM_LIMIT, HttpError, Request, head_bytes, take_head
from autoscaler.run.polls import BadRequest, Reply, parse_poll

POLL_PATH = "/v1/poll"
FILES_PATH = "/v1/files"
REGISTER_PATH = "/v1/register"
REGISTRY_FILE = "registered"
"""In the run directory: each machine registered with its launch's token, a line each."""
MAX_BODY = 8 << 20
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
_READ = 256 << 10
"""Bytes read from a socket at once, into one buffer the loop's reads share: a buffer
per read (``Protocol.data_received``'s bytes) was mapped, shrunk and unmapped by the
allocator each time, three system calls and a page fault per poll."""
_JSON = b"application/json"
_BUSY = {"error": "controller busy, try again"}
_WRONG_TOKEN = {"error": "wrong or missing token for this machine"}


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
        tls: ssl.SSLContext | None = None,
        registry: Path | None = None,
        gather_from: int = 0,
    ):
        self.token = token  # the run's secret: each machine's token is derived from it
        self.inbox = inbox
        self.log = log
        self.epoch = secrets.token_hex(8)
        self.allowed: set[str] = set()  # machines of the run that may ask for work
        self.launches: dict[str, str] = {}  # machine -> the launch that started it
        self.tls = tls
        self._registry = registry  # machine and nonce digest of each registration, a line each
        self.registered = _read_registry(registry)
        self._tokens: dict[str, str] = {}  # machine of the run -> its token, once asked
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
        self._connections: set[_Connection] = set()
        self._loop = asyncio.SelectorEventLoop(
            Gathering(lambda: 0 < gather_from < len(self._connections))
        )
        self._loop.set_exception_handler(self._loop_error)
        self._pool = concurrent.futures.ThreadPoolExecutor(FILE_THREADS, "dispatcher-files")
        self._thread: threading.Thread | None = None
        self._server: asyncio.Server | None = None
        self._ticker: asyncio.TimerHandle | None = None
        self._received = memoryview(bytearray(_READ))  # every connection's reads, in turn
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
        return f"{'https' if self.tls is not None else 'http'}://{host}:{port}"

    def authorised(self, header: str | None, machine: str | None) -> bool:
        """Whether the request's token is ``machine``'s (or the run's secret itself, which
        only the controller holds: agents of a run begun before machine tokens, and the
        benchmarks' simulated agents). A machine of the run has its token derived once,
        whatever it presented: an HMAC per request cost a poll more than its lookup."""
        given = bearer_token(header)
        if given is None:
            return False
        if machine is not None and len(machine) <= MAX_MACHINE_ID:
            expected = self._tokens.get(machine)
            if expected is None:
                expected = machine_token(self.token, machine)
                if machine in self.allowed:
                    self._tokens[machine] = expected
            if token_matches(given, expected):
                return True
        return token_matches(given, self.token)

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
                loop.create_server(
                    lambda: _Connection(self), sock=self._sock, backlog=SOMAXCONN, ssl=self.tls
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
        for connection in list(self._connections):
            connection.abort()
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

    def _crowded(self, connection: _Connection, request: Request) -> None:
        self.crowded += 1
        busy = {"error": f"more than {self.max_connections} connections: try again"}
        connection.send(request, 503, busy, keep=False)

    # --- polls ------------------------------------------------------------------------------

    def _poll(self, connection: _Connection, request: Request, body: bytes, arrived: float) -> None:
        """Answer a poll at once, or hand it to the daemon: ``_settle`` writes its answer
        when the daemon's reply comes (``_flush``) or its time is up (``_expire``)."""
        header = request.headers.get("authorization")
        if bearer_token(header) is None:  # no token: refused before its body is read
            self._refuse(connection, request, None, "poll")
            return
        try:
            poll = parse_poll(body, arrived)  # once: the machine it names is the token's
        except BadRequest as exc:
            claimed = _claimed_machine(body)
            if not self.authorised(header, claimed):
                self._refuse(connection, request, claimed, "poll")
            else:
                connection.send(request, 400, {"error": str(exc)})
            return
        if not self.authorised(header, poll.machine):
            self._refuse(connection, request, poll.machine, "poll")
            return
        if poll.machine in self.allowed:
            self.last_seen[poll.machine] = arrived
            if self._put - self._taken >= self.max_backlog:
                self.busy += 1
                connection.send(request, 503, _BUSY)
                return
        elif poll.machine not in self.gone:  # launched a moment ago: not known to us yet
            connection.send(request, 503, {"error": "machine not known yet"})
            return
        elif not poll.results:
            connection.send(request, 410, {"error": f"machine {poll.machine!r} was released"})
            return
        # (a machine given up on whose poll carries results: they still count,
        # ``Agents.poll_events``, and the daemon's answer releases its agent)
        self.polls += 1
        reply = poll.reply
        reply._conn = connection
        give_up_at = poll.arrived + poll.wait_s + PROCESS_TIMEOUT_S
        reply._timer = self._loop.call_at(give_up_at, self._expire, reply)
        reply._to = self
        connection.wait_for(reply, request)
        self._put += 1
        self.inbox.put(poll)

    def _refuse(
        self, connection: _Connection, request: Request, machine: str | None, what: str
    ) -> None:
        """A request whose token is not its machine's: 401 (``_refused``)."""
        connection.send(request, *self._refused(connection, machine, what))

    def _refused(
        self, connection: _Connection, machine: str | None, what: str
    ) -> tuple[int, dict[str, Any]]:
        """A request whose token is not its machine's, counted and logged: its answer."""
        self.refused += 1
        if self.log is not None:
            peer = connection.transport.get_extra_info("peername")
            self.log.warning(
                "agent refused: wrong or missing token for the machine",
                peer=peer[0] if peer else None,
                machine=_logged(machine),
                request=what,
            )
        return 401, _WRONG_TOKEN

    def _register(self, connection: _Connection, request: Request, body: bytes) -> None:
        """An agent with its launch's token asks for its machine's: answered once per
        machine (a repeat with the same nonce, whose answer was lost, is answered again)."""
        given = bearer_token(request.headers.get("authorization"))
        launch = launch_of(self.token, given) if given else None
        try:
            ask = wire.loads(body)
            machine, nonce = ask["machine"], ask["nonce"]
            if not isinstance(machine, str) or not machine or not isinstance(nonce, str):
                raise TypeError("machine and nonce must be strings")
        except (ValueError, KeyError, TypeError) as exc:
            connection.send(request, 400, {"error": f"register: bad request ({exc})"})
            return
        if launch is None:
            self._refuse(connection, request, machine, "register")
            return
        if machine in self.gone:
            connection.send(request, 410, {"error": f"machine {machine!r} was released"})
            return
        if machine not in self.launches:
            connection.send(request, 503, {"error": "machine not known yet"})
            return
        digest = hashlib.sha256(nonce.encode()).hexdigest()
        before = self.registered.get(machine)
        if self.launches[machine] != launch or before not in (None, digest):
            why = "another launch's" if self.launches[machine] != launch else "registered"
            self.refused += 1
            if self.log is not None:
                self.log.warning("registration refused", machine=machine, why=why)
            connection.send(request, 403, {"error": f"machine {machine!r} cannot register"})
            return
        if before is None:
            self.registered[machine] = digest
            if self._registry is not None:
                with self._registry.open("a", encoding="utf-8") as out:
                    out.write(f"{machine} {digest}\n")
            if self.log is not None:
                self.log.info("machine registered", machine=machine, launch=launch)
        connection.send(request, 200, {"token": machine_token(self.token, machine)})

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
            if reply._conn is None or reply._timer is None:
                continue
            if reply.body is not None:
                self._settle(reply)
            else:  # held: the timer moves to the hold's end
                reply._timer.cancel()
                reply._timer = self._loop.call_at(reply.hold_until, self._expire, reply)

    def _expire(self, reply: Reply) -> None:
        """A poll's time is up: the daemon's answer if it came meanwhile, the held base
        answer at its time, else 503."""
        if reply._conn is None:
            return
        if reply.body is None and reply.base is not None and reply.hold_until > self._loop.time():
            # held just now; the flush that moves the timer has not run yet
            reply._timer = self._loop.call_at(reply.hold_until, self._expire, reply)
            return
        self._settle(reply)

    def _settle(self, reply: Reply) -> None:
        connection, reply._conn = reply._conn, None
        if reply._timer is not None:
            reply._timer.cancel()
        answer = reply._close()
        if connection is not None:
            connection.answered(None if answer is None else {"epoch": self.epoch, **answer})

    # --- task files (coroutines; their I/O on the file threads) -----------------------------

    def _files_refused(
        self, request: Request, connection: _Connection, machine: str | None
    ) -> tuple[int, dict[str, Any]] | None:
        """Why a task-file request is not served: no files, or a token that is not the
        machine's whose attempt it names."""
        if self.files is None:
            return 404, {"error": "this run has no task files"}
        if not self.authorised(request.headers.get("authorization"), machine):
            return self._refused(connection, machine, request.target[:100])
        return None

    async def _plan(self, request: Request, connection: _Connection, body: bytes) -> bool:
        header = request.headers.get("authorization")
        claimed = _claimed_machine(body) if bearer_token(header) is not None else None
        refused = self._files_refused(request, connection, claimed)
        if refused is not None:
            return connection.write_answer(request, *refused, keep=False)
        status, answer = await self._loop.run_in_executor(self._pool, self.files.plan, body)
        return connection.write_answer(request, status, answer)

    async def _input(self, request: Request, connection: _Connection) -> bool:
        """``GET`` an input file, streamed block by block."""
        owner = self.files.owner(request.target) if self.files is not None else None
        refused = self._files_refused(request, connection, owner)
        if refused is not None:
            return connection.write_answer(request, *refused, keep=False)
        keep = request.length == 0  # a body sent with a GET is not read
        path = self.files.input_file(request.target)
        if path is None:
            missing = {"error": "agents POST to " + POLL_PATH}
            return connection.write_answer(request, 404, missing, keep)
        loop = self._loop
        try:
            stream, size = await loop.run_in_executor(self._pool, _open_input, path)
        except OSError as exc:
            failed = {"error": f"input: {exc.strerror}"}
            return connection.write_answer(request, 404, failed, keep)
        keep = keep and request.keep_alive
        sent = 0
        try:
            connection.write(head_bytes(200, size, not keep, None))
            while sent < size:
                block = await loop.run_in_executor(
                    self._pool, stream.read, min(_BLOCK, size - sent)
                )
                if not block:
                    break  # the file shrank: the answer is cut short, the connection closed
                connection.write(block)
                sent += len(block)
                await connection.drain()
        finally:
            stream.close()
        return keep and sent == size

    async def _receive(self, request: Request, connection: _Connection) -> bool:
        """``PUT`` an output file: ``Staging.receive`` on a file thread, reading the body
        from the loop a block at a time (a file is never held whole in memory)."""
        owner = self.files.owner(request.target) if self.files is not None else None
        refused = self._files_refused(request, connection, owner)
        if refused is not None:
            return connection.write_answer(request, *refused, keep=False)
        seen = self.last_seen
        status, answer = await self._loop.run_in_executor(
            self._pool,
            self.files.receive,
            request.target,
            _Body(connection, self._loop, self._closing),
            request.length,
            lambda machine: seen.__setitem__(machine, time.monotonic()),
        )
        return connection.write_answer(request, status, answer, keep=status == 200)  # else unread


class _Connection(asyncio.BufferedProtocol):
    """One agent's connection on the loop: its requests framed from the bytes as they
    arrive and answered one after the other, without a coroutine per request. A poll is
    handed to the daemon and its answer written when the daemon's reply comes; the
    connection reads nothing more meanwhile (at most one poll outstanding, answers in
    order). The rare task-file requests run as a coroutine that reads its body from here
    (``read``) and waits for the client to read what it wrote (``drain``).

    Nothing buffers without bound: the socket is not read while a poll is outstanding or
    the client is a block behind reading answers (bytes that arrive meanwhile stop the
    reading, so at most one read's worth waits), nor past ``STREAM_LIMIT`` bytes of an
    uploaded body that the file thread has not taken."""

    __slots__ = (
        "arrived",
        "blocked",
        "buf",
        "crowded",
        "d",
        "ended",
        "eof",
        "held",
        "linger",
        "lost",
        "paused",
        "reply",
        "request",
        "searched",
        "task",
        "transport",
        "waiter",
        "wanted",
    )

    def __init__(self, dispatcher: Dispatcher) -> None:
        self.d = dispatcher
        self.transport: asyncio.Transport
        self.buf = bytearray()  # received, not yet served
        self.searched = 0  # bytes of buf searched for the end of a head
        self.request: Request | None = None  # a POST whose body is arriving
        self.arrived = 0.0  # when its head came
        self.reply: Reply | None = None  # the poll the daemon has not answered yet
        self.held: Request | None = None  # its request
        self.task: asyncio.Task[None] | None = None  # a task-file request being served
        self.waiter: asyncio.Future[None] | None = None  # the task's read or drain
        self.wanted = 0  # bytes the task's read waits for
        self.crowded = False  # past max_connections: every request 503
        self.paused = False  # the socket is not read
        self.blocked = False  # the client is a block behind reading answers
        self.eof = False  # the client sent its last byte
        self.lost = False
        self.ended = False  # nothing more is served: closing
        self.linger: asyncio.TimerHandle | None = None

    # --- asyncio's calls --------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        self.transport.set_write_buffer_limits(_BLOCK)
        connections = self.d._connections
        self.crowded = len(connections) >= self.d.max_connections
        connections.add(self)

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.d._received

    def buffer_updated(self, nbytes: int) -> None:
        if self.ended:
            return  # refused: what follows is not read
        self.buf += self.d._received[:nbytes]
        if self.task is not None:
            self._wake()
            self._flow()
        elif self.reply is None and not self.blocked:
            self._serve()
        elif not self.paused:
            self.paused = True
            self.transport.pause_reading()

    def eof_received(self) -> bool:
        self.eof = True
        self._wake()
        if not self.ended and self.reply is None and self.task is None and not self.blocked:
            self._serve()
        return not self.ended  # open, to answer the requests already in

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = self.ended = True
        self._wake()
        if self.linger is not None:
            self.linger.cancel()
        if self.reply is None:
            self.d._connections.discard(self)
        # else a late answer: the connection is let go once it is settled

    def pause_writing(self) -> None:
        self.blocked = True

    def resume_writing(self) -> None:
        self.blocked = False
        self._wake()
        if self.reply is None and self.task is None:
            self._next()

    # --- the dispatcher's calls -------------------------------------------------------------

    def write(self, data: bytes) -> None:
        if not self.lost:
            self.transport.write(data)

    def write_answer(
        self, request: Request, status: int, body: dict[str, Any], keep: bool = True
    ) -> bool:
        """Write a JSON answer; whether the connection stays open for the next request."""
        keep = keep and request.keep_alive
        data = wire.dumps(body)
        self.write(head_bytes(status, len(data), not keep, _JSON) + data)
        return keep

    def send(self, request: Request, status: int, body: dict[str, Any], keep: bool = True) -> None:
        """Answer a request at once; the next is served after it (unless it closes)."""
        if not self.write_answer(request, status, body, keep):
            self._end()

    def wait_for(self, reply: Reply, request: Request) -> None:
        """The poll ``request`` is the daemon's: nothing more is served until ``answered``."""
        self.reply, self.held = reply, request

    def answered(self, answer: dict[str, Any] | None) -> None:
        """The daemon's answer to the poll outstanding (None: it did not take it in time)."""
        request, self.reply, self.held = self.held, None, None
        if self.lost or request is None:
            self.d._connections.discard(self)
            return
        if answer is None:
            self.send(request, 503, _BUSY)
        else:
            self.send(request, 200, answer)
        self._next()

    def abort(self) -> None:
        """(The dispatcher closes.) Cut the connection at once; the poll outstanding, if
        any, is given up unanswered (a late ``send`` returns False)."""
        self.ended = True
        reply, self.reply = self.reply, None
        if reply is not None:
            reply._conn = None
            if reply._timer is not None:
                reply._timer.cancel()
            reply._close()
        self.transport.abort()

    async def read(self, size: int) -> bytes:
        """The next ``size`` bytes of the body being read; fewer only once the client
        closed the connection."""
        while len(self.buf) < size and not self.eof and not self.lost:
            self.wanted = size
            self._flow()
            await self._wait()
        self.wanted = 0
        chunk = bytes(self.buf[:size])
        del self.buf[:size]
        self._flow()
        return chunk

    async def drain(self) -> None:
        """Once the client has read what was written down to the low-water mark."""
        while self.blocked and not self.lost:
            await self._wait()

    # --- serving ----------------------------------------------------------------------------

    def _serve(self) -> None:
        """Serve the requests the buffer holds, one after the other, until one is
        outstanding or the rest has not arrived yet."""
        while self.reply is None and self.task is None and not self.blocked and not self.ended:
            try:
                served = self._step()
            except HttpError as exc:
                data = wire.dumps({"error": exc.message})
                self.write(head_bytes(exc.status, len(data), True, _JSON) + data)
                self._end()
                return
            if not served:
                if self.eof:  # the client closed, in the middle of a request or between two
                    self._end()
                return

    def _step(self) -> bool:
        """Serve the next request if the buffer holds it: whether it did."""
        request = self.request
        if request is None:
            request = take_head(self.buf, self.searched)
            if request is None:
                self.searched = len(self.buf)
                return False
            self.searched = 0
            self._begin(request)
        elif len(self.buf) >= request.length:
            self.request = None
            body = bytes(self.buf[: request.length])
            del self.buf[: request.length]
            self._posted(request, body)
        else:
            return False
        return True

    def _begin(self, request: Request) -> None:
        """A request whose head is in: a POST waits for its body; the rest are served."""
        if request.expects_continue and request.length > 0:
            self.write(CONTINUE)
        method = request.method
        if method == "POST":
            if request.length > MAX_BODY:
                too_big = f"body of {request.length} bytes: more than {MAX_BODY}"
                self.send(request, 413, {"error": too_big}, keep=False)
                return
            self.request = request
            self.arrived = time.monotonic()
        elif self.crowded:
            self.d._crowded(self, request)
        elif method == "GET":
            self._start(self.d._input(request, self))
        elif method == "PUT":
            self._start(self.d._receive(request, self))
        else:
            unknown = {"error": f"method {method} is not served: agents POST to {POLL_PATH}"}
            self.send(request, 405, unknown, keep=False)

    def _posted(self, request: Request, body: bytes) -> None:
        if self.crowded:
            self.d._crowded(self, request)
        elif request.target == POLL_PATH:
            self.d._poll(self, request, body, self.arrived)
        elif request.target == FILES_PATH:
            self._start(self.d._plan(request, self, body))
        elif request.target == REGISTER_PATH:
            self.d._register(self, request, body)
        else:
            self.send(request, 404, {"error": f"no such endpoint {request.target[:100]}"})

    def _next(self) -> None:
        """Serve on after an answer: the requests already in, then the socket's."""
        if self.paused and not self.ended:
            self.paused = False
            self.transport.resume_reading()
        self._serve()

    def _end(self) -> None:
        """Serve no more; close once the answers are written. A client still sending (a
        request refused before its body was read) is read and ignored until it closes:
        a socket closed with bytes unread resets the connection, and the reset can
        overtake the answer."""
        if self.ended:
            return
        self.ended = True
        if self.eof or not self.transport.can_write_eof():  # TLS has no half-close
            self.transport.close()
            return
        self.transport.write_eof()
        if self.paused:
            self.paused = False
            self.transport.resume_reading()
        self.linger = self.d._loop.call_later(CLOSE_S, self._linger)

    def _linger(self) -> None:
        """The client has not closed: cut it once it has read the answers."""
        if self.transport.get_write_buffer_size() > 0:
            self.linger = self.d._loop.call_later(CLOSE_S, self._linger)
        else:
            self.transport.abort()

    # --- task files -------------------------------------------------------------------------

    def _start(self, exchange: Coroutine[Any, Any, bool]) -> None:
        self.task = self.d._loop.create_task(self._exchange(exchange))

    async def _exchange(self, exchange: Coroutine[Any, Any, bool]) -> None:
        keep = False
        try:
            keep = await exchange
        except ConnectionError:
            pass  # the agent went (released, killed) meanwhile
        finally:
            self.task = None
            if keep:
                self._next()
            else:
                self._end()

    def _flow(self) -> None:
        """(A task-file request.) Read the socket while the buffer holds less than a block
        or less than the body's reader waits for."""
        stop = len(self.buf) >= max(STREAM_LIMIT, self.wanted)
        if stop != self.paused and not self.ended:
            self.paused = stop
            if stop:
                self.transport.pause_reading()
            else:
                self.transport.resume_reading()

    async def _wait(self) -> None:
        self.waiter = self.d._loop.create_future()
        try:
            await self.waiter
        finally:
            self.waiter = None

    def _wake(self) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(None)


class _Body:
    """A request's body, read on the loop, as the blocking stream a file thread reads."""

    def __init__(
        self, connection: _Connection, loop: asyncio.AbstractEventLoop, closing: threading.Event
    ) -> None:
        self._connection = connection
        self._loop = loop
        self._closing = closing

    def read(self, size: int) -> bytes:
        """Up to ``size`` bytes (fewer only at the end of the connection); b"" once the
        dispatcher closes."""
        try:
            future = asyncio.run_coroutine_threadsafe(self._connection.read(size), self._loop)
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


def _read_registry(path: Path | None) -> dict[str, str]:
    """The registrations a daemon of this run made before (machine -> nonce digest)."""
    if path is None or not path.is_file():
        return {}
    pairs = (line.split(" ", 1) for line in path.read_text(encoding="utf-8").splitlines())
    return {p[0]: p[1] for p in pairs if len(p) == 2}


MAX_MACHINE_ID = 1024
"""The longest machine id a token is derived for (a run's ids are far shorter: an EC2
instance id, a scheduler's job name): a longer claim is checked against the run's secret
alone, never hashed at a length a client chose."""


def _claimed_machine(body: bytes) -> str | None:
    """The machine a request's body names, whole: the token is checked against it (a
    token derived from a cut id would speak for every machine whose id begins so)."""
    try:
        data = wire.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None
    machine = data.get("machine") if isinstance(data, dict) else None
    return machine if isinstance(machine, str) else None


def _logged(machine: str | None) -> str | None:
    """A claimed machine id as a log line keeps it (an agent's claim can be long)."""
    return None if machine is None else machine[:100]

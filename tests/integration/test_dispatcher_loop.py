"""The dispatcher's one event loop on real loopback sockets (issue 36 §1): keep-alive
connections, requests it cannot serve refused with a 4xx naming the problem, held polls
answered at their time, polls the daemon never takes answered 503, backpressure when
the daemon falls behind or connections pass the limit, a close that ends every
connection at once, and a thousand agents' connections held together. The test plays
the daemon: it takes ``Poll``s from the dispatcher's queue and answers them, as
``run/daemon.py`` does from its main thread."""

from __future__ import annotations

import asyncio
import http.client
import json
import queue
import resource
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog
import structlog.testing

from autoscaler.config.schema import RunConfig
from autoscaler.core.model import TaskSpec
from autoscaler.core.task_files import FileSpec, InputFile
from autoscaler.run.dispatch import MAX_BODY, POLL_PATH, PROCESS_TIMEOUT_S, Dispatcher
from autoscaler.run.http1 import HEAD_MAX
from autoscaler.run.polls import Poll
from autoscaler.run.staging import Staging

pytestmark = pytest.mark.integration

TOKEN = "loop-token"
ANSWER = {"ack": True, "tasks": [], "cancel": [], "release": False}


def poll_request(
    machine: str,
    wait_s: float = 0.0,
    close: bool = False,
    results: list[Any] | None = None,
    **more: Any,
) -> bytes:
    body = json.dumps(
        {"machine": machine, "results": results or [], "running": [], "wait_s": wait_s, **more}
    )
    shut = "Connection: close\r\n" if close else ""
    return (
        f"POST {POLL_PATH} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n"
        f"Content-Type: application/json\r\n{shut}Content-Length: {len(body)}\r\n\r\n{body}"
    ).encode()


def read_answer(stream: Any) -> tuple[int, dict[str, str], bytes]:
    """One answer from a socket's file: status, headers (lower case), body."""
    line = stream.readline()
    assert line.startswith(b"HTTP/1.1 "), line
    headers = {}
    while (header := stream.readline()) not in (b"\r\n", b""):
        name, _, value = header.decode().partition(":")
        headers[name.strip().lower()] = value.strip()
    body = stream.read(int(headers["content-length"]))
    return int(line.split()[1]), headers, body


def closed_by_server(sock: socket.socket) -> bool:
    """Whether the server closed the connection (EOF or a reset on the next read)."""
    sock.settimeout(30)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


class Daemon:
    """The daemon's side of the queue: each poll taken is answered by ``answer``."""

    def __init__(self, dispatcher: Dispatcher, answer: Callable[[Poll], None]) -> None:
        self.inbox = dispatcher.inbox
        self.answer = answer
        self.taken: list[Poll] = []
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while (poll := self.inbox.get()) is not None:
            assert isinstance(poll, Poll)
            self.taken.append(poll)
            self.answer(poll)

    def stop(self) -> None:
        self.inbox.put(None)
        self.thread.join(30)


class World:
    """Dispatchers, the daemon's side of their queues and raw agent connections, all
    closed at the end of the test."""

    def __init__(self, gather_from: int = 0) -> None:
        self.gather_from = gather_from
        self.dispatchers: list[Dispatcher] = []
        self.daemons: list[Daemon] = []
        self.socks: list[socket.socket] = []

    def dispatcher(self, **limits: Any) -> Dispatcher:
        d = Dispatcher(TOKEN, queue.SimpleQueue(), **{"gather_from": self.gather_from, **limits})
        d.allowed.update(f"m{i}" for i in range(2000))
        d.start()
        self.dispatchers.append(d)
        return d

    def daemon(self, d: Dispatcher, answer: Callable[[Poll], None] | None = None) -> Daemon:
        daemon = Daemon(d, answer or echo)
        self.daemons.append(daemon)
        return daemon

    def connect(self, d: Dispatcher) -> tuple[socket.socket, Any]:
        sock = socket.create_connection(d.address, timeout=30)
        self.socks.append(sock)
        return sock, sock.makefile("rb")

    def close(self) -> None:
        for daemon in self.daemons:
            daemon.stop()
        for sock in self.socks:
            sock.close()
        for d in self.dispatchers:
            d.close()


def echo(poll: Poll) -> None:
    poll.reply.send({**ANSWER, "tasks": [poll.machine]})


@pytest.fixture(params=[0, 1], ids=["one-by-one", "gathering"])
def world(request: pytest.FixtureRequest) -> Iterator[World]:
    """Every behaviour holds whether the loop reads each request as it comes, or pauses
    to gather them as past ``gather_from`` connections (here: past one)."""
    made = World(request.param)
    yield made
    made.close()


def test_one_connection_carries_many_polls(world: World) -> None:
    """An agent's polls, one after the other on one keep-alive connection, each answered."""
    d = world.dispatcher()
    world.daemon(d)
    sock, stream = world.connect(d)
    for i in range(200):
        sock.sendall(poll_request(f"m{i}"))
        status, headers, body = read_answer(stream)
        assert status == 200
        assert "connection" not in headers
        assert json.loads(body) == {"epoch": d.epoch, **ANSWER, "tasks": [f"m{i}"]}
    sock.sendall(poll_request("m0", close=True))
    status, headers, _ = read_answer(stream)
    assert (status, headers["connection"]) == (200, "close")
    assert closed_by_server(sock)
    assert d.polls == 201


def test_a_machine_given_up_on_still_hands_in_its_results_and_is_then_told_to_go(
    world: World,
) -> None:
    """A machine the daemon lost (a false loss, a notice) whose agent still holds results:
    the poll that carries them reaches the daemon, which counts them and releases the
    agent; a poll without results is told 410 at once (issue 36 §4)."""
    d = world.dispatcher()
    daemon = world.daemon(d, lambda p: p.reply.send({**ANSWER, "release": True}))
    d.allowed.discard("m7")
    d.gone.add("m7")
    sock, stream = world.connect(d)
    result = {"run": 3, "task": 12, "exit_code": 0, "runtime_s": 1.5}
    sock.sendall(poll_request("m7", results=[result]))
    status, _, body = read_answer(stream)
    assert status == 200
    assert json.loads(body)["release"] is True
    assert [(p.machine, [r.task for r in p.results]) for p in daemon.taken] == [("m7", [12])]
    sock.sendall(poll_request("m7"))
    status, _, body = read_answer(stream)
    assert status == 410
    assert "was released" in json.loads(body)["error"]
    assert len(daemon.taken) == 1


def test_polls_sent_back_to_back_are_answered_in_order(world: World) -> None:
    d = world.dispatcher()
    world.daemon(d)
    sock, stream = world.connect(d)
    sock.sendall(b"".join(poll_request(f"m{i}") for i in range(20)))
    said = [json.loads(read_answer(stream)[2])["tasks"] for _ in range(20)]
    assert said == [[f"m{i}"] for i in range(20)]


@pytest.mark.parametrize(
    ("request_bytes", "status", "problem"),
    [
        (b"POST /v1/poll\r\nHost: x\r\n\r\n", 400, "malformed request line 'POST /v1/poll'"),
        (b"GARBAGE\r\n\r\n", 400, "malformed request line 'GARBAGE'"),
        (
            b"POST /v1/poll HTTP/1.1\r\nContent-Length: ten\r\n\r\n",
            400,
            "Content-Length: 'ten' is not a byte count",
        ),
        (
            b"POST /v1/poll HTTP/1.1\r\nContent-Length: %d\r\n\r\n" % (MAX_BODY + 1),
            413,
            f"body of {MAX_BODY + 1} bytes: more than {MAX_BODY}",
        ),
        (
            b"POST /v1/poll HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
            411,
            "Transfer-Encoding 'chunked' is not read: send Content-Length",
        ),
        (
            b"POST /v1/poll HTTP/1.1\r\nX-Big: " + b"y" * (70 << 10) + b"\r\n\r\n",
            431,
            "request line and headers exceed",
        ),
        (b"DELETE /v1/poll HTTP/1.1\r\n\r\n", 405, "method DELETE is not served"),
    ],
)
def test_a_request_it_cannot_serve_gets_a_4xx_naming_the_problem_and_the_connection_closes(
    world: World, request_bytes: bytes, status: int, problem: str
) -> None:
    d = world.dispatcher()
    sock, stream = world.connect(d)
    sock.sendall(request_bytes)
    said, headers, body = read_answer(stream)
    assert said == status
    assert problem in json.loads(body)["error"]
    assert headers["connection"] == "close"
    assert closed_by_server(sock)
    assert d.inbox.empty()


def test_a_bad_poll_body_is_refused_and_the_connection_kept(world: World) -> None:
    """The body framed right but not a poll: 400 naming the field, and the next poll on the
    same connection is served."""
    d = world.dispatcher()
    world.daemon(d)
    sock, stream = world.connect(d)
    body = b'{"machine": 7}'
    sock.sendall(
        b"POST /v1/poll HTTP/1.1\r\nAuthorization: Bearer %s\r\nContent-Length: %d\r\n\r\n%s"
        % (TOKEN.encode(), len(body), body)
    )
    status, _, said = read_answer(stream)
    assert (status, json.loads(said)) == (400, {"error": "machine: must be a non-empty string"})
    sock.sendall(poll_request("m1"))
    assert read_answer(stream)[0] == 200


def test_a_held_poll_is_answered_with_its_base_at_its_time(world: World) -> None:
    """The daemon holds an idle agent's poll: nothing is sent before ``hold_until``, the
    base answer then. A second poll held and then sent (work came) gets the full answer."""
    d = world.dispatcher()
    held_for = 1.0

    def answer(poll: Poll) -> None:
        if poll.machine == "m1":
            poll.reply.hold({**ANSWER, "held": True}, time.monotonic() + held_for)
        else:
            poll.reply.hold({**ANSWER, "held": True}, time.monotonic() + 60)
            assert poll.reply.send({**ANSWER, "tasks": ["work"]})

    daemon = world.daemon(d, answer)
    sock, stream = world.connect(d)
    started = time.monotonic()
    sock.sendall(poll_request("m1", wait_s=30))
    status, _, body = read_answer(stream)
    waited = time.monotonic() - started
    sock.sendall(poll_request("m2", wait_s=30))
    second = read_answer(stream)
    assert (status, json.loads(body)["held"]) == (200, True)
    assert waited >= held_for
    assert json.loads(second[2])["tasks"] == ["work"]
    assert not daemon.taken[0].reply.send(ANSWER)  # answered: too late for another


def test_a_poll_the_daemon_never_takes_is_answered_503_and_a_late_answer_is_refused(
    world: World,
) -> None:
    d = world.dispatcher()
    sock, stream = world.connect(d)
    started = time.monotonic()
    sock.sendall(poll_request("m1", wait_s=0.5))
    status, headers, body = read_answer(stream)
    waited = time.monotonic() - started
    assert (status, json.loads(body)) == (503, {"error": "controller busy, try again"})
    assert "connection" not in headers  # the agent polls again on it
    assert waited >= 0.5 + PROCESS_TIMEOUT_S
    late = d.inbox.get_nowait()
    assert isinstance(late, Poll)
    assert not late.reply.send(ANSWER)


def test_polls_beyond_the_backlog_are_answered_503_at_once(world: World) -> None:
    """The daemon has not taken two polls: a third is not queued but refused; once the
    daemon catches up, polls are queued again."""
    d = world.dispatcher(max_backlog=2)
    waiting = [world.connect(d) for _ in range(2)]
    for i, (sock, _) in enumerate(waiting):
        sock.sendall(poll_request(f"m{i}", wait_s=30))
    queued: list[Poll] = [d.inbox.get(timeout=30), d.inbox.get(timeout=30)]
    sock, stream = world.connect(d)
    sock.sendall(poll_request("m9"))
    status, _, body = read_answer(stream)
    assert (status, json.loads(body)) == (503, {"error": "controller busy, try again"})
    assert d.busy == 1
    assert d.last_seen["m9"] > 0  # refused, but heard: the machine is in touch
    for poll in queued:
        assert poll.reply.send(ANSWER)
    assert [read_answer(s)[0] for _, s in waiting] == [200, 200]
    world.daemon(d)
    sock.sendall(poll_request("m9"))
    assert read_answer(stream)[0] == 200
    assert d.polls == 3


def test_connections_past_the_limit_are_answered_503_and_closed(world: World) -> None:
    d = world.dispatcher(max_connections=2)
    world.daemon(d)
    first, second = world.connect(d), world.connect(d)
    for i, (sock, stream) in enumerate((first, second)):
        sock.sendall(poll_request(f"m{i}"))
        assert read_answer(stream)[0] == 200
    sock, stream = world.connect(d)
    sock.sendall(poll_request("m2"))
    status, headers, body = read_answer(stream)
    assert status == 503
    assert "more than 2 connections" in json.loads(body)["error"]
    assert headers["connection"] == "close"
    assert closed_by_server(sock)
    first[0].sendall(poll_request("m0"))  # those within the limit are still served
    assert read_answer(first[1])[0] == 200
    assert d.crowded == 1


def test_close_ends_every_connection_at_once(world: World) -> None:
    """Agents with polls held for a minute: close() cuts them all (no answer is sent, the
    held replies refuse a late send), logs no error and returns."""
    d = world.dispatcher(log=structlog.get_logger())
    held: list[Poll] = []

    def hold(poll: Poll) -> None:
        poll.reply.hold(ANSWER, time.monotonic() + 60)
        held.append(poll)

    world.daemon(d, hold)
    conns = [world.connect(d) for _ in range(20)]
    idle = world.connect(d)  # between polls
    for i, (sock, _) in enumerate(conns):
        sock.sendall(poll_request(f"m{i}", wait_s=60))
    while len(held) < len(conns):
        time.sleep(0.01)
    time.sleep(0.1)  # the loop has moved the polls' timers to the holds' end
    with structlog.testing.capture_logs() as logs:
        d.close()
    assert [e for e in logs if e["log_level"] == "error"] == []
    assert all(closed_by_server(sock) for sock, _ in [*conns, idle])
    assert not any(poll.reply.send(ANSWER) for poll in held)
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(d.address, timeout=5).close()


def test_close_before_start_frees_the_port() -> None:
    d = Dispatcher(TOKEN, queue.SimpleQueue())
    d.close()
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(d.address, timeout=5).close()


def test_the_loop_calls_on_tick_with_the_monotonic_clock(world: World) -> None:
    d = world.dispatcher()
    ticks: list[tuple[float, str]] = []
    d.on_tick = lambda now: ticks.append((now, threading.current_thread().name))
    while len(ticks) < 3:
        time.sleep(0.05)
    times = [t for t, _ in ticks]
    assert times == sorted(times)
    assert times[-1] <= time.monotonic()
    assert {name for _, name in ticks} == {"dispatcher"}


def test_a_thousand_keep_alive_connections_are_served_at_once(world: World) -> None:
    """1,000 agents, each on its own connection, all open before any polls: three polls
    each, every one answered on the connection it came on."""
    agents = 1000
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 3 * agents:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 4 * agents), hard))
    d = world.dispatcher()
    world.daemon(d)
    host, port = d.address

    async def agent(i: int, opened: asyncio.Event, count: list[int]) -> list[str]:
        reader, writer = await asyncio.open_connection(host, port)
        count[0] += 1
        if count[0] == agents:
            opened.set()
        await opened.wait()  # every connection open before any polls
        said = []
        for _ in range(3):
            writer.write(poll_request(f"m{i}"))
            head = await reader.readuntil(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 200 "), head
            length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
            said.extend(json.loads(await reader.readexactly(length))["tasks"])
        writer.close()
        return said

    async def fleet() -> list[list[str]]:
        opened = asyncio.Event()
        count = [0]
        return await asyncio.gather(*(agent(i, opened, count) for i in range(agents)))

    said = asyncio.run(fleet())
    assert said == [[f"m{i}"] * 3 for i in range(agents)]
    assert d.polls == 3 * agents


def staging_of(tmp_path: Path, spec: FileSpec) -> Staging:
    """The task files of a run of one task with ``spec``, in ``tmp_path/run``."""
    cfg = RunConfig.model_validate(
        {
            "bag": {"command": "true"},
            "constraint": {"budget": 1},
            "machine_types": [{"name": "a", "price": 1, "max_count": 2}],
            "provider": "local",
        }
    )
    log = structlog.wrap_logger(structlog.ReturnLogger())
    return Staging(cfg, tmp_path / "run", [TaskSpec(0, "true", files=spec)], log)


def test_an_output_file_is_streamed_in_and_an_input_file_out(world: World, tmp_path: Path) -> None:
    """Task files through the loop: a 5 MiB output PUT in blocks by the file threads,
    whole under its name; an input GET on the same keep-alive connection after it."""
    source = tmp_path / "input.bin"
    source.write_bytes(bytes(range(256)) * 4096)  # 1 MiB
    spec = FileSpec((InputFile(str(source), source.name),), ("*.bin",), 1 << 30, None)
    staging = staging_of(tmp_path, spec)
    d = world.dispatcher()
    d.files = staging
    staging.payload(spec, 0, "m1", 1, False)
    output = bytes(range(251)) * (5 * 4177)  # 5 MiB and a bit, not a block multiple
    conn = http.client.HTTPConnection(*d.address, timeout=30)
    auth = {"Authorization": f"Bearer {TOKEN}"}
    ask = {"machine": "m1", "run": 1, "task": 0, "files": [["out.bin", len(output)]]}
    conn.request("POST", "/v1/files", json.dumps(ask), auth)
    plan = conn.getresponse()
    where = json.loads(plan.read())["put"][0]
    conn.request("PUT", where, output, {**auth, "Content-Length": str(len(output))})
    put = conn.getresponse()
    assert (put.status, json.loads(put.read())) == (200, {})
    conn.request("GET", "/v1/input/0.m1-1/0", headers=auth)
    got = conn.getresponse()
    data = got.read()
    conn.close()
    assert (plan.status, got.status) == (200, 200)
    assert data == source.read_bytes()
    stored = tmp_path / "run" / "outputs" / ".attempts" / "0.m1-1" / "out.bin"
    assert stored.read_bytes() == output
    assert d.last_seen["m1"] > 0  # an uploading agent is in touch


def test_a_low_soft_file_limit_is_raised_so_that_agents_are_served() -> None:
    """A daemon started under the common soft limit of 1,024 open files would serve 768
    agents; it raises its soft limit as far as the hard one allows."""
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    code = (
        "import queue, resource\n"
        "from autoscaler.run.dispatch import Dispatcher\n"
        "d = Dispatcher('t', queue.SimpleQueue())\n"
        "print(d.max_connections, resource.getrlimit(resource.RLIMIT_NOFILE)[0])\n"
    )

    def low() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (1024, hard))

    proc = subprocess.run(
        [sys.executable, "-c", code], preexec_fn=low, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    served, soft = map(int, proc.stdout.split())
    want = 20_000 + 256
    expected = want if hard == resource.RLIM_INFINITY else min(want, hard)
    assert soft == max(expected, 1024)
    assert served == min(20_000, soft - 256)
    if hard >= want:
        assert served == 20_000


# --- framing: requests as the bytes arrive (one protocol per connection) --------------------


def test_a_poll_sent_byte_by_byte_is_answered(world: World) -> None:
    d = world.dispatcher()
    world.daemon(d)
    sock, stream = world.connect(d)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    for byte in poll_request("m3"):
        sock.send(bytes([byte]))
    status, _, body = read_answer(stream)
    assert (status, json.loads(body)["tasks"]) == (200, ["m3"])


def test_a_body_sent_after_its_head_is_read_when_it_comes(world: World) -> None:
    """A client that waits for ``100 Continue`` sends its body only once the head was
    read and answered: the body then completes the request."""
    d = world.dispatcher()
    world.daemon(d)
    sock, stream = world.connect(d)
    request = poll_request("m4")
    head, _, body = request.partition(b"\r\n\r\n")
    sock.sendall(head.replace(b"Host: x", b"Host: x\r\nExpect: 100-continue") + b"\r\n\r\n")
    assert stream.readline() == b"HTTP/1.1 100 Continue\r\n"
    assert stream.readline() == b"\r\n"
    sock.sendall(body)
    status, _, said = read_answer(stream)
    assert (status, json.loads(said)["tasks"]) == (200, ["m4"])


def test_a_request_behind_a_held_poll_waits_for_its_answer(world: World) -> None:
    """Two polls in one segment, the first held by the daemon: the second is not read
    until the first is answered, and the answers come in order; a request that cannot
    be framed behind them is refused after them."""
    d = world.dispatcher()
    sock, stream = world.connect(d)
    sock.sendall(poll_request("m1", wait_s=30) + poll_request("m2") + b"GARBAGE\r\n\r\n")
    first = d.inbox.get(timeout=30)
    assert isinstance(first, Poll)
    with pytest.raises(queue.Empty):
        d.inbox.get(timeout=0.5)  # the second waits behind the first
    assert first.reply.send({**ANSWER, "tasks": ["first"]})
    second = d.inbox.get(timeout=30)
    assert isinstance(second, Poll)
    assert second.reply.send({**ANSWER, "tasks": ["second"]})
    said = [read_answer(stream) for _ in range(3)]
    assert [(s, json.loads(b).get("tasks")) for s, _, b in said[:2]] == [
        (200, ["first"]),
        (200, ["second"]),
    ]
    assert said[2][0] == 400
    assert closed_by_server(sock)


def test_a_head_past_the_limit_is_refused_before_its_end_comes(world: World) -> None:
    """431 once ``HEAD_MAX`` bytes came without the blank line: the dispatcher does not
    wait for (or buffer) more. The client may go on sending; the answer still reaches it."""
    d = world.dispatcher()
    sock, stream = world.connect(d)
    sock.sendall(b"POST /v1/poll HTTP/1.1\r\nX-Big: " + b"y" * HEAD_MAX)
    status, headers, body = read_answer(stream)
    assert status == 431
    assert headers["connection"] == "close"
    assert "request line and headers exceed" in json.loads(body)["error"]
    sock.sendall(b"y" * HEAD_MAX)  # read and ignored, not a reset before the answer
    assert closed_by_server(sock)
    assert d.inbox.empty()


def test_answers_before_a_refusal_reach_a_client_that_is_still_sending(world: World) -> None:
    """A request refused while its client is still sending (bytes unread) and has not
    read the answers before it yet: they and the refusal all reach the client before the
    connection closes. A socket closed with bytes unread resets the connection, and the
    reset drops whatever the kernel had not sent yet."""
    pad = "x" * (4 << 20)
    d = world.dispatcher()
    world.daemon(d, lambda p: p.reply.send({**ANSWER, "pad": pad}))
    sock, stream = world.connect(d)
    sending = poll_request("m1") + b"GARBAGE\r\n\r\n" + b"y" * (2 << 20)
    sender = threading.Thread(target=sock.sendall, args=(sending,), daemon=True)
    sender.start()
    status, _, body = read_answer(stream)
    assert (status, len(json.loads(body)["pad"])) == (200, len(pad))
    status, headers, body = read_answer(stream)
    assert (status, headers["connection"]) == (400, "close")
    assert "malformed request line 'GARBAGE'" in json.loads(body)["error"]
    sender.join(30)
    assert closed_by_server(sock)


def test_a_client_that_closes_in_the_middle_of_a_body_is_not_answered(world: World) -> None:
    d = world.dispatcher()
    world.daemon(d)
    sock, _ = world.connect(d)
    request = poll_request("m5")
    sock.sendall(request[:-10])
    sock.shutdown(socket.SHUT_WR)
    assert closed_by_server(sock)
    other, stream = world.connect(d)
    other.sendall(poll_request("m6"))
    assert read_answer(stream)[0] == 200
    assert d.polls == 1


def test_a_client_that_shuts_its_side_after_a_poll_still_gets_the_answer(world: World) -> None:
    d = world.dispatcher()
    world.daemon(d)
    sock, stream = world.connect(d)
    sock.sendall(poll_request("m7"))
    sock.shutdown(socket.SHUT_WR)
    status, _, body = read_answer(stream)
    assert (status, json.loads(body)["tasks"]) == (200, ["m7"])
    assert closed_by_server(sock)


def test_a_client_that_does_not_read_its_answers_is_not_read_either(world: World) -> None:
    """Polls sent without reading the answers: once a block of answers waits unread the
    dispatcher stops reading the connection instead of buffering answers without bound
    (the daemon takes no more than the kernel's buffers and a block hold of answers);
    once the client reads, every poll is answered, in order."""
    pad = "x" * (64 << 10)
    d = world.dispatcher()
    world.daemon(d, lambda p: p.reply.send({**ANSWER, "tasks": [p.machine], "pad": pad}))
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 256 << 10)
    sock.connect(d.address)
    world.socks.append(sock)
    unread = (
        (1 << 20) + _sysctl_max("tcp_wmem") + sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF)
    )
    at_most = unread // len(pad) + 3  # answers unread, one on its way, one poll outstanding
    sent = 3 * at_most
    payload = b"".join(poll_request(f"m{i}", pad=pad) for i in range(sent))
    sender = threading.Thread(target=sock.sendall, args=(payload,), daemon=True)
    sender.start()
    while d.polls < (1 << 20) // len(pad):  # a block of answers: taken in any case
        time.sleep(0.01)
    time.sleep(1.0)  # time to take every poll, were the connection read on
    assert d.polls <= at_most
    stream = sock.makefile("rb")
    said = [read_answer(stream) for _ in range(sent)]
    sender.join(30)
    assert [(s, json.loads(b)["tasks"]) for s, _, b in said] == [
        (200, [f"m{i}"]) for i in range(sent)
    ]
    assert d.polls == sent


def _sysctl_max(name: str) -> int:
    return int(Path(f"/proc/sys/net/ipv4/{name}").read_text().split()[2])

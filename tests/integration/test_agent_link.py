"""How the worker agent reads its controller's answers over HTTP (``agent.Link``): a
controller on a bare socket that answers with exactly the bytes a test gives, well
formed or not. Whatever it sends, the agent keeps its results until a good answer
acknowledges them, and runs what it was given."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from tests.integration import agent_harness
from tests.integration.agent_harness import StartAgent, task

pytestmark = pytest.mark.integration

start_agent = agent_harness.start_agent


@dataclass(frozen=True)
class Poll:
    connection: int  # 1, 2, ...: which accepted connection carried it
    head: bytes
    body: dict[str, Any]


Answer = Callable[[bytes], tuple[bytes, bool]]
"""A JSON body -> (the bytes sent, close the connection after them)."""


def ok(body: bytes) -> tuple[bytes, bool]:
    return (
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n%s" % (len(body), body),
        False,
    )


class RawController:
    """Answers poll n with ``answers[n]`` (then with ``ok``), recording every poll."""

    def __init__(self, answers: list[Answer]) -> None:
        self.answers = list(answers)
        self.polls: list[Poll] = []
        self.tasks: dict[int, list[dict[str, Any]]] = {}  # poll number -> tasks to give
        self._lock = threading.Condition()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.1)
        self._closing = threading.Event()
        self._threads = [threading.Thread(target=self._accept, daemon=True)]
        self._threads[0].start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._listener.getsockname()[1]}"

    def close(self) -> None:
        self._closing.set()
        for thread in self._threads:
            thread.join(timeout=5)
        self._listener.close()

    def wait_for(self, predicate: Callable[[Poll], bool], timeout: float = 10.0) -> Poll:
        deadline = time.monotonic() + timeout
        with self._lock:
            while True:
                found = next((poll for poll in self.polls if predicate(poll)), None)
                if found is not None:
                    return found
                left = deadline - time.monotonic()
                assert left > 0, f"no such poll in {timeout} s: {self.polls}"
                self._lock.wait(left)

    def _accept(self) -> None:
        count = 0
        while not self._closing.is_set():
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                continue
            count += 1
            thread = threading.Thread(target=self._serve, args=(conn, count), daemon=True)
            self._threads.append(thread)
            thread.start()

    def _serve(self, conn: socket.socket, number: int) -> None:
        conn.settimeout(0.1)
        buffer = b""
        with conn:
            while not self._closing.is_set():
                try:
                    chunk = conn.recv(65536)
                except TimeoutError:
                    continue
                except OSError:
                    return
                if not chunk:
                    return
                buffer += chunk
                head, sep, rest = buffer.partition(b"\r\n\r\n")
                if not sep:
                    continue
                length = next(
                    int(line.split(b":", 1)[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                )
                if len(rest) < length:
                    continue
                buffer = rest[length:]
                if not self._answer(conn, number, head, json.loads(rest[:length])):
                    return

    def _answer(self, conn: socket.socket, number: int, head: bytes, body: Any) -> bool:
        with self._lock:
            index = len(self.polls)
            self.polls.append(Poll(number, head, body))
            self._lock.notify_all()
            answer = self.answers[index] if index < len(self.answers) else ok
            tasks = self.tasks.get(index, [])
        reply = {"epoch": "e1", "ack": True, "tasks": tasks, "heartbeat_s": 0.2}
        data, close = answer(json.dumps(reply).encode())
        conn.sendall(data)
        return not close


@pytest.fixture
def raw() -> Iterator[Callable[[list[Answer]], RawController]]:
    made: list[RawController] = []

    def make(answers: list[Answer]) -> RawController:
        made.append(RawController(answers))
        return made[-1]

    yield make
    for controller in made:
        controller.close()


def carries(run: int) -> Callable[[Poll], bool]:
    return lambda poll: any(result["run"] == run for result in poll.body["results"])


def test_polls_share_one_keep_alive_connection(
    raw: Callable[[list[Answer]], RawController], start_agent: StartAgent
) -> None:
    """Every poll goes on the first connection, with the token, while answers keep it open."""
    controller = raw([])
    controller.tasks = {1: [task(1, "true")], 3: [task(2, "true")]}
    agent = start_agent(controller.url)

    controller.wait_for(carries(2))
    assert {poll.connection for poll in controller.polls} == {1}
    assert all(
        b"Authorization: Bearer " + agent_harness.TOKEN.encode() in p.head for p in controller.polls
    )
    assert agent.proc.poll() is None


def test_an_answer_without_a_length_is_read_to_the_end_of_the_connection(
    raw: Callable[[list[Answer]], RawController], start_agent: StartAgent
) -> None:
    """HTTP/1.0 with no Content-Length: the body is what comes before the close; the
    task in it runs, and the next poll opens a new connection."""

    def to_the_end(body: bytes) -> tuple[bytes, bool]:
        return b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n" + body, True

    controller = raw([to_the_end])
    controller.tasks = {0: [task(1, "echo read")]}
    agent = start_agent(controller.url)

    poll = controller.wait_for(carries(1))
    result = next(r for r in poll.body["results"] if r["run"] == 1)
    assert (result["exit_code"], result["stdout"]) == (0, "read\n")
    assert poll.connection == 2
    assert "poll failed" not in agent.log()


def chunked(body: bytes) -> tuple[bytes, bool]:
    return (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n"
        % (len(body), body),
        False,
    )


def cut_short(body: bytes) -> tuple[bytes, bool]:
    return b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body[:10]), True


def garbage(body: bytes) -> tuple[bytes, bool]:
    return b"SSH-2.0-OpenSSH_9.2\r\n\r\n", True


def nothing(body: bytes) -> tuple[bytes, bool]:
    return b"", True


def bad_length(body: bytes) -> tuple[bytes, bool]:
    return b"HTTP/1.1 200 OK\r\nContent-Length: -5\r\n\r\n" + body, True


@pytest.mark.parametrize(
    ("answer", "said"),
    [
        (chunked, "Transfer-Encoding b'chunked' is not read"),
        (cut_short, "answer cut short"),
        (garbage, "bad status line b'SSH-2.0"),
        (nothing, "closed the connection without an answer"),
        (bad_length, "bad Content-Length"),
    ],
)
def test_a_malformed_answer_is_a_failed_poll_and_its_results_go_again(
    raw: Callable[[list[Answer]], RawController],
    start_agent: StartAgent,
    answer: Answer,
    said: str,
) -> None:
    """The poll that carries run 1's result gets a malformed answer: the agent says why,
    polls again on a new connection, and sends the result again; it is acknowledged and
    sent no more."""
    controller = raw([ok, answer])
    controller.tasks = {0: [task(1, "echo once")]}
    agent = start_agent(controller.url)

    first = controller.wait_for(carries(1))
    again = controller.wait_for(lambda poll: poll is not first and carries(1)(poll))
    assert again.connection > first.connection
    controller.wait_for(lambda poll: controller.polls.index(poll) > controller.polls.index(again))
    later = controller.polls[controller.polls.index(again) + 1 :]
    assert later
    assert not any(carries(1)(poll) for poll in later)
    log = agent.log()
    assert "poll failed" in log
    assert said in log, log
    assert agent.proc.poll() is None

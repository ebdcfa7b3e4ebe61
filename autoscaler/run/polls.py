"""A poll as the daemon sees it, and its answer: the agents' request body
(``bootstrap/agent.py``) checked field by field into a ``Poll``, and the ``Reply`` the
daemon's thread writes and the dispatcher's loop sends (``run.dispatch``).

A bad field is a ``BadRequest`` naming it, answered 400 by the dispatcher.
"""

from __future__ import annotations

import asyncio
import json
import threading
from dataclasses import dataclass, field
from typing import Any, Protocol

from autoscaler.run import wire

MAX_WAIT_S = 60.0
"""The longest an agent may ask the daemon to hold its poll (its ``wait_s``)."""


class Waker(Protocol):
    """Who sends a reply: told (from the daemon's thread) that it was sent or held."""

    def _wake(self, reply: Reply, first: bool, settle: bool) -> None: ...


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
        "_conn",
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
        self._to: Waker | None = None  # set before the poll goes on the daemon's queue
        self._conn: Any = None  # the loop's: the connection it answers
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
    rebalance: str | None = None  # when its provider recommended a rebalance (it drains)
    setup: dict[str, Any] | None = None  # how far the machine's set-up is (agent.py)
    refused: list[int] = field(default_factory=list)  # runs of results not given to it


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
        data = wire.loads(body)
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
    if not isinstance(running, list) or not all(type(r) is int for r in running):
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
    rebalance = data.get("rebalance")
    if rebalance is not None and (
        not isinstance(rebalance, dict) or not isinstance(rebalance.get("time"), str)
    ):
        raise BadRequest("rebalance: must be {time: str}")
    setup = data.get("setup")
    if setup is not None and (
        not isinstance(setup, dict) or setup.get("state") not in ("running", "done", "failed")
    ):
        raise BadRequest("setup: must be {state: running|done|failed, ...}")
    wait_s = min(float(wait), MAX_WAIT_S)
    advised = None if rebalance is None else rebalance["time"][:40]
    return Poll(
        machine, parsed, running, wait_s, arrived, notice=said, rebalance=advised, setup=setup
    )


_NUMBERS = (int, float)


def parse_result(r: object, index: int = 0) -> AgentResult:
    """Check one result of an agent's request; ``BadRequest`` naming the bad field."""
    if type(r) is dict:  # as agents send it (one a task): checked in one pass
        run, task, runtime = r.get("run"), r.get("task"), r.get("runtime_s")
        code, error = r.get("exit_code"), r.get("error")
        stdout, stderr = r.get("stdout", ""), r.get("stderr", "")
        if (
            type(run) is int
            and type(task) is int
            and isinstance(runtime, _NUMBERS)
            and (code is None or type(code) is int)
            and (error is None or type(error) is str)
            and type(stdout) is str
            and type(stderr) is str
        ):
            return AgentResult(run, task, code, runtime, error, stdout, stderr, r.get("stored"))
    return _checked_result(r, index)


def _checked_result(r: object, index: int) -> AgentResult:
    """``parse_result`` field by field: the bad one named, or (a value of a subclass, such
    as a bool for a run number) the result as the checks take it."""
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

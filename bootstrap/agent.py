"""The worker agent: runs on every machine, asks the controller for tasks, runs them, reports.

One file, Python 3.11+ standard library only, so it can be copied to any machine::

    AUTOSCALER_TOKEN=... python3 agent.py --url http://127.0.0.1:PORT --machine ID \\
        [--workdir DIR] [--heartbeat-s 2] [--orphan-after-s 60] [--start-delay-s 0] \\
        [--ready-at UNIX_TIME] \\
        [--tail-bytes 4096] [--slots 1] [--report-s 0.25] [--token-file PATH] \\
        [--launch-token-file PATH] [--ca-file PATH] \\
        [--notice-url URL] [--notice-every-s 5]

The token is its machine's (the controller derives one per machine: another machine's
is refused). It comes from ``--token-file`` (its content, stripped) or else from the
environment variable ``AUTOSCALER_TOKEN``; the agent removes that variable from its own
environment, so tasks do not inherit it, and never logs it. An agent started before its
machine id was known (EC2 user data) has its launch's token instead
(``--launch-token-file``): it first registers its machine with it (below) and is given
its machine's token. ``--ca-file``: an ``https`` controller is trusted only if its
certificate is issued by that CA (the run's, pinned), whatever the system trusts. Logs
go to stderr, one line per notable thing: ``time level message key=value ...``.

Protocol
========

Registration (``--launch-token-file`` only), before the first poll: ``POST
<url>/v1/register`` with the launch's token and ``{"machine": str, "nonce": str}`` (the
nonce random, the same in every try); 200 answers ``{"token": str}``, the machine's token
from then on. 503 (the controller does not know the machine yet) and any failure: retry
as a poll would; 401 or 403 (not one of the launch's machines, or registered already by
another agent): exit 2; 410: exit 0.

Every request is ``POST <url>/v1/poll`` over HTTP/1.1 on one keep-alive connection
(reconnected after any error), with the headers ``Authorization: Bearer <token>`` and
``Content-Type: application/json``. Request body::

    {"machine": str, "pid": int, "host": str,
     "epoch": str | null,     # epoch of the last response seen; null before the first
     "results": [Result],     # finished runs not yet acknowledged, oldest first
     "running": [int],        # the runs in progress (in the order they started), then
                              # the runs queued locally, in order
     "wait_s": float,         # how long the controller may hold the request if it has
                              # nothing to say
     "notice": Notice,        # only once the machine's provider said it takes it back
     "rebalance": Rebalance,  # only once the provider recommended a rebalance
     "setup": SetupState}     # once the controller asked for a set-up

    SetupState = {"state": "running"} | {"state": "done", "seconds": float}
               | {"state": "failed", "command": str, "exit_code": int | null,
                  "error": str, "stdout": str, "stderr": str, "seconds": float}

    Notice = {"action": str, "time": str}   # as the provider wrote them
    Rebalance = {"time": str}               # EC2's noticeTime

    Result = {"run": int, "task": int, "exit_code": int | null, "runtime_s": float,
              "stdout": str, "stderr": str, "error": str | null,
              "stored": [[str, int]]}  # a task with files: the outputs stored

``runtime_s`` is real (monotonic) seconds. ``stdout`` and ``stderr`` are the last
``--tail-bytes`` bytes of each stream, decoded as UTF-8 with replacement (a character cut
in half at the start of the tail is dropped). ``error`` is null on exit 0, else one line:

* ``"exit 3"``: the command exited with that code;
* ``"exit 127: command not found: <first line of stderr>"``;
* ``"killed by signal SIGSEGV"``: the shell itself died of a signal (``exit_code`` is
  minus the signal number, as ``subprocess`` reports it);
* ``"timed out after 5s"`` (``exit_code`` null): the task's ``timeout_s`` passed;
* ``"cannot start: <OSError text>"`` (``exit_code`` null): the process could not be
  created, e.g. its working directory does not exist;
* ``"bad task: <why>"`` (``exit_code`` null): the task record is malformed.

Response 200 body::

    {"epoch": str, "ack": bool, "tasks": [Task], "cancel": [int], "release": bool,
     "lease_s": float | null, "renew_in_s": float | null, "heartbeat_s": float,
     "slots": int | null, "report_s": float | null,
     "setup": {"commands": [str], "timeout_s": float | null} | null,
     "refused": [int]}    # runs of results refused: acknowledged all the same

    Task = {"run": int, "task": int, "command": str | null, "sleep_s": float | null,
            "env": {str: str}, "cwd": str | null, "timeout_s": float | null,
            "files": Files}       # only for a task with files

    Files = {"inputs": [[name, "get" | "link", where]], "outputs": [glob],
             "max_bytes": int}

Missing keys read as empty or null. Semantics:

* ``setup`` (the first one only): the agent runs the commands in its working directory,
  one after the other (``sh -c``), starts no task before they all exit 0, and says how
  far it is in every request; a command that fails or passes ``timeout_s`` (for them
  all) ends the set-up as failed, with its output's tail.

* ``ack: true``: every result sent in that request is stored; the agent drops them.
  Those in ``refused`` (results for tasks the controller never gave this machine) are
  not counted, and dropped all the same.
  Otherwise (no ack, an error, a timeout, any status but 200) it keeps them and sends
  them again in the next request, so the controller must accept a result twice.
* ``slots`` (replaces ``--slots``, default 1): up to that many runs go on at once; the
  others wait in a local queue and start in the order received as runs end (a smaller
  ``slots`` stops nothing: no run starts until fewer than ``slots`` go on). A task whose
  run is in progress, queued or unacknowledged is ignored. A command runs
  as ``sh -c command`` in a new session (its own process group), with stdin from
  /dev/null, its output in temporary files, in ``cwd`` (relative to ``--workdir``, which
  defaults to the agent's working directory) with ``env`` added to the agent's
  environment. A ``sleep_s`` task is synthetic: the agent waits that long without a
  process and reports exit 0 with empty output. When a run ends, however it ends, its
  process group is killed, so nothing it started outlives it. Its output files are
  reused by later runs once its tails are read. What follows holds for each run.
* ``timeout_s``: at that many real seconds after the start the process group is killed
  and the result says ``"timed out after Xs"`` with a null exit code.
* ``cancel``: a run in progress is killed (its process group), a queued one dropped
  before it starts; neither gives a result. Tasks of the same response are queued before
  cancels are applied.
* ``files``: the run's ``cwd`` is made first (and removed when the run ends), each input
  put there under its ``name``: ``get`` fetches ``GET <url>where`` (authorised like a
  poll), ``link`` links the path ``where`` (a shared file system). After an exit 0, the
  regular files the ``outputs`` globs match (``**`` too) are stored, unless they sum to
  more than ``max_bytes`` (``error``: ``"outputs 123 MB exceed limit 100 MB"``): the
  agent posts ``{"machine", "run", "task", "files": [[path, bytes]]}`` to
  ``<url>/v1/files``, and the answer says where they go: ``{"put": [url]}`` (one per
  file, in order: a path on the controller, authorised, or a full URL such as a
  presigned S3 one, not), or ``{"dir": path}`` (a shared file system: moved there). The
  result then carries ``"stored": [[path, bytes]]``. Any failure is the run's
  ``error``: ``"inputs: ..."`` or ``"outputs: ..."``.
* ``release: true``: the agent kills every run in progress and exits 0 at once.
* ``lease_s``: the agent must not be alive later than ``lease_s`` seconds after it sent
  that request, unless a later response renews the lease. Each response replaces the
  deadline; a null ``lease_s`` removes it. When it passes, the agent kills its runs,
  logs "lease expired" and exits 3. ``renew_in_s``: the agent sends its next request
  no later than that many seconds after sending this one.
* ``heartbeat_s`` (replaces ``--heartbeat-s``): while a run is in progress or queued, the
  agent polls with ``wait_s: 0`` at least that often. When idle it long-polls with
  ``wait_s`` = ``heartbeat_s``, bounded so that the answer is due by the renewal time and
  within half the time left before the lease or orphan deadline; if the controller answers
  early with nothing, the next poll waits until ``heartbeat_s`` after the previous one was
  sent.
* Results are reported many per request. When a run ends and the agent has nothing left
  to start (a slot is free and nothing is queued) it polls at once; while it still has
  queued work it polls when the oldest result not yet sent has waited ``report_s``
  (replaces ``--report-s``, default 0.25 s), or at the heartbeat if that comes first. A
  group of tasks therefore costs a few round trips, not one per task; one task at a time
  still costs one round trip each, sent at once.
* HTTP timeout of a request: ``wait_s`` + 10 s, cut short when the lease, the orphan
  deadline or a run's timeout comes first (the request then counts as failed).
* An ``https`` controller whose certificate does not verify against ``--ca-file`` (or
  the system's CAs without it): the agent logs "controller certificate refused" and
  exits 2 before it sends anything.
* 401 or 403: the agent logs "token refused by the controller" and exits 2. 410: the
  controller does not know this machine; the agent kills its runs and exits 0. Any other
  status, a malformed body, a refused connection or a timeout: retry after 0.05 s,
  doubling up to 2 s. When no request has succeeded for ``--orphan-after-s`` (since the
  last success, or since the first attempt after ``--start-delay-s``), the agent kills
  its runs, logs "controller unreachable" and exits 4.
* SIGTERM or SIGINT: the agent kills every run in progress and exits 0.

* ``--notice-url`` (EC2 spot: ``http://169.254.169.254/latest/meta-data/spot/instance-action``;
  ``{machine}`` in it is replaced by ``--machine``): read every ``--notice-every-s``
  seconds on a thread of its own, with an IMDSv2 session token when the server gives one
  (``PUT /latest/api/token``), else without. 404 (or no answer) means no notice; 200 is
  the notice, ``{"action": ..., "time": ...}``. From then on the agent starts nothing
  new, sends the notice with every request at once (the controller then counts the
  machine gone, puts its tasks back in the bag and answers ``release``), and keeps
  reporting runs that end meanwhile. Where the notice URL ends in
  ``spot/instance-action`` the same thread reads the rebalance recommendation beside it
  (``events/recommendations/rebalance``; 200 is ``{"noticeTime": ...}``); once there is
  one the agent sends it with every request (the controller gives the machine no new
  work and cancels its queued runs; it ends at its paid time) and runs on as before.

Exit codes: 0 released, unknown to the controller or terminated; 2 bad token or usage;
3 lease expired; 4 controller unreachable.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import select
import signal
import socket
import sys
import threading
import time
from collections import deque
from types import FrameType
from typing import IO, TYPE_CHECKING, Any, NamedTuple, NoReturn

if TYPE_CHECKING:
    import argparse
    import http.client
    import subprocess
    from collections.abc import Callable

TOKEN_ENV = "AUTOSCALER_TOKEN"
POLL_PATH = "/v1/poll"
FILES_PATH = "/v1/files"
BLOCK = 1 << 20
LINE_MAX = 65537  # bytes of a status or header line, as http.client
HEADERS_MAX = 100
FILE_ERRORS = (OSError, ValueError, LookupError, TypeError)  # and http_errors()
HTTP_GRACE_S = 10.0
BACKOFF_FIRST_S = 0.05
BACKOFF_MAX_S = 2.0
FIRST_LINE_MAX_CHARS = 200
REGISTER_PATH = "/v1/register"
REPORT_S = 0.25
NOTICE_EVERY_S = 5.0
NOTICE_TIMEOUT_S = 2.0
"""How long a result may wait for others to share its request, while there is work."""

EXIT_OK = 0
EXIT_USAGE = 2
EXIT_LEASE = 3
EXIT_ORPHAN = 4

INFO, WARNING, ERROR = "INFO", "WARNING", "ERROR"  # log levels
_LOG_LOCK = threading.Lock()


def log(level: str, message: str, **fields: object) -> None:
    """Log one line on stderr: UTC time to the millisecond, the level, the message, then
    ``key=value`` pairs. (Not the logging module: it costs a tenth of the start-up.)"""
    parts = [message]
    parts.extend(f"{key}={_field(value)}" for key, value in fields.items() if value is not None)
    now = time.time()
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now))
    line = f"{stamp}.{int(now % 1 * 1000):03d}Z {level} {' '.join(parts)}\n"
    with _LOG_LOCK, contextlib.suppress(OSError, ValueError):  # stderr gone: say nothing
        sys.stderr.write(line)
        sys.stderr.flush()


def _field(value: object) -> str:
    text = seconds(value) if isinstance(value, float) else str(value)
    if not text or any(c.isspace() or c in '"=' for c in text):
        return json.dumps(text)
    return text


def seconds(value: float) -> str:
    """``5.0`` as ``5``, ``0.25`` as ``0.25``: a duration for messages."""
    return f"{value:.3f}".rstrip("0").rstrip(".")


def http_errors(*others: type[Exception]) -> tuple[type[Exception], ...]:
    """``others`` and ``http.client``'s exception class once something imported it (none
    can be raised before): for ``except`` clauses that must not import it."""
    module = sys.modules.get("http.client")
    return (*others, module.HTTPException) if module is not None else others


def distrust(exc: Exception) -> None:
    """Exit (2) if ``exc`` says the controller's certificate is not from the pinned CA:
    not a controller to retry, nor to send results or the token to."""
    ssl = sys.modules.get("ssl")
    if ssl is not None and isinstance(exc, ssl.SSLCertVerificationError):
        raise AgentExit(EXIT_USAGE, "controller certificate refused", ERROR, error=exc.reason)


class BadResponse(ConnectionError):
    """The controller's answer is not HTTP/1.x as :class:`Link` reads it."""


class Link:
    """The keep-alive connection of the polls to an ``http://`` controller: one request at
    a time, the response read by its Content-Length (or to the end, with none). A few
    lines of our own because ``http.client``, with the ``email`` package and ``ssl`` it
    imports, is a third of the agent's start-up, paid by every agent of a fleet at once.
    ``https`` controllers and file transfers use ``http.client``."""

    def __init__(self, host: str, port: int, token: str) -> None:
        self._address = (host, port)
        name = f"[{host}]" if ":" in host else host  # an IPv6 address, as in a URL
        self._head = (
            f"Host: {name}:{port}\r\nAuthorization: Bearer {token}\r\n"
            "Content-Type: application/json\r\n"
        ).encode("latin-1")
        self._sock: socket.socket | None = None
        self._stream: IO[bytes] | None = None

    def post(self, path: str, body: bytes, timeout: float) -> tuple[int, bytes]:
        """(status, body) of ``POST path``; ``OSError`` on any failure (then call close)."""
        sock, stream = self._sock, self._stream
        if sock is None or stream is None:
            sock = socket.create_connection(self._address, timeout)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            stream = sock.makefile("rb")
            self._sock, self._stream = sock, stream
        sock.settimeout(timeout)
        request = b"POST %s HTTP/1.1\r\n%sContent-Length: %d\r\n\r\n" % (
            path.encode("latin-1"),
            self._head,
            len(body),
        )
        sock.sendall(request + body)
        line = stream.readline(LINE_MAX)
        if not line:
            raise ConnectionResetError("the controller closed the connection without an answer")
        version, _, rest = line.partition(b" ")
        if not version.startswith(b"HTTP/1.") or not rest[:3].isdigit():
            raise BadResponse(f"bad status line {line[:80]!r}")
        length: int | None = None
        close = version == b"HTTP/1.0"
        for _ in range(HEADERS_MAX):
            line = stream.readline(LINE_MAX)
            if not line.endswith(b"\n"):
                raise BadResponse("headers cut short or too long")
            if not line.strip():
                break
            name, _, value = line.partition(b":")
            name, value = name.strip().lower(), value.strip().lower()
            if name == b"content-length":
                if not value.isdigit():
                    raise BadResponse(f"bad Content-Length {value[:40]!r}")
                length = int(value)
            elif name == b"connection":
                close = value == b"close" or (close and value != b"keep-alive")
            elif name == b"transfer-encoding" and value != b"identity":
                raise BadResponse(f"Transfer-Encoding {value[:40]!r} is not read")
        else:
            raise BadResponse(f"more than {HEADERS_MAX} header lines")
        data = stream.read(length) if length is not None else stream.read()
        if length is not None and len(data) < length:
            raise ConnectionResetError(f"answer cut short: {len(data)} of {length} bytes")
        if close or length is None:
            self.close()
        return int(rest[:3]), data

    def close(self) -> None:
        if self._stream is not None:
            with contextlib.suppress(OSError):
                self._stream.close()
        if self._sock is not None:
            with contextlib.suppress(OSError):
                self._sock.close()
        self._sock = self._stream = None


class AgentExit(Exception):
    """Stop the agent: kill its runs, log ``message``, exit with ``code``."""

    def __init__(self, code: int, message: str, level: str, **fields: object) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.level = level
        self.fields = fields


class Config(NamedTuple):
    """What the command line says."""

    scheme: str
    host: str
    port: int | None
    path: str
    machine: str
    workdir: str
    heartbeat_s: float
    orphan_after_s: float
    start_delay_s: float
    tail_bytes: int
    slots: int = 1
    report_s: float = REPORT_S
    notice_url: str | None = None
    notice_every_s: float = NOTICE_EVERY_S
    ca_file: str | None = None
    register: bool = False  # the token is the launch's: register the machine first


NOTICE_PATH = "spot/instance-action"
REBALANCE_PATH = "events/recommendations/rebalance"


def rebalance_url(notice_url: str) -> str | None:
    """Where the rebalance recommendation is, beside the notice at ``notice_url`` (None:
    a notice URL of another shape)."""
    if not notice_url.endswith(NOTICE_PATH):
        return None
    return notice_url[: -len(NOTICE_PATH)] + REBALANCE_PATH


def read_notice(url: str, timeout: float = NOTICE_TIMEOUT_S) -> dict[str, str] | None:
    """The interruption notice at ``url``, or None (404, no answer, any error)."""
    data = read_metadata(url, timeout)
    if data is None:
        return None
    return {
        "action": str(data.get("action", "terminate"))[:40],
        "time": str(data.get("time", ""))[:40],
    }


def read_rebalance(url: str, timeout: float = NOTICE_TIMEOUT_S) -> dict[str, str] | None:
    """The rebalance recommendation at ``url``, or None (404, no answer, any error)."""
    data = read_metadata(url, timeout)
    return None if data is None else {"time": str(data.get("noticeTime", ""))[:40]}


def read_metadata(url: str, timeout: float = NOTICE_TIMEOUT_S) -> dict[str, Any] | None:
    """The JSON object at ``url`` ({} if it is not one), or None (404, no answer, any
    error). EC2's instance metadata: an IMDSv2 token first (``PUT /latest/api/token``),
    and without one if the server does not give it (IMDSv1). Proxies are never used."""
    import http.client  # here: with ssl and email they cost a start-up most agents never use
    import urllib.parse
    import urllib.request

    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    parts = urllib.parse.urlsplit(url)
    headers: dict[str, str] = {}
    ask = urllib.request.Request(
        f"{parts.scheme}://{parts.netloc}/latest/api/token",
        method="PUT",
        headers={"X-aws-ec2-metadata-token-ttl-seconds": "300"},
    )
    try:
        with opener.open(ask, timeout=timeout) as answer:
            headers["X-aws-ec2-metadata-token"] = answer.read(4096).decode().strip()
    except (OSError, ValueError, http.client.HTTPException):
        pass  # no IMDSv2 here: ask without a token
    try:
        with opener.open(urllib.request.Request(url, headers=headers), timeout=timeout) as r:
            text = r.read(4096).decode("utf-8", "replace")
    except (OSError, ValueError, http.client.HTTPException):
        return None  # 404: no notice; or no answer
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        data = {}
    return data if isinstance(data, dict) else {}


class NoticeWatcher(threading.Thread):
    """Reads the interruption notice (and the rebalance recommendation, if it has its
    URL) every ``every_s`` seconds until there is a notice; keeps what it finds and
    wakes the poll loop as a child's end does (SIGCHLD)."""

    def __init__(self, url: str, every_s: float, rebalance: str | None = None) -> None:
        super().__init__(name="notice", daemon=True)
        self._url = url
        self._rebalance_url = rebalance
        self._every_s = every_s
        self._stopped = threading.Event()
        self.notice: dict[str, str] | None = None
        self.rebalance: dict[str, str] | None = None

    def stop(self) -> None:
        self._stopped.set()

    def run(self) -> None:
        while not self._stopped.is_set():
            if self._rebalance_url is not None and self.rebalance is None:
                self.rebalance = read_rebalance(self._rebalance_url)
                if self.rebalance is not None:
                    os.kill(os.getpid(), signal.SIGCHLD)
            found = read_notice(self._url)
            if found is not None:
                self.notice = found
                os.kill(os.getpid(), signal.SIGCHLD)
                return
            self._stopped.wait(self._every_s)


class Task(NamedTuple):
    """A run to do: exactly one of ``command`` and ``sleep_s`` is set."""

    run: int
    task: int
    command: str | None
    sleep_s: float | None
    env: dict[str, str]
    cwd: str | None
    timeout_s: float | None
    files: dict[str, Any] | None = None


class Result(NamedTuple):
    """How a run ended, as sent to the controller."""

    run: int
    task: int
    exit_code: int | None
    runtime_s: float
    stdout: str
    stderr: str
    error: str | None
    stored: list[list[Any]] | None = None

    def to_json(self) -> dict[str, object]:
        out = self._asdict()
        if self.stored is None:
            del out["stored"]
        return out


class Reply(NamedTuple):
    """A 200 response; ``rejected`` are results for task records that were malformed."""

    epoch: str | None
    ack: bool
    tasks: list[Task]
    rejected: list[Result]
    cancel: list[int]
    release: bool
    lease_s: float | None
    renew_in_s: float | None
    heartbeat_s: float | None
    slots: int | None
    report_s: float | None
    setup: Setup | None = None


class Setup(NamedTuple):
    """Commands to run once, in order, before any task (``setup`` in a reply)."""

    commands: tuple[str, ...]
    timeout_s: float | None


def parse_setup(obj: dict[str, Any]) -> Setup | None:
    raw = obj.get("setup")
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise ValueError(f"setup must be an object or null, got {raw!r}")
    commands = _list(raw, "commands")
    if not all(isinstance(c, str) for c in commands):
        raise ValueError(f"setup.commands must list strings, got {commands!r}")
    return Setup(tuple(commands), _opt_float(raw, "timeout_s"))


class Outputs(NamedTuple):
    """A pair of temporary files a run's stdout and stderr go to, reused run after run."""

    out: IO[bytes]
    err: IO[bytes]

    @classmethod
    def new(cls) -> Outputs:
        with contextlib.ExitStack() as stack:
            out = stack.enter_context(temp_file())
            err = stack.enter_context(temp_file())
            stack.pop_all()
        return cls(out, err)

    def empty(self) -> None:
        """Ready for the next run: truncated, the offset it shares with children at 0
        (unbuffered files: reads go through ``os.pread``, nothing cached). An empty file
        is not truncated: that would still write the inode (a journal entry per task)."""
        for stream in (self.out, self.err):
            fd = stream.fileno()
            if os.fstat(fd).st_size:
                os.ftruncate(fd, 0)
            os.lseek(fd, 0, os.SEEK_SET)

    def close(self) -> None:
        self.out.close()
        self.err.close()


def temp_file() -> IO[bytes]:
    """An unnamed, unbuffered file for a run's output: ``O_TMPFILE`` in ``$TMPDIR`` or
    /tmp where the system has it, else ``tempfile.TemporaryFile``. (The imports of
    ``tempfile``, ``shutil``, ``glob`` and ``subprocess`` wait for their first use: an
    agent that runs plain commands never pays them.)"""
    flags = getattr(os, "O_TMPFILE", 0)
    if flags:
        try:
            fd = os.open(os.environ.get("TMPDIR") or "/tmp", flags | os.O_RDWR, 0o600)
        except OSError:
            pass
        else:
            return open(fd, "r+b", buffering=0)  # the caller closes it
    import tempfile

    return tempfile.TemporaryFile(buffering=0)


class Process(NamedTuple):
    """A command's shell, leader of its own process group, and its output files."""

    proc: Child | subprocess.Popen[bytes]
    outputs: Outputs

    def kill(self) -> None:
        """SIGKILL the whole process group and reap the leader."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()


class Current(NamedTuple):
    """A run in progress: a process, or a synthetic sleep until ``ends_at``.

    ``deadline`` is when its ``timeout_s`` passes (infinity without one).
    """

    task: Task
    started: float
    process: Process | None
    ends_at: float
    deadline: float


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _int(obj: dict[str, Any], key: str) -> int:
    value = obj.get(key)
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(f"{key} must be an integer, got {value!r}")
    return value


def _opt_float(obj: dict[str, Any], key: str) -> float | None:
    value = obj.get(key)
    if value is None:
        return None
    if not _is_number(value) or not math.isfinite(value) or value < 0:
        raise ValueError(f"{key} must be a non-negative number or null, got {value!r}")
    return float(value)


def _opt_str(obj: dict[str, Any], key: str) -> str | None:
    value = obj.get(key)
    if value is None or isinstance(value, str):
        return value
    raise ValueError(f"{key} must be a string or null, got {value!r}")


def _list(obj: dict[str, Any], key: str) -> list[Any]:
    value = obj.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise ValueError(f"{key} must be a list, got {value!r}")
    return value


def parse_task(raw: object) -> Task | Result:
    """A task record, or a ``bad task`` result when only its run and task ids are sound."""
    if not isinstance(raw, dict):
        raise ValueError(f"a task must be an object, got {raw!r}")
    run = _int(raw, "run")
    task = _int(raw, "task")
    try:
        command = _opt_str(raw, "command")
        sleep_s = _opt_float(raw, "sleep_s")
        if (command is None) == (sleep_s is None):
            raise ValueError("exactly one of command and sleep_s must be set")
        env = raw.get("env") or {}
        if not isinstance(env, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in env.items()
        ):
            raise ValueError("env must map strings to strings")
        return Task(
            run=run,
            task=task,
            command=command,
            sleep_s=sleep_s,
            env=dict(env),
            cwd=_opt_str(raw, "cwd"),
            timeout_s=_opt_float(raw, "timeout_s"),
            files=_files(raw.get("files")),
        )
    except ValueError as exc:
        return Result(run, task, None, 0.0, "", "", f"bad task: {exc}")


def _files(raw: object) -> dict[str, Any] | None:
    if raw is not None and not isinstance(raw, dict):
        raise ValueError("files must be an object or null")
    return raw


def _rmtree(path: str, ignore_errors: bool) -> None:
    import shutil

    shutil.rmtree(path, ignore_errors)


def move(source: str, target: str) -> None:
    import shutil

    shutil.move(source, target)


def collect(cwd: str, patterns: list[str]) -> list[list[Any]]:
    """The regular files under ``cwd`` that ``patterns`` match: [[path, bytes]], sorted."""
    import glob

    found = {p for g in patterns for p in glob.glob(g, root_dir=cwd, recursive=True)}
    paths = [os.path.join(cwd, p) for p in sorted(found)]
    return [[p[len(cwd) + 1 :], os.path.getsize(p)] for p in paths if os.path.isfile(p)]


def parse_reply(data: bytes) -> Reply:
    """Read a 200 response body; ``ValueError`` when it is not a valid reply."""
    obj = json.loads(data)
    if not isinstance(obj, dict):
        raise ValueError("the response is not a JSON object")
    epoch = _opt_str(obj, "epoch")
    tasks: list[Task] = []
    rejected: list[Result] = []
    for raw in _list(obj, "tasks"):
        parsed = parse_task(raw)
        if isinstance(parsed, Task):
            tasks.append(parsed)
        else:
            rejected.append(parsed)
    cancel = _list(obj, "cancel")
    if not all(_is_int(run) for run in cancel):
        raise ValueError(f"cancel must list run ids, got {cancel!r}")
    heartbeat_s = _opt_float(obj, "heartbeat_s")
    return Reply(
        epoch=epoch,
        ack=obj.get("ack") is True,
        tasks=tasks,
        rejected=rejected,
        cancel=[int(run) for run in cancel],
        release=obj.get("release") is True,
        lease_s=_opt_float(obj, "lease_s"),
        renew_in_s=_opt_float(obj, "renew_in_s"),
        heartbeat_s=heartbeat_s if heartbeat_s else None,
        slots=_opt_slots(obj),
        report_s=_opt_float(obj, "report_s"),
        setup=parse_setup(obj),
    )


def _opt_slots(obj: dict[str, Any]) -> int | None:
    value = obj.get("slots")
    if value is None:
        return None
    if not _is_int(value) or value < 1:
        raise ValueError(f"slots must be a positive integer or null, got {value!r}")
    return int(value)


def read_tail(stream: IO[bytes], limit: int) -> str:
    """The last ``limit`` bytes of a file, decoded; a character cut at the start is dropped."""
    fd = stream.fileno()
    size = os.fstat(fd).st_size
    if size == 0 or limit <= 0:
        return ""
    start = max(0, size - limit)
    data = os.pread(fd, limit, start)
    if start > 0:
        skip = 0
        while skip < min(3, len(data)) and data[skip] & 0xC0 == 0x80:
            skip += 1
        data = data[skip:]
    return data.decode("utf-8", errors="replace")


def read_first_line(stream: IO[bytes]) -> str:
    """The first line of a file, stripped and bounded."""
    head = os.pread(stream.fileno(), FIRST_LINE_MAX_CHARS * 4, 0).split(b"\n", 1)[0]
    return head.decode("utf-8", errors="replace").strip()[:FIRST_LINE_MAX_CHARS]


def describe_exit(code: int, stderr_first_line: str) -> str | None:
    """The ``error`` of a result whose process exited with ``code``."""
    if code == 0:
        return None
    if code == 127:
        detail = f": {stderr_first_line}" if stderr_first_line else ""
        return f"exit 127: command not found{detail}"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = str(-code)
        return f"killed by signal {name}"
    return f"exit {code}"


SHELL = "/bin/sh"
FOUND_MAX = 1024  # programs whose place on the PATH is kept
PLAIN = re.compile(r"[A-Za-z0-9_./:,+@%-]+(?: +[A-Za-z0-9_./:,+@%=-]+)*")
"""A command line the shell would only split into words: no quoting, expansion,
redirection, operator, assignment or comment. Such a line runs without ``sh``."""
SHELL_ONLY = frozenset(
    {".", ":", "[", "alias", "bg", "break", "cd", "command", "continue", "echo", "eval"}
    | {"exec", "exit", "export", "fc", "fg", "getopts", "hash", "jobs", "kill", "local"}
    | {"printf", "pwd", "read", "readonly", "return", "set", "shift", "source", "test"}
    | {"times", "trap", "type", "ulimit", "umask", "unalias", "unset", "wait"}
)
"""Builtins whose program namesake differs (``echo -e``, ``pwd``, ``kill %1``) or that
exist only in the shell: a line starting with one runs in ``sh``. ``true`` and
``false`` are the same either way."""
WAKE = (signal.SIGCHLD,)
RESET_SIGNALS = (signal.SIGPIPE, signal.SIGXFSZ)
"""Python ignores them; a task's shell gets them back at their default, as with Popen."""


class Child:
    """A shell started with ``os.posix_spawn``: what the agent uses of ``Popen``."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None  # set by Agent._reap, or:

    def wait(self) -> None:
        if self.returncode is None:
            self.returncode = os.waitstatus_to_exitcode(os.waitpid(self.pid, 0)[1])


class Spawner:
    """Starts ``sh -c command`` in a new session, stdin from /dev/null, output in
    ``outputs``, in ``cwd`` (the agent moves there: it uses no relative path) with ``env``
    added. With ``os.posix_spawn`` (half the agent's CPU per task of ``Popen``; glibc
    leaves its internal signals 32 and 33 ignored in the shell, as in all it starts so),
    else (no ``setsid``, no /proc to keep the agent's inherited fds from tasks) ``Popen``.

    A plain command line (``PLAIN``: words only) is started as its program, found on
    the ``PATH``, with no shell between, as make does: ``sh -c 'sleep 1'`` forks and
    runs sleep as a second program, which doubles the CPU a short task costs (2.8 ms
    against 1.5 ms for ``sleep 0.01`` here). Where the program cannot be started so (not
    found, not executable, a script without ``#!``), ``sh`` runs the line, and says
    what it says."""

    def __init__(self) -> None:
        self.devnull = os.open(os.devnull, os.O_RDONLY)  # not inherited, as every fd of ours
        self.environ = dict(os.environb)  # encoded once: the agent's, the token left out
        self.fast = hasattr(os, "posix_spawn")
        self._found: dict[tuple[str, str | None], str | None] = {}  # program -> its path
        try:  # what Popen's close_fds did: fds the agent was started with stay here
            for fd in map(int, os.listdir("/proc/self/fd")):
                if fd > 2:
                    with contextlib.suppress(OSError):  # the listing's own fd, closed
                        os.set_inheritable(fd, False)
        except OSError:
            self.fast = False

    def __call__(self, command: str, cwd: str, env: dict[str, str], outputs: Outputs) -> Process:
        if self.fast:
            os.chdir(cwd)  # the run's directory, as Popen's cwd (the same error if missing)
            try:
                environ = (
                    {**self.environ, **{os.fsencode(k): os.fsencode(v) for k, v in env.items()}}
                    if env
                    else self.environ
                )
                files = [
                    (os.POSIX_SPAWN_DUP2, self.devnull, 0),
                    (os.POSIX_SPAWN_DUP2, outputs.out.fileno(), 1),
                    (os.POSIX_SPAWN_DUP2, outputs.err.fileno(), 2),
                ]
                argv = self.plain(command, env)
                if argv is not None:
                    try:
                        return Process(Child(self._start(argv, environ, files)), outputs)
                    except OSError:  # sh runs it and says why it cannot
                        pass
                pid = self._start([SHELL, "-c", command], environ, files)
                return Process(Child(pid), outputs)
            except NotImplementedError:  # no POSIX_SPAWN_SETSID here
                self.fast = False
        import subprocess

        mask = signal.pthread_sigmask(signal.SIG_SETMASK, ())  # the shell's, as setsigmask
        try:
            proc = subprocess.Popen(
                command,
                shell=True,
                cwd=cwd,
                env={**os.environ, **env} if env else None,  # inherit: no per-variable work
                stdin=self.devnull,
                stdout=outputs.out,
                stderr=outputs.err,
                start_new_session=True,
            )
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        if mask:  # a child's end while SIGCHLD was unblocked was lost: wake the wait anyway
            os.kill(os.getpid(), signal.SIGCHLD)
        return Process(proc, outputs)

    @staticmethod
    def _start(argv: list[str], environ: Any, files: list[Any]) -> int:
        return os.posix_spawn(
            argv[0],
            argv,
            environ,
            file_actions=files,
            setsid=True,
            setsigmask=(),
            setsigdef=RESET_SIGNALS,
        )

    def plain(self, command: str, env: dict[str, str]) -> list[str] | None:
        """The argv a plain command line runs as, its program found on the ``PATH`` (the
        task's, if it sets one); None where it needs ``sh``."""
        if not PLAIN.fullmatch(command):
            return None
        argv = command.split()
        if argv[0] in SHELL_ONLY:
            return None
        path = env.get("PATH") if env else None
        key = (argv[0], path)
        if key in self._found:
            found = self._found[key]
        else:
            found = argv[0] if "/" in argv[0] else which(argv[0], path)
            if found is not None and "/" not in argv[0] and not os.path.isabs(found):
                found = None  # a relative PATH entry: it depends on the task's cwd
            if len(self._found) < FOUND_MAX:
                self._found[key] = found
        if found is None:
            return None
        return [found, *argv[1:]]

    def close(self) -> None:
        os.close(self.devnull)


def which(program: str, path: str | None) -> str | None:
    """Where ``program`` (a name, no slash) is on ``path`` (None: ours), as
    ``shutil.which`` on POSIX finds it: the first entry with an executable file of
    that name."""
    if path is None:
        path = os.environ.get("PATH", os.defpath)
    for entry in path.split(os.pathsep):
        candidate = os.path.join(entry, program)
        if os.access(candidate, os.X_OK) and not os.path.isdir(candidate):
            return candidate
    return None


def _on_child(signum: int, frame: FrameType | None) -> None:
    """SIGCHLD without ``sigtimedwait``: the wake-up pipe has woken the wait."""


class Agent:
    """The poll loop: one thread, up to ``slots`` runs at once, every wait bounded by what
    is due. A child's exit (SIGCHLD, kept blocked) ends the wait: ``signal.sigtimedwait``
    takes it in one system call, where a Python handler, a wake-up pipe written from it,
    ``select`` and a read took five (without ``sigtimedwait``, as on macOS: those)."""

    def __init__(self, config: Config, token: str) -> None:
        self._config = config
        self._token = token
        self._host = socket.gethostname()
        self._queue: deque[Task] = deque()
        self._running: dict[int, Current] = {}  # by run, in the order they started
        self._slots = config.slots
        self._report_s = config.report_s
        self._spare: list[Outputs] = []  # output files of ended runs, for the next ones
        self._spawn = Spawner()
        self._results: list[Result] = []
        self._fresh = False  # a result not yet sent in any request
        self._report_by: float | None = None  # when the oldest fresh result must go
        self._epoch: str | None = None
        self._heartbeat_s = config.heartbeat_s
        self._lease_deadline: float | None = None
        self._renew_at: float | None = None
        self._last_success = 0.0
        self._last_sent: float | None = None
        self._poll_now = True
        self._retry_at: float | None = None
        self._backoff_s = BACKOFF_FIRST_S
        self._failures = 0
        self._link: Link | None = None  # polls to an http:// controller
        self._conn: http.client.HTTPConnection | None = None  # https polls, files
        self._signalled: int | None = None
        self._deferring_signals = False
        self._wake_r = -1
        self._watcher: NoticeWatcher | None = None
        self._setup: Setup | None = None  # asked for by the controller
        self._setup_next = 0  # the command to run next
        self._setup_proc: Process | None = None
        self._setup_began = 0.0  # the first command's start
        self._setup_said: dict[str, Any] | None = None  # what the requests say of it
        self._notice: dict[str, str] | None = None  # the provider takes the machine back
        self._rebalance: dict[str, str] | None = None  # the provider recommends a rebalance

    def run(self) -> int:
        """Work until released, refused, orphaned, out of lease or signalled; the exit code."""
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)
        if hasattr(signal, "sigtimedwait"):
            signal.pthread_sigmask(signal.SIG_BLOCK, WAKE)  # pending until _wait takes it
        else:
            self._wake_r, wake_w = os.pipe()
            os.set_blocking(wake_w, False)
            signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)
            signal.signal(signal.SIGCHLD, _on_child)
        config = self._config
        try:
            log(
                INFO,
                "agent started",
                machine=config.machine,
                controller=f"{config.scheme}://{config.host}"
                + (f":{config.port}" if config.port else ""),
                pid=os.getpid(),
                slots=self._slots,
            )
            if config.notice_url:
                url = config.notice_url.replace("{machine}", config.machine)
                self._watcher = NoticeWatcher(url, config.notice_every_s, rebalance_url(url))
                self._watcher.start()
            if config.start_delay_s > 0:
                time.sleep(config.start_delay_s)
            self._last_success = time.monotonic()
            if config.register:
                self._register()
            self._loop()
        except AgentExit as stop:
            self._deferring_signals = True
            self._kill_all()
            log(stop.level, stop.message, machine=config.machine, **stop.fields)
            return stop.code
        finally:
            if self._watcher is not None:
                self._watcher.stop()
            self._close()
            signal.pthread_sigmask(signal.SIG_UNBLOCK, WAKE)
            signal.set_wakeup_fd(-1)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            for outputs in self._spare:
                outputs.close()
            self._spawn.close()

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self._signalled = signum
        if not self._deferring_signals:
            self._raise_if_signalled()

    def _raise_if_signalled(self) -> None:
        if self._signalled is not None:
            name = signal.Signals(self._signalled).name
            raise AgentExit(EXIT_OK, "terminated", INFO, signal=name)

    def _register(self) -> None:
        """Exchange the launch's token for the machine's (see the protocol)."""
        config = self._config
        body = json.dumps({"machine": config.machine, "nonce": os.urandom(16).hex()}).encode()
        path = config.path[: -len(POLL_PATH)] + REGISTER_PATH
        while True:
            now = time.monotonic()
            if now - self._last_success > config.orphan_after_s:
                raise AgentExit(EXIT_ORPHAN, "controller unreachable", ERROR)
            try:
                status, data = self._post(body, HTTP_GRACE_S, path)
                if status == 200:
                    token = json.loads(data)["token"]
                    if isinstance(token, str) and token:
                        self._close()
                        self._token = token
                        self._succeeded()
                        log(INFO, "machine registered", machine=config.machine)
                        return
            except http_errors(OSError, ValueError, LookupError, TypeError) as exc:
                self._close()
                distrust(exc)
                status = -1
                data = f"{type(exc).__name__}: {exc}".encode()
            if status in (401, 403):
                raise AgentExit(EXIT_USAGE, "registration refused", ERROR, status=status)
            if status == 410:
                raise AgentExit(EXIT_OK, "machine unknown to the controller", WARNING)
            self._failed(f"register: HTTP {status}" if status > 0 else data.decode())
            time.sleep(max(0.0, (self._retry_at or now) - time.monotonic()))

    def _loop(self) -> NoReturn:
        while True:
            now = time.monotonic()
            self._check_deadlines(now)
            self._check_notice()
            self._advance(now)
            due = self._next_poll_at()
            if now >= due:
                self._poll()
            else:
                self._wait(due)

    def _check_deadlines(self, now: float) -> None:
        if self._lease_deadline is not None and now >= self._lease_deadline:
            raise AgentExit(EXIT_LEASE, "lease expired", ERROR)
        if now >= self._last_success + self._config.orphan_after_s:
            raise AgentExit(
                EXIT_ORPHAN,
                "controller unreachable",
                ERROR,
                silent_s=now - self._last_success,
            )

    def _check_notice(self) -> None:
        """The provider's notice, once: start nothing more and tell the controller now.
        Its rebalance recommendation, once: tell the controller now."""
        watcher = self._watcher
        if watcher is not None and self._rebalance is None and watcher.rebalance is not None:
            self._rebalance = watcher.rebalance
            self._poll_now = True
            self._retry_at = None
            log(WARNING, "rebalance recommendation", **self._rebalance)
        if self._notice is not None or watcher is None or watcher.notice is None:
            return
        self._notice = watcher.notice
        self._poll_now = True
        self._retry_at = None
        log(WARNING, "interruption notice", **self._notice)

    def _must_act_by(self) -> float:
        """The earliest moment something must be done whatever the controller says."""
        moment = self._last_success + self._config.orphan_after_s
        if self._lease_deadline is not None:
            moment = min(moment, self._lease_deadline)
        for current in self._running.values():
            moment = min(moment, current.deadline)
        return moment

    def _next_poll_at(self) -> float:
        if self._retry_at is not None:
            return self._retry_at
        if self._poll_now or self._last_sent is None:
            return -math.inf
        due = self._last_sent + self._heartbeat_s
        if self._renew_at is not None:
            due = min(due, self._renew_at)
        if self._report_by is not None:
            due = min(due, self._report_by)
        return due

    def _wait(self, until: float) -> None:
        limit = min(until, self._must_act_by())
        setup = self._setup
        if self._setup_proc is not None and setup is not None and setup.timeout_s is not None:
            limit = min(limit, self._setup_began + setup.timeout_s)
        for current in self._running.values():
            limit = min(limit, current.ends_at)
        timeout = limit - time.monotonic()
        if timeout <= 0:
            return
        if self._wake_r < 0:  # until a child ends or the notice comes (SIGCHLD both)
            signal.sigtimedwait(WAKE, timeout)
        elif select.select([self._wake_r], [], [], timeout)[0]:
            os.read(self._wake_r, 4096)

    def _reap(self) -> None:
        """Take the exit codes of the shells that ended: one wait each, and one more only
        while some still run (the agent's children are its runs' and its set-up's shells)."""
        live = [c.process.proc for c in self._running.values() if c.process is not None]
        live += [self._setup_proc.proc] if self._setup_proc is not None else []
        try:
            while live and (ended := os.waitpid(-1, os.WNOHANG))[0]:
                for proc in live:
                    if proc.pid == ended[0]:
                        proc.returncode = os.waitstatus_to_exitcode(ended[1])
                        live.remove(proc)
                        break
        except ChildProcessError:  # no child at all
            pass

    def _advance(self, now: float) -> None:
        self._reap()
        self._advance_setup(now)
        for current in list(self._running.values()):
            process = current.process
            code = process.proc.returncode if process is not None else None
            if code is not None:
                self._exited(current, code, now)
            elif now >= current.deadline and current.deadline < current.ends_at:
                self._time_out(current, now)
            elif now >= current.ends_at:
                self._finish(current, 0, current.ends_at - current.started, None)
        while len(self._running) < self._slots and self._queue and self._ready():
            self._start(self._queue.popleft())
        if self._fresh and len(self._running) < self._slots and not self._queue:
            self._poll_now = True  # out of work to start: report now, ask for more

    def _ready(self) -> bool:
        """Whether runs may start: no notice, and the set-up (if asked for) done."""
        said = self._setup_said
        return self._notice is None and (said is None or said["state"] == "done")

    def _advance_setup(self, now: float) -> None:
        """Run the set-up's commands one after the other; say how it ended."""
        setup = self._setup
        if setup is None or self._setup_said is None or self._setup_said["state"] != "running":
            return
        proc = self._setup_proc
        if proc is not None:
            code = proc.proc.returncode
            late = setup.timeout_s is not None and now - self._setup_began > setup.timeout_s
            if code is None and not late:
                return
            proc.kill()
            command = setup.commands[self._setup_next]
            if code != 0:
                stdout = read_tail(proc.outputs.out, self._config.tail_bytes)
                stderr = read_tail(proc.outputs.err, self._config.tail_bytes)
                error = (
                    f"timed out after {seconds(setup.timeout_s or 0.0)}s"
                    if code is None
                    else describe_exit(code, read_first_line(proc.outputs.err))
                )
                self._recycle(proc.outputs)
                self._setup_proc = None
                self._setup_failed(now, command, code, error, stdout, stderr)
                return
            self._recycle(proc.outputs)
            self._setup_proc = None
            self._setup_next += 1
        if self._setup_next >= len(setup.commands):
            self._setup_said = {"state": "done", "seconds": round(now - self._setup_began, 3)}
            self._poll_now = True
            log(INFO, "set-up done", seconds=self._setup_said["seconds"])
            return
        outputs = self._spare.pop() if self._spare else Outputs.new()
        try:
            self._setup_proc = self._spawn(
                setup.commands[self._setup_next], self._config.workdir, {}, outputs
            )
        except (OSError, ValueError) as exc:
            self._recycle(outputs)
            self._setup_failed(now, setup.commands[self._setup_next], None, f"cannot start: {exc}")

    def _setup_failed(
        self,
        now: float,
        command: str,
        code: int | None,
        error: str | None,
        out: str = "",
        err: str = "",
    ) -> None:
        """The set-up ends as failed: say so in every request from now on."""
        self._setup_said = {
            "state": "failed",
            "command": command[:500],
            "exit_code": code,
            "error": error,
            "stdout": out,
            "stderr": err,
            "seconds": round(now - self._setup_began, 3),
        }
        self._poll_now = True
        log(ERROR, "set-up failed", command=command[:200], error=error)

    def _start(self, task: Task) -> None:
        now = time.monotonic()
        deadline = now + task.timeout_s if task.timeout_s is not None else math.inf
        if task.command is None:
            ends_at = now + (task.sleep_s or 0.0)
            self._running[task.run] = Current(task, now, None, ends_at, deadline)
            return
        workdir = self._config.workdir
        cwd = os.path.join(workdir, task.cwd) if task.cwd else workdir
        if task.files is not None:
            try:
                self._inputs(cwd, task.files)
            except http_errors(*FILE_ERRORS) as exc:
                self._close()
                result = Result(task.run, task.task, None, 0.0, "", "", f"inputs: {exc}")
                self._add_result(result, now)
                _rmtree(cwd, True)
                return
        outputs = self._spare.pop() if self._spare else Outputs.new()
        self._deferring_signals = True
        try:
            process = self._spawn(task.command, cwd, task.env, outputs)
        except (OSError, ValueError) as exc:
            self._spare.append(outputs)
            error = f"cannot start: {exc}"
            self._add_result(Result(task.run, task.task, None, 0.0, "", "", error), now)
            log(WARNING, "run cannot start", run=task.run, task=task.task, error=exc)
        else:
            self._running[task.run] = Current(task, now, process, math.inf, deadline)
        self._deferring_signals = False
        self._raise_if_signalled()

    def _exited(self, current: Current, code: int, now: float) -> None:
        first_line = ""
        if current.process is not None:
            current.process.kill()
            if code == 127:
                first_line = read_first_line(current.process.outputs.err)
        self._finish(current, code, now - current.started, describe_exit(code, first_line))

    def _time_out(self, current: Current, now: float) -> None:
        if current.process is not None:
            current.process.kill()
        error = f"timed out after {seconds(current.task.timeout_s or 0.0)}s"
        self._finish(current, None, now - current.started, error)

    def _finish(
        self, current: Current, code: int | None, runtime_s: float, error: str | None
    ) -> None:
        stdout = stderr = ""
        if current.process is not None:
            outputs = current.process.outputs
            stdout = read_tail(outputs.out, self._config.tail_bytes)
            stderr = read_tail(outputs.err, self._config.tail_bytes)
            self._recycle(outputs)
        task = current.task
        del self._running[task.run]
        runtime_s = round(runtime_s, 6)
        stored = None
        if task.files is not None:
            if error is None:
                stored, error = self._outputs(task, self._cwd(task))
            _rmtree(self._cwd(task), True)
        result = Result(task.run, task.task, code, runtime_s, stdout, stderr, error, stored)
        self._add_result(result, time.monotonic())
        if error is not None:
            log(
                WARNING,
                "run failed",
                run=task.run,
                task=task.task,
                exit_code=code,
                runtime_s=runtime_s,
                error=error,
            )

    def _add_result(self, result: Result, now: float) -> None:
        """Keep ``result`` until acknowledged; it goes in a request within ``report_s``."""
        self._results.append(result)
        self._fresh = True
        if self._report_by is None:
            self._report_by = now + self._report_s

    def _recycle(self, outputs: Outputs) -> None:
        try:
            outputs.empty()
        except OSError:
            outputs.close()
        else:
            self._spare.append(outputs)

    def _cwd(self, task: Task) -> str:
        return os.path.join(self._config.workdir, task.cwd or "")

    def _kill(self, current: Current) -> None:
        if current.process is not None:
            current.process.kill()
            self._recycle(current.process.outputs)
        if current.task.files is not None:
            _rmtree(self._cwd(current.task), True)
        del self._running[current.task.run]
        log(INFO, "run killed", run=current.task.run, task=current.task.task)

    def _kill_all(self) -> None:
        if self._setup_proc is not None:
            self._setup_proc.kill()
            self._setup_proc = None
        for current in list(self._running.values()):
            self._kill(current)

    def _cancel(self, run: int) -> None:
        current = self._running.get(run)
        if current is not None:
            self._kill(current)
            if not self._queue:
                self._poll_now = True
            return
        for task in self._queue:
            if task.run == run:
                self._queue.remove(task)
                log(INFO, "run dropped from the queue", run=run, task=task.task)
                return

    def _long_poll_s(self, now: float) -> float:
        wait_s = self._heartbeat_s
        if self._renew_at is not None:
            wait_s = min(wait_s, self._renew_at - now)
        if self._lease_deadline is not None:
            wait_s = min(wait_s, (self._lease_deadline - now) / 2)
        wait_s = min(wait_s, (self._last_success + self._config.orphan_after_s - now) / 2)
        return max(0.0, wait_s)

    def _poll(self) -> None:
        now = time.monotonic()
        idle = not self._running and not self._queue and self._setup_proc is None
        wait_s = self._long_poll_s(now) if idle else 0.0
        running = [*self._running, *[task.run for task in self._queue]]
        sent = len(self._results)
        body = {
            "machine": self._config.machine,
            "pid": os.getpid(),
            "host": self._host,
            "epoch": self._epoch,
            "results": [result.to_json() for result in self._results],
            "running": running,
            "wait_s": wait_s,
        }
        if self._notice is not None:
            body["notice"] = self._notice
        if self._rebalance is not None:
            body["rebalance"] = self._rebalance
        if self._setup_said is not None:
            body["setup"] = self._setup_said
        http_timeout = wait_s + HTTP_GRACE_S
        local_s = self._must_act_by() - now
        self._last_sent = now
        self._poll_now = False
        self._fresh = False
        self._report_by = None
        try:
            status, data = self._post(
                json.dumps(body, separators=(",", ":")).encode(),
                max(min(http_timeout, local_s), 0.001),
            )
        except http_errors(OSError) as exc:
            self._close()
            distrust(exc)
            if isinstance(exc, TimeoutError) and local_s < http_timeout:
                return
            self._failed(f"{type(exc).__name__}: {exc}")
            return
        if status in (401, 403):
            raise AgentExit(EXIT_USAGE, "token refused by the controller", ERROR, status=status)
        if status == 410:
            raise AgentExit(EXIT_OK, "machine unknown to the controller", WARNING)
        if status != 200:
            self._failed(f"HTTP {status}")
            return
        try:
            reply = parse_reply(data)
        except ValueError as exc:
            self._failed(f"bad response: {exc}")
            return
        self._succeeded()
        self._apply(reply, now, sent)

    def _post(self, payload: bytes, timeout: float, path: str = "") -> tuple[int, bytes]:
        config = self._config
        path = path or config.path
        if config.scheme == "https":
            response = self._call("POST", path, payload, None, timeout)
            return response.status, response.read()
        if self._link is None:
            self._link = Link(config.host, config.port or 80, self._token)
        return self._link.post(path, payload, timeout)

    def _call(
        self, method: str, path: str, body: Any, size: int | None = None, timeout: float = 60.0
    ) -> http.client.HTTPResponse:
        """One request on the controller's connection, authorised; to a full URL (a
        presigned one) on a connection of its own, not."""
        import http.client  # here: see Link
        import urllib.parse

        config = self._config
        parts = urllib.parse.urlsplit(path)
        own = parts.scheme != ""
        conn = self._conn
        if conn is None or own:
            host, port = parts.hostname or config.host, parts.port or config.port
            if (parts.scheme or config.scheme) != "https":
                conn = http.client.HTTPConnection(host, port, blocksize=BLOCK)
            else:
                conn = http.client.HTTPSConnection(
                    host, port, blocksize=BLOCK, context=None if own else self._pinned()
                )
            if not own:
                self._conn = conn
        conn.timeout = timeout
        if conn.sock is not None:
            conn.sock.settimeout(timeout)
        headers = {"Authorization": f"Bearer {self._token}", "Content-Type": "application/json"}
        headers = {} if own else headers
        if size is not None:
            headers["Content-Length"] = str(size)
        conn.request(method, path if not own else parts.path + "?" + parts.query, body, headers)
        return conn.getresponse()

    def _pinned(self) -> Any:
        """The TLS context that trusts only ``--ca-file`` (None: the system's CAs)."""
        import ssl

        ca_file = self._config.ca_file
        return None if ca_file is None else ssl.create_default_context(cafile=ca_file)

    def _inputs(self, cwd: str, files: dict[str, Any]) -> None:
        """Make the run's work directory and put its inputs there."""
        os.makedirs(cwd, exist_ok=True)
        base = self._config.path[: -len(POLL_PATH)]
        for name, how, where in files.get("inputs") or []:
            path = os.path.join(cwd, name)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            if how == "link":
                os.symlink(where, path)
                continue
            response = self._call("GET", base + where, None)
            if response.status != 200:
                raise ValueError(f"{name}: HTTP {response.status} {response.read(200)!r}")
            with open(path, "wb") as stream:
                while chunk := response.read(BLOCK):
                    stream.write(chunk)

    def _outputs(self, task: Task, cwd: str) -> tuple[list[list[Any]] | None, str | None]:
        """Store the run's outputs where the controller says: what was stored, or why not."""
        files = task.files or {}
        try:
            found = collect(cwd, files.get("outputs") or [])
            total = sum(size for _, size in found)
            if total > files["max_bytes"]:
                limit = files["max_bytes"] / 1e6
                return None, f"outputs {total / 1e6:.3g} MB exceed limit {limit:.3g} MB"
            if found:
                self._store(task, cwd, found)
        except http_errors(*FILE_ERRORS) as exc:
            self._close()
            return None, f"outputs: {exc}"
        return found, None

    def _store(self, task: Task, cwd: str, found: list[list[Any]]) -> None:
        base = self._config.path[: -len(POLL_PATH)]
        ask = {"machine": self._config.machine, "run": task.run, "task": task.task, "files": found}
        response = self._call("POST", base + FILES_PATH, json.dumps(ask))
        data = response.read()
        if response.status != 200:
            raise ValueError(f"HTTP {response.status} {data[:300]!r}")
        answer = json.loads(data)
        if "dir" in answer:  # a shared file system: moved, whole files only under their name
            for rel, _ in found:
                target = os.path.join(answer["dir"], rel)
                os.makedirs(os.path.dirname(target), exist_ok=True)
                move(os.path.join(cwd, rel), target + ".part")
                os.replace(target + ".part", target)
            return
        for (rel, size), url in zip(found, answer["put"], strict=True):
            with open(os.path.join(cwd, rel), "rb") as stream:  # a full URL: presigned
                response = self._call("PUT", url if url[0] != "/" else base + url, stream, size)
                data = response.read()
            if response.status not in (200, 201, 204):
                raise ValueError(f"{rel}: HTTP {response.status} {data[:300]!r}")

    def _close(self) -> None:
        if self._link is not None:
            self._link.close()
            self._link = None
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _failed(self, error: str) -> None:
        """A poll failed: retry after the backoff, or sooner as the lease nears its end
        (half the time left, so that a controller back in time renews it)."""
        self._failures += 1
        now = time.monotonic()
        wait_s = self._backoff_s
        if self._lease_deadline is not None:
            wait_s = min(wait_s, max(BACKOFF_FIRST_S, (self._lease_deadline - now) / 2))
        self._retry_at = now + wait_s
        log(
            WARNING,
            "poll failed",
            error=error,
            failures=self._failures,
            retry_in_s=round(wait_s, 3),
        )
        self._backoff_s = min(self._backoff_s * 2, BACKOFF_MAX_S)

    def _succeeded(self) -> None:
        if self._failures:
            log(INFO, "controller reachable again", failures=self._failures)
        self._failures = 0
        self._retry_at = None
        self._backoff_s = BACKOFF_FIRST_S
        self._last_success = time.monotonic()

    def _apply(self, reply: Reply, sent_at: float, sent: int) -> None:
        if reply.epoch is not None:
            if self._epoch is not None and reply.epoch != self._epoch:
                log(WARNING, "controller epoch changed", epoch=reply.epoch)
            self._epoch = reply.epoch
        if reply.ack:
            del self._results[:sent]
        if reply.heartbeat_s is not None:
            self._heartbeat_s = reply.heartbeat_s
        self._lease_deadline = sent_at + reply.lease_s if reply.lease_s is not None else None
        self._renew_at = sent_at + reply.renew_in_s if reply.renew_in_s is not None else None
        if reply.release:
            raise AgentExit(EXIT_OK, "released by the controller", INFO)
        if reply.setup is not None and self._setup is None:
            self._setup = reply.setup
            self._setup_began = time.monotonic()
            self._setup_said = {"state": "running"}
            log(INFO, "set-up", commands=len(reply.setup.commands))
            self._advance_setup(self._setup_began)
        if reply.slots is not None:
            self._slots = reply.slots
        if reply.report_s is not None:
            self._report_s = reply.report_s
        known = {task.run for task in self._queue} | {result.run for result in self._results}
        known.update(self._running)
        for task in reply.tasks:
            if task.run not in known:
                known.add(task.run)
                self._queue.append(task)
        for result in reply.rejected:
            if result.run not in known:
                known.add(result.run)
                self._add_result(result, sent_at)
                log(WARNING, "bad task", run=result.run, error=result.error)
        for run in reply.cancel:
            self._cancel(run)


FLAGS: dict[str, tuple[Callable[[str], Any], Any, str | None]] = {
    "--url": (str, None, "controller base URL, http://HOST:PORT"),
    "--machine": (str, None, "this machine's id"),
    "--workdir": (str, None, "default working directory of tasks"),
    "--heartbeat-s": (float, 2.0, None),
    "--orphan-after-s": (float, 60.0, None),
    "--start-delay-s": (float, 0.0, None),
    "--ready-at": (
        float,
        None,
        "Unix time before which not to report (a boot that counts from the launch)",
    ),
    "--tail-bytes": (int, 4096, None),
    "--slots": (int, 1, "runs at once, until told"),
    "--report-s": (float, REPORT_S, "a result waits at most this long"),
    "--token-file": (str, None, f"file holding the token ({TOKEN_ENV})"),
    "--launch-token-file": (str, None, "file holding the launch's token: register first"),
    "--ca-file": (str, None, "the CA an https controller's certificate must come from"),
    "--notice-url": (str, None, "where to read an interruption notice"),
    "--notice-every-s": (float, NOTICE_EVERY_S, None),
}
"""The command line: flag -> (type, default, help)."""
REQUIRED = ("--url", "--machine")


def _parser() -> argparse.ArgumentParser:
    import argparse

    parser = argparse.ArgumentParser(prog="agent.py", description="autoscaler worker agent")
    for flag, (kind, default, text) in FLAGS.items():
        parser.add_argument(flag, type=kind, default=default, required=flag in REQUIRED, help=text)
    return parser


def read_flags(argv: list[str]) -> dict[str, Any]:
    """The values of the flags (``heartbeat_s``, ...), defaults filled in. A well-formed
    command line (``--flag value`` or ``--flag=value``, no flag twice) is read here;
    anything else (``--help``, an unknown flag, a missing value or required flag, a
    value of the wrong type) by ``argparse``, which prints its help or its usage error
    and exits (2). ``argparse`` with what it imports is a fifth of the start-up."""
    values: dict[str, Any] = {}
    i = 0
    while i < len(argv):
        flag, eq, value = argv[i].partition("=")
        if flag not in FLAGS or flag in values:
            break
        if not eq:
            if i + 1 == len(argv) or argv[i + 1].startswith("--"):
                break
            i += 1
            value = argv[i]
        try:
            values[flag] = FLAGS[flag][0](value)
        except ValueError:
            break
        i += 1
    else:
        if all(flag in values for flag in REQUIRED):
            return {
                flag[2:].replace("-", "_"): values.get(flag, default)
                for flag, (_, default, _) in FLAGS.items()
            }
    return vars(_parser().parse_args(argv))


def usage_error(message: str) -> NoReturn:
    """Exit 2 with the usage and ``message``, as ``argparse`` does."""
    _parser().error(message)


URL = re.compile(
    r"([A-Za-z][A-Za-z0-9+.-]*)://(?:[^@/?#]*@)?(\[[^\]/?#]*\]|[^:/?#]*)(?::([^/?#]*))?([^?#]*)"
)
"""scheme://[user@]host[:port][/path]: what ``urllib.parse.urlsplit`` makes of a URL
without a query (its import is a twentieth of the start-up)."""


def split_url(text: str) -> tuple[str, str, int | None, str]:
    """(scheme, host, port, path) of an http(s) URL, the host without brackets and in
    lower case; ``ValueError`` naming what is wrong."""
    match = URL.match(text)
    if match is None or match.group(1).lower() not in ("http", "https") or not match.group(2):
        raise ValueError(f"must be http://HOST[:PORT], got {text!r}")
    scheme, host, port, path = match.groups()
    if port and not (port.isdigit() and int(port) <= 65535):
        raise ValueError(f"has a bad port: {text!r}")
    return scheme.lower(), host.strip("[]").lower(), int(port) if port else None, path


def parse_args(argv: list[str] | None) -> tuple[Config, str | None]:
    """The configuration and the token's file (``--token-file`` or
    ``--launch-token-file``); exits 2 on a usage error."""
    args = read_flags(sys.argv[1:] if argv is None else argv)
    try:
        scheme, host, port, path = split_url(args["url"])
    except ValueError as exc:
        usage_error(f"--url {exc}")
    for name in ("heartbeat_s", "orphan_after_s", "notice_every_s"):
        value = args[name]
        if not math.isfinite(value) or value <= 0:
            usage_error(f"--{name.replace('_', '-')} must be positive, got {value}")
    for name in ("start_delay_s", "report_s", "tail_bytes"):
        value = args[name]
        if not math.isfinite(value) or value < 0:
            usage_error(f"--{name.replace('_', '-')} must be non-negative, got {value}")
    start_delay_s = args["start_delay_s"]
    if args["ready_at"] is not None and math.isfinite(args["ready_at"]):
        start_delay_s = max(start_delay_s, args["ready_at"] - time.time())
    if args["slots"] < 1:
        usage_error(f"--slots must be positive, got {args['slots']}")
    if args["token_file"] is not None and args["launch_token_file"] is not None:
        usage_error("give --token-file or --launch-token-file, not both")
    if args["notice_url"] is not None:
        try:
            split_url(args["notice_url"])
        except ValueError as exc:
            usage_error(f"--notice-url {exc}")
    config = Config(
        scheme=scheme,
        host=host,
        port=port,
        path=path.rstrip("/") + POLL_PATH,
        machine=args["machine"],
        workdir=os.path.abspath(args["workdir"] or os.getcwd()),
        heartbeat_s=args["heartbeat_s"],
        orphan_after_s=args["orphan_after_s"],
        start_delay_s=start_delay_s,
        tail_bytes=args["tail_bytes"],
        slots=args["slots"],
        report_s=args["report_s"],
        notice_url=args["notice_url"],
        notice_every_s=args["notice_every_s"],
        ca_file=args["ca_file"],
        register=args["launch_token_file"] is not None,
    )
    token_file: str | None = args["token_file"] or args["launch_token_file"]
    return config, token_file


def read_token(token_file: str | None) -> str:
    """The token from ``token_file`` or the environment; ``AgentExit`` (2) when missing."""
    if token_file is not None:
        try:
            with open(token_file, encoding="utf-8") as stream:
                token = stream.read().strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise AgentExit(EXIT_USAGE, "cannot read the token file", ERROR, error=exc) from exc
    else:
        token = os.environ.get(TOKEN_ENV, "").strip()
    os.environ.pop(TOKEN_ENV, None)
    if not token:
        raise AgentExit(EXIT_USAGE, f"no token: set {TOKEN_ENV} or pass --token-file", ERROR)
    return token


def main(argv: list[str] | None = None) -> int:
    """Run the agent; the exit code."""
    config, token_file = parse_args(argv)
    try:
        token = read_token(token_file)
    except AgentExit as stop:
        log(stop.level, stop.message, **stop.fields)
        return stop.code
    return Agent(config, token).run()


if __name__ == "__main__":
    sys.exit(main())

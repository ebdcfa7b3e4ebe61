"""Faults from the remote side: an HTTP proxy in front of the moto server.

EC2's throttling and capacity errors cannot be had from moto, so the proxy answers
chosen requests with EC2's own error response and forwards everything else to moto.
boto3 (or a daemon subprocess) is pointed at ``FaultProxy.endpoint`` instead of moto's:
it sees what it would see from EC2, and botocore's retries, backoff and error parsing
run for real.

moto starts ``MinCount`` instances where EC2 starts as many as it can up to
``MaxCount``; unless told otherwise (``fill_max_count=False``), the proxy raises a
forwarded RunInstances' MinCount to its MaxCount, so moto behaves as EC2 with capacity
to spare. Rules and ``seen`` see the request as the client sent it.

Rules match on the request's Action (the EC2 query protocol: ``Action=RunInstances&...``
in a form body) and, optionally, on its parsed parameters, for a number of requests
or a span of time. ``counts`` tallies requests per Action, failed ones included.
"""

from __future__ import annotations

import collections
import contextlib
import http.client
import re
import socket
import sys
import threading
import time
import urllib.parse
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any
from xml.sax.saxutils import escape

import boto3
import yaml

if TYPE_CHECKING:
    from tests.integration.ec2_world import Ec2World

Params = dict[str, list[str]]
REGION = "@region"
"""The region a request was signed for (its SigV4 credential scope), among ``Params``:
a rule can refuse one region's requests and let another's through."""
_REGION = re.compile(r"Credential=[^/,]+/\d{8}/([^/,]+)/")

# Headers that belong to one hop (RFC 9110 §7.6.1): never forwarded.
_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "content-length",
    }
)
# Headers ``send_response`` writes itself.
_OWN = frozenset({"server", "date"})

MESSAGES = {
    "RequestLimitExceeded": "Request limit exceeded.",
    "InsufficientInstanceCapacity": (
        "We currently do not have sufficient capacity in the Availability Zone you requested."
    ),
    "InstanceLimitExceeded": (
        "You have requested more instances than your current instance limit allows."
    ),
    "VcpuLimitExceeded": "You have requested more vCPU capacity than your current limit allows.",
    "Unsupported": "The requested configuration is currently not supported.",
    "SpotMaxPriceTooLow": "Your Spot request price is lower than the minimum required price.",
    "MaxSpotInstanceCountExceeded": (
        "You have requested more Spot Instances than your current Spot Instance limit allows."
    ),
    "InsufficientFreeAddressesInSubnet": (
        "The specified subnet does not have enough free addresses to satisfy the request."
    ),
}


def error_body(code: str, message: str | None = None) -> bytes:
    """EC2's XML error response."""
    text = escape(message or MESSAGES.get(code, f"injected {code}"))
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        f"<Response><Errors><Error><Code>{escape(code)}</Code><Message>{text}</Message>"
        f"</Error></Errors><RequestID>{uuid.uuid4()}</RequestID></Response>"
    ).encode()


@dataclass
class Rule:
    action: str  # "*" for every request
    code: str
    status: int
    match: Callable[[Params], bool] | None
    times: int | None  # requests left to fail; None = no limit
    until: float | None  # time.monotonic() after which the rule is spent; None = never

    def applies(self, action: str, params: Params, now: float) -> bool:
        if self.times is not None and self.times <= 0:
            return False
        if self.until is not None and now >= self.until:
            return False
        if self.action not in ("*", action):
            return False
        return self.match is None or self.match(params)


@dataclass(frozen=True)
class Seen:
    """One request as the proxy saw it, and the error it answered with (if any)."""

    action: str
    params: Params
    injected: str | None


class FaultProxy:
    """A threaded HTTP/1.1 proxy on loopback that forwards to ``upstream`` or fails by rule."""

    def __init__(self, upstream: str, *, fill_max_count: bool = True):
        url = urllib.parse.urlsplit(upstream)
        if url.scheme != "http" or url.hostname is None:
            raise ValueError(f"upstream must be an http:// URL, not {upstream!r}")
        self.upstream_host = url.hostname
        self.upstream_port = url.port or 80
        self.fill_max_count = fill_max_count
        self.counts: collections.Counter[str] = collections.Counter()
        self.seen: list[Seen] = []
        self._rules: list[Rule] = []
        self._lock = threading.Lock()
        self._holds: set[str] = set()
        self._released = threading.Event()
        self.held = 0  # responses being held back now
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    # --- life ------------------------------------------------------------------------

    def start(self) -> FaultProxy:
        server = _Server(("127.0.0.1", 0), _Handler)
        server.proxy = self
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self.release()
        server, self._server = self._server, None
        if server is None:
            return
        server.shutdown()
        server.close_connections()
        server.server_close()
        if self._thread is not None:
            self._thread.join(10)

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    @property
    def endpoint(self) -> str:
        assert self._server is not None, "the proxy is not started"
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    # --- rules -----------------------------------------------------------------------

    def fail(
        self,
        action: str,
        code: str,
        status: int = 400,
        match: Callable[[Params], bool] | None = None,
        times: int | None = None,
        for_s: float | None = None,
    ) -> None:
        """Answer ``action`` requests (those ``match`` accepts) with EC2 error ``code``.

        For the next ``times`` such requests, or for ``for_s`` seconds, or (neither)
        until ``clear``. Rules are tried in the order they were added.
        """
        until = None if for_s is None else time.monotonic() + for_s
        with self._lock:
            self._rules.append(Rule(action, code, status, match, times, until))

    def throttle(self, for_s: float) -> None:
        """Answer every request with ``RequestLimitExceeded`` (HTTP 503) for ``for_s``."""
        self.fail("*", "RequestLimitExceeded", status=503, for_s=for_s)

    def hold(self, action: str) -> None:
        """Forward ``action`` requests to moto (they take effect) but hold back the
        answers until ``release``: a client killed meanwhile never learns the result."""
        with self._lock:
            self._holds.add(action)
            self._released.clear()

    def release(self) -> None:
        """Let every held answer go (to whoever still listens)."""
        with self._lock:
            self._holds.clear()
            self._released.set()

    def _hold_back(self, action: str) -> None:
        with self._lock:
            if action not in self._holds:
                return
            self.held += 1
        try:
            self._released.wait(120)
        finally:
            with self._lock:
                self.held -= 1

    def clear(self) -> None:
        """Drop every rule, the counts and the log of requests."""
        with self._lock:
            self._rules.clear()
            self.counts.clear()
            self.seen.clear()

    def requests(self, action: str | None = None) -> list[Seen]:
        """The requests seen so far (of ``action``), oldest first."""
        with self._lock:
            return [s for s in self.seen if action is None or s.action == action]

    # --- for the handler ---------------------------------------------------------------

    def _decide(self, action: str, params: Params) -> Rule | None:
        """Count the request; the rule that fails it, if any (spending one of its times)."""
        now = time.monotonic()
        with self._lock:
            self.counts[action] += 1
            rule = next((r for r in self._rules if r.applies(action, params, now)), None)
            if rule is not None and rule.times is not None:
                rule.times -= 1
            self.seen.append(Seen(action, params, rule.code if rule else None))
            return rule


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    proxy: FaultProxy

    def handle_error(self, request: object, client_address: object) -> None:
        # A client killed while its answer was held (the crash tests) is expected.
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)  # type: ignore[arg-type]

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler]):
        self._conns: set[socket.socket] = set()
        self._conns_lock = threading.Lock()
        super().__init__(address, handler)

    def track(self, conn: socket.socket, open_: bool) -> None:
        with self._conns_lock:
            if open_:
                self._conns.add(conn)
            else:
                self._conns.discard(conn)

    def close_connections(self) -> None:
        """End the kept-alive connections too, so no handler thread outlives the proxy."""
        with self._conns_lock:
            conns = list(self._conns)
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as botocore's connection pool expects
    timeout = 60  # an idle kept-alive connection is closed after this long
    server: _Server

    def setup(self) -> None:
        super().setup()
        self.server.track(self.connection, True)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self.server.track(self.connection, False)

    def log_message(self, format: str, *args: object) -> None:
        pass  # quiet: the tests look at ``counts`` and ``seen``

    def do_GET(self) -> None:
        self._proxy()

    do_POST = do_PUT = do_DELETE = do_HEAD = do_PATCH = do_GET

    def _body(self) -> bytes:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            chunks = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    break
                chunks.append(self.rfile.read(size))
                self.rfile.readline()  # the CRLF after each chunk
            return b"".join(chunks)
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _action(self, body: bytes) -> tuple[str, Params]:
        target = self.headers.get("X-Amz-Target")
        query = urllib.parse.urlsplit(self.path).query
        form = body.decode("utf-8", "replace") if body else ""
        content_type = self.headers.get("Content-Type", "")
        params: Params = urllib.parse.parse_qs(query, keep_blank_values=True)
        if "x-www-form-urlencoded" in content_type or (form and not target):
            try:
                for key, values in urllib.parse.parse_qs(form, keep_blank_values=True).items():
                    params.setdefault(key, []).extend(values)
            except ValueError:
                pass
        region = _REGION.search(self.headers.get("Authorization", ""))
        if region:
            params[REGION] = [region.group(1)]
        if target:
            return target.rsplit(".", 1)[-1], params
        return (params.get("Action") or [""])[0], params

    def _proxy(self) -> None:
        body = self._body()
        action, params = self._action(body)
        rule = self.server.proxy._decide(action, params)
        if rule is not None:
            self._reply(rule.status, error_body(rule.code), "text/xml;charset=UTF-8")
            return
        proxy = self.server.proxy
        if action == "RunInstances" and proxy.fill_max_count and "MaxCount" in params:
            filled = {k: v for k, v in params.items() if k != REGION}
            filled["MinCount"] = params["MaxCount"]
            forward = urllib.parse.urlencode(filled, doseq=True).encode()
        else:
            forward = body
        headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP}
        conn = http.client.HTTPConnection(proxy.upstream_host, proxy.upstream_port, timeout=60)
        try:
            conn.request(self.command, self.path, body=forward, headers=headers)
            resp = conn.getresponse()
            data = resp.read()
            out = [(k, v) for k, v in resp.getheaders() if k.lower() not in _HOP | _OWN]
            status = resp.status
        except OSError as exc:  # moto gone: what a load balancer in front of it would say
            self._reply(502, error_body("ServiceUnavailable", str(exc)), "text/xml")
            return
        finally:
            conn.close()
        proxy._hold_back(action)
        self.send_response(status)
        for key, value in out:
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def _reply(self, status: int, data: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)


# --- failover scenarios: a type refused, and what the run did about it -------------------------


def refuse_type(
    instance_type: str, after: int = 0, region: str | None = None
) -> Callable[[Params], bool]:
    """A rule's match: RunInstances of ``instance_type`` (in ``region``) after its
    first ``after``."""
    seen = [0]

    def match(params: Params) -> bool:
        if params.get("InstanceType") != [instance_type]:
            return False
        if region is not None and params.get(REGION) != [region]:
            return False
        seen[0] += 1
        return seen[0] > after

    return match


SPOT_DEADLINE: dict[str, Any] = {
    "bag": None,
    "constraint": None,
    "jobs": [
        {
            "name": "sweep",
            "bag": {"synthetic": 12},
            "constraint": {"deadline_s": 40},
            "task_s": {"small": 3, "fast": 1.5},
        }
    ],
    "machine_types": [
        {"name": "small", "price": 2, "max_count": 3, "boot_s": 5},
        {"name": "fast", "price": 1, "max_count": 3, "boot_s": 5},
    ],
}
"""``Ec2World.config`` overrides: a deadline job for which spot ``fast`` (c5.large) is
the cheaper way to the deadline, on-demand ``small`` (t3.micro) the other."""

SPOT_BUDGET_TASKS = 300
SPOT_BUDGET: dict[str, Any] = {
    "bag": {"synthetic": SPOT_BUDGET_TASKS},
    "constraint": {"budget": 80.0},
    "machine_types": [
        {"name": "small", "price": 1, "max_count": 12, "boot_s": 5},
        {"name": "fast", "price": 3, "max_count": 10, "boot_s": 5},
    ],
    "sampling": {"delta": 0.5},  # n = 8, iw = 8
    "emulator": {"runtime": {"dist": "normal", "mean_s": 6, "sd_s": 1}},
}
"""``Ec2World.config`` overrides: a budget run whose bag outlasts one ATU, so that after
sampling (8 machines of each type) the plan wants more of spot ``fast``."""


WEST = "us-west-2"


def two_regions(world: Ec2World) -> Path:
    """The deadline job on two providers of kind ec2: ``east`` (us-east-1, type
    ``use1``, the cheaper) and ``west`` (us-west-2, type ``usw2``), the same instance
    type in each; one moto server answers both regions."""
    data = yaml.safe_load(world.config(**SPOT_DEADLINE).read_text(encoding="utf-8"))
    east = data.pop("ec2")
    data.pop("provider")
    west_ec2 = boto3.client("ec2", endpoint_url=world.moto.endpoint, region_name=WEST)
    west = {
        **east,
        "region": WEST,
        "ami": west_ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"],
        "subnets": [s["SubnetId"] for s in west_ec2.describe_subnets()["Subnets"]][:2],
        "types": {"usw2": {"instance_type": "t3.micro"}},
    }
    east["types"] = {"use1": {"instance_type": "t3.micro"}}
    data["providers"] = {"east": {"kind": "ec2", **east}, "west": {"kind": "ec2", **west}}
    data["machine_types"] = [
        {"name": "use1", "price": 1, "max_count": 3, "boot_s": 5, "provider": "east"},
        {"name": "usw2", "price": 2, "max_count": 3, "boot_s": 5, "provider": "west"},
    ]
    data["jobs"][0]["task_s"] = {"use1": 3, "usw2": 3}
    data["emulator"]["speed"] = {"use1": 1, "usw2": 1}
    path = world.tmp / "two-regions.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


# --- what a run did about a refusal, from its journal ------------------------------------------

JournalRow = tuple[float, str, dict[str, Any]]  # (run time, record type, its fields)


@dataclass(frozen=True)
class Failover:
    """How a run answered the first refused launch of ``refused``, in run seconds.

    ``replanned_at``: the first launch of another type decided after the refusal (the
    same step: ``replanned_at == refused_at``); ``running_at``: the first machine of
    such a launch ready (its agent took work). None: it never happened."""

    refused: str
    kind: str  # what the run made of the refusal (capacity, limit, error, ...)
    refused_at: float
    replanned_at: float | None
    running_at: float | None
    refusals: int  # launches of ``refused`` refused in the whole run

    @property
    def same_step(self) -> bool:
        return self.replanned_at == self.refused_at

    @property
    def to_running_s(self) -> float | None:
        return None if self.running_at is None else self.running_at - self.refused_at


def failover_of(rows: list[JournalRow], refused: str) -> Failover | None:
    """The run's answer to its first refused launch of type ``refused`` (None: none)."""
    first = next(
        (i for i, (_, ty, d) in enumerate(rows) if ty == "LaunchFailed" and d["type"] == refused),
        None,
    )
    if first is None:
        return None
    t0, _, failed = rows[first]
    after = rows[first + 1 :]
    tokens = {d["token"]: t for t, ty, d in after if ty == "Launch" and d["type"] != refused}
    replanned = min(tokens.values(), default=None)
    machines = {
        d["machine"] for _, ty, d in after if ty == "MachineLaunched" and d["token"] in tokens
    }
    ready = (t for t, ty, d in after if ty == "MachineReady" and d["machine"] in machines)
    running = next(ready, None)
    count = sum(1 for _, ty, d in rows if ty == "LaunchFailed" and d["type"] == refused)
    return Failover(refused, str(failed.get("kind")), t0, replanned, running, count)

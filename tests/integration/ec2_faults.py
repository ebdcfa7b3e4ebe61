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

moto's console output is a fixed sample with no host keys; ``console`` gives every
instance the console a real one prints (cloud-init lists the host keys it made there).
moto's spot price history has one price for every zone; ``spot_price`` sets a zone's.
"""

from __future__ import annotations

import base64
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
from types import TracebackType
from xml.sax.saxutils import escape

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
    for_s: float | None  # seconds from the first request it fails; None = no limit
    until: float | None = None  # time.monotonic() after which the rule is spent

    def applies(self, action: str, params: Params, now: float) -> bool:
        if self.times is not None and self.times <= 0:
            return False
        if self.until is not None and now >= self.until:
            return False
        if self.action not in ("*", action):
            return False
        if self.match is not None and not self.match(params):
            return False
        if self.for_s is not None and self.until is None:
            self.until = now + self.for_s  # the window opens with the first failure
        return True


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
        self._console: str | None = None
        self._spot: dict[str, float] = {}  # zone -> the spot price its history answers
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

        For the next ``times`` such requests, or for ``for_s`` seconds from the first
        such request (so a client slow to start on a loaded host meets the whole
        window), or (neither) until ``clear``. Rules are tried in the order they were
        added.
        """
        with self._lock:
            self._rules.append(Rule(action, code, status, match, times, for_s))

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

    def console(self, text: str | None) -> None:
        """Answer GetConsoleOutput with ``text`` as every instance's console (None: moto's)."""
        with self._lock:
            self._console = text

    def _console_of(self, data: bytes) -> bytes:
        with self._lock:
            text = self._console
        if text is None:
            return data
        output = b"<output>" + base64.b64encode(text.encode()) + b"</output>"
        return re.sub(rb"<output>[^<]*</output>", lambda _: output, data, count=1)

    def spot_price(self, zone: str, usd_per_hour: float) -> None:
        """Answer DescribeSpotPriceHistory with ``usd_per_hour`` as the price of every
        instance type in ``zone`` (the other zones keep moto's)."""
        with self._lock:
            self._spot[zone] = usd_per_hour

    def _spot_prices_of(self, data: bytes) -> bytes:
        with self._lock:
            prices = dict(self._spot)

        def item(m: re.Match[bytes]) -> bytes:
            zone = re.search(rb"<availabilityZone>([^<]*)</availabilityZone>", m[0])
            usd = prices.get(zone[1].decode()) if zone else None
            if usd is None:
                return m[0]
            price = f"<spotPrice>{usd:.6f}</spotPrice>".encode()
            return re.sub(rb"<spotPrice>[^<]*</spotPrice>", lambda _: price, m[0])

        return re.sub(rb"<item>.*?</item>", item, data, flags=re.S)

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
            if action == "GetConsoleOutput" and status == 200:
                data = proxy._console_of(data)
            if action == "DescribeSpotPriceHistory" and status == 200:
                data = proxy._spot_prices_of(data)
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

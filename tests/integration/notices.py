"""A stand-in for EC2's instance metadata, on loopback: the spot interruption notice of
each instance (``/<instance id>/spot/instance-action``) and its rebalance recommendation
(``/<instance id>/events/recommendations/rebalance``), each 404 until a test posts one,
and IMDSv2's session token (``PUT /latest/api/token``), which the agent must send back."""

from __future__ import annotations

import json
import secrets
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

TOKEN_HEADER = "X-aws-ec2-metadata-token"


class NoticeServer:
    """``notice(machine, action, time)`` makes that machine's next read find the notice,
    ``rebalance(machine, time)`` its rebalance recommendation; ``reads`` counts the
    notice reads per machine, ``rebalance_reads`` the others, ``tokenless`` the reads of
    either that came without a token.
    ``imdsv2=False``: no token endpoint, reads need none (IMDSv1)."""

    def __init__(self, imdsv2: bool = True) -> None:
        self.token = secrets.token_hex(8) if imdsv2 else None  # None: IMDSv1, no tokens
        self.notices: dict[str, dict[str, str]] = {}
        self.rebalances: dict[str, dict[str, str]] = {}
        self.reads: dict[str, int] = {}
        self.rebalance_reads: dict[str, int] = {}
        self.tokenless = 0
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_PUT(self) -> None:
                if self.path == "/latest/api/token" and server.token is not None:
                    self._send(200, server.token.encode(), "text/plain")
                else:
                    self._send(404, b"", "text/plain")

            def do_GET(self) -> None:
                parts = self.path.strip("/").split("/")
                if parts[1:] == ["spot", "instance-action"]:
                    table, reads = server.notices, server.reads
                elif parts[1:] == ["events", "recommendations", "rebalance"]:
                    table, reads = server.rebalances, server.rebalance_reads
                else:
                    self._send(404, b"", "text/plain")
                    return
                with server._lock:
                    reads[parts[0]] = reads.get(parts[0], 0) + 1
                    sent = self.headers.get(TOKEN_HEADER)
                    if sent is None:
                        server.tokenless += 1
                    if server.token is not None and sent != server.token:
                        self._send(401, b"", "text/plain")
                        return
                    found = table.get(parts[0])
                if found is None:
                    self._send(404, b"", "text/plain")
                else:
                    self._send(200, json.dumps(found).encode(), "application/json")

            def _send(self, status: int, body: bytes, kind: str) -> None:
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self.port = self._httpd.server_address[1]
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        """The notice URL an agent is given (``{machine}``: its instance id)."""
        return f"http://127.0.0.1:{self.port}/{{machine}}/spot/instance-action"

    def notice(self, machine: str, action: str = "terminate", time: str = "") -> None:
        with self._lock:
            self.notices[machine] = {"action": action, "time": time}

    def rebalance(self, machine: str, time: str = "") -> None:
        with self._lock:
            self.rebalances[machine] = {"noticeTime": time}

    def __enter__(self) -> NoticeServer:
        self._thread.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

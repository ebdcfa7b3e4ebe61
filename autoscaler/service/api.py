"""The service's HTTP API on loopback, and the client the CLI uses.

Every request carries the service's token: ``Authorization: Bearer <token>``, or the
cookie a browser gets from ``GET /login?token=<token>``. The token is made once per
state directory and kept in ``<state dir>/token`` (mode 0600, in a 0700 directory), so
only the service's user can read it; ``<state dir>/api.json`` (0600) says where the
service listens. JSON in and out; errors are ``{"error": ..., "problems": [...]}``.

    GET  /                        the status page (read-only; HTML polling the API)
    GET  /login?token=T           sets the cookie, redirects to /
    GET  /api/v1/status           {"service": {...}, "jobs": [job with history, ...]}
    GET  /api/v1/jobs             {"jobs": [job, ...]}
    GET  /api/v1/jobs/ID          job, with its history
    POST /api/v1/jobs             {"job": {job file}, "base_dir": DIR, "source": NAME}
                                  -> 201 {"id": ID}; 400 with the problems, field by field
    POST /api/v1/jobs/ID/cancel   -> job
    POST /api/v1/jobs/ID/update   {"budget": B}, {"deadline_s": D} (run seconds from now:
                                  emulated in a time-scaled run) or {"deadline_at": epoch}
    GET  /api/v1/jobs/ID/wait?timeout=S   blocks until the job ends (or S) -> job
    GET  /metrics                 Prometheus text, per job
"""

from __future__ import annotations

import hmac
import json
import os
import secrets
import threading
import urllib.error
import urllib.parse
import urllib.request
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from autoscaler.core.atomic import write_atomic
from autoscaler.core.errors import AutoscalerError, ConfigError
from autoscaler.service.service import Service
from autoscaler.service.store import JobNotFound

TOKEN_FILE = "token"
API_FILE = "api.json"
COOKIE = "autoscaler_token"
MAX_BODY = 256 * 1024 * 1024
"""The largest request body taken (a job file with its bag inline)."""


def service_token(state_dir: Path) -> str:
    """The state directory's API token, made on first use (mode 0600)."""
    path = state_dir / TOKEN_FILE
    try:
        return path.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        token = secrets.token_urlsafe(32)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(token)
        return token


class ApiServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, service: Service, host: str, port: int, token: str) -> None:
        self.service = service
        self.token = token
        super().__init__((host, port), _Handler)

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> threading.Thread:
        thread = threading.Thread(target=self.serve_forever, name="api", daemon=True)
        thread.start()
        return thread


def serve_api(service: Service, host: str, port: int) -> ApiServer:
    """Listen, and say where in ``api.json``."""
    token = service_token(service.state_dir)
    try:
        server = ApiServer(service, host, port, token)
    except OSError as exc:
        raise AutoscalerError(f"the API cannot listen on {host}:{port}: {exc}") from None
    write_atomic(
        service.state_dir / API_FILE, json.dumps({"url": server.url, "pid": os.getpid()}) + "\n"
    )
    server.start()
    return server


class _Handler(BaseHTTPRequestHandler):
    server: ApiServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        return  # the service logs what matters; no line per request on stderr

    # --- auth --------------------------------------------------------------------------

    def _token(self) -> str | None:
        auth = self.headers.get("Authorization", "")
        if auth.startswith("Bearer "):
            return auth.removeprefix("Bearer ").strip()
        for part in self.headers.get("Cookie", "").split(";"):
            name, _, value = part.strip().partition("=")
            if name == COOKIE:
                return value
        return None

    def _authorized(self, token: str | None) -> bool:
        return token is not None and hmac.compare_digest(token.encode(), self.server.token.encode())

    # --- replies -------------------------------------------------------------------------

    def _send(
        self, status: int, body: bytes, content_type: str, headers: dict[str, str] | None = None
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _json(self, status: int, data: object) -> None:
        self._send(status, json.dumps(data).encode(), "application/json")

    def _error(self, status: int, message: str, problems: list[str] | None = None) -> None:
        self._json(status, {"error": message, **({"problems": problems} if problems else {})})

    # --- routes --------------------------------------------------------------------------

    def do_GET(self) -> None:
        self._route("GET")

    def do_POST(self) -> None:
        self._route("POST")

    def _route(self, method: str) -> None:
        url = urllib.parse.urlsplit(self.path)
        query = urllib.parse.parse_qs(url.query)
        parts = [p for p in url.path.split("/") if p]
        body: object = None
        if method == "POST":
            length = int(self.headers.get("Content-Length") or 0)
            if length > MAX_BODY:
                self._error(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, "request body too large")
                return
            raw = self.rfile.read(length) if length else b"{}"
        if parts == ["login"] and method == "GET":
            self._login(query)
            return
        if not self._authorized(self._token()):
            self._error(HTTPStatus.UNAUTHORIZED, "no valid token: see the service's token file")
            return
        if method == "POST":
            try:
                body = json.loads(raw or b"{}")
            except ValueError as exc:
                self._error(HTTPStatus.BAD_REQUEST, f"the body is not JSON: {exc}")
                return
        try:
            self._dispatch(method, parts, query, body)
        except JobNotFound as exc:
            self._error(HTTPStatus.NOT_FOUND, exc.message)
        except ConfigError as exc:
            self._error(HTTPStatus.BAD_REQUEST, exc.message, exc.problems)
        except AutoscalerError as exc:
            self._error(HTTPStatus.CONFLICT, exc.message)
        except (BrokenPipeError, ConnectionResetError):
            return

    def _login(self, query: dict[str, list[str]]) -> None:
        token = next(iter(query.get("token") or []), None)
        if not self._authorized(token):
            self._error(HTTPStatus.UNAUTHORIZED, "wrong token")
            return
        cookie = f"{COOKIE}={token}; HttpOnly; SameSite=Strict; Path=/"
        self._send(HTTPStatus.SEE_OTHER, b"", "text/plain", {"Location": "/", "Set-Cookie": cookie})

    def _dispatch(
        self, method: str, parts: list[str], query: dict[str, list[str]], body: object
    ) -> None:
        service = self.server.service
        match method, parts:
            case "GET", []:
                from autoscaler.service.page import render_page

                self._send(HTTPStatus.OK, render_page().encode(), "text/html; charset=utf-8")
            case "GET", ["metrics"]:
                from autoscaler.service.metrics import render_metrics

                text, content_type = render_metrics(service.job_views())
                self._send(HTTPStatus.OK, text, content_type)
            case "GET", ["api", "v1", "status"]:
                self._json(
                    HTTPStatus.OK,
                    {"service": service.service_view(), "jobs": service.views(history=True)},
                )
            case "GET", ["api", "v1", "jobs"]:
                self._json(HTTPStatus.OK, {"jobs": service.views()})
            case "GET", ["api", "v1", "jobs", job_id]:
                self._json(HTTPStatus.OK, service.view(job_id))
            case "GET", ["api", "v1", "jobs", job_id, "wait"]:
                timeout = float((query.get("timeout") or ["60"])[0])
                self._json(HTTPStatus.OK, service.wait(job_id, timeout=min(timeout, 300.0)))
            case "POST", ["api", "v1", "jobs"]:
                if not isinstance(body, dict) or not isinstance(body.get("job"), dict):
                    self._error(HTTPStatus.BAD_REQUEST, 'give {"job": {...the job file...}}')
                    return
                base = body.get("base_dir")
                job_id = service.submit(
                    body["job"],
                    source=str(body.get("source") or "job"),
                    base_dir=Path(base) if isinstance(base, str) else None,
                )
                self._json(HTTPStatus.CREATED, {"id": job_id})
            case "POST", ["api", "v1", "jobs", job_id, "cancel"]:
                self._json(HTTPStatus.OK, service.cancel(job_id))
            case "POST", ["api", "v1", "jobs", job_id, "update"]:
                data = body if isinstance(body, dict) else {}
                self._json(
                    HTTPStatus.OK,
                    service.update(
                        job_id,
                        budget=_number(data, "budget"),
                        deadline_s=_number(data, "deadline_s"),
                        deadline_at=_number(data, "deadline_at"),
                    ),
                )
            case _:
                self._error(HTTPStatus.NOT_FOUND, f"no such endpoint: {method} {self.path}")


def _number(data: dict[str, Any], key: str) -> float | None:
    value = data.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise AutoscalerError(f"{key}: must be a number (got {value!r})")
    return float(value)


# --- the client -------------------------------------------------------------------------


class ApiError(AutoscalerError):
    """The service answered with an error (``status``), or could not be reached."""

    def __init__(self, message: str, status: int = 0, problems: list[str] | None = None):
        super().__init__(message)
        self.status = status
        self.problems = problems or []


class Client:
    """The API of the service holding ``state_dir``."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir
        try:
            info = json.loads((state_dir / API_FILE).read_text(encoding="utf-8"))
            self.url = str(info["url"])
            self.token = (state_dir / TOKEN_FILE).read_text(encoding="utf-8").strip()
        except (OSError, ValueError, KeyError):
            raise ApiError(
                f"no service in {state_dir}: start one with `autoscaler serve SERVICE.yaml` "
                "(or give --state-dir / AUTOSCALER_STATE_DIR of a running one)"
            ) from None

    def call(self, method: str, path: str, body: object = None, timeout: float = 30.0) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            self.url + path,
            data=data,
            method=method,
            headers={"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                return json.loads(response.read() or b"null")
        except urllib.error.HTTPError as exc:
            try:
                info = json.loads(exc.read())
            except ValueError:
                info = {}
            raise ApiError(
                str(info.get("error") or exc.reason), exc.code, info.get("problems")
            ) from None
        except (urllib.error.URLError, ConnectionError, TimeoutError) as exc:
            raise ApiError(
                f"the service of {self.state_dir} does not answer at {self.url} ({exc}): "
                "is `autoscaler serve` running?"
            ) from None

"""The service's HTTP API on loopback (FastAPI on uvicorn); its client is
``autoscaler.service.client``.

Every request carries a token: ``Authorization: Bearer <token>``, or the cookie a
browser gets from ``GET /login?token=<token>``. The state directory's own token is made
once per state directory and kept in ``<state dir>/token`` (mode 0600, in a 0700
directory), so only the service's user can read it: it is ``admin``'s. Other users'
tokens are made with ``autoscaler token create`` (``service.users``); a request acts as
its token's user, and a change its role does not allow (``service.users.refusal``) is a
403 naming what the role lacks. Each submit, update and cancel, refused or not, is a line
of the audit log (``service.audit``). ``<state dir>/api.json`` (0600) says where the
service listens. A browser that asks for ``/`` without it gets a page saying how to log
in (``autoscaler page``). JSON in and out; errors are ``{"error": ..., "problems": [...]}``,
and a 400 names each bad field (a body that is not JSON, an update giving a budget and a
deadline).

    GET  /                        the status page (read-only; HTML polling the API)
    GET  /login?token=T           sets the cookie, redirects to /
    GET  /openapi.json            this API's OpenAPI document
    GET  /api/v1/status           {"service": {...}, "jobs": [job with history, ...],
                                   "user": {"name": ..., "role": ...}} (the token's)
    GET  /api/v1/jobs             {"jobs": [job, ...]}
    GET  /api/v1/jobs/ID          job, with its history
    POST /api/v1/jobs             {"job": {job file}, "base_dir": DIR, "source": NAME}
                                  -> 201 {"id": ID}; 400 with the problems, field by field
    POST /api/v1/jobs/ID/cancel   -> job
    POST /api/v1/jobs/ID/update   {"budget": B}, {"deadline_s": D} (run seconds from now:
                                  emulated in a time-scaled run) or {"deadline_at": epoch}
    GET  /api/v1/jobs/ID/wait?timeout=S   blocks until the job ends (or S ≤ 300) -> job
    GET  /metrics                 Prometheus text, per job

``/openapi.json`` takes the token like the rest: everything but ``/login`` does, so one
rule covers the whole API and another local user learns nothing from it, not even what
listens. Request handlers run on daemon threads: a long submit or ``wait`` never holds
up the service's exit.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import socket
import threading
from collections.abc import Callable
from http import HTTPStatus
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import uvicorn
from fastapi import FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Receive, Scope, Send

from autoscaler.bootstrap.tls import ServerCert as Tls
from autoscaler.core.atomic import write_atomic
from autoscaler.core.errors import AutoscalerError, ConfigError
from autoscaler.run.auth import bearer_token
from autoscaler.service.api_models import (
    ErrorBody,
    Jobs,
    JobView,
    Status,
    SubmitRequest,
    Submitted,
    UpdateRequest,
)
from autoscaler.service.audit import AuditLog, Outcome
from autoscaler.service.client import API_FILE, TOKEN_FILE
from autoscaler.service.users import Action, Forbidden, Role, Tokens, User, Users, check

if TYPE_CHECKING:
    from autoscaler.service.service import Service

COOKIE = "autoscaler_token"
MAX_BODY = 256 * 1024 * 1024
"""The largest request body taken (a job file with its bag inline)."""
MAX_WAIT_S = 300.0
"""The longest one ``wait`` request blocks."""
SHUTDOWN_GRACE_S = 2
"""How long requests in flight may finish once the service stops."""

T = TypeVar("T")


def service_token(state_dir: Path) -> str:
    """The state directory's API token, made on first use (mode 0600, written whole). A
    file found empty (a first start stopped between making it and writing it, or on a
    full disk) is made again: an empty token would let an empty cookie in as admin."""
    path = state_dir / TOKEN_FILE
    try:
        token = path.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        token = ""
    if not token:
        token = secrets.token_urlsafe(32)
        write_atomic(path, token)
    return token


# --- the app ----------------------------------------------------------------------------


def _error(status: int, message: str, problems: list[str] | None = None) -> JSONResponse:
    body: dict[str, Any] = {"error": message}
    if problems:
        body["problems"] = problems
    return JSONResponse(body, status_code=status, headers={"Cache-Control": "no-store"})


def _ok(data: object, status: int = HTTPStatus.OK) -> JSONResponse:
    return JSONResponse(data, status_code=status, headers={"Cache-Control": "no-store"})


async def _on_daemon_thread(call: Callable[[], T]) -> T:
    """``call()`` on a daemon thread of its own, awaited: unlike a worker pool's thread,
    it never keeps the process from exiting."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[T] = loop.create_future()

    def settle(outcome: Callable[[], None]) -> None:
        try:
            loop.call_soon_threadsafe(lambda: None if done.cancelled() else outcome())
        except RuntimeError:  # the loop has closed: nobody waits for this answer
            return

    def run() -> None:
        try:
            result = call()
        except Exception as error:
            failure = error
            settle(lambda: done.set_exception(failure))
            return
        settle(lambda: done.set_result(result))

    threading.Thread(target=run, name="api-request", daemon=True).start()
    return await done


LOGIN_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>autoscaler: log in</title></head>
<body style="font-family: sans-serif; max-width: 44em; margin: 2em auto">
<h1>autoscaler service: log in</h1>
<p>This page needs the service's token, which this browser has not given.</p>
<p>On the machine the service runs on, as the user it runs as, run
<code>autoscaler page</code> (with <code>--state-dir DIR</code> if the service was started
with one) and open the address it prints, which ends in <code>/login?token=&hellip;</code>:
it sets a cookie and brings you back here.</p>
<p>The service's own token is kept in <code>&lt;state dir&gt;/token</code>; a user with a
token of their own (<code>autoscaler token create</code>) runs <code>autoscaler page</code>
with <code>AUTOSCALER_TOKEN</code> or <code>--token-file</code> set to it. Programs send a
token as a header, <code>Authorization: Bearer &lt;token&gt;</code>.</p>
</body></html>
"""
"""What a browser (``Accept: text/html``) gets at ``/`` without a valid token: how to log
in. Other clients get the JSON 401 every endpoint gives."""


class _Guard:
    """Every request but ``/login`` carries a user's token (the user goes in the
    request's state); no body over ``MAX_BODY``."""

    def __init__(self, app: ASGIApp, users: Users) -> None:
        self.app = app
        self.users = users

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] != "/login":
            request = Request(scope)
            given = bearer_token(request.headers.get("authorization"))
            if given is None:
                given = request.cookies.get(COOKIE)
            user = self.users.identify(given)
            if user is None:
                answer: Response = _error(
                    HTTPStatus.UNAUTHORIZED,
                    "no valid token (none given, not this service's, or revoked)",
                )
                if scope["path"] == "/" and "text/html" in request.headers.get("accept", ""):
                    answer = HTMLResponse(
                        LOGIN_PAGE,
                        status_code=HTTPStatus.UNAUTHORIZED,
                        headers={"Cache-Control": "no-store"},
                    )
                await answer(scope, receive, send)
                return
            length = request.headers.get("content-length", "")
            if length.isdigit() and int(length) > MAX_BODY:
                answer = _error(
                    HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
                    f"request body too large: {length} bytes, the limit is {MAX_BODY}",
                )
                await answer(scope, receive, send)
                return
            scope.setdefault("state", {})["user"] = user
        await self.app(scope, receive, send)


_ERRORS: dict[int | str, dict[str, Any]] = {
    HTTPStatus.UNAUTHORIZED: {"model": ErrorBody, "description": "no valid token"},
}
_JOB_ERRORS: dict[int | str, dict[str, Any]] = {
    **_ERRORS,
    HTTPStatus.BAD_REQUEST: {"model": ErrorBody, "description": "a bad field, named"},
    HTTPStatus.NOT_FOUND: {"model": ErrorBody, "description": "no such job"},
    HTTPStatus.CONFLICT: {"model": ErrorBody, "description": "not possible in its state"},
}
_CHANGE_ERRORS: dict[int | str, dict[str, Any]] = {
    **_JOB_ERRORS,
    HTTPStatus.FORBIDDEN: {"model": ErrorBody, "description": "what the user's role lacks"},
}


_MESSAGES = {"missing": "missing (required)", "extra_forbidden": "unknown field"}


def _problem(error: Any) -> str:
    """One validation error as ``field: message (got value)``."""
    if error.get("type") == "json_invalid":  # loc: ("body", character)
        why = (error.get("ctx") or {}).get("error") or "cannot be parsed"
        at = error.get("loc", ("body", 0))[-1]
        return f"body: not JSON ({why} at character {at})"
    where = [str(part) for part in error.get("loc", ()) if part not in ("body", "query", "path")]
    field = ".".join(where) or "body"
    kind = error.get("type")
    line = f"{field}: {_MESSAGES.get(kind) or error.get('msg') or 'not valid'}"
    if kind == "missing":
        return line
    got = repr(error.get("input"))
    return f"{line} (got {got[:80] + '...' if len(got) > 80 else got})"


def make_app(service: Service, users: Users, *, https: bool = False) -> FastAPI:
    """The API of ``service``, for ``users`` (``https``: served over TLS, so the login
    cookie is ``Secure``: a browser never sends the token in clear to an HTTP server on
    the same host)."""
    app = FastAPI(
        title="autoscaler service",
        version="1",
        description="Jobs in (a bag of tasks and a budget or deadline), their runs out.",
        docs_url=None,  # the interactive pages load scripts from the internet
        redoc_url=None,
    )

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> Response:
        problems = [_problem(e) for e in exc.errors()]
        not_json = any(e.get("type") == "json_invalid" for e in exc.errors())
        message = "the request body is not JSON" if not_json else "the request is not valid"
        return _error(HTTPStatus.BAD_REQUEST, message, problems)

    @app.exception_handler(ConfigError)
    async def bad_config(request: Request, exc: ConfigError) -> Response:
        return _error(HTTPStatus.BAD_REQUEST, exc.message, exc.problems)

    @app.exception_handler(AutoscalerError)
    async def refused(request: Request, exc: AutoscalerError) -> Response:
        status = {"JobNotFound": HTTPStatus.NOT_FOUND, Forbidden.code: HTTPStatus.FORBIDDEN}
        return _error(status.get(exc.code, HTTPStatus.CONFLICT), exc.message)

    audit = AuditLog(service.state_dir)

    def audited(said: dict[str, str], job: str | None, outcome: Outcome, **more: str) -> None:
        """A line of the audit log; one the disk refuses goes to the service's log: the
        change is done (a job journaled), and a 500 would say it was not."""
        try:
            audit.record(service.clock(), **said, job=job, outcome=outcome, **more)
        except OSError as exc:
            if service.log is not None:
                line = {**said, "job": job, "outcome": outcome, **more}
                service.log.error("audit log cannot be written", error=repr(exc), **line)

    def acting(request: Request, action: Action, job_id: str | None, do: Callable[[], T]) -> T:
        """``do()``, if the request's user may ``action`` (the job ``job_id``): its
        answer, or its error; either is a line of the audit log."""
        user: User = request.state.user
        said = {"user": user.name, "role": user.role.value, "action": action}
        try:
            owner = service.owner(job_id) if job_id and user.role is Role.SUBMIT else None
            check(user, action, job_id, owner)
            done = do()
        except AutoscalerError as exc:
            outcome: Outcome = "refused" if isinstance(exc, Forbidden) else "failed"
            audited(said, job_id, outcome, detail=exc.message)
            raise
        audited(said, job_id if job_id is not None else str(done), "ok")  # a submit: its id
        return done

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> Response:
        where = f"{request.method} {request.url.path}"
        if exc.status_code == HTTPStatus.NOT_FOUND:
            return _error(exc.status_code, f"no such endpoint: {where}")
        if exc.status_code == HTTPStatus.METHOD_NOT_ALLOWED:
            return _error(exc.status_code, f"method not allowed: {where}")
        if exc.status_code == HTTPStatus.BAD_REQUEST:  # a body that cannot be read
            return _error(exc.status_code, "the request is not valid", [f"body: {exc.detail}"])
        return _error(exc.status_code, f"{where}: {exc.detail}")

    @app.get("/", response_class=HTMLResponse, responses=_ERRORS)
    async def page() -> Response:
        """The status page."""
        from autoscaler.service.page import render_page

        return HTMLResponse(render_page(), headers={"Cache-Control": "no-store"})

    @app.get(
        "/login",
        status_code=HTTPStatus.SEE_OTHER,
        response_class=RedirectResponse,
        responses={HTTPStatus.UNAUTHORIZED: {"model": ErrorBody, "description": "wrong token"}},
    )
    async def login(token: str | None = None) -> Response:
        """Set the token's cookie and go to the status page."""
        if users.identify(token) is None:
            return _error(HTTPStatus.UNAUTHORIZED, "token: wrong token")
        answer = RedirectResponse("/", status_code=HTTPStatus.SEE_OTHER)
        answer.set_cookie(
            COOKIE, token or "", httponly=True, samesite="strict", path="/", secure=https
        )
        return answer

    @app.get("/metrics", response_class=Response, responses=_ERRORS)
    async def metrics() -> Response:
        """Prometheus text, per job."""
        from autoscaler.service.prometheus import render_metrics

        views, quota, alerts, projects = await _on_daemon_thread(
            lambda: (
                (views := service.job_views()),
                service.quota.usage(),
                service.alerting.status(views),
                service.project_standings(),
            )
        )
        text, content_type = render_metrics(views, quota, alerts, projects)
        return Response(text, media_type=content_type)

    @app.get("/api/v1/status", response_model=Status, responses=_ERRORS)
    async def status(request: Request) -> Response:
        """The service, every job with its history, and who asks."""
        user: User = request.state.user

        def both() -> dict[str, Any]:
            return {
                "service": service.service_view(),
                "jobs": service.views(history=True),
                "user": {"name": user.name, "role": user.role.value},
            }

        return _ok(await _on_daemon_thread(both))

    @app.get("/api/v1/jobs", response_model=Jobs, responses=_ERRORS)
    async def jobs() -> Response:
        """Every job."""
        return _ok({"jobs": await _on_daemon_thread(service.views)})

    @app.post(
        "/api/v1/jobs",
        status_code=HTTPStatus.CREATED,
        response_model=Submitted,
        responses=_CHANGE_ERRORS,
    )
    async def submit(request: Request, body: SubmitRequest) -> Response:
        """Validate a job file and journal the job, the user's."""
        base = Path(body.base_dir) if body.base_dir is not None else None
        user: User = request.state.user

        def journal() -> str:
            return service.submit(
                body.job, source=body.source or "job", base_dir=base, user=user.name
            )

        job_id = await _on_daemon_thread(lambda: acting(request, "submit", None, journal))
        return _ok({"id": job_id}, HTTPStatus.CREATED)

    @app.get("/api/v1/jobs/{job_id}", response_model=JobView, responses=_JOB_ERRORS)
    async def job(job_id: str) -> Response:
        """One job, with its history."""
        return _ok(await _on_daemon_thread(lambda: service.view(job_id)))

    @app.get("/api/v1/jobs/{job_id}/wait", response_model=JobView, responses=_JOB_ERRORS)
    async def wait(
        job_id: str,
        timeout: Annotated[
            float, Query(ge=0, allow_inf_nan=False, description="seconds; at most 300")
        ] = 60.0,
    ) -> Response:
        """Block until the job has ended, or ``timeout`` seconds."""
        left = min(timeout, MAX_WAIT_S)
        return _ok(await _on_daemon_thread(lambda: service.wait(job_id, timeout=left)))

    @app.post("/api/v1/jobs/{job_id}/cancel", response_model=JobView, responses=_CHANGE_ERRORS)
    async def cancel(request: Request, job_id: str) -> Response:
        """Cancel a job: a queued one never starts; a running one stops and reports."""
        return _ok(
            await _on_daemon_thread(
                lambda: acting(request, "cancel", job_id, lambda: service.cancel(job_id))
            )
        )

    @app.post("/api/v1/jobs/{job_id}/update", response_model=JobView, responses=_CHANGE_ERRORS)
    async def update(request: Request, job_id: str, body: UpdateRequest) -> Response:
        """Give a running or queued job a new budget or deadline."""

        def change() -> dict[str, Any]:
            return service.update(
                job_id, budget=body.budget, deadline_s=body.deadline_s, deadline_at=body.deadline_at
            )

        return _ok(await _on_daemon_thread(lambda: acting(request, "update", job_id, change)))

    app.openapi = lambda: _openapi(app)  # type: ignore[method-assign]  # FastAPI's documented hook
    app.add_middleware(_Guard, users=users)
    return app


def _openapi(app: FastAPI) -> dict[str, Any]:
    """The generated document, with the token schemes and without FastAPI's 422 (a bad
    request is a 400 here)."""
    if app.openapi_schema:
        return app.openapi_schema
    doc = get_openapi(
        title=app.title, version=app.version, description=app.description, routes=app.routes
    )
    for item in doc["paths"].values():
        for operation in item.values():
            operation.get("responses", {}).pop("422", None)
    schemas = doc.setdefault("components", {}).setdefault("schemas", {})
    for name in ("HTTPValidationError", "ValidationError"):
        schemas.pop(name, None)
    doc["components"]["securitySchemes"] = {
        "bearer": {
            "type": "http",
            "scheme": "bearer",
            "description": "<state dir>/token, or a user's (`autoscaler token create`)",
        },
        "cookie": {"type": "apiKey", "in": "cookie", "name": COOKIE, "description": "/login"},
    }
    doc["security"] = [{"bearer": []}, {"cookie": []}]
    doc["paths"]["/login"]["get"]["security"] = []
    app.openapi_schema = doc
    return doc


# --- the server -------------------------------------------------------------------------


class ApiServer:
    """uvicorn serving ``make_app`` on a socket bound at construction, on its own thread."""

    def __init__(
        self, service: Service, host: str, port: int, users: Users, tls: Tls | None = None
    ) -> None:
        self.service = service
        self.users = users
        self.tls = tls
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.socket = socket.create_server((host, port), family=family)
        config = uvicorn.Config(
            make_app(service, users, https=tls is not None),
            log_config=None,
            access_log=False,
            lifespan="off",
            timeout_graceful_shutdown=SHUTDOWN_GRACE_S,
            ssl_certfile=str(tls.cert_file) if tls is not None else None,
            ssl_keyfile=str(tls.key_file) if tls is not None else None,
        )
        self._server = uvicorn.Server(config)
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self.socket.getsockname()[:2]
        scheme = "https" if self.tls is not None else "http"
        return f"{scheme}://[{host}]:{port}" if ":" in host else f"{scheme}://{host}:{port}"

    def start(self) -> threading.Thread:
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self.socket]}, name="api", daemon=True
        )
        self._thread.start()
        return self._thread

    def shutdown(self) -> None:
        """Stop taking requests; those in flight get ``SHUTDOWN_GRACE_S`` to finish."""
        self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=SHUTDOWN_GRACE_S + 3.0)

    def server_close(self) -> None:
        self.socket.close()
        self.users.tokens.close()


def serve_api(service: Service, host: str, port: int, tls: Tls | None = None) -> ApiServer:
    """Listen, and say where in ``api.json`` (with HTTPS, with the certificate's SHA-256
    fingerprint, which the command line pins)."""
    roster = {u.name: Role(u.role) for u in service.config.users}
    users = Users(service_token(service.state_dir), Tokens(service.state_dir), roster)
    try:
        server = ApiServer(service, host, port, users, tls)
    except OSError as exc:
        raise AutoscalerError(f"the API cannot listen on {host}:{port}: {exc}") from None
    where: dict[str, Any] = {"url": server.url, "pid": os.getpid()}
    if tls is not None:
        where["fingerprint"] = tls.fingerprint
    write_atomic(service.state_dir / API_FILE, json.dumps(where) + "\n")
    server.start()
    return server

"""The client of the service's HTTP API (``autoscaler.service.api``), as the CLI uses it:
the standard library only, so a command such as ``submit`` starts fast.

The token it sends, first found of: a token file given (``--token-file``), the
``AUTOSCALER_TOKEN`` environment variable, the state directory's own token
(``<state dir>/token``, ``admin``'s: the service's own user needs neither).

Over HTTPS the client pins the certificate whose SHA-256 fingerprint the service wrote to
``api.json`` (a self-signed one, or the config's): a server with any other certificate is
refused before the token is sent, whatever CAs the system trusts or names it carries."""

from __future__ import annotations

import datetime as dt
import hashlib
import http.client
import json
import os
import re
import ssl
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from autoscaler.core.errors import AutoscalerError

TOKEN_FILE = "token"
"""The service's API token, in its state directory (mode 0600)."""
TOKEN_ENV = "AUTOSCALER_TOKEN"
"""A user's token, when it is not the state directory's."""
API_FILE = "api.json"
"""Where the service listens (``{"url": ..., "pid": ..., "fingerprint": ...}``; the
fingerprint with HTTPS), in its state directory."""


class ApiError(AutoscalerError):
    """The service answered with an error (``status``), or could not be reached."""

    def __init__(self, message: str, status: int = 0, problems: list[str] | None = None):
        super().__init__(message)
        self.status = status
        self.problems = problems or []


class Client:
    """The API of the service holding ``state_dir``, as the user of the token in
    ``token_file`` (or as the module says)."""

    def __init__(self, state_dir: Path, token_file: Path | None = None) -> None:
        self.state_dir = state_dir
        given = given_token(token_file)
        try:
            info = json.loads((state_dir / API_FILE).read_text(encoding="utf-8"))
            self.url = str(info["url"])
            self.fingerprint = info.get("fingerprint")
            self.token = given or (state_dir / TOKEN_FILE).read_text(encoding="utf-8").strip()
        except (OSError, ValueError, KeyError):
            raise ApiError(
                f"no service in {state_dir}: start one with `autoscaler serve SERVICE.yaml` "
                "(or give --state-dir / AUTOSCALER_STATE_DIR of a running one)"
            ) from None

    def call(self, method: str, path: str, body: object = None, timeout: float = 30.0) -> Any:
        data = None if body is None else json.dumps(body, default=_yaml_value).encode()
        request = urllib.request.Request(
            self.url + path,
            data=data,
            method=method,
            headers={"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"},
        )
        opener = urllib.request.build_opener(
            urllib.request.ProxyHandler({}), _Pinned(self.fingerprint)
        )
        try:
            with opener.open(request, timeout=timeout) as response:
                return json.loads(response.read() or b"null")
        except urllib.error.HTTPError as exc:
            try:
                info = json.loads(exc.read())
            except ValueError:
                info = {}
            raise ApiError(
                str(info.get("error") or exc.reason), exc.code, info.get("problems")
            ) from None
        except CertificateMismatch as exc:
            raise ApiError(str(exc)) from None
        except (urllib.error.URLError, ConnectionError, TimeoutError) as exc:
            if isinstance(exc, urllib.error.URLError) and isinstance(
                exc.reason, CertificateMismatch
            ):
                raise ApiError(str(exc.reason)) from None
            raise ApiError(
                f"the service of {self.state_dir} does not answer at {self.url} ({exc}): "
                "is `autoscaler serve` running?"
            ) from None


def given_token(token_file: Path | None) -> str | None:
    """The token of ``token_file``, else of ``AUTOSCALER_TOKEN``; None when neither is
    given. One that is empty, cannot be read, or could not be sent in a header (a second
    line, a character not of a token) is an error naming where it was, never the text."""
    if token_file is not None:
        try:
            token = token_file.read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise AutoscalerError(f"--token-file {token_file}: cannot be read ({exc})") from None
        if not token:
            raise AutoscalerError(f"--token-file {token_file}: the file is empty")
        return _one_token(token, f"--token-file {token_file}")
    if TOKEN_ENV in os.environ:
        token = os.environ[TOKEN_ENV].strip()
        if not token:
            raise AutoscalerError(f"{TOKEN_ENV} is set but empty: unset it, or give a token")
        return _one_token(token, TOKEN_ENV)
    return None


_TOKEN = re.compile(r"[A-Za-z0-9._~+/-]+=*")
"""What a bearer token is made of (RFC 6750's b64token): every token the service makes."""


def _one_token(token: str, where: str) -> str:
    if not _TOKEN.fullmatch(token):
        raise AutoscalerError(
            f"{where}: not a token (one line of letters, digits and '-._~+/'; "
            "`autoscaler token create` prints one)"
        )
    return token


class CertificateMismatch(ConnectionError):
    """The server's certificate is not the one ``api.json`` pins."""


class _Pinned(urllib.request.HTTPSHandler):
    """HTTPS to the one certificate whose SHA-256 is ``fingerprint`` (no CA, no name
    check: the pin is the trust)."""

    def __init__(self, fingerprint: str | None) -> None:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        super().__init__(context=context)
        self.fingerprint = fingerprint

    def https_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        pin = self.fingerprint

        class Connection(http.client.HTTPSConnection):
            def connect(self) -> None:
                super().connect()
                der = self.sock.getpeercert(binary_form=True) if self.sock else None
                seen = hashlib.sha256(der or b"").hexdigest()
                if pin is None or seen != pin:
                    self.close()
                    raise CertificateMismatch(
                        f"the service's certificate (SHA-256 {seen}) is not the one "
                        f"{API_FILE} pins ({pin or 'none'}): refused"
                    )

        return self.do_open(Connection, req, context=self._context)  # type: ignore[attr-defined]


def _yaml_value(value: object) -> object:
    """What YAML reads but JSON has not, as JSON: a date or time in ISO 8601 (as a job
    file's unquoted ``deadline_at: 2026-12-01T09:00:00Z``)."""
    if isinstance(value, dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, set | frozenset):
        return list(value)
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    raise TypeError(f"{type(value).__name__} is not JSON: {value!r}")

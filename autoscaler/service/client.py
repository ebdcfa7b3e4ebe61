"""The client of the service's HTTP API (``autoscaler.service.api``), as the CLI uses it:
the standard library only, so a command such as ``submit`` starts fast."""

from __future__ import annotations

import datetime as dt
import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from autoscaler.core.errors import AutoscalerError

TOKEN_FILE = "token"
"""The service's API token, in its state directory (mode 0600)."""
API_FILE = "api.json"
"""Where the service listens (``{"url": ..., "pid": ...}``), in its state directory."""


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
        data = None if body is None else json.dumps(body, default=_yaml_value).encode()
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

"""The service's audit log: who did what, when, to which job, and how it went.

``<state dir>/audit.jsonl`` (mode 0600), one JSON object a line, only ever appended to:
each submit, update and cancel the API is asked for, refusals included, and each token
made or revoked. The service and the ``token`` commands write to it from their own
processes; each line is one ``write`` to a file opened for appending, so lines of two
writers never interleave.

    {"time": "2026-12-02T17:04:05.123Z", "user": "bob", "role": "submit",
     "action": "cancel", "job": "j3", "outcome": "refused",
     "detail": "user bob (role submit) may cancel only their own jobs: j3 is alice's"}

``outcome`` is ``ok``, ``refused`` (the role does not allow it: the API's 403) or
``failed`` (asked, and not possible: a bad job file, a job that has ended, no such job).
A line the disk refuses is the API's to report elsewhere (``service.api``: the service's
log), not a reason to answer a change that was made with an error.
A token's line names the token's user and id (``subject``, ``token``), never the token.
"""

from __future__ import annotations

import json
import os
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

AUDIT_FILE = "audit.jsonl"

Outcome = Literal["ok", "refused", "failed"]


def stamp(now: float) -> str:
    """``now`` (epoch seconds) as ISO 8601 UTC, to the millisecond."""
    return (
        datetime.fromtimestamp(now, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    )


class AuditLog:
    """Appends records to ``<state_dir>/audit.jsonl``."""

    def __init__(self, state_dir: Path) -> None:
        self.path = state_dir / AUDIT_FILE
        self._lock = threading.Lock()

    def record(
        self,
        now: float,
        *,
        user: str,
        role: str,
        action: str,
        job: str | None,
        outcome: Outcome,
        detail: str | None = None,
        **more: Any,
    ) -> None:
        line: dict[str, Any] = {
            "time": stamp(now),
            "user": user,
            "role": role,
            "action": action,
            "job": job,
            "outcome": outcome,
        }
        if detail is not None:
            line["detail"] = detail
        line.update(more)
        data = (json.dumps(line) + "\n").encode()
        with self._lock:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                os.write(fd, data)
            finally:
                os.close(fd)

    def lines(self) -> list[dict[str, Any]]:
        """Every record, oldest first (none before the first)."""
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return []
        return [json.loads(line) for line in text.splitlines() if line.strip()]

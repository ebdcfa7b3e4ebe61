"""The journal of a real run: every event and action, in SQLite (WAL), before it acts.

A record is what ``runs.record`` makes of an event or action: when (run time), whether
it is an event or an action, its type and its fields. The daemon writes the events it
fed into one ``Controller.step`` and the actions that came out in one transaction,
before any action reaches a provider or an agent; replaying the records into a fresh
``RunState`` rebuilds the state the run had (``replay``).

WAL with ``synchronous=NORMAL``: a committed step survives the daemon being killed
(the operating system holds the pages); only a power failure can lose the last steps.
"""

from __future__ import annotations

import dataclasses
import json
import sqlite3
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from autoscaler.errors import AutoscalerError
from autoscaler.model import (
    Action,
    Assign,
    BoundaryNear,
    Cancel,
    Configure,
    Event,
    Extend,
    Launch,
    LaunchFailed,
    MachineLaunched,
    MachineLost,
    MachineReady,
    Mark,
    Move,
    Release,
    Replicate,
    Shutdown,
    Stop,
    TaskDone,
    TaskFailed,
    Tick,
)
from autoscaler.state import RunState

JOURNAL_DB = "journal.sqlite"

_EVENTS: dict[str, type[Any]] = {
    c.__name__: c
    for c in (
        MachineLaunched,
        LaunchFailed,
        MachineReady,
        MachineLost,
        TaskDone,
        TaskFailed,
        Tick,
        BoundaryNear,
        Shutdown,
    )
}
_ACTIONS: dict[str, type[Any]] = {
    c.__name__: c
    for c in (Launch, Extend, Mark, Release, Assign, Replicate, Cancel, Move, Configure, Stop)
}

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS journal (
    seq INTEGER PRIMARY KEY,
    t REAL NOT NULL,
    kind TEXT NOT NULL CHECK (kind IN ('event', 'action')),
    type TEXT NOT NULL,
    data TEXT NOT NULL
);
"""


class JournalError(AutoscalerError):
    code = "JournalError"


def fields(item: Event | Action) -> dict[str, Any]:
    """The fields of an event or action as plain JSON values."""
    return {f.name: _plain(getattr(item, f.name)) for f in dataclasses.fields(item)}


def _plain(value: object) -> Any:
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    return value


def encode(item: Event | Action) -> str:
    """The fields of an event or action as JSON."""
    return json.dumps(fields(item), separators=(",", ":"))


def decode(kind: str, type_name: str, data: str | dict[str, Any]) -> Event | Action:
    """The event or action a record holds."""
    table = _EVENTS if kind == "event" else _ACTIONS
    cls = table.get(type_name)
    if cls is None:
        raise JournalError(f"journal holds an unknown {kind} type {type_name!r}")
    fields = json.loads(data) if isinstance(data, str) else data
    if cls is Move:
        fields = {**fields, "tasks": tuple(fields["tasks"])}
    try:
        item: Event | Action = cls(**fields)
    except TypeError as exc:
        raise JournalError(f"journal record {type_name} {fields!r} does not fit: {exc}") from None
    return item


def replay(state: RunState, records: Iterator[tuple[float, str, Event | Action]]) -> int:
    """Apply journaled records to a fresh state, in order; returns how many there were."""
    n = 0
    for t, kind, item in records:
        state.now = t
        if kind == "event":
            state.apply_event(item)  # type: ignore[arg-type]
        else:
            state.apply_action(item)  # type: ignore[arg-type]
        n += 1
    return n


class SqliteJournal:
    """Append-only journal of one run, with a small key-value table of run facts."""

    def __init__(self, path: Path):
        self.path = path
        self._db = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(_SCHEMA)

    def close(self) -> None:
        self._db.close()

    # --- run facts --------------------------------------------------------------------

    def set_meta(self, **values: str | float | int) -> None:
        with self._db:
            self._db.executemany(
                "INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)",
                [(k, json.dumps(v)) for k, v in values.items()],
            )

    def meta(self) -> dict[str, Any]:
        rows = self._db.execute("SELECT key, value FROM meta").fetchall()
        return {k: json.loads(v) for k, v in rows}

    # --- records ----------------------------------------------------------------------

    def step(self, now: float, events: Sequence[Event], actions: Sequence[Action]) -> None:
        """Write one step's events and actions in one transaction."""
        rows = [(now, "event", type(e).__name__, encode(e)) for e in events]
        rows += [(now, "action", type(a).__name__, encode(a)) for a in actions]
        if not rows:
            return
        self._db.execute("BEGIN")
        try:
            self._db.executemany(
                "INSERT INTO journal (t, kind, type, data) VALUES (?, ?, ?, ?)", rows
            )
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    def records(self) -> Iterator[tuple[float, str, Event | Action]]:
        cursor = self._db.execute("SELECT t, kind, type, data FROM journal ORDER BY seq")
        for t, kind, type_name, data in cursor:
            yield t, kind, decode(kind, type_name, data)

"""The journal of a run: every event and action, in order, with its run time.

A record (``Record``) is one event or action with the run time it was applied at; the
state is the fold of ``RunState.apply`` over the records (``replay``). Every driver
writes through the one ``Journal`` protocol: the daemon in SQLite (``SqliteJournal``),
the dry run as JSON lines (``JsonlJournal``). The events fed into one ``Controller.step``
and the actions that came out are written as one step, events first: the order the
controller applies them in.

A result's line of the run's outputs file (its exit code and output tails, which the
event does not hold) is written with its event, in the same transaction, to a table of
its own (``SqliteJournal.outputs``): the file is written after the journal and rebuilt
from it (``run.results``).

SQLite runs in WAL with ``synchronous=NORMAL``: a committed step survives the daemon
being killed (the operating system holds the pages); only a power failure can lose the
last steps. The daemon writes a step before any action reaches a provider or an agent.
"""

from __future__ import annotations

import dataclasses
import json
import math
import sqlite3
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Literal, Protocol

from autoscaler.core.errors import AutoscalerError
from autoscaler.core.model import (
    ACTION_TYPES,
    EVENT_TYPES,
    Action,
    Assign,
    AssignGroup,
    BoundaryNear,
    Event,
    Extend,
    JobSpec,
    TaskDone,
)
from autoscaler.core.state import RunState
from autoscaler.core.task_files import Stored

JOURNAL_DB = "journal.sqlite"
JOURNAL_JSONL = "journal.jsonl"

Kind = Literal["event", "action"]

_TYPES: dict[str, dict[str, type[Any]]] = {
    "event": {c.__name__: c for c in EVENT_TYPES},
    "action": {c.__name__: c for c in ACTION_TYPES},
}
_NESTED: dict[str, type[Any]] = {"JobSpec": JobSpec, "Stored | None": Stored}
"""Records a field may hold, by the field's annotation: written as JSON objects."""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS journal (
    seq INTEGER PRIMARY KEY,
    t REAL NOT NULL,
    kind TEXT NOT NULL CHECK (kind IN ('event', 'action')),
    type TEXT NOT NULL,
    data TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS outputs (seq INTEGER PRIMARY KEY, line TEXT NOT NULL);
"""


class JournalError(AutoscalerError):
    code = "JournalError"


@dataclass(frozen=True, slots=True)
class Record:
    """One journaled event or action: its place in the journal and its run time."""

    seq: int
    t: float
    kind: Kind
    item: Event | Action


class Journal(Protocol):
    """Where a driver writes its steps, and where a resume or a check reads them back."""

    def step(self, now: float, events: Sequence[Event], actions: Sequence[Action]) -> None:
        """One controller step: the events it was fed and the actions it returned."""
        ...

    def records(self) -> Iterator[Record]:
        """Every record so far, in the order it was written."""
        ...

    def set_meta(self, **values: str | float | int) -> None:
        """Facts about the run (its id, seed, address); a later value replaces one."""
        ...

    def meta(self) -> dict[str, Any]: ...

    def close(self) -> None: ...


def kind_of(item: Event | Action) -> Kind:
    return "event" if isinstance(item, EVENT_TYPES) else "action"


_NAMES: dict[type, tuple[str, ...]] = {}  # a dataclass's field names, looked up once
_SCALARS = frozenset({str, int, float, bool, type(None)})
_ENCODER = json.JSONEncoder(separators=(",", ":"))  # dumps would build one per call


def fields(item: Any) -> dict[str, Any]:
    """The fields of an event or action (or a record one holds) as plain JSON values."""
    cls = type(item)
    names = _NAMES.get(cls)
    if names is None:
        names = _NAMES[cls] = tuple(f.name for f in dataclasses.fields(item))
    out: dict[str, Any] = {}
    for name in names:  # one record per task result: the common scalars go straight
        value = getattr(item, name)
        out[name] = value if type(value) in _SCALARS else _plain(value)
    return out


def _plain(value: object) -> Any:
    if type(value) in _SCALARS:
        return value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return fields(value)
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    return value


def encode(item: Event | Action) -> str:
    """The fields of an event or action as compact JSON (the SQLite journal's ``data``):
    the common records formatted directly (``_FAST``), to the same text."""
    fast = _FAST.get(type(item))
    if fast is not None:
        data: str | None = fast[1](item, _COMPACT)
        if data is not None:
            return data
    return _ENCODER.encode(fields(item))


def decode(kind: str, type_name: str, data: str | dict[str, Any]) -> Event | Action:
    """The event or action a record holds (JSON lists come back as the tuples they were)."""
    cls = _TYPES.get(kind, {}).get(type_name)
    if cls is None:
        raise JournalError(f"journal holds an unknown {kind} type {type_name!r}")
    values = json.loads(data) if isinstance(data, str) else data
    values = {k: tuple(v) if isinstance(v, list) else v for k, v in values.items()}
    try:
        for f in dataclasses.fields(cls):
            nested = _NESTED.get(str(f.type))
            if nested is not None and isinstance(values.get(f.name), dict):
                values[f.name] = nested(**values[f.name])
        item: Event | Action = cls(**values)
    except TypeError as exc:
        raise JournalError(f"journal record {type_name} {values!r} does not fit: {exc}") from None
    return item


_KINDS: dict[type, tuple[Kind, str]] = {}  # a record type's kind and name, looked up once


def _row(now: float, item: Event | Action) -> tuple[float, str, str, str]:
    """A record's row of the SQLite journal."""
    cls = type(item)
    known = _KINDS.get(cls)
    if known is None:
        known = _KINDS[cls] = (kind_of(item), cls.__name__)
    return (now, known[0], known[1], encode(item))


def step_records(
    seq: int, now: float, events: Sequence[Event], actions: Sequence[Action]
) -> list[Record]:
    """One step's records, numbered from ``seq``: events first, then actions."""
    items: list[Event | Action] = [*events, *actions]
    return [Record(seq + i, now, kind_of(item), item) for i, item in enumerate(items)]


def replay(state: RunState, records: Iterable[Record]) -> int:
    """Apply journaled records to a fresh state, in order; returns how many there were."""
    n = 0
    for record in records:
        state.apply(record.t, record.item)
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

    def step(
        self,
        now: float,
        events: Sequence[Event],
        actions: Sequence[Action],
        outputs: Sequence[tuple[int, str]] = (),
    ) -> None:
        """Write one step's events and actions in one transaction, with ``outputs``:
        (index in ``events``, line) of the results whose outputs file lines they are."""
        rows = [_row(now, item) for item in (*events, *actions)]  # as ``step_records``
        if not rows:
            return
        self._db.execute("BEGIN")
        try:
            self._db.executemany(
                "INSERT INTO journal (t, kind, type, data) VALUES (?, ?, ?, ?)", rows
            )
            if outputs:
                (last,) = self._db.execute("SELECT last_insert_rowid()").fetchone()
                first = int(last) - len(rows) + 1
                self._db.executemany(
                    "INSERT INTO outputs (seq, line) VALUES (?, ?)",
                    [(first + i, line) for i, line in outputs],
                )
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    def outputs(self) -> Iterator[str]:
        """The outputs file's lines journaled with their results, in the journal's order."""
        for (line,) in self._db.execute("SELECT line FROM outputs ORDER BY seq"):
            yield line

    def records(self) -> Iterator[Record]:
        cursor = self._db.execute("SELECT seq, t, kind, type, data FROM journal ORDER BY seq")
        for seq, t, kind, type_name, data in cursor:
            yield Record(seq, t, kind, decode(kind, type_name, data))


_ASCII = json.encoder.encode_basestring_ascii  # a string as ``json.dumps`` writes it


_SPACED = (", ", ": ")  # ``json.dumps``'s separators: the JSONL journal's
_COMPACT = (",", ":")  # ``_ENCODER``'s: the SQLite journal's


def _assign_data(item: Assign, sep: tuple[str, str]) -> str | None:
    if type(item.task) is int and type(item.machine) is str:
        c, k = sep
        return f'{{"task"{k}{item.task}{c}"machine"{k}{_ASCII(item.machine)}}}'
    return None


def _group_data(item: AssignGroup, sep: tuple[str, str]) -> str | None:
    if type(item.machine) is str and all(type(t) is int for t in item.tasks):
        c, k = sep
        tasks = c.join(map(str, item.tasks))
        return f'{{"tasks"{k}[{tasks}]{c}"machine"{k}{_ASCII(item.machine)}}}'
    return None


def _done_data(item: TaskDone, sep: tuple[str, str]) -> str | None:
    if (
        item.stored is None
        and type(item.task) is int
        and type(item.machine) is str
        and type(item.runtime_s) is float
        and math.isfinite(item.runtime_s)
    ):
        c, k = sep
        return (
            f'{{"task"{k}{item.task}{c}"machine"{k}{_ASCII(item.machine)}{c}'
            f'"runtime_s"{k}{item.runtime_s!r}{c}"stored"{k}null}}'
        )
    return None


def _near_data(item: BoundaryNear, sep: tuple[str, str]) -> str | None:
    return f'{{"machine"{sep[1]}{_ASCII(item.machine)}}}' if type(item.machine) is str else None


def _extend_data(item: Extend, sep: tuple[str, str]) -> str | None:
    if type(item.machine) is str and type(item.until) is float and math.isfinite(item.until):
        c, k = sep
        return f'{{"machine"{k}{_ASCII(item.machine)}{c}"until"{k}{item.until!r}}}'
    return None


_FAST: dict[type, tuple[str, Any]] = {
    Assign: ('"action", "type": "Assign"', _assign_data),
    AssignGroup: ('"action", "type": "AssignGroup"', _group_data),
    TaskDone: ('"event", "type": "TaskDone"', _done_data),
    BoundaryNear: ('"event", "type": "BoundaryNear"', _near_data),
    Extend: ('"action", "type": "Extend"', _extend_data),
}
"""The records a run makes by the million (a task's ``Assign`` or its group's
``AssignGroup``, and its ``TaskDone``) and by the hundred thousand (a machine's
``BoundaryNear`` and ``Extend`` each paid unit): their ``data`` formatted directly, with
the separators of the journal's JSON, None for a value the encoder would write otherwise."""


def jsonl_line(seq: int, t: float, item: Event | Action) -> str:
    """A record as ``JsonlJournal`` writes it: ``json.dumps`` of its dict, with the
    lines of the common records (``_FAST``) formatted directly, to the same text."""
    fast = _FAST.get(type(item))
    if fast is not None and type(t) is float and math.isfinite(t):
        data = fast[1](item, _SPACED)
        if data is not None:
            return f'{{"seq": {seq}, "t": {t!r}, "kind": {fast[0]}, "data": {data}}}'
    kind, name = kind_of(item), type(item).__name__
    return json.dumps({"seq": seq, "t": t, "kind": kind, "type": name, "data": fields(item)})


class JsonlJournal:
    """The dry run's journal: one JSON line per record, appended to ``path``.

    A line holds the record's ``seq``, run time ``t``, ``kind``, ``type`` and ``data`` (its
    fields); times are written in full, so a replay of the file rebuilds the run's state
    exactly. Run facts, if any are set, go to a JSON file beside it (``<name>.meta.json``).
    Lines are written in whole batches of ``BATCH_LINES`` (and on ``close``, or before
    the file is read back): a dry run acts on nothing outside, and a write per step
    cost a million writes in a million-task run.
    """

    BATCH_LINES = 4096

    def __init__(self, path: Path, *, fresh: bool = False):
        """Continue the journal at ``path``, or start it over (``fresh``)."""
        self.path = path
        self.meta_path = path.with_suffix(".meta.json")
        if fresh:
            path.unlink(missing_ok=True)
            self.meta_path.unlink(missing_ok=True)
        self._seq = 1 + sum(1 for _ in self._lines())  # numbered from 1, as in SQLite
        self._stream: IO[str] = path.open("a", encoding="utf-8")
        self._batch: list[str] = []  # lines not yet written

    def close(self) -> None:
        self._flush()
        self._stream.close()

    def _flush(self) -> None:
        if self._batch:
            self._stream.write("\n".join(self._batch) + "\n")
            self._batch.clear()
        self._stream.flush()

    def _lines(self) -> Iterator[dict[str, Any]]:
        if not self.path.exists():
            return
        with self.path.open(encoding="utf-8") as stream:
            for n, line in enumerate(stream, 1):
                try:
                    yield json.loads(line)
                except ValueError:
                    raise JournalError(f"{self.path}:{n}: not a JSON line") from None

    def set_meta(self, **values: str | float | int) -> None:
        self.meta_path.write_text(json.dumps({**self.meta(), **values}), encoding="utf-8")

    def meta(self) -> dict[str, Any]:
        if not self.meta_path.exists():
            return {}
        try:
            out: dict[str, Any] = json.loads(self.meta_path.read_text(encoding="utf-8"))
        except ValueError:
            raise JournalError(f"{self.meta_path}: not JSON") from None
        return out

    def step(self, now: float, events: Sequence[Event], actions: Sequence[Action]) -> None:
        seq, batch = self._seq, self._batch
        for item in (*events, *actions):  # as ``step_records`` numbers them
            batch.append(jsonl_line(seq, now, item))
            seq += 1
        self._seq = seq
        if len(batch) >= self.BATCH_LINES:
            self._flush()

    def records(self) -> Iterator[Record]:
        self._flush()
        for line in self._lines():
            kind = line["kind"]
            yield Record(line["seq"], line["t"], kind, decode(kind, line["type"], line["data"]))

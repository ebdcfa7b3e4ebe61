"""The run's outputs file (``outputs.jsonl``): one line per result, derived from the journal.

A result's line (its task, machine, run, exit code, run time and output tails) is
journaled with its ``TaskDone`` or ``TaskFailed``, in the same transaction
(``SqliteJournal.step``), and appended to the file only once that step is committed. A
daemon killed at any moment therefore leaves the file a prefix of the journal's lines,
perhaps with a line cut in half at its end, and a resumed daemon completes it
(``settle``) before it appends more: the lines the file lacks are appended, and a file
that is not such a prefix (lines of results the journal never took, or took once but
the file holds twice) is rewritten from the journal, atomically. What a user reads from
the file then agrees with the journal, and so with the report.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from autoscaler.core.atomic import write_atomic

JOURNALED_META = "outputs_journaled"
"""The journal's meta key saying that its results' lines are journaled with them (runs
begun before they were cannot be rebuilt: their file is left as it is)."""


@dataclass(frozen=True, slots=True)
class Settled:
    """What ``settle`` did to the file."""

    kept: int  # lines the file held that the journal holds
    appended: int  # lines the journal holds that the file lacked
    dropped: int  # lines (a half line included) the journal does not hold
    rewritten: bool  # the file was replaced whole (not a prefix of the journal's lines)


def settle(path: Path, journaled: Iterable[str]) -> Settled:
    """Make the file at ``path`` hold exactly the ``journaled`` lines, in order."""
    wanted = iter(journaled)
    if not path.exists():
        path.touch()
    with path.open("rb") as f:
        kept, offset, tail = _common_prefix(f, wanted)
        if tail is None:  # the file is a prefix of the journal's lines, a half line aside
            extra = _count_lines(f, offset)
            if extra:
                os.truncate(path, offset)
            rest = list(wanted)
            if rest:
                with path.open("a", encoding="utf-8") as out:
                    out.write("".join(f"{line}\n" for line in rest))
            return Settled(kept, len(rest), extra, rewritten=False)
        f.seek(0)
        data = f.read()
    text = data.decode("utf-8", errors="replace")
    held = Counter(text.removesuffix("\n").split("\n") if text else ())
    lines = [*data[:offset].decode("utf-8", errors="replace").split("\n")[:-1], *tail, *wanted]
    in_both = sum((held & Counter(lines)).values())
    mode = path.stat().st_mode & 0o777
    write_atomic(path, "".join(f"{line}\n" for line in lines))
    os.chmod(path, mode)
    return Settled(in_both, len(lines) - in_both, sum(held.values()) - in_both, rewritten=True)


def _common_prefix(f: IO[bytes], wanted: Iterator[str]) -> tuple[int, int, list[str] | None]:
    """How many of the file's first whole lines are the journal's first lines, where
    that prefix ends, and (when a whole line differs) the journal's lines read and
    not matched (``None``: the file holds no whole line past the prefix that differs)."""
    kept = offset = 0
    for raw in f:
        if not raw.endswith(b"\n"):
            return kept, offset, None  # a half line: dropped
        line = next(wanted, None)
        if line is None:
            return kept, offset, None  # the journal holds no more: the rest is dropped
        if raw[:-1].decode("utf-8", errors="replace") != line:
            return kept, offset, [line]
        kept += 1
        offset += len(raw)
    return kept, offset, None


def _count_lines(f: IO[bytes], offset: int) -> int:
    """Lines (a half line counts) from ``offset`` to the end of ``f``."""
    f.seek(offset)
    return sum(1 for _ in f)


class OutputsFile:
    """The outputs file as a daemon appends to it: a step's lines once it is journaled."""

    def __init__(self, path: Path) -> None:
        self._stream = path.open("a", encoding="utf-8")

    def append(self, lines: Sequence[str]) -> None:
        if lines:
            self._stream.write("".join(f"{line}\n" for line in lines))
            self._stream.flush()

    def close(self) -> None:
        self._stream.close()

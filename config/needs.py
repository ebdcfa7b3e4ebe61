"""What a bag's tasks need (paper 004's input size, estimate, output size) or a category
label: read from a bag file's columns, or filled in from a sweep's templates.

A bag ``file`` ending in ``.csv`` or ``.tsv`` is a table with a header: a ``command``
column and optional ``input_bytes``, ``estimate_s``, ``output_bytes`` and ``category``
columns; an empty cell is a requirement not given. Sizes are bytes, or a number with
KB, MB, GB (10^3) or KiB, MiB, GiB (2^10); estimates are seconds or a duration
(``90s``, ``3m``). Every problem names the file's field, the line and the column.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

from pydantic import BeforeValidator

from autoscaler.config.durations import seconds_in

COLUMNS = ("command", "input_bytes", "estimate_s", "output_bytes", "category")
TABLE_SUFFIXES = {".csv": ",", ".tsv": "\t"}

_BYTES = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*(B|KB|MB|GB|TB|KiB|MiB|GiB|TiB)?\s*$", re.I)
_UNITS = {"b": 1, "kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12}
_UNITS |= {"kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}


@dataclass(frozen=True, slots=True)
class Needs:
    """One task's requirements and label; None where not given."""

    input_bytes: float | None = None
    estimate_s: float | None = None
    output_bytes: float | None = None
    category: str | None = None


@dataclass(frozen=True, slots=True)
class Row:
    command: str
    needs: Needs


def is_table(path: Path) -> bool:
    return path.suffix.lower() in TABLE_SUFFIXES


def bytes_in(text: str) -> float | None:
    """The bytes ``text`` gives (``"10KB"``: 10000.0), or None: it is not a size."""
    match = _BYTES.match(text)
    if match is None:
        return None
    return float(match.group(1)) * _UNITS[(match.group(2) or "b").lower()]


def read_table(text: str, path: Path, where: str) -> tuple[list[Row], list[str]]:
    """The rows of a task table, and the problems found (each naming ``where``, the
    line and the column); lines whose first cell starts with ``#`` are skipped."""
    lines = text.splitlines()
    reader = csv.reader(lines, delimiter=TABLE_SUFFIXES[path.suffix.lower()])
    problems: list[str] = []
    header: list[str] | None = None
    rows: list[Row] = []
    for number, cells in enumerate(reader, start=1):
        if not cells or not "".join(cells).strip() or cells[0].lstrip().startswith("#"):
            continue
        if header is None:
            header = [c.strip() for c in cells]
            unknown = [c for c in header if c not in COLUMNS]
            if unknown:
                problems.append(
                    f"{where}: line {number}: unknown column {', '.join(map(repr, unknown))} "
                    f"(known: {', '.join(COLUMNS)})"
                )
            if "command" not in header:
                problems.append(f"{where}: line {number}: the header has no command column")
            if problems:
                return [], problems
            continue
        if len(cells) != len(header):
            problems.append(
                f"{where}: line {number}: {len(cells)} cells, the header has {len(header)}"
            )
            continue
        row = _row(dict(zip(header, cells, strict=True)), f"{where}: line {number}", problems)
        if row is not None:
            rows.append(row)
    return rows, problems


def _row(cells: Mapping[str, str], where: str, problems: list[str]) -> Row | None:
    command = cells["command"].strip()
    if not command:
        problems.append(f"{where}, column command: empty")
        return None
    values = {name: cells.get(name, "").strip() for name in COLUMNS[1:]}
    needs, bad = parse_needs(values, lambda name: f"{where}, column {name}")
    problems.extend(bad)
    return Row(command, needs) if not bad else None


def parse_needs(
    values: Mapping[str, str | float | None], name_of: Callable[[str], str]
) -> tuple[Needs, list[str]]:
    """Requirements from text or numbers (a table's cells, a sweep's filled templates);
    an empty or missing value is not given. ``name_of`` names a value in problems."""
    problems: list[str] = []
    got: dict[str, float | None] = {}
    for name, parse in _PARSERS.items():
        raw = values.get(name)
        if raw is None or (isinstance(raw, str) and not raw.strip()):
            got[name] = None
            continue
        value = float(raw) if isinstance(raw, int | float) else parse(raw)
        if value is None or value < 0 or value != value:
            kind = "a duration" if name == "estimate_s" else "a size (bytes, or with KB, MB, GB)"
            problems.append(f"{name_of(name)}: not {kind} (got {raw!r})")
            value = None
        got[name] = value
    label = values.get("category")
    text = "" if label is None else str(label).strip()
    needs = Needs(got["input_bytes"], got["estimate_s"], got["output_bytes"], text or None)
    return needs, problems


_PARSERS: dict[str, Callable[[str], float | None]] = {
    "input_bytes": bytes_in,
    "estimate_s": seconds_in,
    "output_bytes": bytes_in,
}


def fill_needs(
    templates: Mapping[str, str | float | None],
    combos: Iterable[Mapping[str, object]],
    where: str,
) -> tuple[list[Needs], list[str]]:
    """Each sweep combination's requirements: every template filled with its values
    (``"{size}KB"``), then read as ``parse_needs`` reads a cell. Problems are reported
    once per field, for the first combination that shows them."""
    out: list[Needs] = []
    problems: dict[str, str] = {}
    for combo in combos:
        filled: dict[str, str | float | None] = {}
        for name, template in templates.items():
            if not isinstance(template, str):
                filled[name] = template
                continue
            try:
                filled[name] = template.format_map(combo)
            except (AttributeError, IndexError, KeyError, TypeError, ValueError) as exc:
                problems.setdefault(name, f"{where}.{name}: cannot fill the template: {exc!r}")
                filled[name] = None
        needs, bad = parse_needs(filled, _naming(where, combo))
        for text in bad:
            problems.setdefault(text.split(" (for ", 1)[0], text)
        out.append(needs)
    return out, list(problems.values())


def _naming(where: str, combo: Mapping[str, object]) -> Callable[[str], str]:
    return lambda name: f"{where}.{name} (for {dict(combo)})"


def _to_bytes(value: object) -> object:
    if isinstance(value, str):
        got = bytes_in(value)
        if got is None:
            raise ValueError(f"not a size (got {value!r}): use bytes, or KB, MB, GB")
        return got
    return value


Bytes = Annotated[float, BeforeValidator(_to_bytes)]
"""A size as a config gives it: bytes, or a number with KB, MB, GB, KiB, MiB, GiB."""

"""How many tasks a config's bags hold, counted without making them: a run or a job too
big for memory is refused before its bag is expanded."""

from __future__ import annotations

import math

from autoscaler.config.needs import is_table
from autoscaler.config.schema import RunConfig
from autoscaler.config.work import Bag, IntRange
from autoscaler.core.errors import ConfigError

SETTING = "service.max_job_tasks"
MAX_TASKS = 10_000_000
"""The most tasks one run may have, whatever makes them (a count, a sweep, a file): more
would not fit in memory (each task takes a few hundred bytes), and is almost certainly a
mistake."""


def _length(values: list[str | int | float] | IntRange) -> int:
    if isinstance(values, IntRange):
        return abs(values.stop - values.start + values.step - (1 if values.step > 0 else -1)) // (
            abs(values.step)
        )
    return len(values)


def _file_lines(bag: Bag, room: int) -> int:
    """The commands of ``bag.file`` (blank lines and ``#`` comments skipped; a table's
    header is not a command), counted up to ``room`` + 1: reading stops there. An
    unreadable file counts 0 here; expanding the bag names it."""
    assert bag.file is not None
    count = -1 if is_table(bag.file) else 0
    try:
        with bag.file.open("rb") as f:
            for line in f:
                text = line.strip()
                if text and not text.startswith(b"#"):
                    count += 1
                    if count > room:
                        break
    except OSError:
        return 0
    return max(0, count)


def bag_size(bag: Bag, room: int) -> tuple[str, int]:
    """The field that sets ``bag``'s size, and the size (a file's counted to ``room`` + 1)."""
    if bag.synthetic is not None:
        return "synthetic", bag.synthetic
    if bag.file is not None:
        return "file", _file_lines(bag, room)
    if bag.sweep:
        return "sweep", math.prod(_length(v) for v in bag.sweep.values())
    return "command", 1


def check_job_size(cfg: RunConfig, limit: int, source: str) -> int:
    """The tasks of ``cfg``'s bags, or a ``ConfigError`` naming the bag that passes
    ``limit`` and the setting that sets it."""
    return _check_size(
        cfg,
        limit,
        source,
        f"the service takes at most {limit:,} in one job (its {SETTING} setting)",
    )


def check_run_size(cfg: RunConfig, source: str) -> int:
    """The tasks of ``cfg``'s bags, or a ``ConfigError`` naming the bag that passes
    ``MAX_TASKS``."""
    return _check_size(cfg, MAX_TASKS, source, f"a run takes at most {MAX_TASKS:,}")


def _check_size(cfg: RunConfig, limit: int, source: str, refusal: str) -> int:
    total = 0
    for field, bag in cfg.bags():
        what, size = bag_size(bag, limit - total)
        total += size
        if total > limit:
            count = f"more than {limit - total + size:,}" if what == "file" else f"{size:,}"
            raise ConfigError(source, [f"{field}.{what}: {count} tasks: {refusal}"])
    return total

"""How a long run keeps Python's garbage collector and the C allocator out of its way, in
the emulator and in the real daemon alike (``long_run``).

A run makes a few objects per event that live as long as it does (its records, its
state). The collector's default young generation (700 allocations) walks them every few
events, and each full collection walks all of them. While a run goes, the young
generation is collected every ``GC_YOUNG`` allocations instead: the same garbage is
freed, a little later.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import threading
from collections.abc import Iterator

GC_YOUNG = 100_000
"""Allocations between young-generation collections while a run goes."""

MALLOC_KEEP_BYTES = 32 * 1024 * 1024
"""Freed memory below this the C allocator keeps for reuse (glibc's M_MMAP_THRESHOLD
and M_TRIM_THRESHOLD; see ``keep_freed_memory``)."""

_M_TRIM_THRESHOLD = -1  # glibc's malloc.h
_M_MMAP_THRESHOLD = -3

_lock = threading.Lock()
_runs = 0  # runs going in this process (a service's dry runs and daemons share it)
_before: tuple[int, int, int] = (0, 0, 0)  # the threshold before the first of them


@contextlib.contextmanager
def long_run() -> Iterator[None]:
    """While a run goes: the young generation collected every ``GC_YOUNG`` allocations
    (unless collection is off), and freed memory kept (``keep_freed_memory``). The
    threshold comes back when the last run of the process that overlapped ends."""
    global _runs, _before
    with _lock:
        if _runs == 0:
            _before = gc.get_threshold()
            if _before[0]:  # 0: collection is off, and stays so
                gc.set_threshold(max(_before[0], GC_YOUNG), *_before[1:])
        _runs += 1
    keep_freed_memory()
    try:
        yield
    finally:
        with _lock:
            _runs -= 1
            if _runs == 0:
                gc.set_threshold(*_before)


def keep_freed_memory() -> None:
    """Have glibc's malloc keep freed blocks below ``MALLOC_KEEP_BYTES`` for reuse, for
    the rest of the process (elsewhere than glibc: nothing).

    The estimates make arrays of every ended run at each tick (``learn.survival``), a
    little larger each time. glibc maps each block above its threshold afresh, raises
    the threshold to the largest block freed, and gives a free heap top above twice
    that back: a run's arrays, growing, land on fresh pages at nearly every tick,
    a page fault per 4 KiB (the 100,000-task dry run: 130,000 faults, about 0.3 s of
    system time of 5). Set, the thresholds stay fixed (glibc stops adjusting them)."""
    try:
        libc = ctypes.CDLL(None)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return
    mallopt(_M_TRIM_THRESHOLD, 2 * MALLOC_KEEP_BYTES)
    mallopt(_M_MMAP_THRESHOLD, MALLOC_KEEP_BYTES)

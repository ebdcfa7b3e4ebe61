"""Runtimes kept sorted for reading, appended in any order (``RuntimeStats``' ended runs)."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np


class SortedTimes:
    """Times appended one by one, read sorted: as a list, or as a numpy array.

    The list is sorted when read (a long sorted run and a few more: timsort merges them
    in O(n)). The array is kept between reads, and a read merges into it only the times
    appended since the last (``np.insert`` at their ``searchsorted`` places: one copy),
    so a caller that asks for the array after every few ends does not pay a conversion
    of every time from Python floats and a sort each time. Both hold the same values in
    the same order. The array is read-only: a reader that kept it keeps what it read.
    """

    __slots__ = ("_array", "_fresh", "_items", "_unsorted")

    def __init__(self, times: Iterable[float] = ()) -> None:
        self._items: list[float] = sorted(times)
        self._unsorted = False
        self._array: np.ndarray | None = None
        self._fresh: list[float] = []  # appended since ``_array`` was last brought up to date

    def add(self, t: float) -> None:
        self._unsorted |= bool(self._items) and t < self._items[-1]
        self._items.append(t)
        if self._array is not None:
            self._fresh.append(t)

    def __len__(self) -> int:
        return len(self._items)

    def as_list(self) -> list[float]:
        """The times, sorted (the list itself: not to be changed by the caller)."""
        if self._unsorted:
            self._items.sort()
            self._unsorted = False
        return self._items

    def as_array(self) -> np.ndarray:
        """The times, sorted, as a read-only float array."""
        if self._array is None:
            self._array = np.array(self.as_list(), dtype=float)
            self._fresh.clear()
        elif self._fresh:
            new = np.sort(np.array(self._fresh, dtype=float))
            self._array = np.insert(self._array, np.searchsorted(self._array, new, "right"), new)
            self._fresh.clear()
        self._array.flags.writeable = False
        return self._array

"""A cluster's free processors over time (a step function from ``now`` on) and how jobs
are placed in it: a rigid job at the earliest time its processors are free for its whole
runtime, a bag's tasks in waves (each wave as many tasks as are free for a task's time at
the earliest start left). A profile's steps are its free time slots (paper 003 §3.2);
``slot_offers`` reads the offers a metascheduler derives from them.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from dataclasses import dataclass

from autoscaler.providers.offer import Offer

Slots = tuple[tuple[float, int], ...]
"""Free time slots: (from, free processors) steps; the last step lasts for ever."""


@dataclass(frozen=True, slots=True)
class Wave:
    """``count`` processors (or tasks) from ``start`` for ``length`` seconds."""

    start: float
    count: int
    length: float

    @property
    def end(self) -> float:
        return self.start + self.length


class Profile:
    """Free processors from ``start`` on: ``free[i]`` on ``[times[i], times[i + 1])``,
    the last step for ever (a working copy; ``copy`` before placing speculatively).

    Placing only takes processors, so the first time ``count`` processors are free never
    moves earlier: ``floor`` keeps it per count, where the next search starts."""

    __slots__ = ("floor", "free", "times")

    def __init__(self, times: list[float], free: list[int]) -> None:
        self.times = times
        self.free = free
        self.floor: dict[int, float] = {}

    @classmethod
    def empty(cls, start: float, processors: int) -> Profile:
        return cls([start], [processors])

    @classmethod
    def of(cls, slots: Slots) -> Profile:
        return cls([t for t, _ in slots], [f for _, f in slots])

    def copy(self) -> Profile:
        twin = Profile(self.times[:], self.free[:])
        twin.floor = dict(self.floor)
        return twin

    def slots(self) -> Slots:
        """The steps as (from, free) pairs, equal neighbours merged."""
        out: list[tuple[float, int]] = []
        for t, f in zip(self.times, self.free, strict=True):
            if not out or out[-1][1] != f:
                out.append((t, f))
        return tuple(out)

    def earliest(self, count: int, length: float, after: float) -> float:
        """The earliest start from ``after`` with ``count`` processors free for ``length``."""
        times, free = self.times, self.free
        last = len(times) - 1
        floor = max(times[0], self.floor.get(count, -math.inf))
        start = max(after, floor)
        i = max(bisect.bisect_right(times, start) - 1, 0)
        while free[i] < count:
            if i == last:
                raise ValueError(f"{count} processors are never free")
            i += 1
            start = times[i]
        if after <= floor:
            self.floor[count] = start
        while True:
            end = start + length
            j = i + 1
            while j <= last and times[j] < end and free[j] >= count:
                j += 1
            if j > last or times[j] >= end:
                return start
            while free[j] < count:
                if j == last:
                    raise ValueError(f"{count} processors are never free")
                j += 1
            i = j
            start = times[i]

    def least(self, start: float, length: float) -> int:
        """The fewest processors free on ``[start, start + length)``."""
        times = self.times
        i = max(bisect.bisect_right(times, start) - 1, 0)
        j = bisect.bisect_left(times, start + length)
        return min(self.free[i : max(j, i + 1)])

    def take(self, wave: Wave) -> None:
        """Reserve ``wave``'s processors."""
        i = self._cut(wave.start)
        j = self._cut(wave.end)
        count = wave.count
        self.free[i:j] = [f - count for f in self.free[i:j]]

    def _cut(self, t: float) -> int:
        times = self.times
        i = bisect.bisect_right(times, t) - 1
        if i >= 0 and times[i] == t:
            return i
        times.insert(i + 1, t)
        self.free.insert(i + 1, self.free[max(i, 0)])
        return i + 1

    def place_rigid(self, count: int, length: float, after: float) -> list[Wave]:
        """A rigid job placed (one wave) at its earliest start."""
        wave = Wave(self.earliest(count, length, after), count, length)
        self.take(wave)
        return [wave]

    def place_tasks(self, tasks: int, length: float, after: float) -> list[Wave]:
        """``tasks`` one-processor tasks placed in waves, earliest first."""
        waves: list[Wave] = []
        start = after
        while tasks > 0:
            start = self.earliest(1, length, start)
            wave = Wave(start, min(tasks, self.least(start, length)), length)
            self.take(wave)
            waves.append(wave)
            tasks -= wave.count
        return waves


def slot_offers(
    provider: str, slots: Slots, task_s: float, tasks: int, after: float
) -> list[Offer]:
    """What a metascheduler reads from ``provider``'s free time slots for a bag: an offer
    per wave the slots hold (k tasks by the end of the wave that brings them to k), up to
    ``tasks``."""
    offers: list[Offer] = []
    done = 0
    for wave in Profile.of(slots).place_tasks(tasks, task_s, after):
        done += wave.count
        offers.append(Offer(provider, done, wave.end))
    return offers


def free_processors(waves: Sequence[Wave], processors: int, start: float) -> Profile:
    """A profile of ``processors`` from ``start`` with ``waves`` (clipped to it) taken."""
    profile = Profile.empty(start, processors)
    for wave in waves:
        if wave.end > start:
            begin = max(wave.start, start)
            profile.take(Wave(begin, wave.count, wave.end - begin))
    return profile

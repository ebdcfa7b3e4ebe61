"""When the daemon itself could not hear: the time its own stalls kept agents silent.

A machine is lost for the silence of its agent (``agents.lost_contact``), and only for
silence the daemon could have heard. Two listeners keep the agents heard, and either one
stalled silences them: the dispatcher, which reads their requests (``last_seen`` is set
as one arrives), and the main loop, which answers them (an agent whose request is held
unanswered does not ask again). Each listener notes the monotonic time as it goes round
(``note``): the dispatcher from its own thread every ``run.dispatch.TICK_S``, the main loop
each time it takes its queue (a health check falls due every ``timers.HEALTH_S``, so an
idle loop goes round as often). A gap between two notes of a listener longer than
``DEAF_AFTER_S`` is time the daemon was deaf: the whole process stopped (SIGSTOP, a
suspended VM, swapping) silences both, a long step the main loop. So does a request
that waited unread in the main loop's queue longer than that (``unread``): a loop that
goes round often but is behind answers every agent late.

A daemon so far behind that every poll waits longer than that counts no silence at
all: a machine that really went is then lost only once the daemon catches up.

``deaf_s(start, end)`` is the deaf time inside an interval: a machine's silence is the
time since it was last heard less that. The deaf intervals are kept merged and sorted
with the running total of their lengths, so a query is two binary searches; those that
ended before the oldest time any check still needs are dropped (``forget_before``).

Pure: it reads no clock (the listeners pass the time) and takes no lock. The dispatcher
notes from its own thread: each listener writes only its own last note, and an interval
found is appended to a queue (``deque.append``, atomic) that the one reader, the main
loop, merges in as it asks.
"""

from __future__ import annotations

import bisect
from collections import deque

DEAF_AFTER_S = 1.0
"""A listener silent this long (real seconds) was deaf, not merely between rounds: well
above their rounds (0.25 s) and a busy step's usual length, well below the silence that
loses a machine (``daemon.lost_after_s``, 15 s by default), so a stall is subtracted
from a machine's silence long before it could count."""


class Hearing:
    """The intervals (monotonic seconds) the daemon could not hear its agents."""

    def __init__(self, deaf_after_s: float = DEAF_AFTER_S) -> None:
        self.deaf_after_s = deaf_after_s
        self._last: dict[str, float] = {}  # listener -> its last note (its own to write)
        self._found: deque[tuple[float, float]] = deque()  # intervals not merged in yet
        self._starts: list[float] = []  # disjoint intervals, sorted
        self._ends: list[float] = []
        self._upto: list[float] = []  # deaf time up to each interval's end, from creation

    def note(self, listener: str, mono: float) -> None:
        """``listener`` goes round at ``mono``: a gap since its last note longer than
        ``deaf_after_s`` was deaf time."""
        last = self._last.get(listener)
        self._last[listener] = mono
        if last is not None and mono - last > self.deaf_after_s:
            self._found.append((last, mono))

    def unread(self, since: float, mono: float) -> None:
        """A request that arrived at ``since`` was taken to be answered at ``mono``."""
        if mono - since > self.deaf_after_s:
            self._found.append((since, mono))

    def deaf_s(self, start: float, end: float) -> float:
        """How long the daemon was deaf between ``start`` and ``end``."""
        self._merge_found()
        if not self._ends or end <= start or self._ends[-1] <= start:
            return 0.0
        return self._before(end) - self._before(start)

    def forget_before(self, mono: float) -> None:
        """Drop the intervals that ended before ``mono``: no check asks about them."""
        self._merge_found()
        cut = bisect.bisect_left(self._ends, mono)
        if cut:
            del self._starts[:cut], self._ends[:cut], self._upto[:cut]

    def intervals(self) -> list[tuple[float, float]]:
        """The deaf intervals kept, in order."""
        self._merge_found()
        return list(zip(self._starts, self._ends, strict=True))

    def _merge_found(self) -> None:
        found = self._found
        while found:
            self._add(*found.popleft())

    def _before(self, t: float) -> float:
        """Deaf time up to ``t``, counted as ``_upto`` counts it."""
        i = bisect.bisect_right(self._starts, t) - 1
        if i < 0:
            return self._upto[0] - (self._ends[0] - self._starts[0]) if self._upto else 0.0
        full_before = self._upto[i] - (self._ends[i] - self._starts[i])
        return full_before + min(t, self._ends[i]) - self._starts[i]

    def _add(self, start: float, end: float) -> None:
        """Merge [start, end] in. Intervals come as they end, now, so near the last one
        (two threads may add them a little out of order): the lists change at their
        tail, amortised O(1)."""
        starts, ends, upto = self._starts, self._ends, self._upto
        i = bisect.bisect_left(ends, start)  # the first interval that ends at or after it
        j = i
        while j < len(starts) and starts[j] <= end:
            start, end = min(start, starts[j]), max(end, ends[j])
            j += 1
        base = upto[i - 1] if i > 0 else (upto[0] - (ends[0] - starts[0]) if upto else 0.0)
        after = list(zip(starts[j:], ends[j:], strict=True))
        del starts[i:], ends[i:], upto[i:]
        for s, e in [(start, end), *after]:
            base += e - s
            starts.append(s)
            ends.append(e)
            upto.append(base)

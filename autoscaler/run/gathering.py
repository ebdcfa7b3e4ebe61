"""The dispatcher's selector at thousands of agents: a pause before each wait on the
sockets, so that one wait returns many agents' requests instead of one."""

from __future__ import annotations

import selectors
import time
from collections.abc import Callable

GATHER_S = 0.020
"""Past the dispatcher's ``gather_from`` connections, how long its loop pauses before it
waits on its sockets again: half the main loop's 40 ms between steps there
(``run.daemon.STEP_GATHER_S``). A poll read sooner waits for the next step all the same,
and the answers of a step are written together. 5 ms before the main loop gathered;
5,000 agents of 2 s tasks, runs in turn (issue 36, steady µs a task): 5 ms 75, 66, 74,
70, 78; 20 ms 64, 66, 70, 58, 62, with round trips' p50 from 35 to 50 ms and their p99
from 60 to 80–100 ms."""


class Gathering(selectors.DefaultSelector):
    """The loop's selector: while ``crowded()`` (past ``gather_from`` connections), it
    pauses ``GATHER_S`` before each wait on the sockets, so that one wait returns the
    requests of many agents instead of one.

    A loop that waits for every request on its own pays a system call and a turn of the
    loop per request; at 10,000 agents of 10 s tasks (1,000 requests a second) the
    exchange alone cost 141 µs a task that way, and 107–117 µs pausing 5 ms
    (``benchmarks.dispatch_floor``). Each answer comes up to ``GATHER_S`` later, against
    agents that report every 2 s or more. A wait that is not to block (callbacks are ready) is
    not paused, and up to ``gather_from`` connections nothing changes."""

    def __init__(
        self, crowded: Callable[[], bool], sleep: Callable[[float], None] = time.sleep
    ) -> None:
        super().__init__()
        self._crowded = crowded
        self._sleep = sleep

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        if (timeout is None or timeout > 0) and self._crowded():
            pause = GATHER_S if timeout is None else min(GATHER_S, timeout)
            self._sleep(pause)
            timeout = None if timeout is None else timeout - pause
        return super().select(timeout)

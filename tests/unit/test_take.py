"""``run.inbox.take``: one step's items, gathered for a while when the fleet is crowded."""

from __future__ import annotations

import queue
import time
from collections.abc import Callable

from autoscaler.run.inbox import MOST_A_STEP, take


def arriving(
    inbox: queue.SimpleQueue[object], later: list[object], asked: list[float]
) -> Callable[[float], None]:
    """A sleep during which ``later`` arrives (the agents' polls meanwhile); the pauses
    asked are kept in ``asked``."""

    def sleep(s: float) -> None:
        asked.append(s)
        for item in later:
            inbox.put(item)

    return sleep


def test_a_step_gathers_what_arrives_until_its_time() -> None:
    inbox: queue.SimpleQueue[object] = queue.SimpleQueue()
    inbox.put("first")
    asked: list[float] = []
    until = time.monotonic() + 0.5
    items = take(inbox, until, arriving(inbox, ["second", "third"], asked))
    assert items == ["first", "second", "third"]
    assert len(asked) == 1
    assert 0 < asked[0] <= 0.5


def test_a_step_past_its_time_or_not_gathering_takes_what_is_queued_at_once() -> None:
    inbox: queue.SimpleQueue[object] = queue.SimpleQueue()
    asked: list[float] = []
    sleep = arriving(inbox, ["late"], asked)
    inbox.put("first")
    assert take(inbox, 0.0, sleep) == ["first"]  # not crowded
    inbox.put("next")
    assert take(inbox, time.monotonic() - 1.0, sleep) == ["next"]  # the last step was long ago
    assert asked == []


def test_a_step_takes_at_most_its_share_and_leaves_the_rest_queued() -> None:
    inbox: queue.SimpleQueue[object] = queue.SimpleQueue()
    for i in range(MOST_A_STEP + 7):
        inbox.put(i)
    assert take(inbox) == list(range(MOST_A_STEP))
    assert take(inbox) == list(range(MOST_A_STEP, MOST_A_STEP + 7))

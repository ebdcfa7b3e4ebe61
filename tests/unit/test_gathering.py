"""The dispatcher's selector past ``gather_from`` connections (run/gathering.py): a wait
that would block pauses first, so the requests that come during the pause are read with
the first one; a wait that is not to block never pauses. Real sockets; the pause is where
a second agent's request arrives."""

from __future__ import annotations

import selectors
import socket
from collections.abc import Iterator

import pytest

from autoscaler.run.gathering import GATHER_S, Gathering

Pairs = list[tuple[socket.socket, socket.socket]]


@pytest.fixture
def pairs() -> Iterator[Pairs]:
    made = [socket.socketpair() for _ in range(2)]
    yield made
    for a, b in made:
        a.close()
        b.close()


def ready(crowded: bool, timeout: float | None, pairs: Pairs) -> tuple[set[int], list[float]]:
    """Which agents' requests one wait returns: the first agent's is there before it,
    the second's comes during a pause, if the selector pauses."""
    (_, first_agent), (_, second_agent) = pairs
    paused: list[float] = []

    def pause(seconds: float) -> None:
        paused.append(seconds)
        second_agent.send(b"poll")

    selector = Gathering(lambda: crowded, sleep=pause)
    try:
        for i, (sock, _) in enumerate(pairs):
            selector.register(sock, selectors.EVENT_READ, i)
        first_agent.send(b"poll")
        return {key.data for key, _ in selector.select(timeout)}, paused
    finally:
        selector.close()


def test_a_crowded_loop_pauses_and_reads_what_came_meanwhile_in_one_wait(pairs: Pairs) -> None:
    got, paused = ready(True, None, pairs)
    assert got == {0, 1}
    assert paused == [GATHER_S]


def test_up_to_the_crowd_each_request_is_read_as_it_comes(pairs: Pairs) -> None:
    got, paused = ready(False, None, pairs)
    assert got == {0}
    assert paused == []


def test_a_wait_that_is_not_to_block_is_not_paused_and_a_short_one_no_longer(pairs: Pairs) -> None:
    got, paused = ready(True, 0, pairs)
    assert (got, paused) == ({0}, [])
    got, paused = ready(True, GATHER_S / 5, pairs)
    assert got == {0, 1}
    assert paused == [GATHER_S / 5]

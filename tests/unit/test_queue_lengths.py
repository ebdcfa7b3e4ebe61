"""The index of queue lengths the tail's take-back reads (``Fleet.queue_lengths``): per
kind of machine, the longest queue and the first launched among equals, as a pass over
every machine with a queue finds them."""

from __future__ import annotations

from collections import deque

from hypothesis import given, settings
from hypothesis import strategies as st

from autoscaler.core.billing import BillingModel
from autoscaler.core.machine_ledger import Fleet, Machine, QueueLengths
from autoscaler.core.model import TypeSpec

_KINDS = (
    TypeSpec("a", 1.0, 9, 60.0),
    TypeSpec("a", 1.0, 9, 60.0, slots=2),
    TypeSpec("b", 2.0, 9, 60.0),
)


def _scan(
    machines: list[Machine], lengths: dict[str, int]
) -> dict[tuple[str, int], tuple[str, int]]:
    """Per kind, the machine with the longest queue, the first launched among equals."""
    best: dict[tuple[str, int], tuple[str, int]] = {}
    for m in machines:  # in launch order: a strictly longer queue replaces the first
        n = lengths.get(m.id, 0)
        kind = (m.type.name, m.type.slots)
        if n and (kind not in best or n > best[kind][1]):
            best[kind] = (m.id, n)
    return best


@given(
    kinds=st.lists(st.sampled_from(range(len(_KINDS))), min_size=1, max_size=12),
    changes=st.lists(st.tuples(st.integers(0, 11), st.integers(0, 4)), max_size=200),
)
@settings(max_examples=300, deadline=None)
def test_the_longest_queue_of_each_kind_is_the_one_a_scan_finds(
    kinds: list[int], changes: list[tuple[int, int]]
) -> None:
    machines = [Machine(f"m{i}", _KINDS[k], "t", 0.0, 3600.0) for i, k in enumerate(kinds)]
    index = QueueLengths()
    lengths: dict[str, int] = {}
    for which, n in changes:
        m = machines[which % len(machines)]
        index.set(m, n, machines.index(m))
        lengths[m.id] = n
        found = {(mid, n) for mid, n in index.longest()}
        assert found == set(_scan(machines, lengths).values())


@given(
    kinds=st.lists(st.sampled_from(range(len(_KINDS))), min_size=1, max_size=12),
    changes=st.lists(st.tuples(st.integers(0, 11), st.integers(-1, 4)), max_size=120),
    first_ask=st.integers(0, 120),
)
@settings(max_examples=200, deadline=None)
def test_a_fleet_keeps_its_longest_queues_from_the_first_time_it_is_asked(
    kinds: list[int], changes: list[tuple[int, int]], first_ask: int
) -> None:
    """``Fleet.longest_queues`` is built from the machines with a queue when first
    asked (the tail) and kept as queues change and machines go (-1: gone) from then on."""
    fleet = Fleet(types={}, billing=BillingModel("fixed", 3600.0))
    machines = []
    for i, k in enumerate(kinds):
        fleet.types[f"t{i}"] = _KINDS[k]
        fleet.launch(f"L{i}", f"t{i}", 1)
        machines.append(fleet.launched(f"m{i}", f"t{i}", f"L{i}", 0.0))
    for step, (which, n) in enumerate(changes):
        m = machines[which % len(machines)]
        if n < 0:
            if m.alive:
                fleet.gone(m, 10.0, "lost")
        elif m.alive:
            m.queue = deque(range(n))
            fleet.track_queue(m)
        if step >= first_ask:
            lengths = {x.id: len(x.queue) for x in fleet.queued.values()}
            assert set(fleet.longest_queues()) == set(_scan(machines, lengths).values())

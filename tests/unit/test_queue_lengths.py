"""The index of queue lengths the tail's take-back reads (``Fleet.queue_lengths``): per
kind of machine, the longest queue and the first launched among equals, as a pass over
every machine with a queue finds them."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from autoscaler.core.machine_ledger import Machine, QueueLengths
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

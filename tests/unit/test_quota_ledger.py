"""The service's quota ledger: whatever order its holders (a service's jobs) give back,
ask and leave in, a grant never takes a type or a limited provider past its limit."""

from __future__ import annotations

import threading

from hypothesis import given, settings
from hypothesis import strategies as st

from autoscaler.service.quota_ledger import Limit, QuotaLedger

TYPES = {"small": 3, "fast": 2, "big": 5}
PROVIDERS = {"campus": Limit("campus", ("small", "fast"), 4)}
HOLDERS = ("j1", "j2", "j3", "pool")


def _ledger() -> QuotaLedger:
    return QuotaLedger(TYPES, PROVIDERS)


def _totals(ledger: QuotaLedger) -> dict[str, int]:
    return {u.name: u.held for u in ledger.usage()}


def _within(ledger: QuotaLedger) -> None:
    for use in ledger.usage():
        assert use.held <= use.most, f"{use.kind} {use.name}: {use.held} held of {use.most}"


counts = st.dictionaries(st.sampled_from(sorted(TYPES)), st.integers(0, 6), max_size=3)
ops = st.lists(
    st.tuples(
        st.sampled_from(HOLDERS),
        st.sampled_from(["claim", "claim", "claim", "leave"]),
        st.floats(0, 1),  # the share of its machines the holder still has
        counts,  # what it asks for
        counts,  # what it waits for
    ),
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@given(ops)
def test_no_interleaving_of_claims_and_leaves_passes_a_limit(steps: list) -> None:
    ledger = _ledger()
    held: dict[str, dict[str, int]] = {h: {} for h in HOLDERS}
    for holder, op, share, asked, waiting in steps:
        if op == "leave":
            ledger.leave(holder)
            held[holder] = {}
        else:
            # Machines end (some of what it held) and the step's launches ask for more.
            have = {t: int(n * share) for t, n in held[holder].items()}
            room = ledger.room(holder)
            granted = ledger.claim(holder, have, asked, waiting)
            for t, n in asked.items():
                assert 0 <= granted[t] <= n
            if "big" in asked:  # of no limited provider: what the room said is granted
                assert granted["big"] == min(asked["big"], room.types["big"] - have.get("big", 0))
            held[holder] = {t: have.get(t, 0) + granted.get(t, 0) for t in TYPES}
        _within(ledger)
        totals = _totals(ledger)
        for t in TYPES:
            assert totals[t] == sum(h.get(t, 0) for h in held.values())


@settings(max_examples=100, deadline=None)
@given(ops)
def test_the_room_is_what_the_others_leave(steps: list) -> None:
    """Whatever the others hold, a holder's room is granted when it asks for it all at
    once, and its grant takes nothing past a limit."""
    ledger = _ledger()
    for holder, op, _, asked, _ in steps:
        if op == "leave":
            ledger.leave(holder)
            continue
        ledger.claim(holder, {}, asked, {})
        other = HOLDERS[(HOLDERS.index(holder) + 1) % len(HOLDERS)]
        ledger.leave(other)
        room = ledger.room(other)
        free = room.providers["campus"]
        want = {"big": room.types["big"], "small": min(room.types["small"], free)}
        assert ledger.claim(other, {}, want, {}) == want
        _within(ledger)
        assert ledger.room(other) == room  # what it holds now is its room still
        ledger.leave(other)


def test_adopted_machines_count_and_block_grants() -> None:
    """A resumed job's machines are counted as they are, even past the limit (they run);
    no one is granted more until the count is under it again."""
    ledger = _ledger()
    ledger.hold("j1", {"big": 7})
    assert ledger.claim("j2", {}, {"big": 1}, {"big": 1}) == {"big": 0}
    assert ledger.room("j2").types["big"] == 0
    assert [w.said() for w in ledger.waits("j2")] == ["1 big machine held by j1"]
    ledger.claim("j1", {"big": 4}, {}, {})
    assert ledger.claim("j2", {}, {"big": 3}, {}) == {"big": 1}


def test_a_wait_for_machines_given_back_is_not_shown() -> None:
    """Between a holder's leaving and the waiting job's next step, the waiting job is not
    said to wait (for machines no one holds)."""
    ledger = _ledger()
    ledger.hold("j1", {"big": 7})
    ledger.hold("j3", {"small": 1})
    assert ledger.claim("j2", {}, {"big": 1}, {"big": 1}) == {"big": 0}
    ledger.leave("j1")
    assert ledger.waits("j2") == []


def test_freed_machines_wake_the_others() -> None:
    ledger = _ledger()
    woken: list[str] = []
    for h in HOLDERS:
        ledger.watch(h, lambda h=h: woken.append(h))
    ledger.claim("j1", {}, {"small": 2}, {})
    assert woken == []  # taking machines wakes no one
    ledger.claim("j1", {"small": 1}, {}, {})
    assert sorted(woken) == ["j2", "j3", "pool"]
    woken.clear()
    ledger.leave("j1")
    assert sorted(woken) == ["j2", "j3", "pool"]


def test_threads_claiming_at_once_stay_within_the_limits() -> None:
    """Holders on threads of their own, each asking for everything at once and giving
    back, never hold more between them than the limits."""
    ledger = _ledger()
    start = threading.Barrier(len(HOLDERS))
    seen: list[dict[str, int]] = []

    def job(holder: str) -> None:
        start.wait()
        have: dict[str, int] = {}
        for i in range(300):
            granted = ledger.claim(holder, have, dict(TYPES), {})
            have = {t: (have.get(t, 0) + granted.get(t, 0)) // (1 + i % 2) for t in TYPES}
            seen.append(_totals(ledger))

    threads = [threading.Thread(target=job, args=(h,)) for h in HOLDERS]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert seen
    for totals in seen:
        assert all(totals[t] <= most for t, most in TYPES.items())
        assert totals["campus"] <= PROVIDERS["campus"].most

"""The spreading rule of a launch over a type's pools (``providers/ec2_pools.py``)."""

from __future__ import annotations

from autoscaler.providers.ec2_pools import Share, spread


def counts(
    count: int, pools: int, start: int = 0, prices: tuple[float | None, ...] = ()
) -> dict[int, int]:
    return {s.pool: s.count for s in spread(count, pools, start, prices).shares}


def test_a_launch_is_dealt_evenly_over_the_pools() -> None:
    assert counts(4, 2) == {0: 2, 1: 2}
    assert counts(7, 3) == {0: 3, 1: 2, 2: 2}
    assert counts(2, 3) == {0: 1, 1: 1, 2: 0}


def test_the_next_launch_starts_where_the_last_ended() -> None:
    """Launches of one machine alternate; odd launches do not pile up in the first pool."""
    start, where = 0, []
    for _ in range(4):
        plan = spread(1, 2, start)
        where += [s.pool for s in plan.shares if s.count]
        start = plan.next_start
    assert where == [0, 1, 0, 1]
    total = {0: 0, 1: 0}
    start = 0
    for _ in range(4):
        plan = spread(3, 2, start)
        for s in plan.shares:
            total[s.pool] += s.count
        start = plan.next_start
    assert total == {0: 6, 1: 6}


def test_every_pool_is_in_the_order_to_take_what_others_refuse() -> None:
    plan = spread(1, 3, start=1)
    assert plan.shares == (Share(1, 1), Share(2, 0), Share(0, 0))
    assert plan.next_start == 2


def test_the_cheapest_zones_share_a_spot_launch_and_the_dearer_follow_cheapest_first() -> None:
    plan = spread(4, 4, 0, (0.05, 0.03, 0.04, 0.03))
    assert plan.shares == (Share(1, 2), Share(3, 2), Share(2, 0), Share(0, 0))


def test_a_pool_without_a_known_price_comes_last_and_none_known_is_round_robin() -> None:
    assert spread(2, 3, 0, (None, 0.04, 0.05)).shares == (Share(1, 2), Share(2, 0), Share(0, 0))
    assert counts(2, 2, 0, (None, None)) == {0: 1, 1: 1}


def test_ties_among_the_cheapest_rotate_from_where_the_last_launch_ended() -> None:
    prices = (0.03, 0.09, 0.03)
    first = spread(1, 3, 0, prices)
    second = spread(1, 3, first.next_start, prices)
    assert [s.pool for s in first.shares if s.count] == [0]
    assert [s.pool for s in second.shares if s.count] == [2]


def test_nothing_to_spread() -> None:
    assert spread(0, 2).shares == (Share(0, 0), Share(1, 0))
    assert spread(3, 0).shares == ()

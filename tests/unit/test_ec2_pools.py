"""The spreading rule of a launch over a type's pools (``providers/ec2_pools.py``)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter

from autoscaler.providers.ec2 import client_token
from autoscaler.providers.ec2_pools import Share, first_pool, spread


def counts(
    count: int, pools: int, start: int = 0, prices: tuple[float | None, ...] = ()
) -> dict[int, int]:
    return {s.pool: s.count for s in spread(count, pools, start, prices)}


def test_a_launch_is_dealt_evenly_over_the_pools() -> None:
    assert counts(4, 2) == {0: 2, 1: 2}
    assert counts(7, 3) == {0: 3, 1: 2, 2: 2}
    assert counts(2, 3) == {0: 1, 1: 1, 2: 0}


def test_a_launch_starts_at_its_keys_pool_whatever_launched_before() -> None:
    """The first pool is a function of the launch's key alone, the same in another
    process (whose ``PYTHONHASHSEED`` differs): a replay there deals each pool the same
    share, so request n of its walk is the first's under the same ``ClientToken``."""
    key = "a-launch-token"  # no sequence number: its hash
    script = (
        "from autoscaler.providers.ec2_pools import first_pool;"
        f"print(first_pool({key!r}, 3), first_pool({key!r}, 7))"
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    other = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, env=env
    )
    assert other.stdout.split() == [str(first_pool(key, 3)), str(first_pool(key, 7))]


def test_a_runs_launches_take_the_pools_in_turn() -> None:
    """Launch tokens are the run's launches in order (``L<n>``, after a prefix): launches
    of one machine alternate over the pools; a key without a number still has a pool."""
    assert [first_pool(f"L{i}", 3) for i in range(6)] == [0, 1, 2, 0, 1, 2]
    assert [first_pool(f"svc-j4_L{i}", 2) for i in range(4)] == [0, 1, 0, 1]
    total: Counter[int] = Counter()
    for i in range(300):
        for s in spread(1, 2, first_pool(f"L{i}", 2)):
            total[s.pool] += s.count
    assert total == {0: 150, 1: 150}
    starts = Counter(first_pool(f"{client_token('run-1', str(i))}-x", 3) for i in range(3000))
    assert set(starts) == {0, 1, 2}
    assert all(900 < n < 1100 for n in starts.values())
    assert first_pool("anything", 0) == 0


def test_every_pool_is_in_the_order_to_take_what_others_refuse() -> None:
    assert spread(1, 3, start=1) == (Share(1, 1), Share(2, 0), Share(0, 0))


def test_the_cheapest_zones_share_a_spot_launch_and_the_dearer_follow_cheapest_first() -> None:
    assert spread(4, 4, 0, (0.05, 0.03, 0.04, 0.03)) == (
        Share(1, 2),
        Share(3, 2),
        Share(2, 0),
        Share(0, 0),
    )


def test_a_pool_without_a_known_price_comes_last_and_none_known_is_round_robin() -> None:
    assert spread(2, 3, 0, (None, 0.04, 0.05)) == (Share(1, 2), Share(2, 0), Share(0, 0))
    assert counts(2, 2, 0, (None, None)) == {0: 1, 1: 1}


def test_ties_among_the_cheapest_are_dealt_from_the_launch_s_first_pool() -> None:
    prices = (0.03, 0.09, 0.03)
    assert [s.pool for s in spread(1, 3, 0, prices) if s.count] == [0]
    assert [s.pool for s in spread(1, 3, 1, prices) if s.count] == [2]
    assert spread(3, 3, 2, prices) == (Share(2, 2), Share(0, 1), Share(1, 0))


def test_nothing_to_spread() -> None:
    assert spread(0, 2) == (Share(0, 0), Share(1, 0))
    assert spread(3, 0) == ()

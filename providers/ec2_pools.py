"""Pools: each subnet (so each zone) is a separate pool of a machine type, and a launch of
several machines is spread across them rather than piled into the first subnet that has
capacity, so one zone's capacity shortage or reclaims take only part of a type away.

``spread`` is the rule, pure: the pools to try in order, each with its share. Machines
are dealt one at a time, round robin, from pool ``start``, so a launch of 4 over 2 pools
puts 2 in each. ``first_pool`` is where a launch starts: a function of its launch token
alone (its sequence number: the run's launches take the pools in turn), not of what
this process launched before, so a launch replayed by another process (a resumed
daemon) asks each pool for what the first asked, under the same ``ClientToken`` (EC2
refuses a token reused with other parameters). A replay
with other zones avoided (other pools) or other spot prices (another order) may still
ask otherwise; ``ec2.py`` then adopts the first attempt's instances by their tag. For a
spot type whose prices are the market's, the pools at the cheapest known price share the
launch (ties spread the same way) and the dearer pools follow, cheapest first, as
fallbacks with no share of their own. The provider (``ec2.py``) walks the order: a pool
that refuses for capacity passes its share on to the next one. Tested in
``tests/unit/test_ec2_pools.py``.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Share:
    """A pool to try and how many machines it is asked for (0: only what others pass on)."""

    pool: int  # index into the subnets
    count: int


def first_pool(key: str, pools: int) -> int:
    """The pool a launch of ``key`` (its launch token) starts at, the same in every
    process: the token's sequence number (``L<n>``, the run's launches in order) modulo
    ``pools``, so a run's launches take the pools in turn; a key without one, a hash of
    it (not Python's ``hash``, which differs between processes)."""
    if pools <= 0:
        return 0
    seq = re.search(r"(\d+)$", key)
    if seq is not None:
        return int(seq.group(1)) % pools
    digest = hashlib.sha256(key.encode()).digest()
    return int.from_bytes(digest[:8], "big") % pools


def spread(
    count: int, pools: int, start: int = 0, prices: Sequence[float | None] = ()
) -> tuple[Share, ...]:
    """``count`` machines over ``pools`` pools, dealt from pool ``start``; with ``prices``
    (one per pool, None where unknown) only the cheapest known pools are dealt to."""
    if pools <= 0:
        return ()
    start %= pools
    rotation = [(start + i) % pools for i in range(pools)]
    known = [p for p in prices[:pools] if p is not None]
    if known:
        cheapest = min(known)
        dealt = [p for p in rotation if prices[p] == cheapest]
        rest = sorted(
            (p for p in rotation if prices[p] != cheapest),
            key=lambda p: (prices[p] is None, prices[p] or 0.0),
        )
    else:
        dealt, rest = rotation, []
    counts = dict.fromkeys(dealt, count // len(dealt))
    for p in dealt[: count % len(dealt)]:
        counts[p] += 1
    return tuple(Share(p, counts[p]) for p in dealt) + tuple(Share(p, 0) for p in rest)

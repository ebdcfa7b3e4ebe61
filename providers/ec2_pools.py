"""Pools: each subnet (so each zone) is a separate pool of a machine type, and a launch of
several machines is spread across them rather than piled into the first subnet that has
capacity, so one zone's capacity shortage or reclaims take only part of a type away.

``spread`` is the rule, pure: the pools to try in order, each with its share. Machines are
dealt one at a time, round robin, from where the type's last launch ended (``start``),
so launches of one machine alternate and a launch of 4 over 2 pools puts 2 in each. For
a spot type whose prices are the market's, the pools at the cheapest known price share
the launch (ties spread the same way) and the dearer pools follow, cheapest first, as
fallbacks with no share of their own. The provider (``ec2.py``) walks the order: a pool
that refuses for capacity passes its share on to the next one. Tested in
``tests/unit/test_ec2_pools.py``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Share:
    """A pool to try and how many machines it is asked for (0: only what others pass on)."""

    pool: int  # index into the subnets
    count: int


@dataclass(frozen=True, slots=True)
class Spread:
    """A launch's pools in the order they are tried, and where the next launch starts."""

    shares: tuple[Share, ...]
    next_start: int


def spread(count: int, pools: int, start: int = 0, prices: Sequence[float | None] = ()) -> Spread:
    """``count`` machines over ``pools`` pools, dealt from pool ``start``; with ``prices``
    (one per pool, None where unknown) only the cheapest known pools are dealt to."""
    if pools <= 0:
        return Spread((), 0)
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
    last = dealt[(count - 1) % len(dealt)] if count > 0 else (start - 1) % pools
    shares = tuple(Share(p, counts[p]) for p in dealt) + tuple(Share(p, 0) for p in rest)
    return Spread(shares, (last + 1) % pools)

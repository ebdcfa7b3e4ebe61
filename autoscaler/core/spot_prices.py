"""The history of market prices (spot) a run has seen, and what a machine of a
market-priced type costs under it.

AWS bills a spot machine per second at the price in force. The run learns the price
each monitoring interval (``PricesSeen``), so it knows the price in force up to its last
refresh (``known_until``) and nothing after: a machine's time past that moment, or
before the type's first price, is counted at the type's cap (``TypeSpec.cap``: the most
AWS may bill it). What a machine costs is then never less than what it is billed, and
committing money on it keeps the budget whatever the market does between refreshes; the
money committed beyond what it is billed is given back at each refresh.
"""

from __future__ import annotations

import bisect
import itertools
import math
from dataclasses import dataclass, field

from autoscaler.core.billing import BillingModel

_EPS = 1e-9


@dataclass
class PriceHistory:
    """Per market-priced type, its prices per ATU from the times they took effect on
    (run time, ascending), known up to ``known_until`` (None: no price seen yet)."""

    times: dict[str, list[float]] = field(default_factory=dict)
    prices: dict[str, list[float]] = field(default_factory=dict)
    known_until: float | None = None
    source: str = ""  # where the last prices came from (``PricesSeen.source``)
    refreshes: int = 0  # PricesSeen events applied

    def record(
        self,
        now: float,
        types: tuple[str, ...],
        at: tuple[float, ...],
        prices: tuple[float, ...],
        source: str,
    ) -> None:
        """Prices seen at ``now``: ``types[i]`` at ``prices[i]`` from ``at[i]`` on.

        A price dated before what was known already (the market's answer includes the
        price in force at the start of the window asked for, with the time it was set)
        takes effect at ``known_until``: the past before it was priced already.
        """
        floor = -math.inf if self.known_until is None else self.known_until
        for name, when, price in sorted(zip(types, at, prices, strict=True), key=lambda x: x[1]):
            when = min(max(when, floor), now)
            ts = self.times.setdefault(name, [])
            ps = self.prices.setdefault(name, [])
            if ps and ps[-1] == price:
                continue
            if ts and ts[-1] >= when - _EPS:  # from the same instant on: the later word
                ps[-1] = price
            else:
                ts.append(when)
                ps.append(price)
        self.known_until = now if self.known_until is None else max(self.known_until, now)
        self.source = source
        self.refreshes += 1

    def price_at(self, name: str, t: float, cap: float, *, holds: bool = False) -> float:
        """The price ``name`` is billed at ``t``: its last price set by ``t``, at most
        ``cap`` (EC2 bills no more than the MaxPrice; above it, it takes the machine
        back), or ``cap`` where it is not known (before its first price, and after the
        last refresh unless the last price ``holds``)."""
        if self.known_until is None or (t >= self.known_until - _EPS and not holds):
            return cap
        ts = self.times.get(name)
        if not ts:
            return cap
        i = bisect.bisect_right(ts, t + _EPS) - 1
        return cap if i < 0 else min(self.prices[name][i], cap)

    def last(self, name: str) -> float | None:
        """The last price seen of ``name`` (None: none)."""
        ps = self.prices.get(name)
        return ps[-1] if ps else None

    def cost(
        self,
        billing: BillingModel,
        name: str,
        cap: float,
        launched: float,
        until: float,
        *,
        holds: bool = False,
    ) -> float:
        """What a machine of ``name`` launched at ``launched`` and billed until ``until``
        costs, ``billing``'s way: per second at the price in force (at least the minimum
        charge), or a whole ATU at the price in force when it begins. ``cap`` wherever
        the price is not known; with ``holds``, the last price seen is taken to hold
        since (what the machine is billed, as far as the run can tell)."""
        if self.known_until is None or not self.times.get(name):
            return billing.cost(cap, until - launched)
        if billing.mode == "fixed":
            units = billing.units(until - launched)
            return sum(
                self.price_at(name, launched + k * billing.atu_s, cap, holds=holds)
                for k in range(units)
            )
        end = launched + max(until - launched, billing.min_charge_s)
        return self._integral(name, cap, launched, end, holds) / billing.atu_s

    def _integral(self, name: str, cap: float, start: float, end: float, holds: bool) -> float:
        """∫ price dt over [start, end] (price × seconds)."""
        known = self.known_until if self.known_until is not None else start
        cuts = [t for t in self.times.get(name, ()) if start < t < end]
        if start < known < end:
            cuts.append(known)
        edges = [start, *sorted(cuts), end]
        total = 0.0
        for a, b in itertools.pairwise(edges):
            if b > a:
                total += self.price_at(name, a, cap, holds=holds) * (b - a)
        return total

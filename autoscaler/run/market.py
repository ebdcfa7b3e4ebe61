"""Reading a provider's spot market once per monitoring interval, for both drivers.

A provider whose types' prices move (``providers.base.SpotMarket``: EC2 with
``ec2.spot_prices: market``, the emulator's ``emulator.spot_prices`` traces) is asked for
the price changes since it was last asked; they reach the run as one ``PricesSeen``
event, journaled and folded like any other, so the planners see the current prices
and the money ledger prices the machines' time by them. The emulator asks at each of
its ticks (``Emulator``); the daemon asks on a timer of the same interval, off its main
loop, and hands the event in as an owner's (``MarketWatch``). An answer with no change
still says the market is known up to now: the money committed at the caps since the
last answer comes back.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from apscheduler.schedulers.base import BaseScheduler

from autoscaler.core.errors import AutoscalerError
from autoscaler.core.model import PricesSeen
from autoscaler.providers.base import SpotMarket


class MarketReader:
    """Asks ``market`` for its price changes, each time since the time it last asked."""

    def __init__(self, market: SpotMarket, source: str) -> None:
        self.market = market
        self.source = source
        self.since: float | None = None

    def read(self, now: float) -> PricesSeen:
        """The price changes up to ``now`` as one event (raises the provider's error)."""
        points = self.market.spot_prices(self.since, now)
        self.since = now
        return PricesSeen(
            tuple(p.type for p in points),
            tuple(p.at for p in points),
            tuple(p.price for p in points),
            self.source,
        )


def market_of(provider: object) -> SpotMarket | None:
    """``provider``'s market, if it reads one for any of its types."""
    if isinstance(provider, SpotMarket) and provider.market_types():
        return provider
    return None


def watch_market(
    provider: object, clock: Callable[[], float], tell: Callable[[PricesSeen], None], log: Any
) -> MarketWatch | None:
    """The daemon's watch over ``provider``'s market (None: it reads none)."""
    market = market_of(provider)
    return None if market is None else MarketWatch(market, clock, tell, log)


class MarketWatch:
    """The daemon's reading of the market: once at the start (for the first step), then
    every ``interval_s`` real seconds on the scheduler's thread, each answer handed to
    the run by ``tell``. A failed reading is logged and tried at the next interval: the
    run goes on with the prices it has, its machines' time past them committed at the
    caps."""

    def __init__(
        self,
        market: SpotMarket,
        clock: Callable[[], float],
        tell: Callable[[PricesSeen], None],
        log: Any,
    ) -> None:
        self.reader = MarketReader(market, "market")
        self._clock = clock
        self._tell = tell
        self._log = log
        self._lock = threading.Lock()  # one reading at a time (the first, then the timer's)

    def first(self) -> list[PricesSeen]:
        """The reading for the run's first step (none if the market does not answer)."""
        seen = self._read()
        return [] if seen is None else [seen]

    def start(self, scheduler: BaseScheduler, interval_s: float) -> None:
        scheduler.add_job(self._tick, "interval", seconds=interval_s, id="market")

    def _tick(self) -> None:
        seen = self._read()
        if seen is not None:
            self._tell(seen)

    def _read(self) -> PricesSeen | None:
        with self._lock:
            try:
                seen = self.reader.read(self._clock())
            except AutoscalerError as exc:
                self._log.warning("spot prices not read", error=exc.message, code=exc.code)
                return None
        self._log.info("spot prices read", changes=len(seen.types))
        return seen

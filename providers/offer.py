"""Offers (paper 003, Netto and Buyya): what a provider says it would do for part of a bag,
without revealing its load: *n tasks by time t*.

A metascheduler asks each provider for offers on slices of a bag (the paper's 100, 75, 50,
25 and 10 %) and composes them (``autoscaler.offers``). A provider that can make offers
(a cluster's scheduler, a cloud with its boot time and limits) implements ``OfferMaker``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

SLICES = (1.0, 0.75, 0.5, 0.25, 0.1)
"""The paper's slices of a bag a provider makes offers for (section 3.1)."""


@dataclass(frozen=True, slots=True)
class OfferRequest:
    """A bag's requirements as exposed to providers (the paper's step 1)."""

    tasks: int  # the bag's size
    task_s: float  # estimated time of one task
    deadline: float  # when the whole bag should be done (the driver's clock)
    now: float  # when the request is made (the driver's clock)


@dataclass(frozen=True, slots=True)
class Offer:
    """``tasks`` of a bag done by ``finish`` (the driver's clock) on ``provider``."""

    provider: str
    tasks: int
    finish: float
    cost: float = 0.0  # what the provider charges for them (0: free, or not said)
    power: int = 0  # total computing power the provider publishes (0: not published)
    load: float = 0.0  # work it still has to process, processor-seconds (0: not published)


class OfferMaker(Protocol):
    """A provider that answers offer requests."""

    def offers(self, request: OfferRequest, sizes: Sequence[int]) -> list[Offer]:
        """One offer per size of ``sizes`` (tasks of the bag), each by the earliest
        finish the provider would promise; sizes it cannot take at all are left out."""
        ...


def slice_sizes(tasks: int, slices: Sequence[float] = SLICES) -> list[int]:
    """The distinct sizes of ``slices`` of a bag of ``tasks`` (at least 1 task each),
    largest first."""
    sizes = {max(1, round(tasks * s)) for s in slices if s > 0}
    return sorted((n for n in sizes if n <= tasks), reverse=True)

"""The one entry point the deadline mode calls when a bag is submitted: every provider's
offers, the policy's name and the bag in; the allocation, whether the deadline holds
and, when it does not, the earliest finish the offers allow (paper 003 §3.1, FEEDBACK)
with a sentence for the user.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from autoscaler.offers import composition
from autoscaler.offers.allocation import Allocation, OffersError, earliest_finish
from autoscaler.offers.cheapest import Rate, cheapest
from autoscaler.providers.offer import Offer, OfferRequest

Policy = Callable[[OfferRequest, Sequence[Offer], Sequence[Rate]], Allocation]
"""A composition: the bag, every provider's offers and what its types charge."""


def _by_offers(compose: Callable[[OfferRequest, Sequence[Offer]], Allocation]) -> Policy:
    """One of paper 003's policies, which go by the offers alone."""
    return lambda bag, offers, rates: compose(bag, offers)


POLICIES: dict[str, Policy] = {
    "no_lb": _by_offers(composition.no_lb),
    "plb": _by_offers(composition.plb),
    "dplb": _by_offers(composition.dplb),
    "dplb_v2": _by_offers(composition.dplb_v2),
    "free_time_slots": _by_offers(composition.free_time_slots),
    "cheapest": lambda bag, offers, rates: cheapest(bag, offers, rates),
}
"""The composition policies by the name a config gives: paper 003's, and the cheapest
split that meets the deadline (``offers.cheapest``)."""


@dataclass(frozen=True, slots=True)
class Decision:
    """What the composition says about a bag."""

    allocation: Allocation
    meets: bool  # every part is promised by the deadline
    earliest: float | None  # when it does not: the earliest finish the offers allow
    message: str | None  # when it does not: what the user is told


def policy(name: str) -> Policy:
    """The composition policy called ``name`` (a key of ``POLICIES``)."""
    try:
        return POLICIES[name]
    except KeyError:
        known = ", ".join(POLICIES)
        raise OffersError(f"unknown offer policy {name!r} (known: {known})") from None


def compose(
    name: str, bag: OfferRequest, offers: Sequence[Offer], rates: Sequence[Rate] = ()
) -> Decision:
    """Compose ``offers`` for ``bag`` with the policy called ``name`` (``rates``: what
    the providers' types charge, for a policy that prices the parts)."""
    allocation = policy(name)(bag, offers, rates)
    if allocation.meets:
        return Decision(allocation, True, None, None)
    earliest = earliest_finish(offers, bag.tasks)
    message = (
        f"deadline {clock(bag.deadline)} cannot be met: the earliest finish the providers "
        f"offer is {clock(allocation.finish, since=bag.deadline)} ({allocation.policy})"
    )
    return Decision(allocation, False, earliest, message)


def clock(t: float, since: float | None = None) -> str:
    """``t`` (seconds since the epoch, UTC) as HH:MM, rounded up to the minute, with the
    days after ``since``'s day when later ("11:25 (+1 d)")."""
    minutes = math.ceil(t / 60)
    text = f"{minutes // 60 % 24:02d}:{minutes % 60:02d}"
    if since is not None:
        days = minutes // 1440 - math.ceil(since / 60) // 1440
        if days > 0:
            text += f" (+{days} d)"
    return text

"""Paper 003's composition policies (§4) and its full-information baseline (§3.2): each
takes the bag (an ``OfferRequest``: size, task time, deadline, now) and every provider's
offers, and returns an ``Allocation`` that gives every task to exactly one provider and
no provider more tasks than it offered.

* **OffersNoLB** (§4.1, Table 1): offers that meet the deadline first, largest first,
  then the others by finish; everything after the first offer that takes the whole bag
  dropped; from each offer in turn a composite is built by taking the following offers of
  providers not yet used; the earliest complete composite wins (first in the list on a
  tie). Not greedy: the best offer need not be in it. Where these composites miss the
  earliest finish the offers allow (the binary search of ``allocation``; a composite takes
  a provider's first offer in the list, not its largest by then), the bag is split in
  proportion to the offers due by that earliest finish instead.
* **OffersWithPLB** (§4.2): each provider's offer meeting the deadline, tasks in
  proportion to its size, P = size / total offered.
* **OffersWithDPLB** (§4.2, Algorithm 1): offers grouped by size, largest first; a group
  gets P = its tasks offered / total offered of the bag; inside a group, DP = a provider's
  computing power / the group's. Unlike the paper's pseudo-code, the last offer of a
  group is capped at its size too; what it cannot take goes to the group's others.
* **OffersWithDPLBV2** (§5): DPLB with DP from the load each provider publishes: its free
  processor-time before the deadline, power × (deadline − now) − load to be processed.
* **FreeTimeSlots** (§3.2): offers read from each provider's free time slots (every
  wave of tasks the slots hold, ``autoscaler.offers.slots``); tasks in proportion to each
  provider's slots by the deadline, else the earliest fill.

The offer-based policies fall back to OffersNoLB when their offers that meet the
deadline cannot cover the bag, as the paper's evaluation does.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence

from autoscaler.offers.allocation import (
    Allocation,
    Part,
    capacity,
    covers,
    earliest_finish,
    parts_of,
    proportional,
    split,
)
from autoscaler.providers.offer import Offer, OfferRequest

NO_LB = "OffersNoLB"
PLB = "OffersWithPLB"
DPLB = "OffersWithDPLB"
DPLB_V2 = "OffersWithDPLBV2"
FREE_TIME_SLOTS = "FreeTimeSlots"

Weight = Callable[[Offer, OfferRequest], float]


def no_lb(bag: OfferRequest, offers: Sequence[Offer]) -> Allocation:
    """OffersNoLB (§4.1): the earliest complete composite of the sorted, filtered offers."""
    meet = sorted((o for o in offers if o.finish <= bag.deadline), key=lambda o: -o.tasks)
    late = sorted((o for o in offers if o.finish > bag.deadline), key=lambda o: o.finish)
    ordered = meet + late
    whole = next((i for i, o in enumerate(ordered) if o.tasks >= bag.tasks), len(ordered))
    ordered = ordered[: whole + 1]
    best: tuple[Part, ...] | None = None
    for start in range(len(ordered)):
        parts = _composite(ordered[start:], bag.tasks)
        if parts and (best is None or _finish(parts) < _finish(best)):
            best = parts
    earliest = earliest_finish(offers, bag.tasks)  # raises when the offers cannot carry it
    if best is None or _finish(best) > earliest:
        return proportional(NO_LB, offers, bag.tasks, bag.deadline, earliest)
    return Allocation(NO_LB, best, bag.deadline)


def _composite(offers: Sequence[Offer], tasks: int) -> tuple[Part, ...]:
    """Offers taken in order, one per provider, until ``tasks`` are placed (empty if they
    fall short)."""
    parts: list[Part] = []
    used: set[str] = set()
    left = tasks
    for offer in offers:
        if offer.provider in used:
            continue
        take = min(offer.tasks, left)
        parts.append(Part(offer.provider, take, offer.finish))
        used.add(offer.provider)
        left -= take
        if left == 0:
            return tuple(parts)
    return ()


def _finish(parts: Sequence[Part]) -> float:
    return max(p.finish for p in parts)


def plb(bag: OfferRequest, offers: Sequence[Offer]) -> Allocation:
    """OffersWithPLB (§4.2): tasks in proportion to the sizes of the offers meeting the
    deadline; OffersNoLB when they cannot cover the bag."""
    if not covers(offers, bag.tasks, bag.deadline):
        return no_lb(bag, offers)
    return proportional(PLB, offers, bag.tasks, bag.deadline, bag.deadline)


def _power(offer: Offer, bag: OfferRequest) -> float:
    return float(offer.power)


def _free_before_deadline(offer: Offer, bag: OfferRequest) -> float:
    window = max(bag.deadline - bag.now, bag.task_s)
    return max(offer.power * window - offer.load, offer.power * bag.task_s)


def double_proportional(
    policy: str, weight: Weight, bag: OfferRequest, offers: Sequence[Offer]
) -> Allocation:
    """Algorithm 1 with DP from ``weight``: groups of equal size get P = group's offered
    tasks / total offered; a group's tasks go by DP, none above an offer's size."""
    if not covers(offers, bag.tasks, bag.deadline):
        return no_lb(bag, offers)
    chosen = sorted(
        capacity(offers, bag.deadline).values(),
        key=lambda o: (-o.tasks, -weight(o, bag), o.provider),
    )
    groups = [list(g) for _, g in itertools.groupby(chosen, key=lambda o: o.tasks)]
    sizes = [sum(o.tasks for o in g) for g in groups]
    quotas = split(bag.tasks, [float(s) for s in sizes], sizes)
    providers: list[str] = []
    tasks: list[int] = []
    for group, quota in zip(groups, quotas, strict=True):
        providers += [o.provider for o in group]
        tasks += split(quota, [weight(o, bag) for o in group], [o.tasks for o in group])
    return Allocation(policy, parts_of(offers, providers, tasks), bag.deadline)


def dplb(bag: OfferRequest, offers: Sequence[Offer]) -> Allocation:
    """OffersWithDPLB: Algorithm 1, DP from each provider's total computing power."""
    return double_proportional(DPLB, _power, bag, offers)


def dplb_v2(bag: OfferRequest, offers: Sequence[Offer]) -> Allocation:
    """OffersWithDPLBV2: Algorithm 1, DP from each provider's free processor-time before
    the deadline (its power and its published load to be processed)."""
    return double_proportional(DPLB_V2, _free_before_deadline, bag, offers)


def free_time_slots(bag: OfferRequest, offers: Sequence[Offer]) -> Allocation:
    """FreeTimeSlots (§3.2) over the offers read from the providers' free time slots: in
    proportion to each one's slots by the deadline, else filled to the earliest finish."""
    by = bag.deadline
    if not covers(offers, bag.tasks, by):
        by = earliest_finish(offers, bag.tasks)
    return proportional(FREE_TIME_SLOTS, offers, bag.tasks, bag.deadline, by)

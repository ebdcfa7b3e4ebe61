"""A cloud provider's offers (issue 20, part 3): they follow from a machine type's boot
time, its limit, its price and its slots. n tasks run on up to ``max_count`` machines of
``slots`` lanes each, each lane doing ⌈n / lanes⌉ tasks in turn after its machine
boots; they are paid from launch by the type's billing model.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from autoscaler.core.billing import BillingModel
from autoscaler.providers.offer import Offer, OfferRequest


@dataclass(frozen=True, slots=True)
class CloudType:
    """What a cloud's offer is made from."""

    provider: str
    boot_s: float  # launch to ready for tasks
    max_count: int  # machines of the type the provider allows
    price: float  # per accountable time unit
    billing: BillingModel
    task_s: float  # one task on one machine of the type (at its slot count)
    slots: int = 1  # tasks a machine runs at once


def cloud_offers(kind: CloudType, request: OfferRequest, sizes: Sequence[int]) -> list[Offer]:
    """One offer per size: n tasks on min(⌈n / slots⌉, max_count) machines by
    now + boot + ⌈n / (machines · slots)⌉ · task_s, costing every machine's billed time.
    ``power`` is the lanes the type allows."""
    offers: list[Offer] = []
    if kind.max_count < 1:
        return offers
    for n in sizes:
        if n < 1:
            continue
        slots = max(1, kind.slots)
        machines = min(math.ceil(n / slots), kind.max_count)
        busy = kind.boot_s + math.ceil(n / (machines * slots)) * kind.task_s
        offers.append(
            Offer(
                kind.provider,
                n,
                request.now + busy,
                cost=machines * kind.billing.cost(kind.price, busy),
                power=kind.max_count * slots,
            )
        )
    return offers

"""A cloud provider's offers (issue 20, part 3): they follow from a machine type's boot
time, its limit and its price. n tasks run on up to ``max_count`` machines, each doing
⌈n / machines⌉ tasks in turn after it boots; they are paid from launch by the type's
billing model.
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
    task_s: float  # one task on one machine of the type


def cloud_offers(kind: CloudType, request: OfferRequest, sizes: Sequence[int]) -> list[Offer]:
    """One offer per size: n tasks on min(n, max_count) machines by
    now + boot + ⌈n / machines⌉ · task_s, costing every machine's billed time."""
    offers: list[Offer] = []
    if kind.max_count < 1:
        return offers
    for n in sizes:
        if n < 1:
            continue
        machines = min(n, kind.max_count)
        busy = kind.boot_s + math.ceil(n / machines) * kind.task_s
        offers.append(
            Offer(
                kind.provider,
                n,
                request.now + busy,
                cost=machines * kind.billing.cost(kind.price, busy),
                power=kind.max_count,
            )
        )
    return offers

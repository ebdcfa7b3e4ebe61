"""What a composition of offers decides (tasks per provider, each by a promised finish) and
the arithmetic the policies share: a provider's capacity by a time, the promise behind a
number of tasks, a proportional split under caps, and the earliest finish (paper 003 §3.1,
FEEDBACK: a binary search from the user's deadline to the last feasible one).

An offer ``(n, t)`` promises n tasks by t; a provider that promises n by t is taken to
promise fewer by t as well.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from autoscaler.core.errors import AutoscalerError
from autoscaler.providers.offer import Offer


class OffersError(AutoscalerError):
    """Offers that cannot carry a bag (they cover fewer tasks than it has), or an unknown
    composition policy."""

    code = "OffersError"


@dataclass(frozen=True, slots=True)
class Part:
    """``tasks`` of the bag go to ``provider``, which promised them by ``finish``."""

    provider: str
    tasks: int
    finish: float
    cost: float | None = None  # expected, where the policy prices its parts


@dataclass(frozen=True, slots=True)
class Allocation:
    """A bag split across providers by ``policy`` (one part per provider used)."""

    policy: str  # the paper's name of the policy that composed it
    parts: tuple[Part, ...]
    deadline: float  # the bag's deadline

    @property
    def tasks(self) -> int:
        """Tasks allocated (the bag's size)."""
        return sum(p.tasks for p in self.parts)

    @property
    def finish(self) -> float:
        """The composed finish: the latest promise of a part."""
        return max(p.finish for p in self.parts)

    @property
    def meets(self) -> bool:
        """Whether every part is promised by the deadline."""
        return self.finish <= self.deadline

    def by_provider(self) -> dict[str, int]:
        """Tasks per provider."""
        return {p.provider: p.tasks for p in self.parts}


def capacity(offers: Sequence[Offer], by: float) -> dict[str, Offer]:
    """Each provider's largest offer due by ``by`` (providers with none are left out)."""
    best: dict[str, Offer] = {}
    for offer in offers:
        if offer.finish <= by and (
            offer.provider not in best or offer.tasks > best[offer.provider].tasks
        ):
            best[offer.provider] = offer
    return best


def promise(offers: Sequence[Offer], provider: str, tasks: int) -> float:
    """The earliest finish ``provider`` offered for at least ``tasks`` tasks."""
    finishes = [o.finish for o in offers if o.provider == provider and o.tasks >= tasks]
    if not finishes:
        raise OffersError(f"{provider} offered no finish for {tasks} tasks")
    return min(finishes)


def split(total: int, weights: Sequence[float], caps: Sequence[int]) -> list[int]:
    """``total`` split in proportion to ``weights`` (largest remainders), none above its
    cap; what a cap turns away goes to the others with room, in order. Equal shares when
    no weight is positive. Needs ``sum(caps) >= total``."""
    if sum(caps) < total:
        raise OffersError(f"caps {list(caps)} cannot hold {total} tasks")
    weight = sum(w for w in weights if w > 0)
    shares = [max(w, 0.0) / weight if weight > 0 else 1 / len(caps) for w in weights]
    exact = [total * s for s in shares]
    out = [min(math.floor(e), c) for e, c in zip(exact, caps, strict=True)]
    left = total - sum(out)
    by_remainder = sorted(range(len(out)), key=lambda i: (-(exact[i] - math.floor(exact[i])), i))
    for i in by_remainder:
        if left and out[i] < min(caps[i], math.ceil(exact[i])):
            out[i] += 1
            left -= 1
    for i in range(len(out)):
        more = min(left, caps[i] - out[i])
        out[i] += more
        left -= more
    return out


def parts_of(
    offers: Sequence[Offer], providers: Sequence[str], tasks: Sequence[int]
) -> tuple[Part, ...]:
    """One part per provider given tasks, each with the earliest finish it offered for them."""
    return tuple(
        Part(p, n, promise(offers, p, n)) for p, n in zip(providers, tasks, strict=True) if n > 0
    )


def covers(offers: Sequence[Offer], tasks: int, by: float) -> bool:
    """Whether the providers' offers due by ``by`` add up to ``tasks``."""
    return sum(o.tasks for o in capacity(offers, by).values()) >= tasks


def earliest_finish(offers: Sequence[Offer], tasks: int) -> float:
    """The earliest time by which the offers together cover ``tasks`` (binary search over
    the offered finishes)."""
    times = sorted({o.finish for o in offers})
    if not times or not covers(offers, tasks, times[-1]):
        total = sum(o.tasks for o in capacity(offers, math.inf).values())
        raise OffersError(f"the offers cover {total} of the bag's {tasks} tasks")
    i = bisect.bisect_left(range(len(times)), True, key=lambda k: covers(offers, tasks, times[k]))
    return times[i]


def proportional(
    policy: str, offers: Sequence[Offer], tasks: int, deadline: float, by: float
) -> Allocation:
    """The bag split in proportion to what each provider offers by ``by``."""
    cap: Mapping[str, Offer] = capacity(offers, by)
    names = sorted(cap)
    sizes = [cap[n].tasks for n in names]
    return Allocation(
        policy, parts_of(offers, names, split(tasks, [float(s) for s in sizes], sizes)), deadline
    )

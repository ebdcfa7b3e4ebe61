"""The cheapest composition that meets the deadline (issue 37, item 4): a cost-aware
policy beside paper 003's, which balance load and leave the price out.

Each provider's part is priced as its machines would run it, each given as much of the
deadline as it can safely take, not the offer's own finish (a cloud's offer is made on
as many machines as it allows, the most expensive way to be early). A machine of a type
running j tasks on each of its lanes is a *pattern*: it lives d = boot + j·e (e: a
task's time), is safe when d + z·σ_j fits before the deadline (σ_j = r·e·√j, r the
relative spread of one task's time), and costs what its billing charges on average
over that spread (``BillingModel.expected_cost``: under hourly units, a machine that
fills its unit pays the next one as often as it runs over). A spot type reclaimed at λ
an hour loses, per reclaim, a replacement's boot and half a task on each lane: its
machines do the work of ``core.reclaims.speed_factor`` of one, as the planners count
them, so a pattern lives and is paid d over that.

The split then solves, with PuLP (the other planners' solvers, ``core.solve``):

    minimise   Σ_{type, j} c_{type, j} · x_{type, j} + Σ_p k_p · n_p
    subject to Σ_p n_p = N
               n_p ≤ Σ_{type of p, j} slots · j · x_{type, j}   (its machines hold its part)
               Σ_j x_{type, j} ≤ max_count(type)
               Σ_{type of p, j} x_{type, j} ≤ max_machines(p)   (its limit across its types)
               n_p ≤ cap_p                                         (its offers by the deadline)
               x, n ≥ 0 integer

where cap_p is the largest of provider p's offers safely due by the deadline (a loaded
cluster's queue, which only it knows, is in its offers; the margin is its waves' spread,
``safe_caps``) and k_p the price per task of its largest offer for a provider whose
types are not known. A MILP, not a greedy: the cost of
a part is a step in its size (whole machines, whole units), so filling the cheapest
provider first is not optimal in general (a free provider first is: it costs nothing
at any size). Ties go to fewer machine-seconds.

A deadline no split meets falls back to OffersNoLB's earliest finish, as the paper's
policies do, and the user hears it (``decide.compose``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import pulp

from autoscaler.core.billing import BillingModel
from autoscaler.core.reclaims import speed_factor
from autoscaler.core.solve import Solver, solve_lp
from autoscaler.offers.allocation import Allocation, Part, capacity, promise
from autoscaler.offers.composition import no_lb
from autoscaler.providers.offer import Offer, OfferRequest

CHEAPEST = "Cheapest"

SPREAD = 0.2
"""The relative spread of one task's time (sd over mean) assumed where none is known,
as the deadline forecast assumes until runs are seen."""

SLICES = tuple(k / 20 for k in range(20, 0, -1))
"""The slices of a bag the policy asks offers for: every 5 %. A part is bounded by its
provider's largest offer due by the deadline, and between the paper's five slices a
quarter of a free cluster could go unused."""

Z = 2.0
"""How many sds of its own spread a part keeps before the deadline (the deadline
planner's ``guard_z``)."""

TIE = 1e-9
"""Per machine-second: among splits of the same cost, the one with fewer (a free
provider's machines cost nothing however many)."""

TIME_LIMIT_S = 10.0
"""A split not proven the cheapest by then is used as found."""

MAX_PATTERNS = 400
"""Tasks per lane tried per type: beyond, every other one (very short tasks)."""


@dataclass(frozen=True, slots=True)
class Rate:
    """One of a provider's machine types as the policy prices a part on it."""

    provider: str
    type: str
    price: float  # per ATU (0: a cluster's own time)
    billing: BillingModel
    boot_s: float
    task_s: float  # one task on one lane
    slots: int
    max_count: int
    spread: float = SPREAD  # sd of one task's time over its mean
    reclaim_per_hour: float = 0.0  # the rate its machines are taken back (spot)
    max_life_s: float | None = None  # a machine lives at most this long (a cluster's job)
    provider_max: int | None = None  # its provider's machines of all types at once (None: none)


@dataclass(frozen=True, slots=True)
class Pattern:
    """A machine of ``rate`` running ``per_lane`` tasks on each lane."""

    rate: Rate
    per_lane: int
    life_s: float  # launch to its last task's end, reclaims' losses in
    sd_s: float  # the spread of that
    cost: float  # what it is expected to cost

    @property
    def tasks(self) -> int:
        return self.per_lane * max(1, self.rate.slots)


def patterns(rate: Rate, window_s: float, z: float) -> list[Pattern]:
    """Every safe pattern of ``rate`` within ``window_s`` (now to the deadline)."""
    e = rate.task_s
    if e <= 0 or rate.max_count < 1:
        return []
    share = speed_factor(rate.reclaim_per_hour, e, rate.boot_s)
    if share <= 0:
        return []
    top = math.floor((window_s - rate.boot_s) / e)
    step = max(1, math.ceil(top / MAX_PATTERNS))
    out = []
    for j in sorted({*range(1, top + 1, step), top}):
        if j < 1:
            continue
        chain = lane_life(rate, j)
        if chain is None:
            break
        life, jobs = chain
        life /= share
        sd = rate.spread * e * math.sqrt(j)
        if life + z * sd > window_s:
            break
        last = life - (jobs - 1) * (rate.max_life_s or 0.0)
        cost = (jobs - 1) * rate.billing.cost(rate.price, rate.max_life_s or 0.0)
        cost += rate.billing.expected_cost(rate.price, last, sd)
        out.append(Pattern(rate, j, life, sd, cost))
    return out


def lane_life(rate: Rate, tasks: int) -> tuple[float, int] | None:
    """How long a lane of ``rate`` takes to run ``tasks`` in turn, and on how many
    machines one after the other: one, unless a machine lives at most ``max_life_s``
    (a cluster's job), when each runs the tasks that fit in its life after its boot and
    the next boots after it (None: not one task fits in a life)."""
    e = rate.task_s
    if rate.max_life_s is None:
        return rate.boot_s + tasks * e, 1
    per_job = math.floor((rate.max_life_s - rate.boot_s) / e)
    if per_job < 1:
        return None
    jobs = math.ceil(tasks / per_job)
    return (jobs - 1) * rate.max_life_s + rate.boot_s + (tasks - (jobs - 1) * per_job) * e, jobs


def safe_caps(
    bag: OfferRequest, offers: Sequence[Offer], rates: Sequence[Rate], z: float
) -> dict[str, int]:
    """Each provider's largest offer safely due by the deadline: its finish and z times
    the spread of the waves it takes on the provider's lanes (where its types are
    known: an offer is made at the tasks' mean time, and a cluster's scheduler holds
    the part to the end of its last wave)."""
    out: dict[str, int] = {}
    for offer in offers:
        mine = [r for r in rates if r.provider == offer.provider]
        if offer.finish + margin(mine, offer.tasks, z) <= bag.deadline:
            out[offer.provider] = max(out.get(offer.provider, 0), offer.tasks)
    return out


def margin(rates: Sequence[Rate], tasks: int, z: float) -> float:
    """How long before the deadline a provider should promise ``tasks`` (``rates``:
    its types; none known: no margin): z times the spread of the waves they take on
    its lanes."""
    if not rates:
        return 0.0
    waves = math.ceil(tasks / max(1, lanes(rates)))
    return max(z * r.spread * r.task_s * math.sqrt(waves) for r in rates)


def lanes(rates: Sequence[Rate]) -> int:
    """The most tasks a provider's types (``rates``) run at once: each type's machines,
    the most slots first, until the provider's limit. A limit shared by its types caps
    their machines together, not each type's alone (two types of a provider limited to
    2 machines are 2 machines, not 4)."""
    left = shared_max(rates)
    out = 0
    for r in sorted(rates, key=lambda r: max(1, r.slots), reverse=True):
        count = r.max_count if left is None else min(r.max_count, left)
        out += count * max(1, r.slots)
        if left is not None:
            left -= count
    return out


def shared_max(rates: Sequence[Rate]) -> int | None:
    """The machines a provider's types (``rates``) may have at once together (None: no
    limit but each type's own)."""
    return min((r.provider_max for r in rates if r.provider_max is not None), default=None)


def cheapest(
    bag: OfferRequest,
    offers: Sequence[Offer],
    rates: Sequence[Rate] = (),
    *,
    z: float = Z,
    solver: Solver = "highs",
) -> Allocation:
    """The split of ``bag`` across the providers that made ``offers`` with the least
    expected cost, every part safely by the deadline (the module's model); OffersNoLB
    when none is."""
    caps = safe_caps(bag, offers, rates, z)
    window = bag.deadline - bag.now
    by_provider: dict[str, list[Pattern]] = {}
    for rate in rates:
        if rate.provider in caps:
            by_provider.setdefault(rate.provider, []).extend(patterns(rate, window, z))
    lp = pulp.LpProblem("cheapest_split", pulp.LpMinimize)
    n = {
        p: lp.add_variable(f"n_{i}", 0, cap, cat="Integer")
        for i, (p, cap) in enumerate(sorted(caps.items()))
    }
    machines: dict[str, list[tuple[Pattern, pulp.LpVariable]]] = {}
    objective: list[pulp.LpAffineExpression] = []
    for p, found in by_provider.items():
        mine = machines.setdefault(p, [])
        for pat in found:
            var = lp.add_variable(f"x_{len(objective)}", 0, cat="Integer")
            mine.append((pat, var))
            objective.append((pat.cost + TIE * pat.life_s) * var)
        lp += n[p] <= pulp.lpSum(pat.tasks * v for pat, v in mine)
        for name in {pat.rate.type for pat in found}:
            of_type = [(pat, v) for pat, v in mine if pat.rate.type == name]
            lp += pulp.lpSum(v for _, v in of_type) <= of_type[0][0].rate.max_count
        limit = shared_max([r for r in rates if r.provider == p])
        if limit is not None:
            lp += pulp.lpSum(v for _, v in mine) <= limit
    priced = {r.provider for r in rates}
    for p in caps:
        if p not in priced:
            objective.append(per_task(offers, bag, p) * n[p])
        elif p not in by_provider:
            lp += n[p] == 0  # its types have no safe machine before the deadline
    lp += pulp.lpSum(objective)
    lp += pulp.lpSum(n.values()) == bag.tasks
    solved = solve_lp(lp, solver, "cheapest split", TIME_LIMIT_S)
    if solved.outcome not in ("optimal", "feasible"):
        return no_lb(bag, offers)
    parts = []
    for p in sorted(n):
        tasks = round(n[p].value() or 0)
        if tasks <= 0:
            continue
        used = [(pat, round(v.value() or 0)) for pat, v in machines.get(p, [])]
        used = [(pat, count) for pat, count in used if count > 0]
        life = max((pat.life_s for pat, _ in used), default=0.0)
        finish = max(bag.now + life, promise(offers, p, tasks))
        if p in priced:
            cost = sum(pat.cost * count for pat, count in used)
        else:
            cost = per_task(offers, bag, p) * tasks
        parts.append(Part(p, tasks, finish, cost))
    return Allocation(CHEAPEST, tuple(parts), bag.deadline)


def per_task(offers: Sequence[Offer], bag: OfferRequest, provider: str) -> float:
    """A provider whose types are not known: the price per task of its largest offer
    due by the deadline."""
    largest = capacity(offers, bag.deadline)[provider]
    return largest.cost / max(1, largest.tasks)

"""The cheapest split that meets the deadline (``offers.cheapest``, issue 37 item 4):
against a brute force over every split of a small bag and every set of machines and a
split worked out by hand, a free provider that can do the bag alone, a deadline nothing
meets, spot reclaims priced in, a provider's machine limit shared by its types."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import replace
from functools import cache

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from autoscaler.config.schema import RunConfig
from autoscaler.core.billing import BillingModel
from autoscaler.offers.allocation import OffersError
from autoscaler.offers.cheapest import (
    CHEAPEST,
    SLICES,
    Pattern,
    Rate,
    cheapest,
    lane_life,
    lanes,
    margin,
    patterns,
)
from autoscaler.offers.cloud import CloudType, cloud_offers
from autoscaler.offers.decide import POLICIES, compose, policy
from autoscaler.providers.offer import Offer, OfferRequest, slice_sizes
from autoscaler.run.assemble import billing_model
from autoscaler.run.offers import compose_offers, soonest, type_rates

HOURLY = BillingModel("fixed", 3600)
PER_SECOND = BillingModel("per_second", 3600, min_charge_s=60)


def offers_of(rates: list[Rate], bag: OfferRequest) -> list[Offer]:
    """Each provider's offers as a dry run makes a cloud's, for the slices the policy
    asks for."""
    out: list[Offer] = []
    for r in rates:
        kind = CloudType(r.provider, r.boot_s, r.max_count, r.price, r.billing, r.task_s, r.slots)
        out += cloud_offers(kind, bag, slice_sizes(bag.tasks, SLICES))
    return out


def least_cost(found: tuple[Pattern, ...], tasks: int) -> float:
    """The least cost of machines of ``found`` (one type's patterns) holding ``tasks``,
    by trying every multiset of at most the type's machines."""
    if tasks == 0:
        return 0.0
    best = math.inf
    limit = found[0].rate.max_count if found else 0
    for count in range(1, limit + 1):
        for combo in itertools.combinations_with_replacement(found, count):
            if sum(p.tasks for p in combo) >= tasks:
                best = min(best, sum(p.cost for p in combo))
    return best


def brute_force(bag: OfferRequest, rates: list[Rate], offers: list[Offer], z: float) -> float:
    """The least expected cost over every split of the bag (one type per provider)."""
    window = bag.deadline - bag.now
    caps = {
        r.provider: max((o.tasks for o in offers if o.provider == r.provider), default=0)
        for r in rates
    }
    by_deadline = {  # an offer's waves on the provider's lanes may run z sds late
        r.provider: max(
            (
                o.tasks
                for o in offers
                if o.provider == r.provider
                and o.finish
                + z * r.spread * r.task_s * math.sqrt(math.ceil(o.tasks / (r.max_count * r.slots)))
                <= bag.deadline
            ),
            default=0,
        )
        for r in rates
    }

    @cache
    def cost(i: int, tasks: int) -> float:
        if tasks > min(caps[rates[i].provider], by_deadline[rates[i].provider]):
            return math.inf
        return least_cost(tuple(patterns(rates[i], window, z)), tasks)

    best = math.inf
    for split in itertools.product(*(range(bag.tasks + 1) for _ in rates)):
        if sum(split) == bag.tasks:
            best = min(best, sum(cost(i, n) for i, n in enumerate(split)))
    return best


@st.composite
def small_cases(draw: st.DrawFn) -> tuple[OfferRequest, list[Rate]]:
    billing = draw(st.sampled_from([HOURLY, PER_SECOND]))
    rates = []
    for i in range(draw(st.integers(1, 3))):
        rates.append(
            Rate(
                f"p{i}",
                f"t{i}",
                draw(st.sampled_from([0.0, 0.05, 0.17, 0.4])),
                billing,
                draw(st.sampled_from([0.0, 60.0, 120.0])),
                draw(st.sampled_from([600.0, 900.0, 1500.0])),
                draw(st.integers(1, 2)),
                draw(st.integers(1, 3)),
                reclaim_per_hour=draw(st.sampled_from([0.0, 0.2])),
                max_life_s=draw(st.sampled_from([None, 3600.0])),
            )
        )
    tasks = draw(st.integers(1, 8))
    deadline = draw(st.sampled_from([1800.0, 3600.0, 5400.0, 7200.0]))
    return OfferRequest(tasks, min(r.task_s for r in rates), deadline, 0.0), rates


@settings(max_examples=120, deadline=None)
@given(case=small_cases())
def test_the_split_costs_what_the_cheapest_of_every_split_costs(
    case: tuple[OfferRequest, list[Rate]],
) -> None:
    """Every split of the bag across the providers, each part on the cheapest set of
    safe machines for it: the policy's expected cost is the least of them."""
    bag, rates = case
    offers = offers_of(rates, bag)
    best = brute_force(bag, rates, offers, 2.0)
    allocation = cheapest(bag, offers, rates)
    if math.isinf(best):
        assert allocation.policy != CHEAPEST  # the earliest finish instead
        return
    assert allocation.policy == CHEAPEST
    assert allocation.tasks == bag.tasks
    assert allocation.meets
    # Within HiGHS's own optimality gap (mip_rel_gap 1e-4 by default): a split 0.0000011
    # dearer than 0.40, where two splits' expected reclaim costs differ in the sixth
    # place, is as optimal as the solver proves, and failed at abs=1e-6.
    cost = sum(p.cost or 0.0 for p in allocation.parts)
    assert cost == pytest.approx(best, rel=1e-4, abs=1e-6)


def hybrid(campus_nodes: int) -> list[Rate]:
    """A free campus cluster (a task in 4 min), EC2 on-demand and spot (in 2 min)."""
    return [
        Rate("campus", "node", 0.0, HOURLY, 60, 240, 1, campus_nodes),
        Rate("aws", "c5", 0.17, HOURLY, 120, 120, 1, 20),
        Rate("aws_spot", "c5_spot", 0.05, HOURLY, 120, 120, 1, 10),
    ]


def test_a_free_provider_that_meets_the_deadline_alone_gets_the_whole_bag() -> None:
    bag = OfferRequest(200, 120, 7200.0, 0.0)
    rates = hybrid(campus_nodes=8)
    allocation = cheapest(bag, offers_of(rates, bag), rates)
    assert allocation.by_provider() == {"campus": 200}
    assert allocation.parts[0].cost == 0.0
    assert allocation.meets


def test_each_part_takes_the_deadline_not_the_offers_finish() -> None:
    """A cloud offers its bag on every machine it may have (done in half an hour); the
    cheapest part runs fewer machines for as long as the deadline safely allows."""
    bag = OfferRequest(300, 120, 7200.0, 0.0)
    rates = [Rate("aws", "c5", 0.17, HOURLY, 120, 120, 1, 20)]
    offers = offers_of(rates, bag)
    allocation = cheapest(bag, offers, rates)
    (part,) = allocation.parts
    whole = next(o for o in offers if o.tasks == 300)
    assert whole.finish < 0.5 * bag.deadline
    assert whole.finish < part.finish <= bag.deadline
    assert part.cost is not None
    assert part.cost < whole.cost


def test_free_capacity_first_then_the_cheapest_cloud() -> None:
    """The free cluster takes what it can by the deadline, spot the rest before
    on-demand."""
    bag = OfferRequest(400, 120, 7200.0, 0.0)
    rates = hybrid(campus_nodes=4)
    allocation = cheapest(bag, offers_of(rates, bag), rates)
    split = allocation.by_provider()
    campus_cap = max(p.tasks for p in patterns(rates[0], 7200.0, 2.0)) * 4  # 27 each
    assert split["campus"] == 100  # its largest offer by the deadline (every 5 %: 20 tasks)
    assert campus_cap - 20 < split["campus"] <= campus_cap
    assert split["aws_spot"] == 400 - split["campus"]
    assert "aws" not in split


def test_a_reclaim_rate_prices_spot_as_lost_work() -> None:
    """Spot reclaimed often enough costs more than on-demand; then on-demand gets it."""
    bag = OfferRequest(100, 120, 7200.0, 0.0)
    calm = Rate("aws_spot", "c5_spot", 0.10, PER_SECOND, 120, 120, 1, 10)
    on_demand = Rate("aws", "c5", 0.12, PER_SECOND, 120, 120, 1, 10)
    taken_back = Rate(
        "aws_spot", "c5_spot", 0.10, PER_SECOND, 120, 120, 1, 10, reclaim_per_hour=20.0
    )
    for spot, winner in ((calm, "aws_spot"), (taken_back, "aws")):
        rates = [spot, on_demand]
        assert cheapest(bag, offers_of(rates, bag), rates).by_provider() == {winner: 100}


def test_an_impossible_deadline_gives_the_earliest_finish_and_says_so() -> None:
    bag = OfferRequest(600, 120, 600.0, 0.0)
    rates = [Rate("aws", "c5", 0.17, HOURLY, 120, 120, 1, 20)]
    decision = compose("cheapest", bag, offers_of(rates, bag), rates)
    assert not decision.meets
    assert decision.earliest is not None
    assert decision.earliest > bag.deadline
    assert decision.allocation.finish == decision.earliest
    assert decision.message is not None
    assert "cannot be met: the earliest finish the providers offer is" in decision.message


def test_an_unknown_policy_lists_the_choices_with_the_cheapest() -> None:
    assert "cheapest" in POLICIES
    with pytest.raises(OffersError, match=r"unknown offer policy 'dearest' \(known: .*cheapest"):
        policy("dearest")


def test_a_lane_of_a_time_limited_type_runs_as_jobs_one_after_the_other() -> None:
    """A cluster's machine is a job of one hour: 14 tasks of 4 min fit after its boot,
    the 15th needs a second job, which boots again after the first's unused end."""
    node = Rate("campus", "node", 0.0, HOURLY, 60, 240, 1, 8, max_life_s=3600)
    assert lane_life(node, 14) == (60 + 14 * 240, 1)
    assert lane_life(node, 15) == (3600 + 60 + 240, 2)
    assert lane_life(replace(node, max_life_s=None), 15) == (60 + 15 * 240, 1)
    assert lane_life(replace(node, max_life_s=200), 1) is None


def test_an_offer_that_ends_at_the_deadline_is_not_taken_as_safe() -> None:
    """A cluster's scheduler holds a part to the deadline it is asked: an offer ending
    there leaves no room for its tasks' spread, so the cloud takes the part."""
    bag = OfferRequest(80, 240, 7200.0, 0.0)
    rates = [
        Rate("campus", "node", 0.0, HOURLY, 60, 240, 1, 8, max_life_s=3600),
        Rate("aws", "c5", 0.17, HOURLY, 120, 120, 1, 20),
    ]
    aws = offers_of(rates[1:], bag)
    at_the_deadline = [Offer("campus", n, bag.deadline) for n in (80, 40)]
    assert "campus" not in cheapest(bag, aws + at_the_deadline, rates).by_provider()
    early = [Offer("campus", n, bag.deadline - 3600) for n in (80, 40)]
    assert cheapest(bag, aws + early, rates).by_provider() == {"campus": 80}


def test_a_small_split_costs_what_it_costs_by_hand() -> None:
    """The brute force above prices parts with the policy's own patterns; here a split
    worked out by hand (no spread: a machine lives exactly its boot and its tasks in
    turn, paid whole hours). 10 tasks by 3500 s: p0 ($0.3/h, a task in 800 s, one
    machine) offers at most 4 by then (5 end at 4000 s); p1 ($0.35/h, 2 slots, a task in
    900 s after a 60 s boot, two machines) runs 3 tasks a lane by then (60 + 4 · 900 >
    3500), 6 a machine, each machine an hour. p1 alone is 2 machines, $0.70; p0 its 4
    for $0.30 and p1 the other 6 on one machine for $0.35 is $0.65, and nothing else is
    as cheap (p1 on one machine leaves p0 at least 4, its most)."""
    bag = OfferRequest(10, 800, 3500.0, 0.0)
    rates = [
        Rate("p0", "t0", 0.3, HOURLY, 0, 800, 1, 1, spread=0.0),
        Rate("p1", "t1", 0.35, HOURLY, 60, 900, 2, 2, spread=0.0),
    ]
    allocation = cheapest(bag, offers_of(rates, bag), rates)
    assert allocation.by_provider() == {"p0": 4, "p1": 6}
    assert sum(p.cost or 0.0 for p in allocation.parts) == pytest.approx(0.65)
    assert allocation.meets


# --- a provider's machine limit across its types -----------------------------------------------


def limited(provider_max: int | None) -> list[Rate]:
    """One provider, two types of at most 2 machines each, and ``provider_max`` machines
    of both together; no spread (a machine lives exactly its boot and its tasks)."""
    return [
        Rate("aws", "slow", 0.3, HOURLY, 60, 480, 1, 2, spread=0.0, provider_max=provider_max),
        Rate("aws", "fast", 1.0, HOURLY, 60, 240, 1, 2, spread=0.0, provider_max=provider_max),
    ]


def test_a_providers_machine_limit_holds_across_its_types() -> None:
    """40 tasks by 2 h. A slow machine runs at most 14 tasks by then (60 + 14 · 480 =
    6780 s), 1 to 7 in an hour ($0.30), 8 to 14 in two ($0.60); a fast one at most 29
    (60 + 29 · 240 = 7020 s), up to 14 in an hour ($1), up to 29 in two ($2). With the
    provider at 2 machines: two slow hold 28 (too few), two fast cost at least $3 (14
    and 26: $1 + $2), a slow and a fast hold 14 + 26 for $0.60 + $2 = $2.60, the least.
    Each type's own limit alone would let it run three: two slow (28 tasks, $1.20) and
    a fast one for the other 12 ($1), $2.20."""
    bag = OfferRequest(40, 240, 7200.0, 0.0)
    rates = limited(provider_max=2)
    allocation = cheapest(bag, offers_of(rates, bag), rates)
    (part,) = allocation.parts
    assert (part.provider, part.tasks) == ("aws", 40)
    assert part.cost == pytest.approx(2.60)
    assert allocation.meets
    unlimited = limited(provider_max=None)
    (part,) = cheapest(bag, offers_of(unlimited, bag), unlimited).parts
    assert part.cost == pytest.approx(2.20)


def test_a_providers_lanes_are_its_machines_within_its_limit() -> None:
    """A provider at 3 machines of a 4-slot type (at most 1) and a 1-slot type (at most
    5): the 4-slot machine and two others, 6 lanes (9 without the limit); the margin an
    offer keeps is the spread of the waves on those lanes, 2 · 0.2 · 100 s · √(12 / 6)."""
    wide = Rate("p", "wide", 1.0, HOURLY, 60, 100, 4, 1, provider_max=3)
    narrow = Rate("p", "narrow", 1.0, HOURLY, 60, 100, 1, 5, provider_max=3)
    assert lanes([narrow, wide]) == 4 + 2
    free = [replace(r, provider_max=None) for r in (narrow, wide)]
    assert lanes(free) == 4 + 5
    assert margin([narrow, wide], 12, 2.0) == pytest.approx(2 * 0.2 * 100 * math.sqrt(2))


def test_a_schedulers_soonest_offer_counts_the_lanes_within_the_limit() -> None:
    """A cluster's machines are jobs of an hour (14 tasks of 4 min after a 1 min boot):
    56 tasks on two types of 2 nodes each but 2 nodes in all are 28 a lane, two jobs one
    after the other (3600 + 60 + 14 · 240 s), so the scheduler is asked for the lane's
    tasks at (3600 + 14 · 240) / 28 s each, not 240 s as on 4 lanes (14 a lane, one job)."""
    asked: list[OfferRequest] = []

    def maker(request: OfferRequest, sizes: Sequence[int]) -> list[Offer]:
        asked.append(request)
        return []

    node = Rate("campus", "node", 0.0, HOURLY, 60, 240, 1, 2, max_life_s=3600, provider_max=2)
    rates = [node, replace(node, type="big")]
    soonest(maker, OfferRequest(56, 240, 7200.0, 0.0), 56, rates)
    assert asked[-1].task_s == pytest.approx((3600 + 14 * 240) / 28)
    soonest(
        maker,
        OfferRequest(56, 240, 7200.0, 0.0),
        56,
        [replace(r, provider_max=None) for r in rates],
    )
    assert asked[-1].task_s == pytest.approx(240)


LIMITED = """\
name: limited
jobs:
  - name: sweep
    bag: {synthetic: 40}
    constraint: {deadline_s: 2h}
    task_s: {slow: 480, fast: 240}
deadline: {offers: cheapest}
machine_types:
  - {name: slow, provider: aws, price: 0.3, max_count: 10, boot_s: 1m}
  - {name: fast, provider: aws, price: 1.0, max_count: 10, boot_s: 1m}
  - {name: node, provider: campus, price: 0, max_count: 8, boot_s: 1m}
billing: {mode: fixed, atu_s: 1h}
providers:
  aws: {kind: sim, max_machines: 2}
  campus: {kind: sim}
emulator: {seed: 1, runtime: {dist: normal, mean_s: 4m, sd_s: 1m}}
"""


def test_a_runs_split_keeps_to_its_providers_machine_limit() -> None:
    """The case above as a config: aws's ``max_machines: 2`` reaches the policy, which
    splits the job onto a slow and a fast machine of two hours each ($2.60, the tasks'
    spread adding under 1 % for the chance of a third hour), not three machines."""
    cfg = RunConfig.model_validate(yaml.safe_load(LIMITED))
    billing = billing_model(cfg)
    rates = type_rates(cfg, billing, cfg.jobs[0], {})
    assert [(r.type, r.max_count, r.provider_max) for r in rates] == [
        ("slow", 2, 2),
        ("fast", 2, 2),
    ]
    _, notes = compose_offers(cfg, billing)
    (said,) = notes
    cost = float(said.split(" for ")[1].split()[0])
    assert "aws 40 tasks by" in said
    assert 2.60 <= cost < 2.60 * 1.01

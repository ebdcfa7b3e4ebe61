"""Paper 003's composition policies (§4) on the paper's example and hand-made offers, and
the properties every composition keeps: each task allocated once, no provider given more
than it offered, and the deadline met whenever the offers allow it."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autoscaler.offers.allocation import OffersError, earliest_finish, split
from autoscaler.offers.composition import dplb, dplb_v2, no_lb, plb
from autoscaler.offers.decide import POLICIES, clock, compose
from autoscaler.providers.offer import Offer, OfferRequest

TABLE_1 = [
    Offer("1", 256, 40),
    Offer("1", 512, 100),
    Offer("2", 128, 40),
    Offer("2", 512, 200),
    Offer("3", 64, 40),
    Offer("3", 512, 200),
]


def bag(tasks: int, deadline: float, now: float = 0.0, task_s: float = 1.0) -> OfferRequest:
    return OfferRequest(tasks=tasks, task_s=task_s, deadline=deadline, now=now)


def test_no_lb_composes_the_papers_table_1_not_greedily() -> None:
    """N = 512, deadline 40: 128 from cluster 2 and 64 from cluster 3 by 40, 320 from
    cluster 1 by 100; not cluster 1's 256 by 40, after which the rest could come only
    from cluster 2 or 3's 512 by 200."""
    allocation = no_lb(bag(512, 40), TABLE_1)
    assert [(p.provider, p.tasks, p.finish) for p in allocation.parts] == [
        ("2", 128, 40),
        ("3", 64, 40),
        ("1", 320, 100),
    ]
    assert allocation.finish == 100
    assert not allocation.meets
    greedy = no_lb(bag(512 - 256, 40), [o for o in TABLE_1 if o.provider != "1"])
    assert greedy.finish == 200  # what taking cluster 1's (256, 40) first leaves


def test_the_offer_policies_fall_back_to_no_lb_when_the_deadline_cannot_be_met() -> None:
    for name in ("plb", "dplb", "dplb_v2"):
        decision = compose(name, bag(512, 40), TABLE_1)
        assert decision.allocation.policy == "OffersNoLB"
        assert decision.allocation.by_provider() == {"2": 128, "3": 64, "1": 320}
        assert not decision.meets
        assert decision.earliest == 100


def test_the_user_hears_the_earliest_finish_when_the_deadline_cannot_be_met() -> None:
    day = 86_400.0 * 20_000  # midnight UTC
    offers = [Offer("a", 10, day + 11 * 3600 + 25 * 60), Offer("b", 5, day + 10 * 3600)]
    decision = compose("plb", bag(12, day + 10 * 3600 + 40 * 60, now=day), offers)
    assert decision.message == (
        "deadline 10:40 cannot be met: the earliest finish the providers offer is 11:25 "
        "(OffersNoLB)"
    )
    assert clock(day + 86_400 + 60, since=day) == "00:01 (+1 d)"


def test_plb_gives_tasks_in_proportion_to_the_offers_meeting_the_deadline() -> None:
    offers = [Offer("a", 300, 50), Offer("b", 100, 40), Offer("c", 400, 90)]
    allocation = plb(bag(200, 60), offers)
    assert allocation.policy == "OffersWithPLB"
    assert allocation.by_provider() == {"a": 150, "b": 50}
    assert allocation.meets


def test_dplb_splits_a_group_of_equal_offers_by_computing_power() -> None:
    """Two groups: size 200 (a, b) offers 400 of 500 tasks offered, so P = 0.8 and it
    takes 80 of 100 tasks, 3:1 by power; size 100 (c) takes 20."""
    offers = [Offer("a", 200, 50, power=300), Offer("b", 200, 50, power=100)]
    offers.append(Offer("c", 100, 50, power=1000))
    allocation = dplb(bag(100, 60), offers)
    assert allocation.by_provider() == {"a": 60, "b": 20, "c": 20}


def test_dplb_never_gives_the_last_offer_of_a_group_more_than_it_offered() -> None:
    """Algorithm 1 as printed gives the last offer of a group whatever is left: here C
    (power 1,000) is capped at its 100, A (power 100) takes 300·100/1,200 = 25, and B, the
    last, would be given 300 − 125 = 175 of its 100. Ours caps B and gives the 75 left to
    A, so every provider takes exactly what it offered."""
    offers = [
        Offer("A", 100, 10, power=100),
        Offer("B", 100, 10, power=100),
        Offer("C", 100, 10, power=1000),
    ]
    allocation = dplb(bag(300, 10), offers)
    assert allocation.by_provider() == {"C": 100, "A": 100, "B": 100}
    assert [p.provider for p in allocation.parts] == ["C", "A", "B"]  # by power


def test_dplb_v2_favours_the_provider_with_less_load_to_process() -> None:
    offers = [
        Offer("busy", 100, 50, power=100, load=100 * 90.0),
        Offer("idle", 100, 50, power=100, load=0.0),
    ]
    allocation = dplb_v2(bag(100, 100), offers)
    assert allocation.by_provider() == {"idle": 91, "busy": 9}  # free 10,000 vs 1,000


def test_free_time_slots_fills_to_the_earliest_finish_when_the_deadline_fails() -> None:
    offers = [Offer("a", 10, 10), Offer("a", 20, 20), Offer("b", 10, 15), Offer("b", 30, 40)]
    decision = compose("free_time_slots", bag(30, 5), offers)
    assert decision.earliest == 20
    assert decision.allocation.finish == 20
    assert decision.allocation.by_provider() == {"a": 20, "b": 10}


def test_an_unknown_policy_is_named_with_the_known_ones() -> None:
    with pytest.raises(OffersError, match=r"unknown offer policy .fastest.*no_lb, plb"):
        compose("fastest", bag(1, 1), [Offer("a", 1, 1)])


def test_offers_that_cannot_carry_the_bag_are_an_error_not_a_partial_allocation() -> None:
    with pytest.raises(OffersError, match="cover 30 of the bag's 50 tasks"):
        no_lb(bag(50, 10), [Offer("a", 20, 5), Offer("b", 10, 5)])


def test_split_caps_each_share_and_passes_the_rest_on() -> None:
    assert split(10, [1.0, 1.0, 1.0], [10, 10, 10]) == [4, 3, 3]
    assert split(10, [9.0, 1.0], [2, 10]) == [2, 8]
    assert split(3, [0.0, 0.0], [2, 2]) == [2, 1]


@st.composite
def offer_lists(draw: st.DrawFn) -> tuple[OfferRequest, list[Offer]]:
    offers: list[Offer] = []
    for name in "abcde"[: draw(st.integers(1, 5))]:
        power = draw(st.integers(1, 500))
        load = draw(st.floats(0, 1e5))
        sizes = sorted(draw(st.lists(st.integers(1, 300), min_size=1, max_size=5, unique=True)))
        finish = 0.0
        for size in sizes:  # a bigger offer never finishes earlier
            finish += draw(st.floats(0, 50))
            offers.append(Offer(name, size, finish, power=power, load=load))
    biggest: dict[str, int] = {}
    for o in offers:
        biggest[o.provider] = max(biggest.get(o.provider, 0), o.tasks)
    tasks = draw(st.integers(1, sum(biggest.values())))
    return bag(tasks, draw(st.floats(0, 150)), task_s=draw(st.floats(1, 10))), offers


@settings(max_examples=300, deadline=None)
@given(case=offer_lists(), name=st.sampled_from(sorted(POLICIES)))
def test_every_task_goes_to_one_provider_within_its_offer(
    case: tuple[OfferRequest, list[Offer]], name: str
) -> None:
    request, offers = case
    decision = compose(name, request, offers)
    allocation = decision.allocation
    assert allocation.tasks == request.tasks
    assert len({p.provider for p in allocation.parts}) == len(allocation.parts)
    for part in allocation.parts:
        assert part.tasks > 0
        assert any(
            o.provider == part.provider and o.tasks >= part.tasks and o.finish <= part.finish
            for o in offers
        )
    earliest = earliest_finish(offers, request.tasks)
    assert allocation.finish >= earliest
    assert decision.meets == (earliest <= request.deadline)

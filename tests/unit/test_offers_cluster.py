"""The emulated cluster of paper 003 (§3): an EDF queue that reschedules the jobs not yet
started for a new one, admits every job (late ones with the earliest deadline that breaks
no other, D^N), and makes offers for a bag's slices without revealing its load; its free
time slots and a cloud's offers."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from autoscaler.core.billing import BillingModel
from autoscaler.offers.cloud import CloudType, cloud_offers
from autoscaler.offers.cluster import Cluster, Job
from autoscaler.offers.decide import compose
from autoscaler.offers.profile import Profile, Wave, slot_offers
from autoscaler.providers.offer import Offer, OfferRequest, slice_sizes


def started(cluster: Cluster) -> dict[str, list[tuple[float, int]]]:
    cluster.advance(math.inf)
    return {job.name: [(w.start, w.count) for w in waves] for job, waves in cluster.started()}


def test_a_new_job_with_an_earlier_deadline_moves_a_queued_one_back() -> None:
    cluster = Cluster("c", 10)
    cluster.admit(Job("running", 10, 100, 0, 100), 0)
    cluster.admit(Job("loose", 10, 100, 0, 1000), 0)
    urgent = cluster.admit(Job("urgent", 10, 100, 50, 200), 50)
    assert urgent.deadline == 200
    assert not urgent.delayed
    assert started(cluster) == {"running": [(0, 10)], "urgent": [(100, 10)], "loose": [(200, 10)]}


def test_a_job_that_would_break_a_held_deadline_gets_the_earliest_that_breaks_none() -> None:
    cluster = Cluster("c", 10)
    cluster.admit(Job("first", 10, 100, 0, 100), 0)
    cluster.admit(Job("tight", 10, 100, 0, 200), 0)
    late = cluster.admit(Job("late", 10, 100, 0, 150), 0)
    assert late.delayed
    assert late.deadline == 300  # behind "tight", which its own deadline would break
    assert started(cluster)["tight"] == [(100, 10)]


def test_offers_meet_the_deadline_by_rescheduling_and_reveal_no_load() -> None:
    """20 tasks of 50 s, due by 200: the queued 5-processor job due at 1,000 moves back
    so the whole bag meets the deadline; the smaller slices merge into that one offer."""
    cluster = Cluster("c", 10)
    cluster.admit(Job("full", 10, 100, 0, 100), 0)
    cluster.admit(Job("loose", 5, 100, 0, 1000), 0)
    request = OfferRequest(tasks=20, task_s=50, deadline=200, now=0)
    assert cluster.offers(request, slice_sizes(20)) == [Offer("c", 20, 200)]
    assert cluster.free_slots(0) == ((0, 0), (100, 5), (200, 10))  # without rescheduling


def test_offers_past_the_deadline_name_the_earliest_finish_per_slice() -> None:
    cluster = Cluster("c", 10)
    cluster.admit(Job("held", 10, 100, 0, 100), 0)
    request = OfferRequest(tasks=40, task_s=50, deadline=120, now=0)
    offers = cluster.offers(request, slice_sizes(40), power=True, load=True)
    assert [(o.tasks, o.finish) for o in offers] == [(10, 150), (20, 200), (30, 250), (40, 300)]
    assert {(o.power, o.load) for o in offers} == {(10, 1000.0)}
    assert cluster.admit(Job("bag", 40, 50, 0, 120, tasks=True), 0).deadline == 300


def test_a_bags_tasks_fill_the_gaps_in_waves() -> None:
    cluster = Cluster("c", 10)
    cluster.admit(Job("half", 6, 100, 0, 100), 0)
    cluster.admit(Job("bag", 12, 50, 0, 1000, tasks=True), 0)
    assert started(cluster)["bag"] == [(0, 4), (50, 4), (100, 4)]


def test_slot_offers_read_every_wave_the_free_slots_hold() -> None:
    slots = ((0.0, 4), (100.0, 10))
    assert slot_offers("c", slots, 50, 16, 0) == [
        Offer("c", 4, 50),
        Offer("c", 8, 100),
        Offer("c", 16, 150),
    ]


def test_a_rigid_job_waits_for_a_window_wide_and_long_enough() -> None:
    profile = Profile([0.0, 10.0, 20.0, 30.0], [8, 2, 8, 10])
    assert profile.earliest(5, 10, 0) == 0
    assert profile.earliest(5, 15, 0) == 20
    assert profile.place_rigid(9, 5, 0) == [Wave(30, 9, 5)]
    assert profile.slots() == ((0.0, 8), (10.0, 2), (20.0, 8), (30.0, 1), (35.0, 10))


def test_a_clouds_offer_follows_from_boot_time_limit_and_billing() -> None:
    kind = CloudType(
        "ec2", boot_s=100, max_count=10, price=2.0, billing=BillingModel("fixed", 3600), task_s=600
    )
    request = OfferRequest(tasks=100, task_s=600, deadline=10_000, now=1_000)
    offers = cloud_offers(kind, request, slice_sizes(100))
    assert [(o.tasks, o.finish, o.cost) for o in offers] == [
        (100, 1_000 + 100 + 10 * 600, 10 * 2 * 2.0),  # 6,100 s on 10 machines: 2 hours each
        (75, 1_000 + 100 + 8 * 600, 10 * 2 * 2.0),
        (50, 1_000 + 100 + 5 * 600, 10 * 1 * 2.0),
        (25, 1_000 + 100 + 3 * 600, 10 * 1 * 2.0),
        (10, 1_000 + 100 + 1 * 600, 10 * 1 * 2.0),
    ]
    per_second = CloudType("ec2", 100, 4, 3.6, BillingModel("per_second", 3600), 600)
    (offer,) = cloud_offers(per_second, request, [4])
    assert offer.cost == 4 * 3.6 * 700 / 3600


def test_a_clouds_offer_counts_each_machines_slots() -> None:
    """4 slots a machine: 100 tasks fill 10 machines' 40 lanes (3 waves, not 10), and
    10 tasks need 3 machines, not 10."""
    kind = CloudType("ec2", 100, 10, 2.0, BillingModel("fixed", 3600), 600, slots=4)
    request = OfferRequest(tasks=100, task_s=600, deadline=10_000, now=1_000)
    offers = {o.tasks: o for o in cloud_offers(kind, request, [100, 10])}
    assert offers[100].finish == 1_000 + 100 + 3 * 600
    assert offers[100].cost == 10 * 1 * 2.0
    assert offers[10].finish == 1_000 + 100 + 600
    assert offers[10].cost == 3 * 1 * 2.0
    assert offers[100].power == 40


@st.composite
def arrivals(draw: st.DrawFn) -> list[Job]:
    jobs: list[Job] = []
    submit = 0.0
    for n in range(draw(st.integers(1, 25))):
        submit += draw(st.sampled_from([0.0, 5.0, 30.0, 100.0]))
        bag = draw(st.booleans())
        procs = draw(st.integers(1, 30 if bag else 8))
        runtime = draw(st.sampled_from([10.0, 25.0, 60.0, 200.0]))
        slack = draw(st.sampled_from([0.0, 20.0, 100.0, 1000.0]))
        jobs.append(Job(f"j{n}", procs, runtime, submit, submit + runtime + slack, bag))
    return jobs


@settings(max_examples=200, deadline=None)
@given(jobs=arrivals())
def test_every_admitted_job_ends_by_the_deadline_it_is_held_to_on_free_processors(
    jobs: list[Job],
) -> None:
    cluster = Cluster("c", 8)
    held = {job.name: cluster.admit(job, job.submit) for job in jobs}
    ran = {job.name: waves for job, waves in started_waves(cluster)}
    assert set(ran) == set(held)
    edges: list[tuple[float, int]] = []
    for name, waves in ran.items():
        job = held[name].job
        assert held[name].deadline >= job.deadline
        assert min(w.start for w in waves) >= job.submit
        assert max(w.end for w in waves) <= held[name].deadline
        assert sum(w.count for w in waves) == job.procs
        assert job.tasks or len(waves) == 1
        edges += [(w.start, w.count) for w in waves] + [(w.end, -w.count) for w in waves]
    busy = 0
    for _, change in sorted(edges):  # ends (negative) before starts at the same instant
        busy += change
        assert busy <= 8


def started_waves(cluster: Cluster) -> list[tuple[Job, list[Wave]]]:
    cluster.advance(math.inf)
    return cluster.started()


def test_a_clusters_and_a_clouds_offers_compose_side_by_side() -> None:
    """40 tasks of 50 s due by 250: the cluster, full until 100 s, offers 30 by then (and
    40 by 300); the cloud (30 machines, 100 s boot) all 40 by 200. DPLB: the size groups
    40 and 30 of 70 offered take 23 and 17."""
    cluster = Cluster("slurm", 10)
    cluster.admit(Job("held", 10, 100, 0, 100), 0)
    request = OfferRequest(tasks=40, task_s=50, deadline=250, now=0)
    cloud = CloudType("ec2", 100, 30, 1.0, BillingModel("fixed", 3600), 50)
    offers = cluster.offers(request, slice_sizes(40), power=True)
    assert [(o.tasks, o.finish) for o in offers] == [(30, 250), (40, 300)]
    offers += cloud_offers(cloud, request, slice_sizes(40))
    decision = compose("dplb", request, offers)
    assert decision.meets
    assert decision.allocation.by_provider() == {"ec2": 23, "slurm": 17}

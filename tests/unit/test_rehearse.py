"""Dry runs that rehearse what goes wrong: the emulator refuses launches over a window
with EC2's error codes (``emulator.refusals``) and takes spot machines back at an hourly
rate (``emulator.reclaim_per_hour``), and the run meets them as it meets the real ones.

The provider's side is the real ``SimProvider``; the run's side the real controllers
under the real emulator, as ``autoscaler run --dry-run`` drives them.
"""

from __future__ import annotations

import math
import random
import statistics
from collections import Counter
from pathlib import Path
from typing import Any, get_args

import pytest
import yaml

from autoscaler.budget.sampling import (
    late_sampled,
    late_sampling,
    late_types,
    refused_unsampled,
    sampling,
)
from autoscaler.budget.settings import ControllerSettings
from autoscaler.config.bag import expand_bag
from autoscaler.config.schema import Emulator as EmulatorModel
from autoscaler.config.schema import LocalLoad, Refusal, RunConfig
from autoscaler.core.billing import BillingModel
from autoscaler.core.errors import AutoscalerError
from autoscaler.core.model import (
    NOTICE_REASON,
    Action,
    Configure,
    Event,
    Launch,
    LaunchFailed,
    TaskDone,
    TypeSpec,
)
from autoscaler.core.state import RunState
from autoscaler.offers.cluster import Cluster
from autoscaler.offers.cluster import Job as ClusterJob
from autoscaler.offers.local_load import Users, local_arrivals
from autoscaler.providers.base import CAPACITY_CODES, LIMIT_CODES, Capabilities, failure_kind
from autoscaler.providers.sim import SimProvider
from autoscaler.report.markdown import render_head
from autoscaler.run.assemble import billing_model
from autoscaler.run.cluster_load import ClusterQueues
from autoscaler.run.offers import compose_offers
from autoscaler.run.start import dry_run, make_emulator
from tests.conftest import make_config

HOURLY = BillingModel("fixed", 3600.0, 60.0, 300.0)
EXAMPLES = Path(__file__).resolve().parents[2] / "config" / "examples"


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def provider(emulator: dict[str, Any], clock: Clock, seed: int | None = None) -> SimProvider:
    caps = Capabilities(HOURLY, max_counts={"c5": 5000, "m5": 5000})
    return SimProvider(caps, EmulatorModel.model_validate(emulator), 10, clock, seed=seed)


# --- refusals ------------------------------------------------------------------------------


def test_a_launch_in_the_window_is_refused_with_ec2s_code_and_none_outside_it() -> None:
    clock = Clock()
    sim = provider({"refusals": [{"type": "c5", "from_s": "10m", "until_s": "40m"}]}, clock)
    clock.now = 599.0
    assert len(sim.launch("c5", 2, "L0", {})) == 2
    clock.now = 600.0
    with pytest.raises(AutoscalerError) as refused:
        sim.launch("c5", 2, "L1", {})
    assert refused.value.code == "InsufficientInstanceCapacity"
    assert failure_kind(refused.value.code, refused.value.retryable) == "capacity"
    assert "InsufficientInstanceCapacity" in refused.value.message
    assert len(sim.launch("m5", 1, "L2", {})) == 1  # another type is not refused
    assert len(sim.launch("c5", 2, "L0", {})) == 2  # a launch that was made stays made
    clock.now = 2400.0
    assert [r.id for r in sim.launch("c5", 1, "L3", {})] == ["c5-2"]  # refused ones took no id


def test_a_quota_code_is_a_limit_as_ec2s_is() -> None:
    clock = Clock()
    sim = provider({"refusals": [{"type": "c5", "code": "InstanceLimitExceeded"}]}, clock)
    with pytest.raises(AutoscalerError) as refused:
        sim.launch("c5", 1, "L0", {})
    assert refused.value.code == "InstanceLimitExceeded"
    assert not refused.value.retryable
    assert failure_kind(refused.value.code, refused.value.retryable) == "limit"


def _refused(share: float, seed: int) -> list[str]:
    clock = Clock()
    sim = provider({"refusals": [{"type": "c5", "share": share}]}, clock, seed=seed)
    out = []
    for i in range(200):
        try:
            sim.launch("c5", 1, f"L{i}", {})
        except AutoscalerError:
            out.append(f"L{i}")
    return out


def test_a_share_refuses_that_share_of_launches_the_same_for_a_seed() -> None:
    first = _refused(0.3, seed=1)
    assert first == _refused(0.3, seed=1)
    assert first != _refused(0.3, seed=2)
    assert 40 <= len(first) <= 80  # 60 expected of 200


# --- reclaims ------------------------------------------------------------------------------


def test_reclaim_times_are_exponential_at_the_rate_and_the_same_for_a_seed() -> None:
    clock = Clock()
    sim = provider({"reclaim_per_hour": {"c5": 0.5}}, clock, seed=3)
    clock.now = 100.0
    sim.launch("c5", 2000, "L0", {})
    sim.launch("m5", 5, "L1", {})
    ends = [sim.failure(f"c5-{i}") for i in range(2000)]
    assert all(e is not None and e.at_s > 100.0 for e in ends)
    lifetimes = [e.at_s - 100.0 for e in ends if e is not None]
    assert statistics.fmean(lifetimes) == pytest.approx(7200.0, rel=0.08)  # 1 / (0.5 per h)
    assert all(e is not None and e.reason.startswith(NOTICE_REASON) for e in ends)
    assert all(sim.failure(f"m5-{i}") is None for i in range(5))  # no rate: never
    again = provider({"reclaim_per_hour": {"c5": 0.5}}, clock, seed=4)
    again.launch("c5", 3, "L0", {})
    twin = provider({"reclaim_per_hour": {"c5": 0.5}}, clock, seed=3)
    twin.launch("c5", 3, "L0", {})
    first = [sim.failure(f"c5-{i}") for i in range(3)]
    assert [twin.failure(f"c5-{i}") for i in range(3)] == first
    assert [again.failure(f"c5-{i}") for i in range(3)] != first


def test_a_machine_failure_before_its_reclaim_is_what_ends_it() -> None:
    clock = Clock()
    told = {"machine_failures": [{"type": "c5", "at_s": 1}], "reclaim_per_hour": {"c5": 0.01}}
    sim = provider(told, clock)
    sim.launch("c5", 1, "L0", {})
    end = sim.failure("c5-0")
    assert end is not None
    assert (end.at_s, end.reason) == (1.0, "emulated machine failure")


# --- through the emulator ------------------------------------------------------------------


def emulate(**overrides: Any) -> tuple[RunState, list[float], list[Event]]:
    """A dry run of ``make_config(**overrides)``: its state, the money committed after
    every step, every event."""
    cfg = make_config(**overrides)
    committed: list[float] = []
    events: list[Event] = []

    def hook(now: float, stepped: list[Event], actions: list[Action], state: RunState) -> None:
        committed.append(state.money.committed)
        events.extend(stepped)

    state = make_emulator(cfg, cfg.bag.synthetic, on_step=hook).run()
    return state, committed, events


EMULATOR = {"seed": 1, "runtime": {"dist": "normal", "mean_s": 600, "sd_s": 60}}


def test_reclaimed_tasks_are_requeued_and_every_task_is_done_once_without_a_retry() -> None:
    """A reclaim never counts towards a task's retries: with ``max_retries: 0`` a task cut
    by a reclaim still runs again, and the bag is done, each task once."""
    state, committed, events = emulate(
        bag={"synthetic": 200, "max_retries": 0},
        constraint={"budget": 150.0},
        emulator={**EMULATOR, "speed": {"fast": 3.0}, "reclaim_per_hour": {"fast": 1.0}},
    )
    reclaimed = [m for m in state.fleet.machines.values() if NOTICE_REASON in (m.end_reason or "")]
    assert len(reclaimed) >= 3
    cut = [s for s in state.tasks.segments if s.outcome == "lost"]
    assert cut, "some reclaim cut a task short"
    assert state.tasks.done == 200
    assert state.tasks.failed == 0
    done = Counter(e.task for e in events if isinstance(e, TaskDone))
    assert set(done) == set(range(200))
    assert all(state.tasks.attempts[s.task] == 0 for s in cut)
    assert max(committed) <= 150.0 + 1e-9


@pytest.mark.parametrize("rate", [0.5, 2.0, 6.0])
def test_committed_spend_never_passes_the_budget_under_reclaims(rate: float) -> None:
    state, committed, _ = emulate(
        bag={"synthetic": 300},
        constraint={"budget": 60.0},
        emulator={
            **EMULATOR,
            "speed": {"fast": 3.0},
            "reclaim_per_hour": {"fast": rate, "slow": rate},
        },
    )
    assert max(committed) <= 60.0 + 1e-9
    assert all(not m.alive for m in state.fleet.machines.values())


def test_a_refusal_window_keeps_the_type_out_until_it_closes_and_the_run_pays_in_time() -> None:
    """slow (the plan's choice after sampling) is refused for an hour from minute 5: every
    refusal is a capacity error for slow alone, no slow machine starts in the window, and
    the bag is done later than without the outage, within the budget."""
    types = [
        {"name": "slow", "price": 1.0, "max_count": 60, "boot_s": 60},
        {"name": "fast", "price": 4.0, "max_count": 60, "boot_s": 60},
    ]
    run = {"bag": {"synthetic": 1500}, "constraint": {"budget": 300.0}, "machine_types": types}
    window = [{"type": "slow", "from_s": "5m", "until_s": "65m"}]
    world = {**EMULATOR, "speed": {"fast": 3.0}}
    state, committed, events = emulate(**run, emulator={**world, "refusals": window})
    calm, _, _ = emulate(**run, emulator=world)
    refused = [e for e in events if isinstance(e, LaunchFailed)]
    assert refused
    assert {(e.type, e.kind) for e in refused} == {("slow", "capacity")}
    slow = [m.launched_at for m in state.fleet.machines.values() if m.type.name == "slow"]
    assert not [t for t in slow if 300.0 <= t < 3900.0]
    assert [t for t in slow if t >= 3900.0], "slow is bought again after its window"
    assert state.tasks.done == 1500
    assert max(committed) <= 300.0 + 1e-9
    assert makespan(state) > makespan(calm)


def makespan(state: RunState) -> float:
    return max(s.end for s in state.tasks.segments if s.outcome == "done")


def test_every_code_a_refusal_takes_is_one_the_run_reads_as_capacity_or_limit() -> None:
    codes = get_args(Refusal.model_fields["code"].annotation)
    assert codes
    assert set(codes) <= CAPACITY_CODES | LIMIT_CODES


# --- a cluster provider's local load ---------------------------------------------------------


def test_local_arrivals_make_up_the_load_and_are_the_same_for_a_seed() -> None:
    arrivals = local_arrivals(random.Random(5), 64, 0.6, -7200.0, 3600.0, 16, (600.0, 7200.0))
    work = sum(a.procs * a.runtime for a in arrivals)
    target = 0.6 * 64 * 10800.0
    assert target <= work < target + 16 * 7200.0
    assert all(-7200.0 <= a.submit < 3600.0 and 1 <= a.procs <= 16 for a in arrivals)
    assert all(600.0 <= a.runtime <= 7200.0 for a in arrivals)
    again = local_arrivals(random.Random(5), 64, 0.6, -7200.0, 3600.0, 16, (600.0, 7200.0))
    assert again == arrivals


def _finish(utilisation: float) -> float:
    load = LocalLoad(processors=16, utilisation=utilisation, max_procs=8, max_job_s=14400.0)
    users = Users("campus", load, "1:local_load:campus")
    return users.finish(ClusterJob("part", 8, 1800.0, 0.0, 1800.0), 0.0)


def test_a_part_waits_in_a_loaded_queue_and_not_in_an_idle_one() -> None:
    assert _finish(0.0) == 1800.0
    assert _finish(0.9) > 1800.0


def hybrid(**emulator: Any) -> RunConfig:
    data = yaml.safe_load((EXAMPLES / "hybrid.yaml").read_text(encoding="utf-8"))
    data["emulator"] |= emulator
    return RunConfig.model_validate(data)


LOADED = {
    "processors": 16,
    "utilisation": 0.9,
    "max_procs": 8,
    "min_job_s": "30m",
    "max_job_s": "4h",
    "slack_s": "30m",
}
"""A campus cluster whose users keep 90 % of its 16 processors busy, with jobs held to half
an hour past their runtime (tighter than a day: EDF puts a part's tight deadline ahead)."""


def test_a_dry_runs_offers_for_a_loaded_cluster_come_from_its_queue() -> None:
    """The campus cluster of hybrid.yaml with its users' load offers less by the deadline
    than idle, whatever the seed draws them: the split gives it fewer tasks, the cloud the
    rest; the same seed, the same split."""
    idle, _ = compose_offers(hybrid(), billing_model(hybrid()))
    for seed in range(5):
        busy, notes = compose_offers(
            hybrid(local_load={"campus": LOADED}, seed=seed), billing_model(idle)
        )
        split = busy.jobs[0].split
        assert split.get("campus", 0) < idle.jobs[0].split["campus"], seed
        assert sum(split.values()) == 600
        assert notes[0].startswith("job sweep:")
        again, _ = compose_offers(
            hybrid(local_load={"campus": LOADED}, seed=seed), billing_model(idle)
        )
        assert again.jobs[0].split == split


# --- what the report says it cost ------------------------------------------------------------


def test_a_rehearsals_report_says_what_it_cost_against_the_same_run_without_it() -> None:
    world = {**EMULATOR, "speed": {"fast": 3.0}}
    rehearsed = make_config(
        bag={"synthetic": 200},
        constraint={"budget": 150.0},
        emulator={
            **world,
            "reclaim_per_hour": {"fast": 1.0},
            "refusals": [{"type": "slow", "from_s": "20m", "until_s": "1h"}],
        },
    )
    calm_cfg = make_config(bag={"synthetic": 200}, constraint={"budget": 150.0}, emulator=world)
    run = dry_run(rehearsed, expand_bag(rehearsed), plots=False)
    calm = dry_run(calm_cfg, expand_bag(calm_cfg), plots=False)
    r = run.report.rehearsal
    assert r is not None
    taken = [m for m in run.report.machines if NOTICE_REASON in (m.end_reason or "")]
    assert r.reclaimed == len(taken) > 0
    assert r.reclaimed_cost == pytest.approx(sum(m.cost for m in taken))
    assert r.refused == len(run.report.launch_problems)
    assert r.runs_cut == len([s for s in run.state.tasks.segments if s.outcome == "lost"])
    assert (r.calm_cost, r.calm_makespan_s) == (calm.report.cost, calm.report.makespan_s)
    assert calm.report.rehearsal is None
    assert "rehearsal" not in calm.report.to_json()
    head = render_head(run.report)
    assert f"{r.reclaimed} machines taken back" in head
    assert f"without them: cost {calm.report.cost:.2f}" in head
    assert "Rehearsed" not in render_head(calm.report)


def test_an_admitted_job_says_when_it_is_planned_to_start() -> None:
    users = Users("campus", LocalLoad(processors=4, utilisation=0.0), "s")
    first = ClusterJob("first", 4, 100.0, 0.0, 100.0)
    second = ClusterJob("second", 2, 50.0, 0.0, 200.0)
    assert users.start(first, 0.0) == 0.0
    assert users.start(second, 10.0) == 100.0


SLURM = {
    "provider": "slurm",
    "slurm": {"types": {"slow": {"partition": "p"}, "fast": {"partition": "p"}}},
}


def test_a_loaded_clusters_machines_wait_in_its_queue_before_they_boot() -> None:
    """``provider: slurm`` dry-run with its users keeping 60 % of it busy: some machines
    are ready later than their boot time after launch, the same ones for the seed; idle,
    every one is ready at its boot time."""
    load = {"processors": 16, "utilisation": 0.6, "max_procs": 8, "max_job_s": "2h"}

    def waits(**emulator: Any) -> list[float]:
        state, _, _ = emulate(**SLURM, emulator={**EMULATOR, "speed": {"fast": 3.0}, **emulator})
        assert state.tasks.done == 100
        return [
            m.ready_at - m.launched_at
            for m in state.fleet.machines.values()
            if m.ready_at is not None
        ]

    assert set(waits()) == {60.0}
    loaded = waits(local_load={"slurm": load})
    assert max(loaded) > 60.0
    assert min(loaded) >= 60.0
    assert waits(local_load={"slurm": load}) == loaded


def test_a_cancelled_job_frees_its_place_and_the_queue_moves_up() -> None:
    def queue() -> tuple[Cluster, list[ClusterJob]]:
        cluster = Cluster("c", 4)
        jobs = [ClusterJob(f"j{i}", 4, 100.0, 0.0, 100.0 * (i + 1)) for i in range(3)]
        for job in jobs:
            cluster.admit(job, 0.0)
        return cluster, jobs

    cluster, (_, second, _) = queue()
    cluster.cancel(second, 10.0)  # queued: it never starts, the third takes its place
    last = cluster.admit(ClusterJob("last", 4, 50.0, 10.0, 10_000.0), 10.0)
    assert last.start == 200.0  # not 300: after the third, now at 100
    cluster, (first, _, _) = queue()
    cluster.cancel(first, 20.0)  # running: its processors are free from 20 s
    assert started(cluster) == {"j0": [(0.0, 4)], "j1": [(20.0, 4)], "j2": [(120.0, 4)]}


def test_a_machine_released_leaves_its_clusters_queue() -> None:
    """Two machines of a 1-processor cluster: the second waits for the first's paid hour,
    and starts when the first is released instead."""
    cfg = make_config(
        provider="slurm",
        slurm={"types": {"slow": {"partition": "p"}, "fast": {"partition": "p"}}},
        emulator={**EMULATOR, "local_load": {"slurm": {"processors": 1, "utilisation": 0}}},
    )
    queues = ClusterQueues(cfg, 3600.0)
    assert queues.wait("slow-0", "slow", 0.0) == 0.0
    assert queues.wait("slow-1", "slow", 10.0) == 3590.0
    queues.leave("slow-0", 100.0)
    queues.leave("slow-1", 100.0)
    assert queues.wait("slow-2", "slow", 200.0) == 0.0


def started(cluster: Cluster) -> dict[str, list[tuple[float, int]]]:
    cluster.advance(math.inf)
    return {job.name: [(w.start, w.count) for w in waves] for job, waves in cluster.started()}


# --- a type refused through sampling -------------------------------------------------------


def refused_through_sampling() -> tuple[ControllerSettings, RunState]:
    """100 tasks on ``a`` and ``b``; sampling wants both, ``b``'s launch is refused for
    capacity until 600 s, and the first plan is made on ``a`` alone."""
    settings = ControllerSettings()
    types = [TypeSpec("a", 1.0, 8, 60.0), TypeSpec("b", 0.5, 20, 60.0, slots=2)]
    state = RunState.new(types, HOURLY, 100.0, 100, list(range(100)))
    state.apply(0.0, sampling(settings, state))
    state.apply(0.0, Launch("b", 5, "L0"))
    state.apply(0.0, LaunchFailed("L0", "b", 5, "no c", "capacity", 600.0, recover_s=1800.0))
    state.apply(300.0, Configure({"a": 8, "b": 0}, 20.0, 3600.0, "plan after sampling"))
    return settings, state


def test_a_type_refused_through_sampling_is_sampled_once_it_may_be_launched_again() -> None:
    """``b`` has no runtimes: no plan can use it. Once its avoidance ends it is sampled
    with the machines sampling starts a type with (iw = 10 tasks at once: 5 machines of
    2 slots), beside the plan's; not before, and not beyond the money the plan leaves."""
    settings, state = refused_through_sampling()
    assert refused_unsampled(settings, state) == ["b"]
    assert late_sampling(settings, state, 599.0, spare=100.0) is None  # still avoided
    late = late_sampling(settings, state, 600.0, spare=100.0)
    assert late is not None
    assert late.counts == {"a": 8, "b": 5}
    assert late.predicted_makespan_s is None  # a sampling configuration predicts nothing
    one = HOURLY.cost(0.5, HOURLY.first_step_s)
    shrunk = late_sampling(settings, state, 600.0, spare=2 * one)
    assert shrunk is not None
    assert shrunk.counts == {"a": 8, "b": 2}
    assert late_sampling(settings, state, 600.0, spare=one / 2) is None  # not one affordable
    state.apply(600.0, late)
    assert late_sampled(state, 600.0) == ["b"]  # the plan holds until b's sample is in
    assert late_sampling(settings, state, 900.0, spare=100.0) is None  # sampling already
    # Refused again: nothing left to wait for, and b is still to be sampled later.
    state.apply(900.0, Launch("b", 5, "L1"))
    state.apply(900.0, LaunchFailed("L1", "b", 5, "no c", "capacity", 1500.0, recover_s=1800.0))
    assert late_types(state.decisions) == ["b"]
    assert late_sampled(state, 900.0) == []
    assert refused_unsampled(settings, state) == ["b"]


def test_a_type_never_refused_or_sampled_is_not_sampled_after_the_plan() -> None:
    """Without a refused launch nothing is sampled after the plan (runs without
    refusals decide as before), and no late sampling is in force."""
    settings = ControllerSettings()
    types = [TypeSpec("a", 1.0, 8, 60.0), TypeSpec("b", 0.5, 20, 60.0)]
    state = RunState.new(types, HOURLY, 100.0, 100, list(range(100)))
    state.apply(0.0, sampling(settings, state))
    state.apply(300.0, Configure({"a": 8, "b": 0}, 20.0, 3600.0, "plan after sampling"))
    assert refused_unsampled(settings, state) == []
    assert late_sampling(settings, state, 600.0, spare=100.0) is None
    assert late_sampled(state, 600.0) is None

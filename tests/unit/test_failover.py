"""Failover: a launch refused for capacity, a quota or a spot shortage re-plans onto the
other types (or the other providers' types) in the step that hears of it, types that
failed recently count less for a while, and money stays within the budget throughout.

The emulator drives the real controllers in virtual time; the remote side is a
``SimProvider`` that refuses chosen types with EC2's error codes from a chosen time on.
"""

from __future__ import annotations

import itertools
from collections.abc import Collection, Mapping, Sequence
from typing import Any

import pytest

from autoscaler.budget.controller import Controller
from autoscaler.budget.planner import solve_budget
from autoscaler.budget.problem import TypeEstimate
from autoscaler.config.schema import Emulator as EmulatorModel
from autoscaler.config.schema import RunConfig
from autoscaler.core.billing import BillingModel
from autoscaler.core.errors import AutoscalerError
from autoscaler.core.journal import decode, encode
from autoscaler.core.model import (
    Action,
    Configure,
    Defer,
    Event,
    JobSpec,
    Launch,
    LaunchFailed,
    MachineLaunched,
    TypeSpec,
)
from autoscaler.core.state import RunState
from autoscaler.deadline.deadline_controller import DeadlineController
from autoscaler.deadline.planning import plan_types
from autoscaler.providers.base import Capabilities, MachineRecord, failure_kind
from autoscaler.providers.sim import SimProvider
from autoscaler.run.assemble import make_controller, new_state
from autoscaler.run.emulator import Emulator
from autoscaler.run.machines import LaunchDone, launch_events
from autoscaler.run.refusals import Holds, refusal
from autoscaler.run.start import task_means
from tests.conftest import make_config

Step = tuple[float, list[Event], list[Action], float]  # now, events, actions, committed
HOURLY = BillingModel("fixed", 3600.0, 60.0, 300.0)


class Refusing(SimProvider):
    """The remote side: launches of ``refuse`` fail with EC2 error ``code`` from virtual
    time ``after`` on; everything else is the emulated world."""

    def __init__(
        self, *args: Any, refuse: Collection[str], code: str, after: float, **kw: Any
    ) -> None:
        super().__init__(*args, **kw)
        self.refuse, self.code, self.after = refuse, code, after

    def launch(
        self, type: str, count: int, token: str, tags: Mapping[str, str]
    ) -> list[MachineRecord]:
        if type in self.refuse and self._clock() >= self.after:
            raise AutoscalerError(f"{self.code}: refused by the test's provider", code=self.code)
        return super().launch(type, count, token, tags)


def emulate(
    controller: Controller | DeadlineController,
    state: RunState,
    types: Sequence[TypeSpec],
    model: EmulatorModel,
    *,
    refuse: Collection[str],
    code: str,
    after: float = 0.0,
    interval: float = 300.0,
    provider_of: Mapping[str, str] | None = None,
    task_s: Sequence[Any] | None = None,
) -> list[Step]:
    """Run ``state`` to its end; every step as (now, events, actions, committed)."""
    caps = Capabilities(
        billing=state.billing,
        max_counts={t.name: t.max_count for t in types},
        boot_estimate_s={t.name: t.boot_s for t in types},
        provider_of=dict(provider_of or {}),
    )
    holder: list[Emulator] = []
    world = Refusing(
        caps,
        model,
        state.n_tasks,
        clock=lambda: holder[0].now,
        task_means=task_s,
        refuse=refuse,
        code=code,
        after=after,
    )
    steps: list[Step] = []

    def hook(now: float, events: list[Event], actions: list[Action], st: RunState) -> None:
        steps.append((now, list(events), list(actions), st.money.committed))

    em = Emulator(controller, state, world, interval, on_step=hook, holds=lambda _: Holds())
    holder.append(em)
    em.run()
    return steps


def refused_step(steps: Sequence[Step], type_name: str) -> Step:
    """The first step that hears of a refused launch of ``type_name``."""
    return next(
        s for s in steps if any(isinstance(e, LaunchFailed) and e.type == type_name for e in s[1])
    )


def launches(actions: Sequence[Action]) -> dict[str, int]:
    out: dict[str, int] = {}
    for a in actions:
        if isinstance(a, Launch):
            out[a.type] = out.get(a.type, 0) + a.count
    return out


# --- what a refusal means -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "kind"),
    [
        ("InsufficientInstanceCapacity", "capacity"),  # on-demand or spot, this type/zone
        ("SpotMaxPriceTooLow", "capacity"),  # the spot price is above our maximum
        ("UnfulfillableCapacity", "capacity"),  # no spare spot capacity
        ("InsufficientCapacity", "capacity"),
        ("InsufficientHostCapacity", "capacity"),
        ("InsufficientReservedInstanceCapacity", "capacity"),
        ("Unsupported", "capacity"),
        ("InstanceLimitExceeded", "limit"),  # the account's quota, in this region
        ("VcpuLimitExceeded", "limit"),
        ("MaxSpotInstanceCountExceeded", "limit"),
        ("InsufficientFreeAddressesInSubnet", "limit"),  # the provider's subnet is full
        ("InvalidParameterValue", "error"),
    ],
)
def test_ec2_refusals_mean_the_type_the_provider_or_nothing(code: str, kind: str) -> None:
    assert failure_kind(code) == kind


def test_a_limit_holds_the_refusing_providers_types_and_a_capacity_error_one_type() -> None:
    """Three types from two providers: east's quota holds east's two types only; then
    west's capacity error avoids that one type; each for its own hold."""
    caps = Capabilities(
        billing=HOURLY,
        max_counts={"e1": 4, "e2": 4, "w1": 4},
        provider_of={"e1": "east", "e2": "east", "w1": "west"},
    )
    types = [TypeSpec(n, 1.0, 4, 60.0) for n in ("e1", "e2", "w1")]
    state = RunState.new(types, HOURLY, 100.0, 10, list(range(10)))
    holds = Holds(unavailable_s=600.0, limit_s=900.0, recover_s=1800.0)
    quota = refusal(
        Launch("e1", 2, "L0"), 2, "quota", "VcpuLimitExceeded", False, caps.siblings("e1"), holds, 0
    )
    assert quota.kind == "limit"
    assert quota.types == ("e1", "e2")
    state.apply(0.0, Launch("e1", 2, "L0"))
    state.apply(0.0, quota)
    assert [state.capacity.launchable(n, 10.0) for n in ("e1", "e2", "w1")] == [False, False, True]
    assert not state.capacity.held(10.0)  # no hold of every type
    state.apply(10.0, Launch("w1", 1, "L1"))
    state.apply(
        10.0,
        refusal(
            Launch("w1", 1, "L1"), 1, "none", "SpotMaxPriceTooLow", False, ("w1",), holds, 10.0
        ),
    )
    assert not state.capacity.launchable("w1", 20.0)
    assert state.capacity.launchable("w1", 611.0)
    assert not state.capacity.launchable("e2", 611.0)
    assert state.capacity.launchable("e2", 901.0)
    assert state.money.committed == 0.0  # the launches never happened: nothing is paid


class Log:
    """Takes the daemon's log call for a refused launch."""

    def warning(self, event: str, **fields: object) -> None:
        self.last = (event, fields)


def test_the_daemon_turns_a_quota_refusal_into_a_hold_of_the_providers_types() -> None:
    """``launch_events``: the provider's code and its types (``LaunchDone.siblings``)
    become a ``LaunchFailed`` that holds them ``limit_hold_s`` and then lets them
    recover over ``recover_s`` (the ``ec2`` section's), and the journal keeps it whole."""
    cfg = make_config(
        provider="sim",
        ec2={
            "region": "us-east-1",
            "ami": "ami-1",
            "ssh": {"key_file": "/nonexistent/key"},
            "types": {"slow": {"instance_type": "t3.micro"}, "fast": {"instance_type": "c5.large"}},
            "limit_hold_s": 120,
            "recover_s": 900,
        },
    )
    state = new_state(cfg, 10, 1)
    launch = Launch("fast", 2, "L0")
    state.apply(0.0, launch)
    done = LaunchDone(launch, (), "quota", "MaxSpotInstanceCountExceeded", False, ("fast",))
    (failed,) = launch_events(done, state, cfg, 5.0, Log())
    assert failed == LaunchFailed(
        "L0", "fast", 2, "quota", "limit", 125.0, types=("fast",), recover_s=900.0
    )
    assert decode("event", "LaunchFailed", encode(failed)) == failed


def test_a_throttled_launch_holds_scale_up_for_the_ec2_sections_throttle_hold() -> None:
    """EC2 throttling a launch past botocore's retries holds every scale-up for
    ``throttle_hold_s`` (60 s unless the section says)."""
    ec2 = {
        "region": "us-east-1",
        "ami": "ami-1",
        "ssh": {"key_file": "/nonexistent/key"},
        "types": {"slow": {"instance_type": "t3.micro"}, "fast": {"instance_type": "c5.large"}},
    }
    for section, hold in ((ec2, 60.0), ({**ec2, "throttle_hold_s": "15s"}, 15.0)):
        cfg = make_config(provider="sim", ec2=section)
        state = new_state(cfg, 10, 1)
        launch = Launch("fast", 1, "L0")
        state.apply(0.0, launch)
        done = LaunchDone(launch, (), "slow down", "RequestLimitExceeded", True, ("fast",))
        (failed,) = launch_events(done, state, cfg, 5.0, Log())
        assert failed.kind == "throttled"
        assert failed.until == 5.0 + hold


def test_a_type_refused_comes_back_at_half_weight_and_regains_it_over_the_window() -> None:
    types = [TypeSpec("a", 1.0, 4, 60.0), TypeSpec("b", 1.0, 4, 60.0)]
    state = RunState.new(types, HOURLY, 100.0, 10, list(range(10)))
    state.apply(0.0, Launch("b", 1, "L0"))
    state.apply(0.0, LaunchFailed("L0", "b", 1, "none", "capacity", 600.0, recover_s=1800.0))
    assert [state.capacity.weight("b", t) for t in (0.0, 599.0)] == [0.0, 0.0]
    assert state.capacity.weight("b", 600.0) == pytest.approx(0.5)
    assert state.capacity.weight("b", 1500.0) == pytest.approx(0.75)
    assert state.capacity.weight("b", 2400.0) == 1.0
    assert state.capacity.weight("a", 0.0) == 1.0
    # A machine of the type launched meanwhile proves its capacity back.
    state.apply(700.0, Launch("b", 1, "L1"))
    state.apply(700.0, MachineLaunched("m", "b", "L1"))
    assert state.capacity.weight("b", 700.0) == 1.0


def recovering_state() -> RunState:
    """Two types alike but for ``b`` refused at 0 (avoided to 600, recovering to 2400)."""
    types = [TypeSpec("a", 1.0, 4, 60.0), TypeSpec("b", 1.0, 4, 60.0)]
    state = RunState.new(types, HOURLY, 100.0, 10, list(range(10)))
    state.apply(0.0, Launch("b", 1, "L0"))
    state.apply(0.0, LaunchFailed("L0", "b", 1, "none", "capacity", 600.0, recover_s=1800.0))
    return state


def test_a_recovering_type_counts_half_as_fast_in_the_budget_milp_at_the_same_price() -> None:
    """``b`` is the faster type (500 s a task against 600 s), refused at 0: at 600 s, back
    at half weight, the MILP sees it twice as slow as at full weight (2400 s), at its
    full price and first cost."""
    state = recovering_state()
    state.now = 600.0
    controller = Controller()
    est = {
        n: TypeEstimate(n, 1.0, 4, 60.0, mean, 60.0, first_cost=1.0, first_tasks=5)
        for n, mean in (("a", 600.0), ("b", 500.0))
    }
    back, full = (
        {t.name: t for t in controller.budget_problem(state, now, est, 10, 50.0).types}
        for now in (600.0, 2400.0)
    )
    assert back["b"].mean_s == pytest.approx(2 * full["b"].mean_s)
    assert back["a"] == full["a"]
    assert (back["b"].price, back["b"].first_cost) == (full["b"].price, full["b"].first_cost)

    def mix(now: float) -> dict[str, int]:
        """The plan's machines for 20 tasks with money for four machine-units."""
        result = solve_budget(controller.budget_problem(state, now, est, n_e=20, money=4.0))
        assert result.plan is not None
        return {n: c for n, c in result.plan.counts.items() if c}

    assert set(mix(600.0)) == {"a"}  # the type that has not failed
    assert set(mix(2400.0)) == {"b"}  # full weight again: the faster one
    problem = controller.budget_problem(state, 300.0, est, n_e=10, money=50.0)
    assert [t.name for t in problem.types] == ["a"]  # avoided: no machine of b alive


def test_a_recovering_type_is_dearer_in_the_deadline_models_and_avoided_before() -> None:
    state = recovering_state()
    state.now = 300.0
    assert {t.name: t.max_count for t in plan_types(state)} == {"a": 4, "b": 0}
    state.now = 1500.0  # weight 0.75
    by_name = {t.name: t for t in plan_types(state)}
    assert by_name["b"].price == pytest.approx(1.0 / 0.75)
    assert by_name["a"].price == 1.0
    assert by_name["b"].max_count == 4


# --- budget mode: the controller fails over ------------------------------------------------


def budget_run(
    refuse: str,
    code: str,
    budget: float = 80.0,
    provider_of: Mapping[str, str] | None = None,
    **overrides: Any,
) -> tuple[RunConfig, RunState, list[Step]]:
    """400 tasks; after sampling (8 machines of each type) the plan wants more of
    ``fast``, three times the speed of ``slow`` for twice the price; from t=100
    ``refuse`` is refused with ``code``."""
    cfg = make_config(
        bag={"synthetic": 400},
        machine_types=[
            {"name": "slow", "price": 1.0, "max_count": 40, "boot_s": 60},
            {"name": "fast", "price": 2.0, "max_count": 20, "boot_s": 60},
        ],
        constraint={"budget": budget},
        sampling={"delta": 0.5},
        **overrides,
    )
    state = new_state(cfg, 400, 1)
    types = [TypeSpec(t.name, t.price, t.max_count, t.boot_s) for t in cfg.machine_types]
    steps = emulate(
        make_controller(cfg),
        state,
        types,
        cfg.emulator,
        refuse={refuse},
        code=code,
        after=100.0,
        interval=cfg.monitoring_interval_s,
        provider_of=provider_of,
        task_s=task_means(cfg, 400),
    )
    return cfg, state, steps


@pytest.mark.parametrize("code", ["InsufficientInstanceCapacity", "SpotMaxPriceTooLow"])
def test_a_capacity_error_after_the_plan_replans_onto_the_other_type_at_once(code: str) -> None:
    cfg, state, steps = budget_run("fast", code)
    _, _, actions, _ = refused_step(steps, "fast")
    plan = next(a for a in actions if isinstance(a, Configure))
    assert "fast unavailable" in plan.reason
    alive_fast = sum(1 for m in state.fleet.machines.values() if m.type.name == "fast")
    assert plan.counts["fast"] == alive_fast  # keeps what runs, asks for no more
    assert launches(actions).get("slow", 0) > 0  # more of the other type, in that same step
    assert state.tasks.done == 400
    assert max(c for *_, c in steps) <= cfg.constraint.budget  # type: ignore[union-attr]


def test_a_quota_in_one_provider_replans_onto_the_other_providers_type_at_once() -> None:
    _, state, steps = budget_run(
        "fast", "VcpuLimitExceeded", provider_of={"slow": "west", "fast": "east"}
    )
    _, events, actions, _ = refused_step(steps, "fast")
    failed = next(e for e in events if isinstance(e, LaunchFailed))
    assert (failed.kind, failed.types) == ("limit", ("fast",))
    plan = next(a for a in actions if isinstance(a, Configure))
    assert plan.reason.startswith("fast held by their provider's limit")
    assert launches(actions).get("slow", 0) > 0
    assert state.tasks.done == 400
    assert max(c for *_, c in steps) <= 80.0


def test_a_quota_of_the_only_provider_waits_for_its_hold_as_before() -> None:
    """One provider: its quota holds every type; the plan stands, its launches wait."""
    _, state, steps = budget_run("fast", "VcpuLimitExceeded")
    _, events, actions, _ = refused_step(steps, "fast")
    failed = next(e for e in events if isinstance(e, LaunchFailed))
    assert set(failed.types) == {"slow", "fast"}
    assert not any(isinstance(a, Configure) for a in actions)
    assert not launches(actions)
    assert any(isinstance(a, Defer) and "fast" in a.types for a in actions)
    assert state.tasks.done == 400
    assert max(c for *_, c in steps) <= 80.0


# --- deadline mode ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "provider_of"),
    [
        ("SpotMaxPriceTooLow", None),  # one provider: the type lacks capacity
        ("VcpuLimitExceeded", {"cheap": "east", "dear": "west"}),  # east's quota
    ],
)
def test_a_deadline_job_refused_its_cheapest_type_is_replanned_onto_another_at_once(
    code: str, provider_of: Mapping[str, str] | None
) -> None:
    """``cheap`` would meet the deadline for a third of the money; it has no capacity,
    or its provider's quota is full: the same step buys ``dear`` machines for the
    tasks, and the job is done in time."""
    types = [TypeSpec("cheap", 0.1, 10, 60.0), TypeSpec("dear", 0.3, 10, 60.0)]
    job = JobSpec("j", 0, 60, 0.0, 3000.0, None, {"cheap": 120.0, "dear": 120.0})
    state = RunState.new(types, HOURLY, None, 60, list(range(60)), jobs=[job])
    model = EmulatorModel.model_validate({"runtime": {"dist": "constant", "value_s": 120.0}})
    steps = emulate(
        DeadlineController(),
        state,
        types,
        model,
        refuse={"cheap"},
        code=code,
        provider_of=provider_of,
    )
    first = steps[0]
    assert launches(first[2]).keys() == {"cheap"}
    now, _, actions, _ = refused_step(steps, "cheap")
    assert now == first[0]  # heard at once, re-planned in that step
    assert launches(actions).keys() == {"dear"}
    assert state.tasks.done == 60
    assert max(seg.end for seg in state.tasks.segments) <= job.deadline


def test_a_refusal_not_understood_is_retried_after_a_wait_not_at_every_step() -> None:
    """``fast`` refused from t=100 with an error code no one knows: the run does not fail
    over (it cannot tell why), but it tries ``fast`` again at most once a retry wait
    (60 s), not at every step of the run, and still finishes within budget."""
    cfg, state, steps = budget_run("fast", "SomethingNobodyKnows")
    refused = [
        now
        for now, events, _, _ in steps
        for e in events
        if isinstance(e, LaunchFailed) and e.type == "fast"
    ]
    assert refused, "the provider refused fast"
    gaps = [b - a for a, b in itertools.pairwise(refused)]
    assert all(gap >= 60.0 - 1e-6 for gap in gaps), gaps
    span = refused[-1] - refused[0]
    assert len(refused) <= span / 60.0 + 2
    assert state.tasks.done == 400
    assert max(c for *_, c in steps) <= cfg.constraint.budget  # type: ignore[union-attr]


def test_a_deferred_launch_is_tried_when_its_hold_lifts_not_at_the_next_tick() -> None:
    """A refusal not understood holds ``fast`` for the retry wait (60 s) with a monitoring
    interval of an hour: the launch waiting for it is tried again 60 s later, not an
    hour later."""
    _, _, steps = budget_run("fast", "SomethingNobodyKnows", monitoring_interval_s=3600)
    refused = [
        now
        for now, events, _, _ in steps
        for e in events
        if isinstance(e, LaunchFailed) and e.type == "fast"
    ]
    assert len(refused) >= 2, "fast was tried again"
    assert refused[1] - refused[0] < 120.0, refused[:3]

"""Behaviour of the controller, through dry runs and through single steps."""

from __future__ import annotations

from collections import Counter

import pytest

from autoscaler.budget.controller import Controller
from autoscaler.config.schema import RunConfig
from autoscaler.core.billing import BillingModel
from autoscaler.core.journal import Record, replay, step_records
from autoscaler.core.model import (
    Action,
    BoundaryNear,
    Configure,
    Defer,
    Event,
    Extend,
    Launch,
    LaunchFailed,
    MachineLaunched,
    MachineReady,
    Mark,
    Release,
    Replicate,
    Shortfall,
    Stop,
    TaskDone,
    TaskState,
    Tick,
    TypeSpec,
)
from autoscaler.core.state import RunState
from autoscaler.run.assemble import controller_settings, new_state
from autoscaler.run.start import make_emulator
from tests.conftest import make_config

HOURLY = BillingModel("fixed", 3600.0)


def run(cfg, seed=None):  # type: ignore[no-untyped-def]
    journal: list[Record] = []

    def hook(now: float, events: list[Event], actions: list[Action], state: RunState) -> None:
        journal.extend(step_records(len(journal) + 1, now, events, actions))

    n = cfg.bag.synthetic
    state = make_emulator(cfg, n, seed=seed, on_step=hook).run()
    return state, journal


# --- single steps of the pure core -------------------------------------------------------


def one_machine_state(budget: float) -> tuple[Controller, RunState]:
    """A run with one machine launched at t=0 and ready, ten tasks in the bag."""
    state = RunState.new([TypeSpec("a", 2.0, 4, 0.0)], HOURLY, budget, 10, list(range(10)))
    controller = Controller()
    actions = controller.step(state, [], 0.0)
    launch = next(a for a in actions if isinstance(a, Launch))
    controller.step(state, [MachineLaunched("m0", "a", launch.token)], 0.0)
    for extra in range(1, launch.count):
        controller.step(state, [MachineLaunched(f"m{extra}", "a", launch.token)], 0.0)
    controller.step(state, [MachineReady("m0")], 0.0)
    return controller, state


def test_machine_is_extended_at_its_boundary_when_the_budget_pays() -> None:
    controller, state = one_machine_state(budget=100.0)
    actions = controller.step(state, [BoundaryNear("m0")], 3540.0)
    assert Extend("m0", 7200.0) in actions
    assert state.money.committed <= 100.0


def test_machine_is_released_at_its_boundary_when_the_budget_cannot_pay() -> None:
    """With every unit committed, the next boundary releases the machine."""
    controller, state = one_machine_state(budget=2.0)  # one unit of one machine
    assert state.money.committed == pytest.approx(2.0)
    actions = controller.step(state, [BoundaryNear("m0")], 3540.0)
    assert any(isinstance(a, Release) and a.machine == "m0" for a in actions)
    assert not any(isinstance(a, Extend) for a in actions)
    assert state.money.committed <= 2.0
    # Nothing runs and nothing can be paid for: the run stops and says why.
    stop = next(a for a in actions if isinstance(a, Stop))
    assert stop.reason is not None
    assert "budget" in stop.reason


def test_boundary_event_for_an_already_extended_machine_is_ignored() -> None:
    controller, state = one_machine_state(budget=100.0)
    controller.step(state, [BoundaryNear("m0")], 3540.0)
    committed = state.money.committed
    assert controller.step(state, [BoundaryNear("m0")], 3545.0) == []
    assert state.money.committed == committed


# --- whole dry runs ----------------------------------------------------------------------


def test_machines_leave_just_before_a_boundary_or_when_idle() -> None:
    """No machine is released in the middle of a paid unit it could still use."""
    cfg = make_config(bag={"synthetic": 300}, constraint={"budget": 60.0})
    state, _ = run(cfg)
    margin = state.billing.boundary_margin_s()
    for m in state.fleet.machines.values():
        assert m.ended_at is not None
        into_unit = (m.ended_at - m.launched_at) % 3600.0
        if m.end_reason and m.end_reason.startswith("end of paid time"):
            assert 3600.0 - margin - 1e-6 <= into_unit or into_unit < 1e-6
        else:
            assert m.end_reason is not None
            assert m.end_reason.startswith(("idle", "bag finished")), m.end_reason


def test_same_seed_same_run_and_another_seed_another() -> None:
    cfg = make_config(bag={"synthetic": 200})
    _, first = run(cfg, seed=3)
    _, again = run(cfg, seed=3)
    _, other = run(cfg, seed=4)
    assert first == again
    assert first != other


def test_round_robin_takes_every_machine_at_the_start() -> None:
    cfg = make_config(policy="round_robin")
    _, journal = run(cfg)
    launches = [r.item for r in journal if isinstance(r.item, Launch)]
    assert {a.type: a.count for a in launches} == {"slow": 10, "fast": 10}
    assert all(r.t == 0.0 for r in journal if isinstance(r.item, Launch))


def test_bats_samples_with_initial_workers_then_plans() -> None:
    """iw = min(N/10, n) machines per type (capped by max_count), then a plan."""
    cfg = make_config(bag={"synthetic": 400}, constraint={"budget": 200.0})
    state, journal = run(cfg)
    first = [r.item for r in journal if isinstance(r.item, Launch) and r.t == 0.0]
    assert {a.type: a.count for a in first} == {"slow": 10, "fast": 10}
    reasons = [c.reason for _, c in state.decisions.configurations]
    assert reasons[0].startswith("sampling")
    assert "plan after sampling" in reasons[1]


def test_failing_tasks_are_retried_then_reported() -> None:
    cfg = make_config(
        bag={"synthetic": 60, "max_retries": 1},
        constraint={"budget": 500.0},
        emulator={
            "seed": 2,
            "runtime": {"dist": "constant", "value_s": 300},
            "task_failure_prob": 0.5,
        },
    )
    state, _journal = run(cfg)
    assert state.tasks.failed > 0
    assert state.tasks.done + state.tasks.failed == 60
    for tid, st in enumerate(state.tasks.task_state):
        if st is TaskState.FAILED:
            assert state.tasks.attempts[tid] == 2
            assert "emulated task failure" in state.tasks.task_errors[tid]
    retried = [
        tid
        for tid in range(60)
        if state.tasks.attempts[tid] == 1 and state.tasks.task_state[tid] is TaskState.DONE
    ]
    assert retried, "some task failed once and then succeeded"


def test_a_lost_machine_has_its_task_requeued_and_done_elsewhere() -> None:
    cfg = make_config(
        bag={"synthetic": 100},
        constraint={"budget": 200.0},
        emulator={
            "seed": 1,
            "runtime": {"dist": "normal", "mean_s": 600, "sd_s": 60},
            "machine_failures": [{"type": "slow", "index": 0, "at_s": 400}],
        },
    )
    state, _ = run(cfg)
    lost = [s for s in state.tasks.segments if s.outcome == "lost"]
    assert len(lost) == 1
    assert state.fleet.machines["slow-0"].end_reason == "lost: emulated machine failure"
    later = [s for s in state.tasks.segments if s.task == lost[0].task and s.outcome == "done"]
    assert later
    assert later[0].machine != "slow-0"
    assert state.tasks.done == 100


def _too_small(on_shortfall: str) -> tuple[RunState, list[Record]]:
    cfg = make_config(
        bag={"synthetic": 1000},
        constraint={"budget": 30.0, "on_shortfall": on_shortfall},
        emulator={"seed": 1, "runtime": {"dist": "normal", "mean_s": 900, "sd_s": 60}},
    )
    return run(cfg)


def test_a_budget_too_small_is_said_early_with_the_budget_needed_and_the_run_goes_on() -> None:
    """Default ``continue``: the shortfall is said within the first unit (the sampling
    machines alone take the whole budget of 30 here), with a needed budget above the one
    given; the run then does what the money pays for, stays within budget and leaves no
    machine running."""
    state, journal = _too_small("continue")
    warned = [(r.t, r.item) for r in journal if isinstance(r.item, Shortfall)]
    assert warned, "no shortfall was said"
    t, first = warned[0]
    assert t < 3600.0
    assert first.needed_budget is not None
    assert first.needed_budget > 30.0
    assert state.tasks.done < 1000
    done_by_then = sum(1 for r in journal if isinstance(r.item, TaskDone) and r.t <= t)
    assert state.tasks.done > done_by_then, "nothing was done after the warning: the run stopped"
    assert state.money.stop_reason is not None
    assert "budget exhausted" in state.money.stop_reason
    assert state.actual_cost() <= 30.0 + 1e-9
    assert not any(True for _ in state.fleet.alive_machines())


def test_on_shortfall_stop_ends_the_run_when_the_shortfall_is_known() -> None:
    state, journal = _too_small("stop")
    stop_at = next(r.t for r in journal if isinstance(r.item, Stop))
    warned_at = next(r.t for r in journal if isinstance(r.item, Shortfall))
    assert stop_at == warned_at < 3600.0  # known within the first unit
    assert state.money.stop_reason is not None
    assert "budget unlikely" in state.money.stop_reason
    assert state.actual_cost() <= 30.0
    assert not any(True for _ in state.fleet.alive_machines())


def test_tail_replicas_run_once_the_bag_is_empty_and_each_task_counts_once() -> None:
    cfg = make_config(
        bag={"synthetic": 120},
        constraint={"budget": 400.0},
        emulator={
            "seed": 5,
            "runtime": {"dist": "lognormal", "mean_s": 600, "sd_s": 400},
            "speed": {"fast": 3.0},
        },
    )
    state, journal = run(cfg)
    replicas = [r.item for r in journal if isinstance(r.item, Replicate)]
    assert replicas
    done = Counter(s.task for s in state.tasks.segments if s.outcome == "done")
    assert state.tasks.done == 120
    assert set(done.values()) == {1}, "a task was counted done twice"
    assert any(s.outcome == "cancelled" for s in state.tasks.segments), (
        "no losing replica cancelled"
    )


def test_tail_replicas_use_the_free_slots_of_busy_machines() -> None:
    """Machines of 4 slots: once the bag is empty a machine still running a task copies
    late tasks onto its other slots (before, only an idle machine took a replica), and
    every task still counts once."""
    cfg = make_config(
        bag={"synthetic": 160},
        constraint={"budget": 400.0},
        machine_types=[
            {"name": "slow", "price": 1.0, "max_count": 10, "boot_s": 60, "slots": 4},
            {"name": "fast", "price": 4.0, "max_count": 10, "boot_s": 60, "slots": 4},
        ],
        emulator={
            "seed": 5,
            "runtime": {"dist": "lognormal", "mean_s": 600, "sd_s": 400},
            "speed": {"fast": 3.0},
        },
    )
    busy: list[tuple[int, str]] = []

    def hook(now: float, events: list[Event], actions: list[Action], state: RunState) -> None:
        for a in actions:
            if isinstance(a, Replicate) and set(state.fleet.machines[a.machine].running) - {a.task}:
                busy.append((a.task, a.machine))

    state = make_emulator(cfg, 160, on_step=hook).run()
    assert busy, "no replica went to a machine with a task running"
    done = Counter(s.task for s in state.tasks.segments if s.outcome == "done")
    assert state.tasks.done == 160
    assert set(done.values()) == {1}


def test_replication_can_be_switched_off() -> None:
    cfg = make_config(tail_replication=False)
    _, journal = run(cfg)
    assert not any(isinstance(r.item, Replicate) for r in journal)


def test_cbc_and_highs_drive_the_same_run() -> None:
    """The solver is a setting; both find the same plans, so the run is the same."""
    highs, _ = run(make_config(bag={"synthetic": 300}, solver="highs"))
    cbc, _ = run(make_config(bag={"synthetic": 300}, solver="cbc"))
    assert [c.counts for _, c in highs.decisions.configurations] == [
        c.counts for _, c in cbc.decisions.configurations
    ]
    assert highs.now == cbc.now
    assert highs.actual_cost() == cbc.actual_cost()


def test_replaying_the_journal_rebuilds_the_state() -> None:
    """The state is a fold over events and actions: no decision hides outside them."""
    cfg = make_config(
        bag={"synthetic": 400},
        constraint={"budget": 150.0},
        emulator={
            "seed": 9,
            "runtime": {"dist": "normal", "mean_s": 600, "sd_s": 120},
            "speed": {"fast": 1.0},  # as slow, four times the price: dropped after sampling
            "task_failure_prob": 0.05,
            "machine_failures": [{"type": "fast", "index": 1, "at_s": 900}],
        },
    )
    state, journal = run(cfg)
    assert any(isinstance(r.item, Mark) for r in journal), "the run should mark machines"
    replayed = new_state(cfg, 400, cfg.emulator.seed)
    replay(replayed, journal)
    assert replayed == state


# --- capacity and account limits (a provider refusing launches) ---------------------------


def two_type_start() -> tuple[Controller, RunState, dict[str, Launch]]:
    types = [TypeSpec("a", 1.0, 4, 0.0), TypeSpec("b", 4.0, 4, 0.0)]
    state = RunState.new(types, HOURLY, 100.0, 40, list(range(40)))
    controller = Controller()
    launches = {a.type: a for a in controller.step(state, [], 0.0) if isinstance(a, Launch)}
    assert set(launches) == {"a", "b"}
    return controller, state, launches


def launched(actions: list[Action]) -> set[str]:
    return {a.type for a in actions if isinstance(a, Launch)}


def test_a_type_without_capacity_is_avoided_until_its_outage_ends() -> None:
    controller, state, launches = two_type_start()
    b = launches["b"]
    failed = LaunchFailed(b.token, "b", b.count, "no capacity", "capacity", until=600.0)
    actions = controller.step(state, [failed], 1.0)
    assert not state.capacity.available("b", 1.0)
    assert "b" not in launched(actions)
    assert Defer(("b",)) in actions  # journaled: a replay knows a tick must try again
    assert state.money.committed == pytest.approx(launches["a"].count * 1.0)  # b's money freed
    assert "b" not in launched(controller.step(state, [Tick()], 300.0))
    # After the outage a tick tries the type again.
    actions = controller.step(state, [Tick()], 700.0)
    assert "b" in launched(actions)
    assert Defer(()) in actions
    assert not state.decisions.deferred
    assert state.capacity.launch_problems[0][1:3] == ("b", "capacity")


def test_an_account_limit_holds_every_scale_up_and_never_stops_the_run() -> None:
    controller, state, launches = two_type_start()
    a, b = launches["a"], launches["b"]
    limit = "InstanceLimitExceeded: you have requested more instances than allowed"
    events: list[Event] = [
        LaunchFailed(a.token, "a", a.count, limit, "limit", until=900.0),
        LaunchFailed(b.token, "b", b.count, limit, "limit", until=900.0),
    ]
    actions = controller.step(state, events, 1.0)
    assert state.capacity.held(1.0)
    assert not launched(actions)
    assert not any(isinstance(x, Stop) for x in actions)  # nothing runs, but it waits
    assert not launched(controller.step(state, [Tick()], 600.0))
    assert launched(controller.step(state, [Tick()], 950.0)) == {"a", "b"}
    assert state.money.committed <= 100.0


def first_configurations(cfg: RunConfig) -> list[Configure]:
    """The configurations the controller decides at the very first step of a run."""
    state = new_state(cfg, cfg.bag.synthetic or 0, seed=1)
    actions = Controller(controller_settings(cfg)).step(state, [], 0.0)
    return [a for a in actions if isinstance(a, Configure)]


def sampling_label(max_slow: int, max_fast: int, budget: float) -> str:
    cfg = make_config(
        bag={"synthetic": 1000},  # n = 30, iw = min(N/10, n) = 30
        machine_types=[
            {"name": "slow", "price": 1.0, "max_count": max_slow, "boot_s": 60},
            {"name": "fast", "price": 4.0, "max_count": max_fast, "boot_s": 60},
        ],
        constraint={"budget": budget},
    )
    (configure,) = first_configurations(cfg)
    return configure.reason


def test_the_sampling_label_says_when_max_count_or_the_budget_capped_iw() -> None:
    """iw = min(N/10, n) is what the paper asks for; the label says what was started."""
    assert sampling_label(40, 40, 1000.0) == "sampling: n=30, iw=30"
    assert sampling_label(10, 40, 1000.0) == (
        "sampling: n=30, iw=30, capped by max_count: slow 10, fast 30"
    )
    assert sampling_label(10, 10, 20.0).startswith(
        "sampling: n=30, iw=30, capped by max_count and budget: slow "
    )
    assert sampling_label(40, 40, 50.0).startswith("sampling: n=30, iw=30, capped by budget: ")

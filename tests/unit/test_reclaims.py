"""Reclaims as a learned risk (``core.reclaims``): the Gamma–Poisson rate per type, its
price in both planners, the hold after repeated reclaims and its return, and the same
rate and holds after a replay of the journal."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from autoscaler.budget.controller import Controller
from autoscaler.config.bag import expand_bag
from autoscaler.core.billing import BillingModel
from autoscaler.core.journal import JsonlJournal, replay
from autoscaler.core.model import (
    NOTICE_REASON,
    AssignGroup,
    BoundaryNear,
    Cancel,
    Extend,
    JobSpec,
    Launch,
    MachineLaunched,
    MachineLost,
    MachineReady,
    Mark,
    Move,
    RebalanceRecommended,
    Release,
    TaskDone,
    TaskState,
    Tick,
    TypeSpec,
)
from autoscaler.core.reclaims import (
    PRIOR_WEIGHT_H,
    SPOT_PRIOR_PER_HOUR,
    Loss,
    ReclaimPolicy,
    reclaim_rate,
    speed_factor,
)
from autoscaler.core.state import RunState
from autoscaler.deadline.deadline_controller import DeadlineController
from autoscaler.deadline.jobs import DeadlineSettings
from autoscaler.report.build import reclaim_holds
from autoscaler.report.markdown import _reclaim_hold_lines
from autoscaler.run.assemble import new_state, type_specs
from autoscaler.run.start import dry_run
from tests.conftest import make_config
from tests.unit.test_config import GOOD, problems

HOURLY = BillingModel("fixed", 3600.0, 60.0, 300.0)
NOTICE = f"{NOTICE_REASON} (terminate at T)"

# --- the estimate ------------------------------------------------------------------------


def test_with_nothing_seen_the_rate_is_the_prior() -> None:
    assert reclaim_rate(0.05, PRIOR_WEIGHT_H, 0, 0.0) == 0.05
    assert reclaim_rate(0.0, PRIOR_WEIGHT_H, 0, 0.0) == 0.0


def test_reclaims_raise_the_rate_and_quiet_hours_lower_it() -> None:
    prior = reclaim_rate(0.05, 10.0, 0, 0.0)
    up = reclaim_rate(0.05, 10.0, 3, 2.0)
    assert up == pytest.approx((0.05 * 10 + 3) / 12)
    assert up > prior
    down = reclaim_rate(0.05, 10.0, 0, 90.0)
    assert down == pytest.approx(0.5 / 100)
    assert down < prior
    # Evidence outweighs the prior in the end: 20 reclaims in 100 machine-hours ≈ 0.2/h.
    assert reclaim_rate(0.05, 10.0, 20, 100.0) == pytest.approx(20.5 / 110)


def test_the_speed_factor_is_the_work_a_reclaim_does_not_lose() -> None:
    assert speed_factor(0.0, 600.0, 120.0) == 1.0
    # 2 an hour, each losing half a 10-minute task and a 2-minute boot: 7 min of 60.
    assert speed_factor(2.0, 600.0, 120.0) == pytest.approx(1 - 2 * 420 / 3600)
    assert speed_factor(20.0, 600.0, 120.0) == 0.0


# --- folded from the state's events --------------------------------------------------------


def spot_state(prior: float = 0.05, policy: ReclaimPolicy | None = None) -> RunState:
    types = [
        TypeSpec("od", 1.0, 10, 60.0),
        TypeSpec("spot", 0.3, 10, 60.0, reclaim_per_hour=prior),
    ]
    return RunState.new(types, HOURLY, 100.0, 10, list(range(10)), reclaims=policy)


def machine(s: RunState, t: float, n: int, type_name: str = "spot", zone: str = "") -> str:
    token = s.fleet.next_token()
    s.apply(t, Launch(type_name, 1, token))
    mid = f"{type_name}-{n}"
    s.apply(t, MachineLaunched(mid, type_name, token, zone=zone))
    s.apply(t, MachineReady(mid))
    return mid


def test_the_state_learns_the_rate_from_notices_and_machine_hours() -> None:
    s = spot_state()
    assert s.reclaim_rate("spot") == 0.05
    assert s.reclaim_rate("od") == 0.0  # on-demand: no prior, nothing seen
    a, b = machine(s, 0.0, 0), machine(s, 0.0, 1)
    s.apply(1800.0, MachineLost(a, NOTICE))
    # 1 reclaim over 0.5 h (a) + 0.5 h (b, still alive) of exposure
    assert s.reclaim_rate("spot") == pytest.approx((0.5 + 1) / (10 + 1.0))
    s.apply(3600.0, MachineLost(b, "lost: stopped answering"))  # a loss, not a reclaim
    assert s.reclaim_rate("spot") == pytest.approx(1.5 / 11.5)
    assert s.reclaim_factor("spot", 600.0) == pytest.approx(
        speed_factor(1.5 / 11.5, 600.0, s.fleet.boot_s("spot"))
    )
    assert s.reclaim_factor("od", 600.0) == 1.0


def test_repeated_reclaims_hold_the_type_until_the_window_passes() -> None:
    s = spot_state(policy=ReclaimPolicy(hold_after=3, window_s=3600.0, hold_below=1.0))
    ids = [machine(s, 0.0, i) for i in range(4)]
    s.apply(600.0, MachineLost(ids[0], NOTICE))
    s.apply(1200.0, MachineLost(ids[1], NOTICE))
    assert s.capacity.available("spot", 1200.0)
    s.apply(1800.0, MachineLost(ids[2], NOTICE))
    assert not s.capacity.available("spot", 1800.0)
    assert s.capacity.weight("spot", 1800.0) == 0.0
    assert s.capacity.available("od", 1800.0)
    (hold,) = s.capacity.reclaims.holds
    assert (hold.type, hold.start, hold.until, hold.reclaims) == ("spot", 1800.0, 5400.0, 3)
    s.apply(3000.0, Tick())  # the rate is still far above its prior: the hold stays
    assert not s.capacity.available("spot", 3000.0)
    assert s.capacity.available("spot", 5400.0)


def running_machine(s: RunState, t: float, n: int, task: int) -> str:
    """A spot machine launched at ``t`` that runs ``task`` from then on."""
    mid = machine(s, t, n)
    s.apply(t, AssignGroup((task,), mid))
    assert s.fleet.machines[mid].running, "the task runs"
    return mid


def test_reclaims_that_cut_little_work_are_priced_not_held() -> None:
    """Three reclaims within the window, but of machines that had just begun their
    tasks: what they lose is a boot and seconds of work, far above half of each
    machine-hour kept. The plan prices them; the type is not held."""
    s = spot_state(policy=ReclaimPolicy(hold_after=3, window_s=3600.0))
    for i, t in enumerate((0.0, 100.0, 200.0)):
        mid = running_machine(s, t, i, i)
        s.apply(t + 30.0, MachineLost(mid, NOTICE))
    assert s.capacity.available("spot", 230.0)
    assert s.capacity.reclaims.holds == []
    assert s.capacity.reclaims.kept("spot", Loss(boot_s=60.0)) > 0.5


def test_reclaims_that_cut_long_runs_hold_the_type() -> None:
    """Three reclaims within the window, each cutting a run of 50 minutes: at the rate
    learned, the machines keep less than half their work. The type is held."""
    s = spot_state(policy=ReclaimPolicy(hold_after=3, window_s=3600.0, weight_h=1.0))
    ids = [running_machine(s, 0.0, i, i) for i in range(3)]
    for k, mid in enumerate(ids):
        s.apply(3000.0 + k, MachineLost(mid, NOTICE))
    assert s.capacity.reclaims.lost_s["spot"] == pytest.approx(3000.0 + 3001.0 + 3002.0)
    assert not s.capacity.available("spot", 3002.0)
    (hold,) = s.capacity.reclaims.holds
    assert (hold.type, hold.reclaims) == ("spot", 3)


def test_reclaims_spread_wider_than_the_window_hold_nothing() -> None:
    s = spot_state(policy=ReclaimPolicy(hold_after=3, window_s=3600.0, hold_below=1.0))
    for i, t in enumerate((0.0, 3000.0, 6000.0)):
        s.apply(t + 1.0, MachineLost(machine(s, t, i), NOTICE))
    assert s.capacity.available("spot", 6001.0)
    assert s.capacity.reclaims.holds == []


def test_a_hold_ends_at_a_tick_once_the_rate_falls_below_the_return_rate() -> None:
    """The rate falls while machines of the type still alive run without a reclaim: at
    the first tick it is below the return rate, the type may be bought again."""
    s = spot_state(
        policy=ReclaimPolicy(hold_after=2, window_s=36000.0, hold_below=1.0, return_per_hour=0.1)
    )
    ids = [machine(s, 0.0, i) for i in range(12)]
    s.apply(60.0, MachineLost(ids[0], NOTICE))
    s.apply(120.0, MachineLost(ids[1], NOTICE))
    assert not s.capacity.available("spot", 120.0)
    s.apply(3600.0, Tick())  # 10 machines, ~11 h: (0.5 + 2) / (10 + 10) > 0.1
    assert not s.capacity.available("spot", 3600.0)
    s.apply(4 * 3600.0, Tick())  # ~40 machine-hours: (0.5 + 2) / 50 = 0.05 < 0.1
    assert s.capacity.available("spot", 4 * 3600.0)
    (hold,) = s.capacity.reclaims.holds
    assert hold.until == 4 * 3600.0


# --- zones: a pool (type, zone) held alone ---------------------------------------------------


def zoned(s: RunState, t: float, zones: str) -> list[str]:
    """One spot machine per letter of ``zones`` (``"aab"``: two in zone a, one in b)."""
    return [machine(s, t, i, zone=f"zone-{z}") for i, z in enumerate(zones)]


def test_reclaims_gathered_in_one_zone_hold_that_zone_and_the_type_stays() -> None:
    s = spot_state(policy=ReclaimPolicy(hold_after=3, window_s=3600.0, hold_below=1.0))
    ids = zoned(s, 0.0, "aaab")
    for k in range(3):
        s.apply(600.0 * (k + 1), MachineLost(ids[k], NOTICE))
    assert s.capacity.available("spot", 1800.0), "the type is not held: it has zone b"
    assert s.capacity.reclaims.held_zones("spot", 1800.0) == ("zone-a",)
    (hold,) = s.capacity.reclaims.holds
    assert (hold.type, hold.zone, hold.until, hold.reclaims) == ("spot", "zone-a", 5400.0, 3)
    assert s.capacity.reclaims.held_zones("spot", 5400.0) == ()  # the window passed
    # The zone's rate is its own: 3 reclaims in 1 machine-hour (600 + 1200 + 1800 s)
    # and the prior's 10 hours.
    assert s.capacity.reclaims.rate("spot", 0.0, "zone-a") == pytest.approx(3.5 / 11)
    assert s.capacity.reclaims.rate("spot", 0.0, "zone-b") == pytest.approx(0.05)


def test_reclaims_spread_over_the_zones_hold_the_whole_type() -> None:
    s = spot_state(policy=ReclaimPolicy(hold_after=3, window_s=3600.0, hold_below=1.0))
    ids = zoned(s, 0.0, "aabb")
    for k, mid in enumerate(ids[1:]):  # a, b, b: no zone has three
        s.apply(600.0 * (k + 1), MachineLost(mid, NOTICE))
    assert not s.capacity.available("spot", 1800.0)
    (hold,) = s.capacity.reclaims.holds
    assert (hold.zone, hold.reclaims) == ("", 3)


def test_a_type_in_one_zone_is_held_whole_as_before() -> None:
    s = spot_state(policy=ReclaimPolicy(hold_after=3, window_s=3600.0, hold_below=1.0))
    ids = zoned(s, 0.0, "aaaa")
    for k in range(3):
        s.apply(600.0 * (k + 1), MachineLost(ids[k], NOTICE))
    assert not s.capacity.available("spot", 1800.0)
    assert s.capacity.reclaims.held_zones("spot", 1800.0) == ()


def test_once_its_other_zone_is_held_too_the_type_is_held() -> None:
    """Zone a is held after three reclaims; then three in zone b, the type's last:
    the reclaims in held zone a no longer count, b's three hold the whole type."""
    s = spot_state(policy=ReclaimPolicy(hold_after=3, window_s=36000.0, hold_below=1.0))
    ids = zoned(s, 0.0, "aaabbb")
    for k in range(3):
        s.apply(60.0 * (k + 1), MachineLost(ids[k], NOTICE))
    assert s.capacity.available("spot", 180.0)
    for k in range(3, 6):
        s.apply(60.0 * (k + 1), MachineLost(ids[k], NOTICE))
    assert not s.capacity.available("spot", 360.0)
    assert [(h.zone, h.reclaims) for h in s.capacity.reclaims.holds] == [("zone-a", 3), ("", 3)]


def test_the_report_says_which_zone_was_held_and_where_launches_went() -> None:
    s = spot_state(policy=ReclaimPolicy(hold_after=3, window_s=3600.0, hold_below=1.0))
    ids = zoned(s, 0.0, "aaab")
    for k in range(3):
        s.apply(600.0 * (k + 1), MachineLost(ids[k], NOTICE))
    s.apply(2400.0, Tick())  # zone a's rate stays high: the hold goes on
    (note,) = reclaim_holds(s)
    assert (note.type, note.zone, note.from_s, note.until_s) == ("spot", "zone-a", 1800.0, 2400.0)
    (_, line) = _reclaim_hold_lines(SimpleNamespace(reclaim_holds=(note,)))
    assert line == (
        "spot in zone-a held 0h30m00s–0h40m00s after 3 reclaims there in 1h; "
        "its launches went to its other zones."
    )


def test_a_zone_hold_ends_at_a_tick_once_the_zones_rate_falls_back() -> None:
    s = spot_state(
        policy=ReclaimPolicy(hold_after=2, window_s=36000.0, hold_below=1.0, return_per_hour=0.1)
    )
    ids = [machine(s, 0.0, i, zone="zone-a") for i in range(12)]
    ids.append(machine(s, 0.0, 12, zone="zone-b"))
    s.apply(60.0, MachineLost(ids[0], NOTICE))
    s.apply(120.0, MachineLost(ids[1], NOTICE))
    assert s.capacity.reclaims.held_zones("spot", 120.0) == ("zone-a",)
    s.apply(3600.0, Tick())  # zone a: (0.5 + 2) / (10 + ~10 machine-hours) > 0.1
    assert s.capacity.reclaims.held_zones("spot", 3600.0) == ("zone-a",)
    s.apply(4 * 3600.0, Tick())  # ~40 machine-hours there: (0.5 + 2) / 50 = 0.05 < 0.1
    assert s.capacity.reclaims.held_zones("spot", 4 * 3600.0) == ()
    assert s.capacity.available("spot", 4 * 3600.0)


# --- through a run: the config, the planners, a replay --------------------------------------


def spot_config(prior: float | None, **overrides: Any) -> Any:
    """Two types alike but for price: ``spot`` cheaper, its reclaim prior ``prior``."""
    spot: dict[str, Any] = {"name": "spot", "price": 2.0, "max_count": 10, "boot_s": 120}
    if prior is not None:
        spot["reclaim_per_hour"] = prior
    data: dict[str, Any] = {
        "bag": {"synthetic": 200},
        "constraint": {"budget": 60.0},
        "machine_types": [
            {"name": "od", "price": 3.0, "max_count": 10, "boot_s": 120},
            spot,
        ],
        "emulator": {
            "seed": 1,
            "runtime": {"dist": "normal", "mean_s": 600, "sd_s": 60},
            "speed": {"od": 1.0, "spot": 1.0},
        },
    }
    data.update(overrides)
    return make_config(**data)


def planned_counts(cfg: Any) -> dict[str, int]:
    """The first plan after sampling (or the deadline plan) of ``cfg``'s dry run."""
    done = dry_run(cfg, expand_bag(cfg), seed=1, plots=False)
    (first, *_) = [c for _, c in done.state.decisions.configurations if "plan" in c.reason]
    return dict(first.counts)


def test_a_spot_type_gets_the_default_prior_and_an_on_demand_one_none() -> None:
    cfg = make_config(
        machine_types=[
            {"name": "od", "price": 3.0, "max_count": 2},
            {"name": "spot", "price": 1.0, "max_count": 2},
            {"name": "told", "price": 1.0, "max_count": 2, "reclaim_per_hour": 0.3},
        ],
        provider="ec2",
        ec2={
            "region": "us-east-1",
            "ami": "ami-0123456789abcdef0",
            "ssh": {"user": "ec2-user", "key_file": "k.pem"},
            "types": {
                "od": {"instance_type": "c5.large"},
                "spot": {"instance_type": "c5.large", "spot": True},
                "told": {"instance_type": "c5.large", "spot": True},
            },
        },
        emulator={"speed": {"od": 1, "spot": 1, "told": 1}},
    )
    priors = {t.name: t.reclaim_per_hour for t in type_specs(cfg)}
    assert priors == {"od": 0.0, "spot": SPOT_PRIOR_PER_HOUR, "told": 0.3}


@pytest.mark.parametrize("budget", [100.0, 120.0])
def test_the_budget_planner_moves_work_off_a_type_reclaimed_often(budget: float) -> None:
    """At rate 0 the plan uses every spot machine; at a prior of 5 an hour (each reclaim
    losing 5 min of task and 2 of boot: 58 % of its work) it buys mostly on-demand, as
    the MILP (120) and as the most profitable type when the budget is tight (100)."""
    calm = planned_counts(spot_config(None, constraint={"budget": budget}))
    risky = planned_counts(spot_config(5.0, constraint={"budget": budget}))
    assert calm["spot"] >= calm["od"]
    assert risky["spot"] < calm["spot"]
    assert risky["od"] > risky["spot"]


def test_the_deadline_planner_moves_work_off_a_type_reclaimed_often() -> None:
    """The cheapest mix that meets a 2-hour deadline: mostly spot at rate 0, mostly
    on-demand at a prior of 5 an hour (its task time taken as 600 s / 0.42)."""

    def deadline_config(prior: float | None) -> Any:
        told = {} if prior is None else {"reclaim_per_hour": prior}
        return spot_config(
            prior,
            constraint={"deadline_s": 7200},
            machine_types=[
                {"name": "od", "price": 3.0, "max_count": 30, "boot_s": 120},
                {"name": "spot", "price": 2.0, "max_count": 30, "boot_s": 120, **told},
            ],
        )

    calm = planned_counts(deadline_config(None))
    risky = planned_counts(deadline_config(5.0))
    assert calm["spot"] > calm["od"]
    assert risky["od"] > risky["spot"]


def test_rate_zero_changes_no_decision() -> None:
    """A prior of 0 given is the on-demand default: the same run, step for step."""
    a = dry_run(spot_config(None), expand_bag(spot_config(None)), seed=1, plots=False)
    b = dry_run(spot_config(0.0), expand_bag(spot_config(0.0)), seed=1, plots=False)
    assert a.state.decisions.configurations == b.state.decisions.configurations
    assert a.state.tasks.segments == b.state.tasks.segments


def test_a_replayed_journal_has_the_live_runs_rates_and_holds(tmp_path: Path) -> None:
    cfg = spot_config(
        0.2,
        emulator={
            "seed": 2,
            "runtime": {"dist": "normal", "mean_s": 600, "sd_s": 60},
            "speed": {"od": 1.0, "spot": 1.0},
            "reclaim_per_hour": {"spot": 3.0},
        },
        reclaims={"hold_after": 2, "within_s": "1h", "hold_below": 1.0},
    )
    tasks = expand_bag(cfg)
    live = dry_run(cfg, tasks, seed=1, out_dir=tmp_path / "run", plots=False).state
    assert live.capacity.reclaims.times.get("spot"), "the run saw reclaims"
    again = new_state(cfg, len(tasks), 1)
    replay(again, JsonlJournal(tmp_path / "run" / "journal.jsonl").records())
    assert again.reclaim_rate("spot") == live.reclaim_rate("spot")
    assert again.capacity.reclaims == live.capacity.reclaims
    assert again.capacity.unavailable == live.capacity.unavailable


# --- a rebalance recommendation: the machine drains ----------------------------------------


def test_a_rebalance_recommendation_drains_the_machine() -> None:
    """Its queued tasks come back to the bag (a ``Cancel`` each, for its agent), it is
    given nothing new when its run ends, it is never kept again, and it goes at the
    end of its paid time; what it ran counts."""
    state = RunState.new([TypeSpec("a", 2.0, 4, 0.0, slots=1)], HOURLY, 100.0, 10, list(range(10)))
    controller = Controller()
    launch = next(a for a in controller.step(state, [], 0.0) if isinstance(a, Launch))
    for i in range(launch.count):
        controller.step(state, [MachineLaunched(f"m{i}", "a", launch.token)], 0.0)
    controller.step(state, [MachineReady("m0")], 0.0)
    m = state.fleet.machines["m0"]
    running = set(m.running)
    assert running
    state.apply(0.0, AssignGroup(tuple(list(state.tasks.pending)[:2]), "m0"))  # a group after
    queued = list(m.queue)
    assert len(queued) == 2
    actions = controller.step(state, [RebalanceRecommended("m0", "T")], 10.0)
    cancelled = [a.task for a in actions if isinstance(a, Cancel) and a.machine == "m0"]
    assert sorted(cancelled) == sorted(queued)
    assert not m.queue
    assert m.marked
    assert m.draining
    assert all(state.tasks.task_state[t] is TaskState.PENDING for t in queued)
    (tid,) = running
    actions = controller.step(state, [TaskDone(tid, "m0", 20.0)], 30.0)
    assert state.tasks.task_state[tid] is TaskState.DONE
    assert not [a for a in actions if getattr(a, "machine", None) == "m0"]
    assert not m.running
    actions = controller.step(state, [Tick()], 600.0)
    assert Mark("m0", release=False) not in actions
    assert m.alive
    assert not m.running
    actions = controller.step(state, [BoundaryNear("m0")], 3540.0)
    assert [a for a in actions if isinstance(a, Release) and a.machine == "m0"]


def test_a_draining_machine_in_a_deadline_run_is_given_no_late_work_and_no_new_unit() -> None:
    """Deadline mode: once its run ends, a machine its provider warned about receives
    none of the tasks the other machines would finish late (it received two), and at
    its boundary it goes instead of being paid another unit (it was extended)."""
    jobs = [JobSpec("j", 0, 12, 0.0, 3000.0, None, {"m": 600.0})]
    billing = BillingModel("fixed", 3600.0, 60.0, 300.0)
    state = RunState.new(
        [TypeSpec("m", 1.0, 10, 0.0)], billing, None, 12, list(range(12)), jobs=jobs
    )
    controller = DeadlineController(DeadlineSettings())
    ids = []
    for launch in [a for a in controller.step(state, [], 0.0) if isinstance(a, Launch)]:
        named = [f"m{len(ids) + i}" for i in range(launch.count)]
        ids += named
        controller.step(state, [MachineLaunched(n, launch.type, launch.token) for n in named], 0.0)
    controller.step(state, [MachineReady(n) for n in ids], 0.0)
    controller.step(state, [RebalanceRecommended("m0", "T")], 10.0)
    m0 = state.fleet.machines["m0"]
    assert m0.draining
    for tid in list(m0.running):
        controller.step(state, [TaskDone(tid, "m0", 590.0)], 600.0)
    assert not m0.running
    actions = controller.step(state, [Tick()], 1300.0)  # the others' tasks are now late
    assert not [a for a in actions if isinstance(a, Move) and a.target == "m0"]
    assert not m0.queue
    actions = controller.step(state, [BoundaryNear("m0")], 3550.0)
    assert [a for a in actions if isinstance(a, Release) and a.machine == "m0"]
    assert not [a for a in actions if isinstance(a, Extend) and a.machine == "m0"]


# --- bad values ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "named"),
    [
        (
            GOOD.replace("max_count: 10}", "max_count: 10, reclaim_per_hour: -0.1}", 1),
            "machine_types[0].reclaim_per_hour",
        ),
        (GOOD + "reclaims: {hold_after: 0}\n", "reclaims.hold_after"),
        (GOOD + "reclaims: {within_s: 0}\n", "reclaims.within_s"),
        (GOOD + "reclaims: {return_per_hour: -1}\n", "reclaims.return_per_hour"),
        (GOOD + "reclaims: {hold_afterr: 3}\n", "reclaims.hold_afterr: unknown field"),
    ],
)
def test_a_bad_reclaim_setting_is_named(tmp_path: Path, text: str, named: str) -> None:
    (said,) = problems(tmp_path, text)
    assert named in said


def test_the_benchmark_runs_each_rule_side_by_side(capsys: pytest.CaptureFixture[str]) -> None:
    from benchmarks.reclaims import RULES, main

    assert main(["--rates", "3", "--seeds", "1"]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| 3 |")]
    assert [row.split("|")[2].strip() for row in rows] == list(RULES)
    assert not [row for row in rows if "NOT" in row]  # every task done within budget
    price = rows[0].split("|")
    assert price[5].strip() == "0/1"  # pricing alone never holds

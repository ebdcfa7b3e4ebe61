"""The daemon's parts: which machines lost contact, what a launch's result means, and
how the machine lifecycle retries a provider that refuses."""

from __future__ import annotations

import itertools
import queue
import threading
import time
from collections.abc import Callable, Collection, Mapping, Sequence

import pytest
import structlog
from apscheduler.schedulers.background import BackgroundScheduler
from structlog.testing import capture_logs

from autoscaler.budget.controller import Controller
from autoscaler.core.actions import Assign
from autoscaler.core.billing import BillingModel
from autoscaler.core.errors import AutoscalerError
from autoscaler.core.leases import Timeline
from autoscaler.core.model import (
    Launch,
    LaunchFailed,
    MachineLaunched,
    MachineLost,
    MachineReady,
    MachineState,
    TaskDone,
    TaskState,
    TypeSpec,
)
from autoscaler.core.reclaims import ReclaimHold
from autoscaler.core.state import Machine, RunState
from autoscaler.providers.base import (
    Capabilities,
    MachineRecord,
    MachineStatus,
    PartialLaunch,
    ProviderState,
)
from autoscaler.run.agents import (
    HEARTBEATS_PER_S,
    describe_s,
    heartbeat_s,
    lost_after_s,
    lost_contact,
    report_s,
    stretch_from,
)
from autoscaler.run.assemble import controller_settings, new_state
from autoscaler.run.carry_out import SCANS_PER_LIMIT, Executor
from autoscaler.run.dispatch import Dispatcher
from autoscaler.run.giveup import UNSEEN_REASON
from autoscaler.run.machines import LaunchDone, MachineLifecycle, launch_events
from autoscaler.run.owner import step_order
from autoscaler.run.timers import Timers
from tests.conftest import make_config

CFG = make_config(daemon={"heartbeat_s": 2.0, "lost_after_s": 10.0})
SLOW = TypeSpec("slow", 1.0, 10, 60.0)


class Log:
    """Takes log calls (the functions log a launch failure); asserts nothing itself."""

    def warning(self, event: str, **fields: object) -> None:
        self.last = (event, fields)


def machine(mid: str, state: MachineState) -> Machine:
    return Machine(mid, SLOW, "L1", launched_at=0.0, paid_until=3600.0, state=state)


def test_a_ready_machine_is_lost_once_silent_for_longer_than_lost_after() -> None:
    ready = machine("m", MachineState.READY)
    since, seen = {"m": 100.0}, {"m": 150.0}
    assert lost_contact([ready], since, seen, mono=160.0, cfg=CFG) == []
    assert lost_contact([ready], since, seen, mono=160.5, cfg=CFG) == [
        MachineLost("m", "no contact for 10s")
    ]


def test_a_booting_machine_has_its_boot_time_before_it_is_lost() -> None:
    booting = machine("m", MachineState.BOOTING)
    since: dict[str, float] = {"m": 100.0}
    assert lost_contact([booting], since, {}, mono=100.0 + 60.0 + 10.0, cfg=CFG) == []
    assert lost_contact([booting], since, {}, mono=100.0 + 60.0 + 10.5, cfg=CFG) == [
        MachineLost("m", "never reported in")
    ]


def test_past_the_stretch_a_busy_agents_results_ride_on_its_heartbeat() -> None:
    """Up to the fleet where the heartbeat stretches, results wait ``report_s``; past it
    they wait for the heartbeat, and the group horizon stretches from the same fleet."""
    d = CFG.daemon
    at = stretch_from(d)
    assert at == HEARTBEATS_PER_S * d.heartbeat_s
    assert report_s(d, 1) == report_s(d, int(at)) == d.report_s
    assert report_s(d, int(at) + 1) == heartbeat_s(d, int(at) + 1) > d.heartbeat_s
    assert report_s(d, 5 * int(at)) == 5 * d.heartbeat_s
    slow = d.model_copy(update={"report_s": 60.0})
    assert report_s(slow, 5 * int(at)) == 60.0  # never shorter than the config's


def test_a_machine_the_daemon_does_not_track_is_not_judged() -> None:
    assert lost_contact([machine("m", MachineState.READY)], {}, {}, mono=1e9, cfg=CFG) == []


def test_a_large_fleet_is_asked_to_report_less_often_and_judged_by_it() -> None:
    d = CFG.daemon  # heartbeat 2 s, lost after 10 s
    small = int(HEARTBEATS_PER_S * d.heartbeat_s)
    assert heartbeat_s(d, small) == d.heartbeat_s
    assert lost_after_s(d, small) == d.lost_after_s
    big = 4 * small
    assert heartbeat_s(d, big) == 4 * d.heartbeat_s  # the fleet's heartbeats a second hold
    assert big / heartbeat_s(d, big) == HEARTBEATS_PER_S
    assert lost_after_s(d, big) == 4 * d.lost_after_s  # as many missed reports as before
    fleet = [machine(f"m{i}", MachineState.READY) for i in range(big)]
    since = {m.id: 0.0 for m in fleet}
    seen = {m.id: 100.0 for m in fleet}
    seen["m0"] = 100.0 - 3 * d.lost_after_s  # silent 3× the small fleet's limit: kept
    seen["m1"] = 100.0 - 5 * d.lost_after_s  # silent past 4×: lost
    assert lost_contact(fleet, since, seen, mono=100.0, cfg=CFG) == [
        MachineLost("m1", "no contact for 50s")
    ]


def first_launch() -> tuple[RunState, Launch]:
    """A fresh run after its first step: the controller's first launch is pending."""
    state = new_state(CFG, 100, 1)
    actions = Controller(controller_settings(CFG)).step(state, [], 0.0)
    launch = next(a for a in actions if isinstance(a, Launch) and a.count >= 2)
    return state, launch


def test_a_launch_that_started_its_machines_reports_them() -> None:
    state, launch = first_launch()
    t, token = launch.type, launch.token
    records = tuple(MachineRecord(f"m{i}", t, token, 5.0 + i) for i in range(launch.count))
    done = LaunchDone(launch, records, None)
    assert launch_events(done, state, CFG, now=7.0, log=Log()) == [
        MachineLaunched(f"m{i}", t, token, at=5.0 + i) for i in range(launch.count)
    ]


def test_a_throttled_launch_holds_scale_up_and_counts_what_is_missing() -> None:
    state, launch = first_launch()
    t, token = launch.type, launch.token
    records = (MachineRecord("a", t, token, 5.0),)
    done = LaunchDone(launch, records, "slow down", "Throttling", True)
    events = launch_events(done, state, CFG, now=7.0, log=Log())
    assert events == [
        MachineLaunched("a", t, token, at=5.0),
        LaunchFailed(token, t, launch.count - 1, "slow down", "throttled", 7.0 + 60.0),
    ]


def test_the_result_of_a_launch_no_longer_pending_is_ignored() -> None:
    state = new_state(CFG, 10, 1)
    done = LaunchDone(Launch("slow", 1, "L9"), (MachineRecord("a", "slow", "L9", 0.0),), None)
    assert launch_events(done, state, CFG, now=0.0, log=Log()) == []


# --- retries: a provider that refuses ---------------------------------------------------------


class Refusing:
    """A provider whose ``terminate`` and ``describe`` refuse (throttled) a given number
    of times, then work; it counts the calls and keeps ``up`` machines."""

    status_polling_interval = 0.0

    def __init__(self, refusals: int, up: Sequence[str] = (), terminate_refusals: int = 0):
        self.capabilities = Capabilities(BillingModel("fixed", 3600.0))
        self.refusals = refusals  # describe's
        self.terminate_refusals = terminate_refusals
        self.up = list(up)
        self.terminated: list[list[str]] = []
        self.terminate_calls = 0
        self.refused = threading.Event()  # set at the first refusal of terminate

    def launch(
        self, type: str, count: int, token: str, tags: Mapping[str, str]
    ) -> list[MachineRecord]:
        return []

    def describe(self, ids: Sequence[str] | None = None) -> list[MachineStatus]:
        if self.refusals > 0:
            self.refusals -= 1
            raise AutoscalerError("Throttling", retryable=True, code="Throttling")
        return [MachineStatus(i, "slow", ProviderState.RUNNING) for i in self.up]

    def terminate(self, ids: Sequence[str], *, now: bool = False) -> list[str]:
        self.terminate_calls += 1
        if self.terminate_refusals != 0:
            self.terminate_refusals -= 1
            self.refused.set()
            raise AutoscalerError("Throttling", retryable=True, code="Throttling")
        self.terminated.append(list(ids))
        self.up = [i for i in self.up if i not in ids]
        return list(ids)


def lifecycle(provider: Refusing, watched: Callable[[], list[str]] = list) -> MachineLifecycle:
    return MachineLifecycle(
        CFG,
        provider,
        None,
        queue.SimpleQueue(),
        BackgroundScheduler(),
        structlog.get_logger(),
        watched=watched,
        gone=set(),
    )


class Partial(Refusing):
    """A provider that starts one machine of each launch, in a zone, and is refused the
    rest for capacity (EC2 when every pool refused what one pool could not take)."""

    def __init__(self) -> None:
        super().__init__(0)

    def launch(
        self, type: str, count: int, token: str, tags: Mapping[str, str]
    ) -> list[MachineRecord]:
        started = [MachineRecord("a", type, token, 5.0, zone="us-east-1a")]
        message = f"{count - 1} refused: InsufficientInstanceCapacity"
        raise PartialLaunch(started, message, code="InsufficientInstanceCapacity")


def test_a_launch_refused_in_part_owns_what_started_and_learns_the_refusal() -> None:
    state, launch = first_launch()
    machines = lifecycle(Partial())
    done = machines.launch_now(launch)
    machines.shutdown()
    assert [r.id for r in done.records] == ["a"]
    launched, failed = launch_events(done, state, CFG, now=7.0, log=Log())
    assert launched == MachineLaunched("a", launch.type, launch.token, at=5.0, zone="us-east-1a")
    assert isinstance(failed, LaunchFailed)
    assert (failed.count, failed.kind) == (launch.count - 1, "capacity")


def test_a_refused_terminate_is_tried_again_and_each_refusal_logged() -> None:
    provider = Refusing(0, up=["m1"], terminate_refusals=1)
    machines = lifecycle(provider)
    with capture_logs() as logs:
        machines.end("m1")
        machines.shutdown()
    assert provider.terminated == [["m1"]]
    failed = [e for e in logs if e["event"] == "terminate failed"]
    assert [(e["machine"], e["attempt"]) for e in failed] == [("m1", 1)]
    assert "Throttling" in failed[0]["error"]
    assert not [e for e in logs if e["log_level"] == "error"]


def test_the_end_of_the_run_stops_the_retries_of_a_terminate() -> None:
    provider = Refusing(0, terminate_refusals=-1)  # refuses every time
    machines = lifecycle(provider)
    with capture_logs() as logs:
        machines.end("m1")
        provider.refused.wait()
        machines.wind_down(lambda: False, lambda: None)  # nothing left to terminate
        machines.shutdown()
    assert provider.terminate_calls == 1
    assert not [e for e in logs if e["event"].startswith("terminate kept failing")]


def test_machines_left_at_the_end_are_terminated_after_a_refused_describe() -> None:
    provider = Refusing(1, up=["m1", "m2"])
    with capture_logs() as logs:
        lifecycle(provider).terminate_leftovers()
    assert provider.terminated == [["m1", "m2"]]
    events = [(e["event"], e.get("attempt")) for e in logs]
    assert events == [
        ("end-of-run terminate failed", 1),
        ("terminating machines left at the end", None),
    ]


# --- the watch of a large fleet -----------------------------------------------------------------


class Counting(Refusing):
    """A provider that keeps when each describe came, and of how many machines."""

    status_polling_interval = 0.2

    def __init__(self) -> None:
        super().__init__(0)
        self.looks: list[tuple[float, int]] = []

    def describe(self, ids: Sequence[str] | None = None) -> list[MachineStatus]:
        self.looks.append((time.monotonic(), len(ids or ())))
        return super().describe(ids)


@pytest.mark.parametrize("machines", [10, 5_000])
def test_a_fleet_past_the_stretch_is_described_less_often(machines: int) -> None:
    """The describe job comes at the provider's interval; past the fleet where the
    heartbeat stretches, a look is skipped until the stretched interval has passed."""
    provider = Counting()
    base = provider.status_polling_interval
    every = describe_s(CFG.daemon, base, machines)
    assert (every > base) is (machines > stretch_from(CFG.daemon))
    ids = [f"m{i}" for i in range(machines)]
    watch = lifecycle(provider, lambda: ids)
    try:
        start = time.monotonic()
        while time.monotonic() - start < every + 2 * base:  # the job, once an interval
            watch.describe_soon()
            time.sleep(base)
    finally:
        watch.shutdown()
    times = [at for at, n in provider.looks if n == machines]
    assert len(times) == len(provider.looks) >= 2  # looked at again once its interval passed
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert min(gaps) >= every - base / 2


# --- health checks that queued up ------------------------------------------------------------


def test_health_checks_queued_up_in_one_step_lose_each_silent_machine_once() -> None:
    """A busy loop takes several queued health checks in one step: each silent machine is
    lost once, and one already found gone in the step (its provider said so) not again."""
    state, launch = first_launch()
    for i in range(2):
        state.apply(1.0, MachineLaunched(f"m{i}", launch.type, launch.token, at=1.0))
    dispatcher = Dispatcher("token", queue.SimpleQueue())
    dispatcher.start()  # (its close waits for it to have served)
    try:
        since = {"m0": 0.0, "m1": 0.0}  # launched at monotonic 0: long silent by now
        scheduler = BackgroundScheduler()
        timers = Timers(scheduler, lambda item: None, Timeline(0.0, 0.0, 1.0), 0.0)
        executor = Executor(lifecycle(Refusing(0)), dispatcher, timers, Log(), since)
        gone = {"m1"}
        first = executor.health(state, CFG, gone)
        again = executor.health(state, CFG, gone)
    finally:
        dispatcher.close()
    assert [e.machine for e in first] == ["m0"]
    assert again == []
    assert gone == {"m0", "m1"}


def test_a_health_check_looks_at_the_fleet_at_most_twenty_times_in_its_silence_limit() -> None:
    """Every machine is looked at in a check: checks due every 0.25 s are done only once
    a twentieth of ``lost_after_s`` has passed since the last one."""
    state, launch = first_launch()
    state.apply(1.0, MachineLaunched("m0", launch.type, launch.token, at=1.0))
    dispatcher = Dispatcher("token", queue.SimpleQueue())
    dispatcher.start()
    try:
        scheduler = BackgroundScheduler()
        timers = Timers(scheduler, lambda item: None, Timeline(0.0, 0.0, 1.0), 0.0)
        executor = Executor(lifecycle(Refusing(0)), dispatcher, timers, Log(), {"m0": 0.0})
        first = executor.health(state, CFG, set())
        soon = executor.health(state, CFG, set())  # m0 still silent: not looked at yet
        executor._scanned -= CFG.daemon.lost_after_s / SCANS_PER_LIMIT  # that long later
        later = executor.health(state, CFG, set())
    finally:
        dispatcher.close()
    assert [e.machine for e in first] == ["m0"]
    assert soon == []
    assert [e.machine for e in later] == ["m0"]


class Recording(Refusing):
    """A provider that starts nothing and keeps each launch's zones to avoid."""

    def __init__(self) -> None:
        super().__init__(0)
        self.avoided: list[tuple[str, ...]] = []

    def launch(
        self,
        type: str,
        count: int,
        token: str,
        tags: Mapping[str, str],
        *,
        avoid_zones: Collection[str] = (),
    ) -> list[MachineRecord]:
        self.avoided.append(tuple(avoid_zones))
        return []


def test_a_launch_of_a_type_with_a_zone_held_after_reclaims_asks_the_provider_to_avoid_it() -> None:
    state, launch = first_launch()
    state.capacity.reclaims.holds.append(ReclaimHold(launch.type, 0.0, 3600.0, 3, "zone-a"))
    state.capacity.reclaims.holds.append(ReclaimHold("other", 0.0, 3600.0, 3, "zone-b"))
    provider = Recording()
    dispatcher = Dispatcher("token", queue.SimpleQueue())
    dispatcher.start()
    try:
        scheduler = BackgroundScheduler()
        timers = Timers(scheduler, lambda item: None, Timeline(0.0, 0.0, 1.0), 0.0)
        executor = Executor(lifecycle(provider), dispatcher, timers, structlog.get_logger(), {})
        executor.apply(state, [], [launch])
        executor.lifecycle.shutdown()
    finally:
        dispatcher.close()
    assert provider.avoided == [("zone-a",)]


class Telling(Refusing):
    """A batch scheduler that knows why a job never ran (a job in Eqw)."""

    def __init__(self, reason: str | None):
        super().__init__(0)
        self.reason = reason
        self.asked: list[list[str]] = []

    def describe(self, ids: Sequence[str] | None = None) -> list[MachineStatus]:
        self.asked.append(list(ids or []))
        return [
            MachineStatus(i, "slow", ProviderState.PENDING, reason=self.reason) for i in ids or []
        ]


@pytest.mark.parametrize("reason", ["sge job 7: Eqw, error: can't open output file", None])
def test_a_machine_that_never_reported_in_is_lost_with_what_its_provider_says(
    reason: str | None,
) -> None:
    """A host too busy to read the scheduler before a machine's boot limit passed lost a
    Grid Engine job in Eqw as "never reported in", and its type was given up without
    the scheduler's reason (test_batch_unready, seen in CI on a loaded host)."""
    state, launch = first_launch()
    state.apply(1.0, MachineLaunched("m0", launch.type, launch.token, at=1.0))
    dispatcher = Dispatcher("token", queue.SimpleQueue())
    dispatcher.start()
    provider = Telling(reason)
    try:
        scheduler = BackgroundScheduler()
        timers = Timers(scheduler, lambda item: None, Timeline(0.0, 0.0, 1.0), 0.0)
        executor = Executor(lifecycle(provider), dispatcher, timers, Log(), {"m0": 0.0})
        (lost,) = executor.health(state, CFG, set())
    finally:
        dispatcher.close()
    assert provider.asked == [["m0"]]
    said = UNSEEN_REASON if reason is None else f"{UNSEEN_REASON}; {reason}"
    assert lost == MachineLost("m0", said)


# --- a result and its machine's loss in one step ---------------------------------------------


def test_a_result_heard_in_the_step_that_loses_its_machine_counts_and_is_not_run_again() -> None:
    """The step's events came in the order the daemon's queue held them: a health check
    (or the provider's word) before a poll carrying the machine's last result. The loss,
    taken first, put the task back in the bag, and the result was journaled but ignored:
    the task ran twice. In ``step_order`` the result counts, then the machine goes; and
    the fold now counts it in either order (``core.state``: a lost machine's runs may
    still end there)."""
    came = [MachineLost("m0", "no contact for 12s"), TaskDone(0, "m0", 30.0)]
    outcomes = {}
    for name, events in (("as queued", came), ("step_order", step_order(came))):
        state, launch = first_launch()
        state.apply(1.0, MachineLaunched("m0", launch.type, launch.token, at=1.0))
        state.apply(2.0, MachineReady("m0"))
        state.apply(2.0, Assign(0, "m0"))
        for e in events:
            state.apply(40.0, e)
        outcomes[name] = (state.tasks.task_state[0], 0 in state.tasks.pending)
    assert outcomes["as queued"] == (TaskState.DONE, False)  # was (PENDING, True): run again
    assert outcomes["step_order"] == (TaskState.DONE, False)
    ready = [MachineLost("m1", "x"), TaskDone(1, "m2", 3.0), MachineReady("m2")]
    assert step_order(ready) == [ready[2], ready[1], ready[0]]

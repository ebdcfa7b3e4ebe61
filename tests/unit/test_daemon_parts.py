"""The daemon's pure parts: which machines lost contact, what a launch's result means."""

from __future__ import annotations

from autoscaler.budget.controller import Controller
from autoscaler.core.model import (
    Launch,
    LaunchFailed,
    MachineLaunched,
    MachineLost,
    MachineState,
    TypeSpec,
)
from autoscaler.core.state import Machine, RunState
from autoscaler.providers.base import MachineRecord
from autoscaler.run.agents import lost_contact
from autoscaler.run.machines import LaunchDone, launch_events
from autoscaler.run.start import controller_settings, new_state
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


def test_a_machine_the_daemon_does_not_track_is_not_judged() -> None:
    assert lost_contact([machine("m", MachineState.READY)], {}, {}, mono=1e9, cfg=CFG) == []


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

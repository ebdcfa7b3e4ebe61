"""Types given up (``autoscaler.run.giveup``): machines that end before their agent is
ready, a few in a row, give their type up as failing set-ups do; the controllers plan
without it and stop, saying why, when no type is left, on a real run state."""

from __future__ import annotations

from typing import Any

import pytest
import structlog

from autoscaler.core.model import (
    NEVER,
    Event,
    Launch,
    LaunchFailed,
    MachineLaunched,
    MachineLost,
    MachineReady,
    Stop,
)
from autoscaler.core.state import RunState
from autoscaler.run.assemble import make_controller, new_state
from autoscaler.run.giveup import UNREADY_MAX, unready_give_ups
from tests.conftest import make_config

LOG = structlog.get_logger()
ENDED = "machine ended: slurm job 69: FAILED (JobLaunchFailure); its log x.log was never written"


def booting(n: int) -> RunState:
    """A state with ``n`` machines of type ``slow`` launched, none ready."""
    state = new_state(make_config(), 100, 1)
    state.apply(0.0, Launch("slow", n, "tok"))
    for i in range(n):
        state.apply(0.0, MachineLaunched(f"m{i}", "slow", "tok"))
    return state


def step(state: RunState, now: float, events: list[Event]) -> list[LaunchFailed]:
    """What the daemon adds to a step's events; the step applied."""
    given = unready_give_ups(state, events, LOG)
    for event in [*given, *events]:
        state.apply(now, event)
    return given


def test_machines_ending_before_ready_give_their_type_up_at_the_third_in_a_row() -> None:
    state = booting(5)
    assert step(state, 1.0, [MachineLost("m0", ENDED)]) == []
    assert step(state, 2.0, [MachineLost("m1", "bootstrap failed: no SSH")]) == []
    (given,) = step(state, 3.0, [MachineLost("m2", "never reported in")])
    assert (given.type, given.kind, given.until, given.count) == ("slow", "unready", NEVER, 0)
    assert given.reason == (  # the last silence says nothing: the last words before it
        f"{UNREADY_MAX} machines of slow in a row ended before their agent was ready; "
        "last: bootstrap failed: no SSH"
    )
    assert state.capacity.given_up("slow")
    assert not state.capacity.given_up("fast")
    assert not state.capacity.launchable("slow", 1e9)
    assert step(state, 4.0, [MachineLost("m3", ENDED)]) == []  # said once


def test_losses_in_one_step_count_together() -> None:
    state = booting(3)
    given = step(state, 1.0, [MachineLost(f"m{i}", ENDED) for i in range(3)])
    assert [(g.type, g.kind) for g in given] == [("slow", "unready")]
    assert given[0].reason.endswith(f"last: {ENDED}")


def test_a_streak_of_silences_names_the_last_of_them() -> None:
    state = booting(3)
    losses = [MachineLost(f"m{i}", "never reported in") for i in range(3)]
    (given,) = step(state, 1.0, losses)
    assert given.reason.endswith("; last: never reported in")


def test_a_machine_that_came_up_starts_the_count_again() -> None:
    state = booting(6)
    step(state, 1.0, [MachineLost("m0", ENDED), MachineLost("m1", ENDED)])
    step(state, 2.0, [MachineReady("m2")])
    assert step(state, 3.0, [MachineLost("m3", ENDED), MachineLost("m4", ENDED)]) == []
    assert len(step(state, 4.0, [MachineLost("m5", ENDED)])) == 1


@pytest.mark.parametrize(
    "reason",
    [
        "never started: queued for 21s",  # a busy cluster, not a broken type
        "set-up failed: exit 3",  # counted by setup_failures_max
        "ended while the daemon was down",
        "interruption notice (terminate at 12:00)",
    ],
)
def test_losses_of_other_causes_do_not_count(reason: str) -> None:
    state = booting(4)
    assert step(state, 1.0, [MachineLost(f"m{i}", reason) for i in range(4)]) == []


def test_a_machine_ready_in_the_same_step_does_not_count() -> None:
    state = booting(3)
    step(state, 1.0, [MachineLost("m0", ENDED), MachineLost("m1", ENDED)])
    events: list[Event] = [MachineReady("m2"), MachineLost("m2", "no contact for 9s")]
    assert step(state, 2.0, events) == []


@pytest.mark.parametrize(
    "constraint",
    [
        {"constraint": {"budget": 100.0}},
        {"constraint": {"deadline_s": 36000}},
    ],
)
def test_a_run_with_every_type_given_up_stops_saying_why(constraint: dict[str, Any]) -> None:
    cfg = make_config(**constraint)
    state = new_state(cfg, 100, 1)
    controller = make_controller(cfg)
    actions = controller.step(state, [], 0.0)
    launches = [a for a in actions if isinstance(a, Launch)]
    assert {a.type for a in launches} == {"slow", "fast"}
    machines = [(f"{a.type}-{i}", a) for a in launches for i in range(a.count)]
    controller.step(state, [MachineLaunched(m, a.type, a.token) for m, a in machines], 1.0)
    committed = state.money.committed
    lost: list[Event] = [MachineLost(m, ENDED) for m, _ in machines]
    events = [*unready_give_ups(state, lost, LOG), *lost]
    actions = controller.step(state, events, 2.0)
    assert not any(isinstance(a, Launch) for a in actions)
    (stop,) = [a for a in actions if isinstance(a, Stop)]
    assert stop.reason is not None
    assert stop.reason.startswith("every machine type was given up, 100 tasks left (slow: ")
    assert "ended before their agent was ready" in stop.reason
    assert state.money.stopped
    assert state.money.committed <= committed

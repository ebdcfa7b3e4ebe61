"""Machine types given up: a type whose machines keep failing before they run a task is
not bought again, and the run goes on without it.

Two failures count. A set-up that fails (``setup_failures_max`` machines of a type;
``Agents`` reads the agents' reports), and a machine that ends before its agent was
ever ready, ``UNREADY_MAX`` in a row since the type's last machine that came up: a
batch job the scheduler could not start (its log path unwritable, its working directory
missing on the node, a partition or queue it may not use), an instance whose agent
never came up. Either gives the type up the same way, a ``LaunchFailed`` of its kind
until ``NEVER``: the state avoids the type for good (``Capacity.given_up``), the
controllers plan without it, and stop, saying why, once no type is left
(``Capacity.none_left``), instead of buying machine after machine that never starts.

A machine the scheduler still queues when the daemon stops waiting for it does not
count: a busy cluster is not a broken type (``lost_contact`` names it apart).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from autoscaler.core.model import (
    GIVEN_UP_KINDS,
    NEVER,
    Event,
    LaunchFailed,
    MachineLost,
    MachineReady,
    MachineState,
)
from autoscaler.core.state import Machine, RunState

UNREADY_MAX = 3
"""Machines of a type that end in a row before their agent is ready: the type is given up."""

ENDED_REASON = "machine ended"
"""How ``MachineLost`` names a machine its provider reports ended (its words follow)."""
UNSEEN_REASON = "never reported in"
"""...a machine up (or of a provider that cannot tell) whose agent never reported in."""
BOOT_REASON = "bootstrap failed"
"""...a machine whose agent could not be started over SSH."""
QUEUED_REASON = "never started"
"""...a machine its provider still queued when the daemon stopped waiting (not counted)."""

_UNREADY_CAUSES = (ENDED_REASON, UNSEEN_REASON, BOOT_REASON)


def give_up(type_name: str, kind: str, why: str, log: Any) -> LaunchFailed:
    """Type ``type_name`` given up for ``why``: the event that says so (``kind``: one of
    ``GIVEN_UP_KINDS``), logged."""
    log.error("type given up", machine_type=type_name, kind=kind, reason=why)
    return LaunchFailed("", type_name, 0, why, kind, until=NEVER)


def _unready_cause(reason: str) -> bool:
    return reason.startswith(_UNREADY_CAUSES)


def _ended_unready(m: Machine) -> bool:
    """Whether ``m`` was lost before its agent was ever ready, for a cause of its own."""
    reason = (m.end_reason or "").removeprefix("lost: ")
    return not m.alive and m.ready_at is None and _unready_cause(reason)


def _telling(streak: Sequence[Machine], lost: dict[str, str]) -> str:
    """Why the streak's last machine ended, or, when it only fell silent, the last that
    has its provider's words (a batch job's state, its log's tail): on a busy host the
    silence can be noticed before the scheduler lists the job's end, and the user wants
    what the scheduler said."""
    reasons = [lost.get(m.id) or (m.end_reason or "").removeprefix("lost: ") for m in streak]
    told = [r for r in reasons if r not in _UNREADY_CAUSES]
    return (told or reasons)[-1]


def unready_give_ups(state: RunState, events: Sequence[Event], log: Any) -> list[LaunchFailed]:
    """The types that ``events`` (a step's, not yet applied) give up: those whose
    machines lost in them, before their agents were ready, make ``UNREADY_MAX`` in a row
    with the machines of the type that ended so since one last came up."""
    if not any(issubclass(kind, MachineLost) for kind in set(map(type, events))):
        return []  # most steps: no machine lost, nothing given up
    lost: dict[str, str] = {}
    ready = {e.machine for e in events if isinstance(e, MachineReady)}
    for event in events:
        if isinstance(event, MachineLost) and _unready_cause(event.reason):
            m = state.fleet.machines.get(event.machine)
            booting = m is not None and m.alive and m.state is MachineState.BOOTING
            if booting and event.machine not in ready:
                lost[event.machine] = event.reason
    given = {e.type for e in events if isinstance(e, LaunchFailed) and e.kind in GIVEN_UP_KINDS}
    out: list[LaunchFailed] = []
    for type_name in dict.fromkeys(state.fleet.machines[mid].type.name for mid in lost):
        if type_name in given or state.capacity.given_up(type_name):
            continue
        mine = [m for m in state.fleet.machines.values() if m.type.name == type_name]
        came_up = max((m.ready_at for m in mine if m.ready_at is not None), default=-1.0)
        streak = [
            m
            for m in mine
            if m.id in lost or (_ended_unready(m) and (m.ended_at or 0.0) >= came_up)
        ]
        if len(streak) >= UNREADY_MAX:
            why = (
                f"{len(streak)} machines of {type_name} in a row ended before their agent "
                f"was ready; last: {_telling(streak, lost)}"
            )
            out.append(give_up(type_name, "unready", why[:1000], log))
    return out

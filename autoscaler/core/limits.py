"""What a run may still take from each provider: machines at once (a quota) and machine
time (a cluster's allocation), across the provider's machine types (``providers:`` in a
config). The planners take these as constraints; the state says what is used."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from autoscaler.core.records import Machine
from autoscaler.core.state import RunState


@dataclass(frozen=True, slots=True)
class Room:
    """What is left of one provider's limits at a moment, and the types it covers."""

    types: tuple[str, ...]
    machines: int | None  # machines that may be alive at once (live ones included)
    seconds: float | None  # machine seconds not yet committed (paid time counts whole)

    def machines_for(self, unit_s: float) -> int | None:
        """Machines at once that fit: the quota, and the machine time for one unit each."""
        by_time = None if self.seconds is None else math.floor(self.seconds / unit_s + 1e-9)
        if self.machines is None:
            return by_time
        return self.machines if by_time is None else min(self.machines, by_time)


def rooms(state: RunState) -> list[Room]:
    """The room left under each limited provider of the run (``state.limits``)."""
    out = []
    for limit in state.limits:
        if limit.max_machines is None and limit.machine_s is None:
            continue
        types = tuple(n for n, t in state.types.items() if t.provider == limit.name)
        used = sum(
            m.paid_until - m.launched_at for m in state.machines.values() if m.type.name in types
        )
        seconds = None if limit.machine_s is None else max(0.0, limit.machine_s - used)
        out.append(Room(types, limit.max_machines, seconds))
    return out


def apportion(room: Room, wanted: Mapping[str, int], unit_s: float) -> dict[str, int]:
    """Per type of ``room``, a cap on its machines such that the caps together stay within
    the room: the room shared in proportion to ``wanted`` (each type's own maximum)."""
    total = room.machines_for(unit_s)
    asked = {t: max(0, wanted.get(t, 0)) for t in room.types}
    if total is None or sum(asked.values()) <= total:
        return asked
    weight = sum(asked.values())
    caps = {t: math.floor(total * n / weight) for t, n in asked.items()}
    for t in sorted(asked, key=lambda t: -asked[t]):  # what flooring left, to the largest
        if sum(caps.values()) >= total:
            break
        if caps[t] < asked[t]:
            caps[t] += 1
    return caps


def new_caps(state: RunState) -> dict[str, int]:
    """Per machine type, how many new machines may be launched now: its own maximum less
    its live machines and launches in flight, with each limited provider's room (less
    those, and the machine time for one unit each) shared among its types in proportion
    to that."""
    flying = dict.fromkeys(state.types, 0)
    for name, count in state.pending_launches.values():
        flying[name] = flying.get(name, 0) + count
    caps = {n: max(0, t.max_count - state.count_alive(n)) for n, t in state.types.items()}
    unit_s = state.billing.first_step_s
    for room in rooms(state):
        used = sum(state.count_alive(n) for n in room.types)  # launches in flight too
        seconds = (
            None
            if room.seconds is None
            else room.seconds - sum(flying[n] for n in room.types) * unit_s
        )
        left = Room(
            room.types,
            None if room.machines is None else max(0, room.machines - used),
            None if seconds is None else max(0.0, seconds),
        )
        caps.update(apportion(left, caps, unit_s))
    return caps


def may_extend(state: RunState, m: Machine) -> bool:
    """Whether ``m`` may be paid its next step: it would outlive no time limit of its
    type (a batch job's), and its provider has the machine time (``machine_hours``)."""
    return no_extension(state, m) is None


def no_extension(state: RunState, m: Machine) -> str | None:
    """Why ``m`` may not be paid its next step whatever the budget (None: it may)."""
    life = m.type.max_life_s
    if life is not None and m.paid_until + state.billing.step_s - m.launched_at > life + 1e-6:
        return "its time limit at the provider ends"
    for room in rooms(state):
        seconds = room.seconds
        if m.type.name in room.types and seconds is not None and seconds < state.billing.step_s:
            return f"its provider's machine hours are used ({m.type.provider})"
    return None

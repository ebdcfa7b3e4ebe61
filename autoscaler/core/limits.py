"""What a run may still take from each provider: machines at once (a quota) and machine
time (a cluster's allocation), across the provider's machine types (``providers:`` in a
config). The planners take these as constraints; the state says what is used. A run
that a service runs beside other jobs has a quota too (``QuotaSet``): what the others
leave of the types' and providers' limits, which are the account's, not the run's."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from autoscaler.core.machine_ledger import Machine
from autoscaler.core.model import QuotaSet
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


def max_alive(state: RunState, type_name: str) -> int:
    """How many machines of ``type_name`` the run may have at once: its ``max_count``,
    or less where a service's quota leaves it less."""
    most = state.types[type_name].max_count
    quota = state.capacity.quota
    if quota is None:
        return most
    return max(0, min(most, quota.types.get(type_name, most)))


def quota_grew(state: RunState, old: QuotaSet | None, new: QuotaSet) -> bool:
    """Whether quota ``new`` leaves the run room for more machines than ``old`` did, of
    some type or provider (``None``: no quota, the limits' own)."""

    def most(q: QuotaSet | None, table: str, name: str, own: int | None) -> float:
        given = None if q is None else getattr(q, table).get(name)
        bound = math.inf if own is None else own
        return bound if given is None else min(bound, given)

    return any(
        most(new, "types", n, t.max_count) > most(old, "types", n, t.max_count)
        for n, t in state.types.items()
    ) or any(
        most(new, "providers", p.name, p.max_machines)
        > most(old, "providers", p.name, p.max_machines)
        for p in state.capacity.limits
    )


def quota_bound(state: RunState, type_name: str) -> bool:
    """Whether the service's quota, not the type's own maximum, keeps the run from more
    machines of ``type_name``: its launches wait for other jobs to free some."""
    quota = state.capacity.quota
    if quota is None:
        return False
    if max_alive(state, type_name) < state.types[type_name].max_count:
        return True
    provider = state.types[type_name].provider
    return provider in quota.providers and any(
        limit.name == provider
        and limit.max_machines is not None
        and quota.providers[provider] < limit.max_machines
        for limit in state.capacity.limits
    )


def rooms(state: RunState) -> list[Room]:
    """The room left under each limited provider of the run (``state.limits``; its
    machines at once as the service's quota leaves them, if it has one)."""
    out = []
    quota = state.capacity.quota.providers if state.capacity.quota is not None else {}
    for limit in state.capacity.limits:
        if limit.max_machines is None and limit.machine_s is None:
            continue
        types = tuple(n for n, t in state.types.items() if t.provider == limit.name)
        used = sum(
            m.paid_until - m.launched_at
            for m in state.fleet.machines.values()
            if m.type.name in types
        )
        seconds = None if limit.machine_s is None else max(0.0, limit.machine_s - used)
        machines = limit.max_machines
        if machines is not None and limit.name in quota:
            machines = max(0, min(machines, quota[limit.name]))
        out.append(Room(types, machines, seconds))
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
    for name, count in state.fleet.pending_launches.values():
        flying[name] = flying.get(name, 0) + count
    caps = {n: max(0, max_alive(state, n) - state.fleet.count_alive(n)) for n in state.types}
    unit_s = state.billing.first_step_s
    for room in rooms(state):
        used = sum(state.fleet.count_alive(n) for n in room.types)  # launches in flight too
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


def quota_waits(state: RunState) -> dict[str, int]:
    """Machines per type the run's configuration wants and does not have because other
    jobs of the service hold them (``quota_bound``)."""
    if state.capacity.quota is None or state.money.stopped or state.money.awaiting_budget:
        return {}
    alive = state.fleet.alive_counts(include_marked=False)
    out = {}
    for name, want in state.decisions.target.items():
        short = want - alive.get(name, 0)
        if short > 0 and quota_bound(state, name):
            out[name] = short
    return out

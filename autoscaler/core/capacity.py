"""What a run may buy and when: the providers' limits and a service's quota, the types
avoided after a refused launch (and their recovery), holds on scale-up, and the refused
launches for the report."""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field

from autoscaler.core.model import GIVEN_UP_KINDS, NEVER, LaunchFailed, ProviderLimit, QuotaSet
from autoscaler.core.reclaims import Loss, Pool, ReclaimHold, Reclaims
from autoscaler.core.words import counted

RECOVERING_WEIGHT = 0.5
"""What a type counts in a plan the moment its avoidance after a refused launch ends."""


@dataclass
class Capacity:
    limits: tuple[ProviderLimit, ...] = ()  # per provider: machines at once, machine time
    unavailable: dict[str, float] = field(default_factory=dict)  # type -> avoided until
    hold_until: float | None = None  # throttled (or a limit of no named types): no scale-up
    held_until: dict[str, float] = field(default_factory=dict)  # type -> its provider's limit
    quota: QuotaSet | None = None  # the last a service set (its jobs share the limits)
    recovering: dict[str, tuple[float, float]] = field(
        default_factory=dict
    )  # type -> (avoidance ended, full weight again): ``weight``
    launch_problems: list[tuple[float, str, str, str]] = field(
        default_factory=list
    )  # (time, type, kind, reason) of refused launches, for the report
    reclaims: Reclaims = field(default_factory=Reclaims)  # learned rates, holds after reclaims

    def available(self, type_name: str, now: float) -> bool:
        """Whether the provider may have capacity for ``type_name`` at ``now``."""
        return self.unavailable.get(type_name, -math.inf) <= now

    def given_up(self, type_name: str) -> bool:
        """Whether ``type_name`` is not bought again (``GIVEN_UP_KINDS``)."""
        return self.unavailable.get(type_name, -math.inf) >= NEVER

    def none_left(self, types: Sequence[str], tasks_left: int) -> str | None:
        """Why no machine can be bought for the run any more, when every type was given
        up (the last reason given for each); None while a type is left."""
        if not types or not all(self.given_up(name) for name in types):
            return None
        why = {t: reason for _, t, kind, reason in self.launch_problems if kind in GIVEN_UP_KINDS}
        said = "; ".join(f"{t}: {why[t]}" if t in why else t for t in types)
        return f"every machine type was given up, {counted(tasks_left, 'task')} left ({said})"

    def held(self, now: float, type_name: str | None = None) -> bool:
        """Whether scale-up waits at ``now`` for a limit or throttling to lift: of every
        type, or (``type_name``) of that type's provider."""
        if self.hold_until is not None and self.hold_until > now:
            return True
        return type_name is not None and self.held_until.get(type_name, -math.inf) > now

    def launchable(self, type_name: str, now: float) -> bool:
        """Whether a new machine of ``type_name`` may be asked for at ``now``: its type
        has capacity and its provider is not held."""
        return self.available(type_name, now) and not self.held(now, type_name)

    def launchable_at(self, types: Sequence[str]) -> float:
        """When the first of ``types`` may be asked for again (its capacity back and its
        provider's hold lifted): when a deferred launch should be tried."""
        common = self.hold_until if self.hold_until is not None else -math.inf
        return min(
            max(common, self.unavailable.get(t, -math.inf), self.held_until.get(t, -math.inf))
            for t in types
        )

    def weight(self, type_name: str, now: float) -> float:
        """How much ``type_name`` counts in a plan at ``now``, in [0, 1].

        0 while it is avoided (no capacity, or its provider held by a limit). When the
        avoidance ends it comes back at ``RECOVERING_WEIGHT`` and regains full weight
        linearly over the ``recover_s`` its refusal gave; a machine of the type
        launched meanwhile proves the capacity back (full weight at once). This is
        Ray's recovery score for a node type whose allocation failed (autoscaler v2,
        ``CloudResourceMonitor.get_recoverable_resource_availabilities``: 0 within a
        safety floor, then min(1, elapsed / RAY_AUTOSCALER_AVAILABILITY_RECOVERY_S),
        the record dropped on a successful launch), with the floor being the avoidance.
        The planners say what a weight does to a type (``budget.plans``,
        ``deadline.planning``).
        """
        if not self.launchable(type_name, now):
            return 0.0
        span = self.recovering.get(type_name)
        if span is None or now >= span[1]:
            return 1.0
        start, end = span
        gained = (now - start) / (end - start) if end > start else 1.0
        return RECOVERING_WEIGHT + (1.0 - RECOVERING_WEIGHT) * max(0.0, gained)

    def refused(self, now: float, failed: LaunchFailed) -> None:
        """A launch was refused at ``now``: said for the report, and avoided until the
        refusal's ``until``, if it gives one."""
        self.launch_problems.append((now, failed.type, failed.kind, failed.reason))
        if failed.until is not None:
            self._avoid(failed, failed.until)

    def _avoid(self, failed: LaunchFailed, until: float) -> None:
        """What a refused launch avoids until ``until``: its type (``capacity``; an
        ``error`` not understood, briefly), its provider's types (``limit``), every
        scale-up (``throttled``, or a limit that names no types); the types avoided for
        capacity or a limit then recover over ``recover_s``."""
        if failed.kind == "capacity" or failed.kind in GIVEN_UP_KINDS:
            avoided: tuple[str, ...] = (failed.type,)
            table = self.unavailable
        elif failed.kind == "limit" and failed.types:
            avoided, table = failed.types, self.held_until
        elif failed.kind in ("limit", "throttled"):
            self.hold_until = max(until, self.hold_until or until)
            return
        else:  # an error not understood: the type waits a little, then is tried again
            self.unavailable[failed.type] = max(until, self.unavailable.get(failed.type, until))
            return
        for name in avoided:
            end = max(until, table.get(name, until))
            table[name] = end
            self.recovering[name] = (end, end + failed.recover_s)

    def launched(self, type_name: str) -> None:
        """A machine of ``type_name`` came: the type has capacity again."""
        self.recovering.pop(type_name, None)

    def machine_ended(
        self,
        type_name: str,
        lived_s: float,
        reclaimed: bool,
        now: float,
        loss: Loss | None = None,
        zone: str = "",
        zones: Collection[str] = (),
    ) -> None:
        """A machine of ``type_name`` in ``zone`` ended at ``now`` after ``lived_s``, taken
        back by its provider or not (``loss``: what it cut short; ``zones``: those of the
        type's machines alive now): learned (``Reclaims``); repeated, costly reclaims
        avoid the type as a refused launch does, until the hold's ``until`` (or only that
        zone, when the type has others: ``Reclaims.held_zones``)."""
        if self.reclaims.ended(type_name, lived_s, reclaimed, now, loss, zone, zones):
            hold = self.reclaims.holding(type_name, now)
            assert hold is not None
            avoided = self.unavailable.get(type_name, -math.inf)
            self.unavailable[type_name] = max(hold.until, avoided)

    def reclaim_returns(self, now: float, alive_s: Mapping[Pool, float]) -> list[ReclaimHold]:
        """The reclaim holds that end at ``now`` because their type's (or zone's) learned
        rate fell back (``Reclaims.returning``): their types are available again, unless
        another avoidance (a refused launch) lasts longer."""
        was = {h.type: h.until for h in self.reclaims.active(now) if not h.zone}
        back = self.reclaims.returning(now, alive_s)
        for hold in back:
            if not hold.zone and self.unavailable.get(hold.type) == was[hold.type]:
                self.unavailable[hold.type] = now
        return back

    def quota_set(self, event: QuotaSet) -> None:
        self.quota = event

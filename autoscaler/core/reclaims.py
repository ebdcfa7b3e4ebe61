"""How often a type's machines are taken back (EC2 spot), learned while the run runs:
the rate per type, what it costs a plan, and the hold after repeated reclaims.

The rate is a Gamma–Poisson estimate. Reclaims of a type's machines are a Poisson
process of rate λ per machine-hour; a Gamma prior of mean ``prior`` worth ``weight_h``
machine-hours of observation, updated by ``reclaims`` seen over ``exposure_h``
machine-hours the type's machines were alive, has the posterior mean

    λ = (prior · weight_h + reclaims) / (weight_h + exposure_h).

It is folded from what the state already has (machines lost with ``NOTICE_REASON``,
machine lifetimes), so a replayed journal gives the same rate. It is learned per type
and per pool: a (type, zone) pair, where the provider said the machine's zone (EC2,
``Machine.zone``), with the type's prior.

A plan prices it as lost work: a reclaim loses on average half a task's time and a
replacement's boot, so a machine does the work of ``speed_factor`` of one.

A type is held (no new launch; the plan moves to the others) when its reclaims are both
repeated and costly: ``hold_after`` of them within ``window_s``, and its machines keep
at most ``hold_below`` of their work at the learned rate and the work each reclaim was
seen to lose (the runs it cut short, and a replacement's boot). Reclaims that lose little
(short tasks, quick boots) are left to the plan's pricing: holding such a type only takes
capacity away (``benchmarks/reclaims``: at 3 reclaims an hour of 4-minute tasks, a
hold at the third reclaim cost 6 % more and took 11 % longer than pricing alone). A hold
lasts ``window_s``, or until a monitoring tick finds the learned rate back below the
return rate (``return_per_hour``; default its prior).

Where the reclaims gather in one zone of a type that has machines in others, the same
rule holds that zone alone (a ``ReclaimHold`` with a ``zone``): the type's launches go
to its other zones (``held_zones``; the provider skips the zone) and the type stays in
the plan. Reclaims in a held zone no longer count toward holding the whole type, which
happens when the reclaims are spread over its zones, or its last zone is the one to go.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field

from autoscaler.core.actions import Cancel
from autoscaler.core.machine_ledger import Machine

PRIOR_WEIGHT_H = 10.0
"""What the config's rate (the prior) counts for, in machine-hours of observation: at
0.05 an hour half a reclaim, so the first reclaims move the rate, one alone not far."""

SPOT_PRIOR_PER_HOUR = 0.05
"""The prior reclaim rate of a spot type whose config gives none. AWS's Spot Instance
Advisor states interruption frequencies per month (under 5 % for most types); 5 % an
hour is a cautious start, which the run's own reclaims and machine-hours correct."""

HOLD_AFTER = 3
HOLD_WINDOW_S = 3600.0
"""A type is held after ``HOLD_AFTER`` reclaims within ``HOLD_WINDOW_S``, for as long..."""

HOLD_BELOW = 0.5
"""... if its machines keep at most this share of their work: reclaims then cost as much
of each machine-hour as they leave (1: every repeated reclaim holds)."""


def reclaim_rate(prior_per_hour: float, weight_h: float, reclaims: int, exposure_h: float) -> float:
    """The posterior mean reclaim rate per machine-hour (Gamma–Poisson)."""
    if weight_h + exposure_h <= 0:
        return prior_per_hour
    return (prior_per_hour * weight_h + reclaims) / (weight_h + exposure_h)


def kept_share(rate_per_hour: float, lost_s: float, boot_s: float) -> float:
    """The share of a machine's work left at ``rate_per_hour`` reclaims, each losing
    ``lost_s`` of the machine's work and a replacement's boot; exactly 1 at rate 0."""
    if rate_per_hour <= 0:
        return 1.0
    return max(0.0, 1.0 - rate_per_hour * (lost_s + boot_s) / 3600.0)


def speed_factor(rate_per_hour: float, mean_task_s: float, boot_s: float) -> float:
    """The share of a machine's work a plan may count on at ``rate_per_hour`` reclaims:
    each loses half a task (``mean_task_s``) and a replacement's boot, on average."""
    return kept_share(rate_per_hour, mean_task_s / 2.0, boot_s)


@dataclass(frozen=True, slots=True)
class ReclaimPolicy:
    """When repeated reclaims hold a type, and what the priors weigh."""

    hold_after: int = HOLD_AFTER  # k reclaims ...
    window_s: float = HOLD_WINDOW_S  # ... within this long hold the type as long
    weight_h: float = PRIOR_WEIGHT_H  # the prior's worth in machine-hours
    hold_below: float = HOLD_BELOW  # ... and its machines keep at most this of their work
    return_per_hour: float | None = None  # a hold ends early below this (None: the prior)


@dataclass(frozen=True, slots=True)
class Loss:
    """What a reclaim cut short: ``work_s``, the machine's runs' time lost (divided among
    its slots: a share of one machine's work); ``boot_s``, the type's boot, which a
    replacement pays again; ``alive_s``, the type's other machines' time alive (for the
    rate), ``zone_alive_s`` those in the machine's zone."""

    work_s: float = 0.0
    boot_s: float = 0.0
    alive_s: float = 0.0
    zone_alive_s: float = 0.0


Pool = tuple[str, str]
"""A machine type in one zone ("": the provider did not say where)."""


@dataclass(frozen=True, slots=True)
class ReclaimHold:
    """Type ``type`` (in ``zone`` alone, if one is named) held from ``start`` until
    ``until`` after ``reclaims`` reclaims within the policy's window (``until`` moves
    earlier when the rate falls back)."""

    type: str
    start: float
    until: float
    reclaims: int
    zone: str = ""


@dataclass
class Reclaims:
    """The reclaims seen per pool (type, zone), the machine time of its ended machines,
    and the holds they caused. ``prior``: each type's prior rate per hour."""

    policy: ReclaimPolicy = field(default_factory=ReclaimPolicy)
    prior: dict[str, float] = field(default_factory=dict)
    times: dict[str, list[float]] = field(default_factory=dict)  # type -> reclaim times
    ended_s: dict[str, float] = field(default_factory=dict)  # type -> ended machines' time
    lost_s: dict[str, float] = field(default_factory=dict)  # type -> work its reclaims cut
    pool_times: dict[Pool, list[float]] = field(default_factory=dict)
    pool_ended_s: dict[Pool, float] = field(default_factory=dict)
    pool_lost_s: dict[Pool, float] = field(default_factory=dict)
    holds: list[ReclaimHold] = field(default_factory=list)

    def learns(self, type_name: str) -> bool:
        """Whether ``type_name`` has a rate above 0: a prior, or a reclaim seen."""
        return self.prior.get(type_name, 0.0) > 0 or bool(self.times.get(type_name))

    def rate(self, type_name: str, alive_s: float, zone: str | None = None) -> float:
        """The learned rate of ``type_name`` (in ``zone``, if given) per machine-hour,
        its machines alive now (there) having lived ``alive_s`` in all; 0 for a type
        with no prior and no reclaim."""
        if not self.learns(type_name):
            return 0.0
        if zone is None:
            seen, ended = self.times.get(type_name), self.ended_s.get(type_name, 0.0)
        else:
            pool = (type_name, zone)
            seen, ended = self.pool_times.get(pool), self.pool_ended_s.get(pool, 0.0)
        prior = self.prior.get(type_name, 0.0)
        exposure_h = (ended + alive_s) / 3600.0
        return reclaim_rate(prior, self.policy.weight_h, len(seen or ()), exposure_h)

    def ended(
        self,
        type_name: str,
        lived_s: float,
        reclaimed: bool,
        now: float,
        loss: Loss | None = None,
        zone: str = "",
        zones: Collection[str] = (),
    ) -> bool:
        """A machine of ``type_name`` in ``zone`` ended at ``now`` after ``lived_s``,
        taken back or not (``loss``: what a reclaim cut short; ``zones``: those the
        type's machines alive now are in, to which its ended machines' are added: the
        zones it has been seen in). True when this reclaim holds the whole type (a new
        hold, or one made longer); a hold of ``zone`` alone is kept in ``holds``."""
        pool = (type_name, zone)
        self.ended_s[type_name] = self.ended_s.get(type_name, 0.0) + max(0.0, lived_s)
        self.pool_ended_s[pool] = self.pool_ended_s.get(pool, 0.0) + max(0.0, lived_s)
        if not reclaimed:
            return False
        self.times.setdefault(type_name, []).append(now)
        self.pool_times.setdefault(pool, []).append(now)
        loss = loss or Loss()
        self.lost_s[type_name] = self.lost_s.get(type_name, 0.0) + loss.work_s
        self.pool_lost_s[pool] = self.pool_lost_s.get(pool, 0.0) + loss.work_s
        p = self.policy
        seen = {z for t, z in self.pool_ended_s if t == type_name}.union(zones)
        others = seen - {zone, ""} - set(self.held_zones(type_name, now))
        if zone and others:
            recent = self._recent(pool, now)
            if recent >= p.hold_after and self.kept(type_name, loss, zone) <= p.hold_below:
                self._hold(ReclaimHold(type_name, now, now + p.window_s, recent, zone))
                return False
        held = set(self.held_zones(type_name, now))
        recent = sum(
            self._recent(q, now) for q in self.pool_times if q[0] == type_name and q[1] not in held
        )
        if recent < p.hold_after or self.kept(type_name, loss) > p.hold_below:
            return False
        self._hold(ReclaimHold(type_name, now, now + p.window_s, recent))
        return True

    def _recent(self, pool: Pool, now: float) -> int:
        return sum(1 for t in self.pool_times.get(pool, ()) if t > now - self.policy.window_s)

    def _hold(self, hold: ReclaimHold) -> None:
        """Hold ``hold``'s type (or zone), or hold it longer (from when it began)."""
        last = self.holding(hold.type, hold.start, hold.zone)
        if last is None:
            self.holds.append(hold)
        else:
            self.holds[self.holds.index(last)] = ReclaimHold(
                hold.type, last.start, hold.until, hold.reclaims, hold.zone
            )

    def kept(self, type_name: str, loss: Loss, zone: str | None = None) -> float:
        """The share of its work ``type_name``'s machines (in ``zone``, if given) keep at
        the learned rate, each reclaim losing what its reclaims so far lost on average
        and a boot (``loss``: the last one's, with the other machines' time alive)."""
        if zone is None:
            seen = len(self.times.get(type_name, ()))
            lost, alive_s = self.lost_s.get(type_name, 0.0), loss.alive_s
        else:
            pool = (type_name, zone)
            seen = len(self.pool_times.get(pool, ()))
            lost, alive_s = self.pool_lost_s.get(pool, 0.0), loss.zone_alive_s
        per_reclaim = lost / seen if seen else 0.0
        return kept_share(self.rate(type_name, alive_s, zone), per_reclaim, loss.boot_s)

    def holding(self, type_name: str, now: float, zone: str = "") -> ReclaimHold | None:
        """The hold of ``type_name`` (of its ``zone`` alone, if given) in force at
        ``now``, if any."""
        for hold in reversed(self.holds):
            if hold.type == type_name and hold.zone == zone:
                return hold if hold.until > now else None
        return None

    def held_zones(self, type_name: str, now: float) -> tuple[str, ...]:
        """The zones of ``type_name`` held alone at ``now``: its launches go elsewhere."""
        return tuple(
            dict.fromkeys(
                h.zone for h in self.holds if h.type == type_name and h.zone and h.until > now
            )
        )

    def returning(self, now: float, alive_s: Mapping[Pool, float]) -> list[ReclaimHold]:
        """The holds in force whose type's (or zone's) rate fell below its return rate
        at ``now`` (``alive_s``: each pool's machines alive, their time so far): each
        ends now."""
        out = []
        for i, hold in enumerate(self.holds):
            if hold.until <= now:
                continue
            name = hold.type
            bar = self.policy.return_per_hour
            bar = self.prior.get(name, 0.0) if bar is None else bar
            if hold.zone:
                rate = self.rate(name, alive_s.get((name, hold.zone), 0.0), hold.zone)
            else:
                alive = sum(v for (t, _), v in alive_s.items() if t == name)
                rate = self.rate(name, alive)
            if rate < bar:
                self.holds[i] = ReclaimHold(name, hold.start, now, hold.reclaims, hold.zone)
                out.append(self.holds[i])
        return out

    def active(self, now: float) -> Iterable[ReclaimHold]:
        return (h for h in self.holds if h.until > now)


def window_words(window_s: float) -> str:
    """``3600`` -> ``1h``; ``1800`` -> ``30m``: a window as the report says it."""
    if window_s >= 3600 and math.isclose(window_s % 3600, 0.0, abs_tol=1e-6):
        return f"{window_s / 3600:g}h"
    return f"{window_s / 60:g}m"


def drain(m: Machine) -> list[Cancel]:
    """What a rebalance recommendation for ``m`` asks of a controller: its queued tasks
    back to the bag (its agent drops them), its runs left to end."""
    return [Cancel(tid, m.id, "rebalance recommendation: the machine drains") for tid in m.queue]

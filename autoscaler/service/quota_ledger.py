"""The service's quota ledger: the machine limits of its platform (each type's
``max_count``, each provider's ``max_machines``) belong to the account, so they hold
across every run the service has going at once (the jobs on their own machines and the
deadline pool), not per run.

Each run (a holder) tells the ledger, at every step, what it holds (machines alive or
being launched, from its state) and asks for its step's launches; the ledger grants
what the limits leave, under one lock, so two runs that planned on the same free
machines at the same moment never launch both. A run's planners see the room the
others leave (``room``, a ``QuotaSet``). Nothing here is journaled: each run's journal
holds its machines, and a service that starts again counts them from the runs it
resumes (``hold``) before any job may launch.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from autoscaler.config.schema import Platform
from autoscaler.core.model import QuotaSet


@dataclass(frozen=True)
class Limit:
    """One limit the runs share: machines of ``types`` at once, at most ``most``."""

    name: str  # the type's name, or the provider's
    types: tuple[str, ...]
    most: int


@dataclass(frozen=True)
class Wait:
    """Machines a holder waits for: ``count`` of ``type``, held by ``holders``."""

    type: str
    count: int
    holders: tuple[str, ...]

    def said(self) -> str:
        machines = "machine" if self.count == 1 else "machines"
        by = f" held by {', '.join(self.holders)}" if self.holders else ""
        return f"{self.count} {self.type} {machines}{by}"


@dataclass(frozen=True)
class Usage:
    """One shared limit as it stands: machines held under it, by holder."""

    kind: str  # "type" or "provider"
    name: str
    most: int
    by: Mapping[str, int]

    @property
    def held(self) -> int:
        return sum(self.by.values())

    def to_json(self) -> dict[str, object]:
        return {
            "kind": self.kind,
            "name": self.name,
            "held": self.held,
            "max": self.most,
            "by": dict(self.by),
        }


class QuotaLedger:
    """Who holds how many machines of each type, against the shared limits.

    Invariant: a grant never takes a type or a limited provider past its limit. What a
    holder already has (adopted after a restart) is counted as it is."""

    def __init__(self, types: Mapping[str, int], providers: Mapping[str, Limit]) -> None:
        self.types = dict(types)
        self.providers = dict(providers)
        self._lock = threading.Lock()
        self._held: dict[str, dict[str, int]] = {}
        self._waiting: dict[str, dict[str, int]] = {}
        self._watchers: dict[str, Callable[[], None]] = {}

    @classmethod
    def of(cls, platform: Platform) -> QuotaLedger:
        """The limits of a service's platform: every type's, every limited provider's."""
        providers = {}
        for name in platform.provider_names():
            most = platform.limits(name).max_machines
            if most is not None:
                types = tuple(
                    t.name for t in platform.machine_types if platform.provider_of(t.name) == name
                )
                providers[name] = Limit(name, types, most)
        return cls({t.name: t.max_count for t in platform.machine_types}, providers)

    # --- the runs' side -------------------------------------------------------------------

    def room(self, holder: str) -> QuotaSet:
        """What ``holder`` may hold at once now: its own machines and what the others
        leave, per type and per limited provider."""
        with self._lock:
            mine = self._held.get(holder, {})
            totals = self._totals()
            types = {
                t: mine.get(t, 0) + max(0, most - totals.get(t, 0))
                for t, most in self.types.items()
            }
            providers = {
                p: sum(mine.get(t, 0) for t in lim.types)
                + max(0, lim.most - sum(totals.get(t, 0) for t in lim.types))
                for p, lim in self.providers.items()
            }
        return QuotaSet(types, providers)

    def claim(
        self,
        holder: str,
        have: Mapping[str, int],
        asked: Mapping[str, int],
        waiting: Mapping[str, int],
    ) -> dict[str, int]:
        """``holder`` holds ``have`` (what it gave back is free again) and is granted
        what the limits leave of ``asked``; the grants. ``waiting``: what it wants and
        cannot have, for ``waits``."""
        with self._lock:
            before = self._totals()
            mine = {t: n for t, n in have.items() if n > 0}
            self._held[holder] = mine
            granted = {}
            for t, n in sorted(asked.items()):
                g = max(0, min(n, self._free(t)))
                granted[t] = g
                if g:
                    mine[t] = mine.get(t, 0) + g
            self._waiting[holder] = {t: n for t, n in waiting.items() if n > 0}
            after = self._totals()
            freed = any(after.get(t, 0) < n for t, n in before.items())
            wake = [w for h, w in self._watchers.items() if h != holder] if freed else []
        for w in wake:
            w()
        return granted

    def watch(self, holder: str, wake: Callable[[], None]) -> None:
        with self._lock:
            self._watchers[holder] = wake

    def hold(self, holder: str, have: Mapping[str, int]) -> None:
        """``holder`` holds ``have`` (a run the service resumes, counted before any job
        launches)."""
        self.claim(holder, have, {}, {})

    def leave(self, holder: str) -> None:
        """``holder``'s run ended: what it held is free."""
        with self._lock:
            freed = any(self._held.pop(holder, {}).values())
            self._waiting.pop(holder, None)
            self._watchers.pop(holder, None)
            wake = list(self._watchers.values()) if freed else []
        for w in wake:
            w()

    # --- what the views show ------------------------------------------------------------

    def waits(self, holder: str) -> list[Wait]:
        """What ``holder`` waits for, and who holds it. Machines no other holder has are
        not waited for: they were given back since ``holder`` last claimed, and its next
        step (it was woken) takes them."""
        with self._lock:
            out = []
            for t, n in sorted(self._waiting.get(holder, {}).items()):
                kin = {
                    t,
                    *(x for lim in self.providers.values() if t in lim.types for x in lim.types),
                }
                holders = sorted(
                    h
                    for h, held in self._held.items()
                    if h != holder and any(held.get(x, 0) > 0 for x in kin)
                )
                if holders:
                    out.append(Wait(t, n, tuple(holders)))
            return out

    def usage(self) -> list[Usage]:
        """Per type, then per limited provider: machines held service-wide against the
        limit, and by whom."""
        with self._lock:
            limits = [Limit(t, (t,), most) for t, most in self.types.items()]
            return [Usage("type", lim.name, lim.most, self._parts(lim.types)) for lim in limits] + [
                Usage("provider", lim.name, lim.most, self._parts(lim.types))
                for lim in self.providers.values()
            ]

    # --- under the lock -------------------------------------------------------------------

    def _totals(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for held in self._held.values():
            for t, n in held.items():
                out[t] = out.get(t, 0) + n
        return out

    def _free(self, type_name: str) -> int:
        """Machines of ``type_name`` that may still be granted, service-wide."""
        totals = self._totals()
        most = self.types.get(type_name)
        free = 1 << 62 if most is None else most - totals.get(type_name, 0)
        for lim in self.providers.values():
            if type_name in lim.types:
                free = min(free, lim.most - sum(totals.get(t, 0) for t in lim.types))
        return free

    def _parts(self, types: tuple[str, ...]) -> dict[str, int]:
        parts = {}
        for h, held in sorted(self._held.items()):
            n = sum(held.get(t, 0) for t in types)
            if n:
                parts[h] = n
        return parts

"""Several providers as one: a run whose machine types come from different providers
(a Slurm cluster and EC2 in two regions, say) talks to this composite, which sends each
call to the provider of the machine type or machine concerned.

Each part is built by its own kind from ``Platform.for_provider(name)``, the config as
if that provider were the run's only one, so every kind works here unchanged. Machine
ids stay the parts' own (an agent reports the id its provider gave it): EC2 instance ids
are unique, and the ids of providers that name their machines carry the machine type,
which is unique in a config. The composite remembers which part owns each id it has
launched or listed; an id it does not know (a resumed run's) is looked up by listing
every part once.
"""

from __future__ import annotations

import threading
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

from autoscaler.core.errors import AutoscalerError
from autoscaler.providers import registry
from autoscaler.providers.base import (
    PROVIDER_TAG,
    Capabilities,
    MachineRecord,
    MachineStatus,
    PartialLaunch,
    PricePoint,
    Provider,
    SpotMarket,
)
from autoscaler.providers.kind import (
    BootContext,
    Bootstrapper,
    RunContext,
    Sweeper,
    TaggedMachine,
)

if TYPE_CHECKING:
    from autoscaler.config.schema import Platform


class MultiProvider:
    """The providers of one run, by name, behind the one ``Provider`` interface."""

    def __init__(self, parts: Mapping[str, Provider], provider_of: Mapping[str, str]) -> None:
        if not parts:
            raise AutoscalerError("a run needs at least one provider")
        self.parts = dict(parts)
        self._provider_of = dict(provider_of)
        self._owner: dict[str, str] = {}  # machine id -> provider name
        self._lock = threading.Lock()
        caps = [p.capabilities for p in self.parts.values()]
        first = caps[0]
        self._capabilities = Capabilities(
            billing=first.billing,
            spot=any(c.spot for c in caps),
            max_counts={t: n for c in caps for t, n in c.max_counts.items()},
            boot_estimate_s={t: s for c in caps for t, s in c.boot_estimate_s.items()},
            provider_of=self._provider_of,
        )

    @property
    def capabilities(self) -> Capabilities:
        return self._capabilities

    @property
    def status_polling_interval(self) -> float:
        """The shortest of the parts' (a part that never polls is still asked then: its
        ``describe`` answers from what it knows)."""
        polling = [p.status_polling_interval for p in self.parts.values()]
        positive = [s for s in polling if s > 0]
        return min(positive) if positive else 0.0

    def part_of_type(self, type: str) -> tuple[str, Provider]:
        name = self._provider_of.get(type)
        if name is None:
            raise AutoscalerError(f"unknown machine type {type!r}", code="UnknownType")
        return name, self.parts[name]

    def owner(self, machine: str) -> str | None:
        """The name of the provider that owns ``machine``, if known."""
        with self._lock:
            return self._owner.get(machine)

    def launch(
        self,
        type: str,
        count: int,
        token: str,
        tags: Mapping[str, str],
        *,
        avoid_zones: Collection[str] = (),
    ) -> list[MachineRecord]:
        name, part = self.part_of_type(type)
        try:
            records = part.launch(
                type, count, token, {**tags, PROVIDER_TAG: name}, avoid_zones=avoid_zones
            )
        except PartialLaunch as partial:
            self._own(name, (r.id for r in partial.records))
            raise
        self._own(name, (r.id for r in records))
        return records

    def market_types(self) -> tuple[str, ...]:
        """The market-priced types of every part that reads a market."""
        return tuple(
            t for p in self.parts.values() if isinstance(p, SpotMarket) for t in p.market_types()
        )

    def spot_prices(self, since: float | None, now: float) -> list[PricePoint]:
        """Every market's price changes, oldest first."""
        points = [
            point
            for p in self.parts.values()
            if isinstance(p, SpotMarket) and p.market_types()
            for point in p.spot_prices(since, now)
        ]
        return sorted(points, key=lambda p: p.at)

    def describe(self, ids: Sequence[str] | None = None) -> list[MachineStatus]:
        if ids is None:
            out: list[MachineStatus] = []
            for name, part in self.parts.items():
                found = part.describe()
                self._own(name, (s.id for s in found))
                out += found
            return out
        out = []
        for name, mine in self._by_owner(ids).items():
            out += self.parts[name].describe(mine)
        return out

    def terminate(self, ids: Sequence[str], *, now: bool = False) -> list[str]:
        ended: list[str] = []
        for name, mine in self._by_owner(ids).items():
            ended += self.parts[name].terminate(mine, now=now)
        return ended

    def _own(self, name: str, ids: Iterable[str]) -> None:
        with self._lock:
            for mid in ids:
                self._owner[mid] = name

    def _by_owner(self, ids: Sequence[str]) -> dict[str, list[str]]:
        """``ids`` grouped by the provider that owns them; ids no provider knows (gone
        before this daemon saw them) are left out."""
        with self._lock:
            unknown = [mid for mid in ids if mid not in self._owner]
        if unknown:
            self.describe()  # learns every id each part knows
        groups: dict[str, list[str]] = {}
        with self._lock:
            for mid in ids:
                name = self._owner.get(mid)
                if name is not None:
                    groups.setdefault(name, []).append(mid)
        return groups


def build(cfg: Platform, ctx: RunContext) -> MultiProvider:
    """The composite of a config with ``providers:``: each part built by its own kind."""
    parts: dict[str, Provider] = {}
    for name in cfg.provider_names():
        kind = registry.kind(cfg.kind_of(name))
        if kind.build is None:
            raise AutoscalerError(
                f"provider {name!r} ({kind.name}) cannot run for real: give it one of the "
                f"kinds {', '.join(registry.real_kinds())} (or use --dry-run)"
            )
        parts[name] = kind.build(cfg.for_provider(name), ctx)
    return MultiProvider(parts, {t.name: cfg.provider_of(t.name) for t in cfg.machine_types})


class MultiBootstrap:
    """The bootstrappers of the parts that have one, behind the one the daemon drives:
    a machine is booted by its provider's, and not at all if that provider's machines
    start their own agents."""

    def __init__(self, parts: Mapping[str, Bootstrapper], provider: MultiProvider) -> None:
        self.parts = dict(parts)
        self.provider = provider

    def _part(self, machine: str) -> Bootstrapper | None:
        name = self.provider.owner(machine)
        return None if name is None else self.parts.get(name)

    def handles(self, machine: str) -> bool:
        return self._part(machine) is not None

    def timeout_s(self, machine: str) -> float:
        part = self._part(machine)
        return 600.0 if part is None else part.timeout_s(machine)

    def wait_ssh(self, machine: str, address: str, timeout_s: float) -> None:
        part = self._part(machine)
        if part is not None:
            part.wait_ssh(machine, address, timeout_s)

    def ensure(self, machine: str, address: str) -> int:
        part = self._part(machine)
        if part is None:
            raise AutoscalerError(f"{machine}: its provider starts its own agents")
        return part.ensure(machine, address)

    def alive(self, machine: str) -> bool:
        part = self._part(machine)
        return part is not None and part.alive(machine)

    def close(self, machine: str) -> None:
        part = self._part(machine)
        if part is not None:
            part.close(machine)

    def close_all(self) -> None:
        for part in self.parts.values():
            part.close_all()


def bootstrapper(cfg: Platform, ctx: BootContext) -> MultiBootstrap | None:
    """The bootstrappers of every part of ``ctx.provider`` (a ``MultiProvider``) that
    has one; None when no part does."""
    provider = ctx.provider
    assert isinstance(provider, MultiProvider)
    parts: dict[str, Bootstrapper] = {}
    for name in cfg.provider_names():
        make = registry.kind(cfg.kind_of(name)).bootstrapper
        if make is None:
            continue
        part = BootContext(ctx.run_dir, ctx.token, ctx.local_port, provider.parts[name])
        boot = make(cfg.for_provider(name), part)
        if boot is not None:
            parts[name] = boot
    return MultiBootstrap(parts, provider) if parts else None


def sweeper(cfg: Platform) -> Sweeper:
    """Every provider's sweeper at once: strays of every part, each ended by its own."""
    sweepers: dict[str, Sweeper] = {}
    for name in cfg.provider_names():
        make = registry.kind(cfg.kind_of(name)).sweeper
        if make is not None:
            sweepers[name] = make(cfg.for_provider(name))
    if not sweepers:
        raise AutoscalerError(
            "no provider of this config starts machines: nothing to clean up "
            f"(providers: {cfg.provider_label()})"
        )
    owner: dict[str, str] = {}

    def list_tagged() -> list[TaggedMachine]:
        found: list[TaggedMachine] = []
        for name, sweep in sweepers.items():
            for m in sweep.list_tagged():
                owner[m.id] = name
                found.append(m)
        return found

    def terminate(ids: Sequence[str]) -> list[str]:
        if any(mid not in owner for mid in ids):
            list_tagged()
        ended: list[str] = []
        for name, sweep in sweepers.items():
            mine = [mid for mid in ids if owner.get(mid) == name]
            if mine:
                ended += sweep.terminate(mine)
        return ended

    return Sweeper(list_tagged, terminate)

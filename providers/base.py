"""What every provider offers: a few methods over lists, with typed records in and out."""

from __future__ import annotations

import enum
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from autoscaler.core.billing import BillingModel
from autoscaler.core.errors import AutoscalerError

PROVIDER_TAG = "autoscaler:provider"
"""The tag a run of several providers adds to a launch: the name of the provider of its
type (``multi``)."""


class ProviderState(enum.Enum):
    """A machine as its provider reports it."""

    PENDING = "pending"  #: accepted, not yet running
    RUNNING = "running"  #: up (the worker may still be starting)
    TERMINATED = "terminated"  #: gone, whoever ended it; terminal


@dataclass(frozen=True, slots=True)
class MachineRecord:
    """A machine a launch created."""

    id: str  # the provider's id (instance id, job id, pid, sim name)
    type: str  # our machine type name
    token: str  # the launch token that created it
    launched_at: float  # seconds on the driver's clock
    zone: str = ""  # where it runs (an EC2 availability zone), if the provider says


@dataclass(frozen=True, slots=True)
class MachineStatus:
    id: str
    type: str
    state: ProviderState
    address: str | None = None  # where to reach it (an instance's IP), if the provider knows
    reason: str | None = None
    """Why a TERMINATED machine ended, in its provider's words (a scheduler's state and
    the tail of the job's log, an agent's exit status), when it ended by itself and the
    provider can tell; None for a machine we ended."""


@dataclass(frozen=True, slots=True)
class Capabilities:
    """What a provider can do, declared up front instead of discovered by surprise."""

    billing: BillingModel
    spot: bool = False
    max_counts: Mapping[str, int] = field(default_factory=dict)
    boot_estimate_s: Mapping[str, float] = field(default_factory=dict)
    provider_of: Mapping[str, str] = field(default_factory=dict)
    """Machine type -> the name of the provider it comes from (a run of several
    providers); empty: every type comes from the one provider."""

    def provider(self, type: str) -> str:
        """The name of the provider ``type`` comes from ('' in a one-provider run)."""
        return self.provider_of.get(type, "")

    def siblings(self, type: str) -> tuple[str, ...]:
        """The types that come from the same provider as ``type`` (all types in a
        one-provider run), ``type`` included."""
        if not self.provider_of:
            return tuple(self.max_counts)
        mine = self.provider_of.get(type)
        return tuple(t for t, p in self.provider_of.items() if p == mine)


def machine_ids(type: str, token: str, count: int) -> list[str]:
    """The ids of a launch's machines where the provider lets us name them (local agents,
    Grid Engine jobs): ``<type>-<token>-<i>``, so a repeated launch finds its own."""
    return [f"{type}-{token}-{i}" for i in range(count)]


def split_machine_id(mid: str) -> tuple[str, str]:
    """(type, launch token) of a ``machine_ids`` id (a type may contain dashes)."""
    parts = mid.rsplit("-", 2)
    return (parts[0], parts[1]) if len(parts) == 3 else (mid, "")


class PartialLaunch(AutoscalerError):
    """A launch started some machines and was refused the rest (``records``: those that
    started, which exist and are paid for); the message and code are the refusal's, so
    the run learns what the refusal means for the rest (``failure_kind``) and still owns
    what started."""

    def __init__(
        self,
        records: Sequence[MachineRecord],
        message: str,
        *,
        retryable: bool = False,
        code: str | None = None,
    ):
        super().__init__(message, retryable=retryable, code=code)
        self.records = tuple(records)


def check_launch(capabilities: Capabilities, type: str, alive: int, count: int) -> None:
    """Refuse a launch of an unknown type, or one past the type's maximum count."""
    limit = capabilities.max_counts.get(type)
    if limit is None:
        raise AutoscalerError(f"unknown machine type {type!r}", code="UnknownType")
    if alive + count > limit:
        raise AutoscalerError(
            f"{type}: {alive} running + {count} requested exceeds the limit {limit}",
            code="MaxCountExceeded",
        )


CAPACITY_CODES = frozenset(
    {
        "InsufficientInstanceCapacity",  # none of this type in the zone now (spot or not)
        "InsufficientHostCapacity",  # no dedicated host of this type
        "InsufficientReservedInstanceCapacity",  # the reservation's type is exhausted
        "InsufficientCapacity",  # not enough capacity (EC2's generic form)
        "UnfulfillableCapacity",  # not enough spare capacity for a spot request
        "SpotMaxPriceTooLow",  # the spot price of this type is above our maximum
        "Unsupported",  # the type is not offered in this zone
    }
)
"""This type has no machines for us now (in this zone, at this spot price): plan without
it for a while. EC2's codes as its API reference lists them (errors-overview: "Error
codes for the Amazon EC2 API"), the same set AWS ParallelCluster fails over on
(aws-parallelcluster-node ``slurm_resources.py``, PR 673)."""

LIMIT_CODES = frozenset(
    {
        "InstanceLimitExceeded",  # the account's on-demand instance quota
        "VcpuLimitExceeded",  # the account's vCPU quota
        "MaxSpotInstanceCountExceeded",  # the account's spot instance quota
        "InsufficientFreeAddressesInSubnet",  # the provider's subnet has no address left
    }
)
"""The provider (the account, in this region; its subnets) may start no more machines of
any type: hold scale-up of that provider's types (``Capabilities.siblings``) for a while.
In a run of several providers the others' types carry on."""

SUBNET_CODES = frozenset({"InsufficientFreeAddressesInSubnet"})
"""This subnet is full: a launch tries the provider's next subnet, as for a zone without
capacity; when every subnet is full, the provider is (``LIMIT_CODES``)."""


def failure_kind(code: str | None, retryable: bool = False) -> str:
    """What a launch error means for later launches: ``capacity``, ``limit``,
    ``throttled`` (passing: wait a little) or ``error``."""
    if code in CAPACITY_CODES:
        return "capacity"
    if code in LIMIT_CODES:
        return "limit"
    if retryable:
        return "throttled"
    return "error"


class Provider(Protocol):
    """Acquires and releases machines of one run.

    ``launch`` is idempotent per token, and tags every machine with the provider's run
    itself (an EC2 tag, an agent's environment, a job name): that is how ``describe``,
    a resumed daemon and ``autoscaler cleanup`` find them. ``tags`` are extra tags.
    """

    @property
    def capabilities(self) -> Capabilities: ...

    @property
    def status_polling_interval(self) -> float:
        """Real seconds between two ``describe`` calls of a running daemon (as in Parsl's
        providers): a process list is cheap, a cloud API call is rate-limited and counted
        against the account. 0: never poll (a provider that cannot tell which machines
        ended); the daemon learns of ends from agents that go silent."""
        ...

    def launch(
        self,
        type: str,
        count: int,
        token: str,
        tags: Mapping[str, str],
        *,
        avoid_zones: Collection[str] = (),
    ) -> list[MachineRecord]:
        """The machines of ``count`` started (fewer if the provider started fewer);
        ``PartialLaunch`` when some started and the rest was refused. ``avoid_zones``:
        zones held after repeated reclaims (``core.reclaims``), not to launch in while the
        provider has others; a provider without zones has none to avoid."""
        ...

    def describe(self, ids: Sequence[str] | None = None) -> list[MachineStatus]:
        """The run's machines (all of them, or ``ids``) as the provider shows them; a
        machine that ended by itself says why where the provider can tell
        (``MachineStatus.reason``)."""
        ...

    def terminate(self, ids: Sequence[str], *, now: bool = False) -> list[str]:
        """End the machines of ``ids`` (only this run's); the ids terminated. ``now``: no
        grace for the agents to end their tasks (the user's second Ctrl-C)."""
        ...


@dataclass(frozen=True, slots=True)
class PricePoint:
    """A market price: a machine of our type ``type`` costs ``price`` per ATU from
    ``at`` (the driver's clock) on."""

    type: str
    at: float
    price: float


@runtime_checkable
class SpotMarket(Protocol):
    """A provider whose types' prices move (EC2's spot market, a dry run's traces)."""

    def market_types(self) -> tuple[str, ...]:
        """Our machine types whose prices it reads (none: it reads no market)."""
        ...

    def spot_prices(self, since: float | None, now: float) -> list[PricePoint]:
        """The price changes of ``market_types`` after ``since`` up to ``now`` (the
        driver's clock), oldest first, each with the time it took effect (``since``
        None: from the start, with the prices in force then); a price that took effect
        before ``since`` and still holds may come again, dated when it took effect."""
        ...

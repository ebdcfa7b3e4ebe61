"""A provider kind: how its provider is built from a config, what it can do, how
``autoscaler cleanup`` sweeps its machines, and how its machines start their agents.

Each provider module declares one ``ProviderKind`` as ``KIND``; ``registry`` maps a
config's ``provider`` name to it. Code outside the providers asks the kind, never the
name (as Parsl's providers share one base and SkyPilot's clouds one interface).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from autoscaler.bootstrap.agent_start import AgentSettings, agent_flags
from autoscaler.bootstrap.tls import CA_CERT
from autoscaler.core.billing import BillingModel
from autoscaler.providers.base import Capabilities, Provider

if TYPE_CHECKING:
    from autoscaler.config.schema import Platform


class Bootstrapper(Protocol):
    """Starts and keeps agents on machines that cannot start their own (over SSH)."""

    def handles(self, machine: str) -> bool:
        """Whether ``machine``'s agent is started here (else its machine starts it)."""
        ...

    def timeout_s(self, machine: str) -> float: ...
    def wait_ssh(self, machine: str, address: str, timeout_s: float) -> None: ...
    def ensure(self, machine: str, address: str) -> int: ...
    def alive(self, machine: str) -> bool: ...
    def close(self, machine: str) -> None: ...
    def close_all(self) -> None: ...


@dataclass(frozen=True, slots=True)
class RunContext:
    """What a real run hands the provider it builds, besides the config."""

    billing: BillingModel
    run_id: str
    run_dir: Path  # the agents' logs and the token file go here
    token: str  # the run's secret: agents present their machine's token, derived from it
    url: str  # the dispatcher's, as agents started on this host reach it
    workdir: Path  # the agents' working directory, unless the provider's section names one
    clock: Callable[[], float]  # run time
    ca_pem: str | None = None  # the run's CA certificate when the dispatcher serves https


@dataclass(frozen=True, slots=True)
class BootContext:
    """What a run hands the bootstrapper that starts agents on its machines."""

    run_dir: Path
    token: str
    local_port: int  # the dispatcher's port on our loopback
    provider: Provider


@dataclass(frozen=True, slots=True)
class TaggedMachine:
    """A machine that carries one of our run tags (any run's), as cleanup lists it."""

    id: str  # what the provider terminates by: an instance id, a job id, a pid
    run_id: str
    type: str  # our machine type
    state: str  # in the provider's own words


@dataclass(frozen=True, slots=True)
class Sweeper:
    """Every machine of ours a provider knows, of any run, and their end."""

    list_tagged: Callable[[], list[TaggedMachine]]
    terminate: Callable[[Sequence[str]], list[str]]  # ids of ``list_tagged``; those ended


@dataclass(frozen=True, slots=True)
class Direct:
    """How a provider's agents reach the dispatcher: ``hosts``, the names they connect to
    directly (the dispatcher then serves https, its certificate from the run's CA), and
    whether some come through SSH tunnels (``tunnelled``: plain HTTP inside them)."""

    hosts: tuple[str, ...] = ()
    tunnelled: bool = False


@dataclass(frozen=True, slots=True)
class ProviderKind:
    """One provider kind, declared by its module."""

    name: str  # what a config's ``provider`` says
    spot: bool = False  # may rent spot machines
    build: Callable[[Platform, RunContext], Provider] | None = None  # None: emulated only
    sweeper: Callable[[Platform], Sweeper] | None = None  # None: it leaves no machine behind
    bootstrapper: Callable[[Platform, BootContext], Bootstrapper | None] | None = None
    """Who starts agents on machines that cannot start their own (None: the machines do)."""
    max_life_s: Callable[[float], float] | None = None
    """The longest one of its machines lives, given the ATU (a batch job's time limit);
    None: as long as it is paid for."""
    direct: Callable[[Platform], Direct] | None = None
    """How its agents reach the dispatcher, when not as local processes or batch jobs do
    (None: over loopback or the cluster's network, plain HTTP)."""

    @property
    def real(self) -> bool:
        """Whether it rents real machines (the emulator's ``sim`` does not)."""
        return self.build is not None

    def capabilities(self, cfg: Platform, billing: BillingModel) -> Capabilities:
        """What its provider declares for the machine types of ``cfg``."""
        return Capabilities(
            billing=billing,
            spot=self.spot,
            max_counts={t.name: t.max_count for t in cfg.machine_types},
            boot_estimate_s={t.name: t.boot_s for t in cfg.machine_types},
        )


def cores(cfg: Platform, type_name: str) -> int:
    """Cores a machine of ``type_name`` runs its tasks on: its slots times the cores one
    task uses (the bag's ``cpus``; a service's platform has no bag: 1)."""
    from autoscaler.config.work import Work

    slots = next((t.slots or 1 for t in cfg.machine_types if t.name == type_name), 1)
    cpus = cfg.bag.cpus if isinstance(cfg, Work) and cfg.bag is not None else 1
    return slots * cpus


def agent_args(cfg: Platform) -> list[str]:
    """Agent flags every provider passes the same way."""
    d = cfg.daemon
    return agent_flags(d.heartbeat_s, d.orphan_after_s, d.tail_bytes)


def agent_settings(
    cfg: Platform, ctx: RunContext, *, python: str | None, workdir: Path | None
) -> AgentSettings:
    """How a provider that starts agents itself starts them: ``python`` and ``workdir``
    are its section's (None: this interpreter, the run's working directory). The working
    directory is made absolute here, against ours: a scheduler starts a job elsewhere."""
    d = cfg.daemon
    return AgentSettings(
        url=ctx.url,
        token=ctx.token,
        heartbeat_s=d.heartbeat_s,
        orphan_after_s=d.orphan_after_s,
        tail_bytes=d.tail_bytes,
        workdir=(workdir or ctx.workdir).absolute(),
        python=python or sys.executable,
        slots={t.name: t.slots or 1 for t in cfg.machine_types},
        ca_file=ctx.run_dir / CA_CERT if ctx.ca_pem is not None else None,
    )

"""The YAML configuration of a run, validated with pydantic: a platform plus the work.

The ``Platform`` is where and how work runs: the machine types, billing, the provider
and its section, the daemon, the emulator, sampling, deadline planning and monitoring.
A service config is a platform plus ``service:`` (``config.service_schema``). The work
(``config.work``) is one bag with its constraint, or deadline jobs. A ``RunConfig`` is
both, in one flat file. Every model forbids unknown fields so a typo is an error that
names the field, never a silently ignored setting.

Durations are seconds, or a string with a unit: ``"90s"``, ``"15m"``, ``"1h"``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

from pydantic import Field, field_validator, model_validator

from autoscaler.config.durations import Seconds
from autoscaler.config.emulation import (
    Affine,
    BimodalRuntime,
    ConstantRuntime,
    Emulator,
    LocalLoad,
    LognormalRuntime,
    MachineFailure,
    NormalRuntime,
    ParetoRuntime,
    Refusal,
    Runtime,
    TraceRuntime,
    UniformRuntime,
    WeibullRuntime,
    check_price_trace,
    weibull_mean_factor,
)
from autoscaler.config.platform import (
    Billing,
    Daemon,
    Deadline,
    Ec2,
    Ec2Type,
    Local,
    MachineType,
    Reclaims,
    Sampling,
    Sge,
    SgeType,
    Slurm,
    SlurmType,
    Ssh,
)
from autoscaler.config.providers import SECTIONS, Limits, ProviderEntry
from autoscaler.config.strict import ConfigModel, Name, known_types
from autoscaler.config.work import (
    Bag,
    Budget,
    Constraint,
    IntRange,
    Job,
    JobMeans,
    SweepValues,
    Work,
)
from autoscaler.core.reclaims import SPOT_PRIOR_PER_HOUR

__all__ = [
    "Affine",
    "Bag",
    "Billing",
    "BimodalRuntime",
    "Budget",
    "ConfigModel",
    "ConstantRuntime",
    "Constraint",
    "Daemon",
    "Deadline",
    "Ec2",
    "Ec2Type",
    "Emulator",
    "IntRange",
    "Job",
    "JobMeans",
    "Local",
    "LocalLoad",
    "LognormalRuntime",
    "MachineFailure",
    "MachineType",
    "Name",
    "NormalRuntime",
    "ParetoRuntime",
    "Platform",
    "ProviderEntry",
    "Reclaims",
    "Refusal",
    "RunConfig",
    "Runtime",
    "Sampling",
    "Seconds",
    "Sge",
    "SgeType",
    "Slurm",
    "SlurmType",
    "Ssh",
    "SweepValues",
    "TraceRuntime",
    "UniformRuntime",
    "WeibullRuntime",
    "Work",
    "weibull_mean_factor",
]


# --- the platform ---------------------------------------------------------------------


class Platform(ConfigModel):
    """Where and how work runs: machine types and their billing, the provider and its
    section, the daemon, the emulator, and how budget and deadline modes plan. A service
    config's fields but ``service:``; a run config's but the work."""

    name: str = "run"
    machine_types: list[MachineType] = Field(min_length=1)
    billing: Billing = Field(default_factory=Billing)
    provider: Literal["sim", "local", "sge", "slurm", "ec2"] = Field(
        default="sim",
        description="sim: dry runs only; local: worker processes on this host; "
        "sge: Grid Engine jobs; slurm: Slurm jobs; ec2: Amazon EC2 instances",
    )
    providers: dict[Name, ProviderEntry] | None = Field(
        default=None,
        description="several providers in one run: name -> {kind, that kind's fields, "
        "limits}; each machine type names its provider (instead of provider:)",
    )
    local: Local = Field(default_factory=Local)
    ec2: Ec2 | None = None
    sge: Sge | None = None
    slurm: Slurm | None = None
    daemon: Daemon = Field(default_factory=Daemon)
    policy: Literal["bats", "round_robin"] = Field(
        default="bats",
        description="bats: budget planner; round_robin: every machine from the start",
    )
    emulator: Emulator = Field(default_factory=Emulator)
    sampling: Sampling = Field(default_factory=Sampling)
    deadline: Deadline = Field(default_factory=Deadline)
    monitoring_interval_s: Seconds = Field(default=300.0, gt=0)
    reclaims: Reclaims = Field(default_factory=Reclaims)
    solver: Literal["highs", "cbc"] = Field(
        default="highs",
        description="MILP solver: HiGHS in-process (highspy); CBC (PuLP's bundled binary)",
    )
    tail_replication: bool = Field(
        default=True, description="once the bag is empty, idle paid machines replicate slow tasks"
    )
    setup: list[str] = Field(
        default_factory=list,
        description="commands every machine runs once, in its agent's working directory, "
        "before its first task (install, fetch, sync); their time counts as start-up",
    )
    setup_timeout_s: Seconds = Field(
        default=1800.0, gt=0, description="a machine's set-up fails past this (real seconds)"
    )
    setup_failures_max: int = Field(
        default=3, ge=1, description="after this many failed set-ups a type is not bought again"
    )

    @field_validator("machine_types")
    @classmethod
    def _unique_names(cls, types: list[MachineType]) -> list[MachineType]:
        seen: set[str] = set()
        for t in types:
            if t.name in seen:
                raise ValueError(f"machine type {t.name!r} is given twice")
            seen.add(t.name)
        return types

    @model_validator(mode="after")
    def _cross_checks(self) -> Platform:
        self._check_platform()
        return self

    def _check_platform(self) -> None:
        names = self.type_names()
        for field, named in (("speed", self.emulator.speed), ("affine", self.emulator.affine)):
            known_types(f"emulator.{field}", named, names)
        for failure in self.emulator.machine_failures:
            if failure.type not in names:
                raise ValueError(
                    f"emulator.machine_failures names unknown machine type {failure.type!r}"
                )
        known_types("emulator.refusals", (r.type for r in self.emulator.refusals), names)
        known_types("emulator.reclaim_per_hour", self.emulator.reclaim_per_hour, names)
        clusters = [n for n in self.provider_names() if self.kind_of(n) in ("slurm", "sge")]
        for name in self.emulator.local_load:
            if name not in clusters:
                raise ValueError(
                    f"emulator.local_load names {name!r}, not a cluster provider of the run "
                    f"(its slurm and sge providers: {', '.join(clusters) or 'none'})"
                )
        for name in self.emulator.reclaim_per_hour:
            if self._on_demand_ec2(name):
                raise ValueError(
                    f"emulator.reclaim_per_hour names {name!r}, an on-demand EC2 type: only "
                    "spot machines are taken back (give the type spot: true, or leave it out)"
                )
        self._provider_section(names)
        known_types("emulator.spot_prices", self.emulator.spot_prices, names)
        for name, trace in self.emulator.spot_prices.items():
            if isinstance(trace, list):
                check_price_trace(f"emulator.spot_prices.{name}", trace)
            cap = self.price_cap(name)
            for i, (_, price) in enumerate(trace if isinstance(trace, list) else ()):
                if cap is not None and price > cap + 1e-12:
                    raise ValueError(
                        f"emulator.spot_prices.{name}[{i}]: price {price:g} is above the "
                        f"type's cap {cap:g} (its max_price, else its price): a spot "
                        "machine is never billed above it"
                    )

    def _on_demand_ec2(self, type_name: str) -> bool:
        """Whether ``type_name`` is an EC2 type of an on-demand instance."""
        entry: object
        if self.providers is not None:
            entry = self.providers.get(self.type_named(type_name).provider or "")
        else:
            entry = self.ec2 if self.provider == "ec2" else None
        if not isinstance(entry, Ec2):
            return False
        spec = entry.types.get(type_name)
        return spec is not None and not spec.spot

    def _provider_section(self, names: set[str]) -> None:
        if self.providers is not None:
            self._several_providers()
            return
        for t in self.machine_types:
            if t.provider is not None:
                raise ValueError(
                    f"machine type {t.name!r} names provider {t.provider!r}, but the config "
                    "has no providers: section (give one, or leave the type's provider out)"
                )
        section: Ec2 | Sge | Slurm | None = None
        if self.provider == "ec2":
            section = self.ec2
        elif self.provider == "sge":
            section = self.sge
        elif self.provider == "slurm":
            section = self.slurm
        else:
            return
        if section is None:
            raise ValueError(f"provider is {self.provider}: give the {self.provider} section")
        _types_section(self.provider, section.types, names)

    def _several_providers(self) -> None:
        providers = self.providers or {}
        # A config written back (a run directory's) has every field: only values other
        # than the defaults are a second provider given.
        if self.provider != "sim":
            raise ValueError("give either provider (one provider) or providers (several), not both")
        for field in SECTIONS:
            if getattr(self, field) not in (None, Local()):
                raise ValueError(
                    f"with providers, a provider's settings go in its entry: move {field}: "
                    "into providers.<name> (with kind: " + field + ")"
                )
        if not providers:
            raise ValueError("providers is empty: name at least one provider")
        for t in self.machine_types:
            if t.provider is None:
                raise ValueError(
                    f"machine type {t.name!r} names no provider (providers: {', '.join(providers)})"
                )
            if t.provider not in providers:
                raise ValueError(
                    f"machine type {t.name!r} names unknown provider {t.provider!r} "
                    f"(providers: {', '.join(providers)})"
                )
        kinds = {entry.kind for entry in providers.values()}
        for name, entry in providers.items():
            mine = {t.name for t in self.machine_types if t.provider == name}
            if not mine:
                raise ValueError(f"providers.{name} has no machine type (name it in one)")
            if isinstance(entry, Ec2 | Sge | Slurm):
                _types_section(f"providers.{name}", entry.types, mine)
            if isinstance(entry, Local) and entry.time_scale != 1 and kinds != {"local"}:
                raise ValueError(
                    f"providers.{name}.time_scale: time runs scaled only when every provider "
                    "is local"
                )

    def provider_names(self) -> list[str]:
        """The names of the run's providers (the kind's name in the one-provider form)."""
        return list(self.providers) if self.providers is not None else [self.provider]

    def kind_of(self, name: str) -> str:
        """The kind of provider ``name``."""
        return self.providers[name].kind if self.providers is not None else self.provider

    def provider_of(self, type_name: str) -> str:
        """The name of the provider machine type ``type_name`` comes from."""
        if self.providers is None:
            return self.provider
        return self.type_named(type_name).provider or ""

    def limits(self, name: str) -> Limits:
        """What the run may take from provider ``name`` (no limit in the one-provider form)."""
        return self.providers[name] if self.providers is not None else Limits()

    def provider_label(self) -> str:
        """The providers as a user reads them: ``ec2``, or ``campus (sge), east (ec2)``."""
        if self.providers is None:
            return self.provider
        return ", ".join(f"{name} ({entry.kind})" for name, entry in self.providers.items())

    def setup_for(self, type_name: str) -> tuple[str, ...]:
        """The set-up commands of a machine of ``type_name``: the run's, then its type's."""
        own = next((t.setup for t in self.machine_types if t.name == type_name), [])
        return (*self.setup, *own)

    def shared_fs(self, type_name: str) -> bool:
        """Whether the agents of ``type_name`` see the daemon's file system."""
        entry = next((t.provider for t in self.machine_types if t.name == type_name), None)
        kind = self.providers[entry] if self.providers is not None and entry else None
        section = kind if kind is not None else getattr(self, self.provider, None)
        return bool(getattr(section, "shared_fs", False))

    def for_provider(self, name: str) -> Platform:
        """This config as if provider ``name`` were its only one: ``provider`` its kind,
        its section in the kind's field, only its machine types. The one-provider form
        is its own view."""
        if self.providers is None:
            return self
        entry = self.providers[name]
        fields = {f: getattr(self, f) for f in type(self).model_fields}
        fields.update(
            provider=entry.kind,
            providers=None,
            machine_types=[t for t in self.machine_types if t.provider == name],
        )
        if entry.kind in SECTIONS:
            fields[entry.kind] = entry
        return type(self).model_construct(**fields)

    def _min_unit_cost(self, price: float) -> float:
        if self.billing.mode == "fixed":
            return price
        return price * max(self.billing.min_charge_s, 1.0) / self.billing.atu_s

    def cheapest_unit(self) -> float:
        """The least a machine can cost: one unit (or minimum charge) of the cheapest type."""
        return self._min_unit_cost(min(t.price for t in self.machine_types))

    def type_names(self) -> set[str]:
        return {t.name for t in self.machine_types}

    def ec2_type(self, type_name: str) -> Ec2Type | None:
        """What machine type ``type_name`` is on EC2, and its provider's section (None:
        not an EC2 type)."""
        section = self.ec2_section(type_name)
        return None if section is None else section.types.get(type_name)

    def ec2_section(self, type_name: str) -> Ec2 | None:
        """The EC2 section machine type ``type_name`` comes from (None: not EC2's)."""
        provider = self.provider_of(type_name)
        if self.providers is not None:
            entry = self.providers.get(provider)
            return entry if isinstance(entry, Ec2) else None
        return self.ec2 if self.provider == "ec2" else None

    def reclaim_prior(self, type_name: str) -> float:
        """The prior reclaim rate per machine-hour of ``type_name``: its config's
        ``reclaim_per_hour``, else ``SPOT_PRIOR_PER_HOUR`` for an EC2 spot type, else 0."""
        given = self.type_named(type_name).reclaim_per_hour
        if given is not None:
            return given
        spec = self.ec2_type(type_name)
        return SPOT_PRIOR_PER_HOUR if spec is not None and spec.spot else 0.0

    def market_priced(self, type_name: str) -> bool:
        """Whether ``type_name``'s price moves: a spot type of an EC2 section that reads
        the market (``spot_prices: market``), or a type a dry run's trace prices."""
        if type_name in self.emulator.spot_prices:
            return True
        section, spec = self.ec2_section(type_name), self.ec2_type(type_name)
        return (
            section is not None
            and spec is not None
            and spec.spot
            and (section.spot_prices == "market")
        )

    def price_cap(self, type_name: str) -> float | None:
        """Per ATU, the most a machine of a market-priced type may be billed: its EC2
        ``max_price`` (USD per hour) at the ATU, else its machine type's price; None
        for a type whose price does not move."""
        if not self.market_priced(type_name):
            return None
        spec = self.ec2_type(type_name)
        if spec is not None and spec.max_price is not None:
            return spec.max_price * self.billing.atu_s / 3600.0
        return self.type_named(type_name).price

    @property
    def time_scale(self) -> float:
        """Emulated seconds per real second (1 but for a time-scaled local run)."""
        if self.providers is not None:
            scales = [e.time_scale for e in self.providers.values() if isinstance(e, Local)]
            return scales[0] if scales and len(scales) == len(self.providers) else 1.0
        return self.local.time_scale if self.provider == "local" else 1.0

    def type_named(self, name: str) -> MachineType:
        for t in self.machine_types:
            if t.name == name:
                return t
        raise KeyError(name)

    def platform(self) -> Platform:
        """The platform part alone (of a run config: its fields but the work)."""
        fields = {name: getattr(self, name) for name in Platform.model_fields}
        return Platform.model_construct(**fields)


def _types_section(where: str, section: Mapping[str, object], names: set[str]) -> None:
    """A provider section's ``types`` names exactly the machine types ``names``."""
    # Unknown keys first: a misspelt key also leaves its type without an entry, and
    # the typo is the more useful of the two to name.
    for name in sorted(set(section) - names):
        raise ValueError(
            f"{where}.types names unknown machine type {name!r} "
            f"(machine types: {', '.join(sorted(names))})"
        )
    for name in sorted(names - set(section)):
        raise ValueError(f"{where}.types has no entry for machine type {name!r}")


# --- the whole file -------------------------------------------------------------------


class RunConfig(Platform, Work):
    """One run: what to run under which constraint, where it may run and how that is paid.

    What to run is either one ``bag`` with its ``constraint`` (a budget: budget mode; a
    ``deadline_s``: deadline mode with one job), or ``jobs`` (deadline mode, paper 002):
    bags arriving over time, each with its own constraint. In the jobs form
    ``constraint`` is not given; once validated it holds their summary (the sum of the
    jobs' budgets if every job has one, and the last deadline), and ``bag`` is None.
    """

    @model_validator(mode="after")
    def _cross_checks(self) -> RunConfig:
        self._one_form()
        self._check_platform()
        self._check_work(self.type_names(), self.cheapest_unit())
        self._check_splits()
        return self

    def _check_splits(self) -> None:
        """A job's ``split`` names providers of the run that can run it."""
        names = self.provider_names() if self.providers is not None else []
        for i, job in enumerate(self.jobs):
            if not job.split:
                continue
            if self.providers is None:
                raise ValueError(f"jobs[{i}].split: the run has one provider: nothing to split")
            if not job.task_s:
                raise ValueError(
                    f"jobs[{i}].split: give task_s (the types that run each part, and how long)"
                )
            for name in job.split:
                if name not in names:
                    raise ValueError(
                        f"jobs[{i}].split names unknown provider {name!r} (providers: "
                        f"{', '.join(names)})"
                    )
                if not any(self.provider_of(t) == name for t in job.task_s):
                    raise ValueError(
                        f"jobs[{i}].split: provider {name!r} has no type in task_s to run its part"
                    )

"""Several providers in one run: the ``providers:`` section of a platform.

One provider stays the default form (``provider: ec2`` and its ``ec2:`` section). A run
that rents from several gives instead a mapping of names to sections, each with its
``kind`` and that kind's own fields, and every machine type names its provider::

    providers:
      campus: {kind: sge, types: {node: {queue: all.q}}, max_machines: 40}
      east: {kind: ec2, region: us-east-1, ami: ami-0abc, types: {...}}
    machine_types:
      - {name: node, provider: campus, price: 0.0, max_count: 40}
      - {name: c5, provider: east, price: 0.17, max_count: 20}

A provider may limit what the run takes from it, whatever its types' own counts:
``max_machines`` at once (an account's quota, a cluster's share) and ``machine_hours``
(machine time the run may use there: a cluster's allocation, free but limited).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, PositiveFloat, PositiveInt

from autoscaler.config.platform import Ec2, Local, Sge, Slurm
from autoscaler.config.strict import ConfigModel


class Limits(ConfigModel):
    """What a run may take from one provider, across its machine types."""

    max_machines: PositiveInt | None = Field(
        default=None, description="machines of this provider at once, at most (a quota)"
    )
    machine_hours: PositiveFloat | None = Field(
        default=None,
        description="machine hours the run may use on this provider (paid units count whole)",
    )


class SimProvider(Limits):
    """``kind: sim``: emulated machines (dry runs only)."""

    kind: Literal["sim"]


class LocalProvider(Local, Limits):
    """``kind: local``: worker processes on this host."""

    kind: Literal["local"]


class SgeProvider(Sge, Limits):
    """``kind: sge``: Grid Engine jobs."""

    kind: Literal["sge"]


class SlurmProvider(Slurm, Limits):
    """``kind: slurm``: Slurm batch jobs."""

    kind: Literal["slurm"]


class Ec2Provider(Ec2, Limits):
    """``kind: ec2``: instances in one region (one entry per region or market)."""

    kind: Literal["ec2"]


ProviderEntry = Annotated[
    SimProvider | LocalProvider | SgeProvider | SlurmProvider | Ec2Provider,
    Field(discriminator="kind"),
]
"""One named provider of a run: its kind, that kind's section, and its limits."""

SECTIONS = ("local", "sge", "slurm", "ec2")
"""The platform's fields that hold one kind's section (the one-provider form)."""

"""The one table of provider kinds: a config's ``provider`` name to its ``ProviderKind``.

Each kind is declared in its own module (``KIND``), imported only when asked for: a
local run needs neither boto3 nor fabric. A new kind is a module and one row here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from autoscaler.core.errors import ConfigError
from autoscaler.providers.kind import ProviderKind

if TYPE_CHECKING:
    from autoscaler.config.schema import Platform


def _sim() -> ProviderKind:
    from autoscaler.providers.sim import KIND

    return KIND


def _local() -> ProviderKind:
    from autoscaler.providers.local import KIND

    return KIND


def _sge() -> ProviderKind:
    from autoscaler.providers.sge import KIND

    return KIND


def _slurm() -> ProviderKind:
    from autoscaler.providers.slurm import KIND

    return KIND


def _ec2() -> ProviderKind:
    from autoscaler.providers.ec2 import KIND

    return KIND


_TABLE: dict[str, Callable[[], ProviderKind]] = {
    "sim": _sim,
    "local": _local,
    "sge": _sge,
    "slurm": _slurm,
    "ec2": _ec2,
}


def kinds() -> tuple[str, ...]:
    """Every kind's name, in the table's order."""
    return tuple(_TABLE)


def kind(name: str) -> ProviderKind:
    """The kind ``name``; a ``ConfigError`` naming it and the known kinds if there is none."""
    load = _TABLE.get(name)
    if load is None:
        raise ConfigError(
            "provider", [f"unknown provider kind {name!r} (known: {', '.join(_TABLE)})"]
        )
    return load()


def real_kinds() -> tuple[str, ...]:
    """The kinds that rent real machines (every one but the emulator's)."""
    return tuple(name for name in _TABLE if kind(name).real)


def is_emulated(name: str) -> bool:
    """Whether kind ``name`` only emulates machines (dry runs only)."""
    return not kind(name).real


def emulated(cfg: Platform) -> bool:
    """Whether every provider of ``cfg`` only emulates machines (dry runs only)."""
    return all(is_emulated(cfg.kind_of(name)) for name in cfg.provider_names())

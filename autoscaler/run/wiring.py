"""From a config to the real things that carry it out: providers and bootstrappers.

The daemon builds its provider and bootstrapper here, through the provider registry:
each kind knows how it is built from a config (``autoscaler.providers.kind``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from autoscaler.config.schema import RunConfig
from autoscaler.core.billing import BillingModel
from autoscaler.core.errors import AutoscalerError
from autoscaler.providers import registry
from autoscaler.providers.base import Provider
from autoscaler.providers.kind import BootContext, RunContext

if TYPE_CHECKING:
    from autoscaler.bootstrap.ssh import SshBootstrap

UNAVAILABLE_S = 600.0
LIMIT_HOLD_S = 900.0
RECOVER_S = 1800.0
"""How long a type without capacity is avoided, scale-up of a provider's types held
after its limit, and the types then take to regain full weight in the plans (Ray's
autoscaler forgets a node type's launch failure after 30 min:
AUTOSCALER_NODE_AVAILABILITY_MAX_STALENESS_S), for providers without an ``ec2``
section's own settings."""


@dataclass(frozen=True, slots=True)
class Holds:
    """What a refused launch costs the types it names, in seconds."""

    unavailable_s: float  # a type without capacity is avoided this long
    limit_s: float  # scale-up of a provider's types waits this long after a limit
    recover_s: float  # then the types avoided regain full weight over this long


def holds(cfg: RunConfig) -> Holds:
    """The holds of ``cfg``'s provider (its ``ec2`` section's, else the defaults)."""
    if cfg.ec2 is not None:
        return Holds(cfg.ec2.unavailable_s, cfg.ec2.limit_hold_s, cfg.ec2.recover_s)
    return Holds(UNAVAILABLE_S, LIMIT_HOLD_S, RECOVER_S)


def make_provider(
    cfg: RunConfig,
    *,
    billing: BillingModel,
    run_id: str,
    run_dir: Path,
    token: str,
    url: str,
    workdir: Path,
    clock: Callable[[], float],
) -> Provider:
    """The provider a real run of ``cfg`` uses; a clear error for one that cannot run."""
    build = registry.kind(cfg.provider).build
    if build is None:
        raise AutoscalerError(
            f"provider {cfg.provider!r} cannot run for real: set provider to one of "
            f"{', '.join(registry.real_kinds())} (or use --dry-run)"
        )
    return build(cfg, RunContext(billing, run_id, run_dir, token, url, workdir, clock))


def make_bootstrap(
    cfg: RunConfig, run_dir: Path, token: str, local_port: int, provider: Provider
) -> SshBootstrap | None:
    """The bootstrapper that starts agents on the run's machines; None where the
    machines start their own (local agents, Grid Engine jobs, EC2 user data)."""
    bootstrapper = registry.kind(cfg.provider).bootstrapper
    if bootstrapper is None:
        return None
    return bootstrapper(cfg, BootContext(run_dir, token, local_port, provider))

"""From a config to the real things that carry it out: providers and bootstrappers.

The daemon builds its provider and bootstrapper here, through the provider registry:
each kind knows how it is built from a config (``autoscaler.providers.kind``).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from autoscaler.config.schema import RunConfig
from autoscaler.core.billing import BillingModel
from autoscaler.core.errors import AutoscalerError
from autoscaler.providers import multi, registry
from autoscaler.providers.base import Provider
from autoscaler.providers.kind import BootContext, RunContext

if TYPE_CHECKING:
    from autoscaler.config.schema import Platform
    from autoscaler.providers.kind import Bootstrapper

ProviderBuild = Callable[["Platform", RunContext], Provider]
"""How a provider is built from a config and a run's context (``ProviderKind.build``)."""


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
    build: ProviderBuild | None = None,
    ca_pem: str | None = None,
) -> Provider:
    """The provider a real run of ``cfg`` uses; a clear error for one that cannot run.

    ``build``: the caller's own instead of the config's kind (a benchmark's simulated
    machines, ``benchmarks/sim_provider.py``); the config still says how time and
    billing run. ``ca_pem``: the run's CA, when the dispatcher serves https."""
    ctx = RunContext(billing, run_id, run_dir, token, url, workdir, clock, ca_pem)
    if build is not None:
        return build(cfg, ctx)
    if cfg.providers is not None:
        return multi.build(cfg, ctx)
    build = registry.kind(cfg.provider).build
    if build is None:
        raise AutoscalerError(
            f"provider {cfg.provider!r} cannot run for real: set provider to one of "
            f"{', '.join(registry.real_kinds())} (or use --dry-run)"
        )
    return build(cfg, ctx)


def direct_hosts(cfg: RunConfig) -> list[str]:
    """Where agents that connect directly reach the dispatcher (the hosts of the
    ``controller_url`` of every EC2 section whose machines start their agents from user
    data): the dispatcher serves https, its certificate from the run's CA, when there is
    one. Agents over an SSH tunnel, local agents and cluster jobs need none; an SSH
    bootstrap beside such agents is refused (its tunnels carry plain HTTP)."""
    hosts: list[str] = []
    tunnelled = False
    for name in cfg.provider_names():
        how = registry.kind(cfg.kind_of(name)).direct
        if how is not None:
            seen = how(cfg.for_provider(name))
            hosts += seen.hosts
            tunnelled = tunnelled or seen.tunnelled
    if hosts and tunnelled:
        raise AutoscalerError(
            "providers: an ec2 provider with bootstrap: ssh cannot share a run with one with "
            "bootstrap: user-data (the dispatcher serves those agents https only)"
        )
    return hosts


def make_bootstrap(
    cfg: RunConfig, run_dir: Path, token: str, local_port: int, provider: Provider
) -> Bootstrapper | None:
    """The bootstrapper that starts agents on the run's machines; None where the
    machines start their own (local agents, Grid Engine jobs, EC2 user data)."""
    if cfg.providers is not None:
        return multi.bootstrapper(cfg, BootContext(run_dir, token, local_port, provider))
    bootstrapper = registry.kind(cfg.provider).bootstrapper
    if bootstrapper is None:
        return None
    return bootstrapper(cfg, BootContext(run_dir, token, local_port, provider))

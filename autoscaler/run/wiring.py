"""From a config to the real things that carry it out: providers and bootstrappers.

The daemon and ``autoscaler cleanup`` build their providers here, so the config's
sections map onto provider settings in one place. The cloud and cluster modules are
imported only when their provider is chosen: a local run needs neither boto3 nor fabric.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from autoscaler.bootstrap.agent_start import AgentSettings, agent_flags, agent_source
from autoscaler.config.schema import Platform, RunConfig
from autoscaler.core.billing import BillingModel
from autoscaler.core.errors import AutoscalerError
from autoscaler.providers.base import Capabilities, Provider
from autoscaler.providers.local import LocalProvider

if TYPE_CHECKING:
    from autoscaler.bootstrap.ssh import SshBootstrap
    from autoscaler.providers.ec2 import Ec2Settings

REAL_PROVIDERS = ("local", "sge", "ec2")

UNAVAILABLE_S = 600.0
LIMIT_HOLD_S = 900.0
"""How long a type without capacity is avoided, and scale-up held after an account
limit, for providers without an ``ec2`` section's own settings."""


def capabilities(cfg: RunConfig, billing: BillingModel) -> Capabilities:
    return Capabilities(
        billing=billing,
        spot=cfg.provider == "ec2",
        max_counts={t.name: t.max_count for t in cfg.machine_types},
        boot_estimate_s={t.name: t.boot_s for t in cfg.machine_types},
    )


def holds(cfg: RunConfig) -> tuple[float, float]:
    """(seconds a type without capacity is avoided, seconds scale-up waits on a limit)."""
    if cfg.ec2 is not None:
        return cfg.ec2.unavailable_s, cfg.ec2.limit_hold_s
    return UNAVAILABLE_S, LIMIT_HOLD_S


def agent_args(cfg: RunConfig) -> list[str]:
    """Agent flags every provider passes the same way."""
    d = cfg.daemon
    return agent_flags(d.heartbeat_s, d.orphan_after_s, d.tail_bytes)


def ec2_settings(cfg: Platform, user_data: str | None = None) -> Ec2Settings:
    from autoscaler.providers.ec2 import Ec2Settings, InstanceSpec

    e = cfg.ec2
    if e is None:
        raise AutoscalerError("provider is ec2 but the config has no ec2 section")
    return Ec2Settings(
        region=e.region,
        ami=e.ami,
        instances={
            name: InstanceSpec(t.instance_type, spot=t.spot, max_price=t.max_price)
            for name, t in e.types.items()
        },
        subnets=tuple(e.subnets),
        security_groups=tuple(e.security_groups),
        key_name=e.key_name,
        instance_profile=e.instance_profile,
        endpoint_url=e.endpoint_url,
        address=e.address,
        user_data=user_data,
        max_attempts=e.max_attempts,
    )


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
    if cfg.provider not in REAL_PROVIDERS:
        raise AutoscalerError(
            f"provider {cfg.provider!r} cannot run for real: set provider to one of "
            f"{', '.join(REAL_PROVIDERS)} (or use --dry-run)"
        )
    caps = capabilities(cfg, billing)
    d = cfg.daemon
    if cfg.provider == "ec2":
        from autoscaler.providers.ec2 import Ec2Provider

        assert cfg.ec2 is not None
        user_data = None
        if cfg.ec2.bootstrap == "user-data":
            from autoscaler.bootstrap.userdata import render_user_data

            assert cfg.ec2.controller_url is not None
            user_data = render_user_data(
                agent_source(),
                cfg.ec2.controller_url,
                token,
                agent_args(cfg),
                poweroff_on_exit=True,
            )
        return Ec2Provider(caps, run_id, ec2_settings(cfg, user_data), clock)
    python = sys.executable
    if cfg.provider == "sge":
        from autoscaler.providers.sge import SgeProvider, SgeType

        assert cfg.sge is not None
        python = cfg.sge.python or python
        workdir = cfg.sge.workdir or workdir
    else:
        python = cfg.local.python or python
    settings = AgentSettings(
        url=url,
        token=token,
        heartbeat_s=d.heartbeat_s,
        orphan_after_s=d.orphan_after_s,
        tail_bytes=d.tail_bytes,
        workdir=workdir,
        python=python,
    )
    if cfg.provider == "sge":
        assert cfg.sge is not None
        types = {
            name: SgeType(t.queue, t.resources, tuple(t.extra_args))
            for name, t in cfg.sge.types.items()
        }
        return SgeProvider(
            caps, run_id, settings, types, run_dir / "agents", clock, run_dir / "token"
        )
    return LocalProvider(caps, run_id, settings, run_dir / "agents", clock, cfg.time_scale)


def make_bootstrap(
    cfg: RunConfig, run_dir: Path, token: str, local_port: int, provider: Provider
) -> SshBootstrap | None:
    """The SSH bootstrapper of an EC2 run that starts agents over SSH; None otherwise."""
    if cfg.provider != "ec2" or cfg.ec2 is None or cfg.ec2.bootstrap != "ssh":
        return None
    from autoscaler.bootstrap.ssh import SshBootstrap, SshSettings

    ssh = cfg.ec2.ssh
    assert ssh is not None
    if not ssh.key_file.is_file():  # checked here: a dry run needs no key
        raise AutoscalerError(f"ec2.ssh.key_file: no such file: {ssh.key_file}")
    console = getattr(provider, "console_output", None)
    settings = SshSettings(
        user=ssh.user,
        key_file=ssh.key_file,
        known_hosts=run_dir / "known_hosts",
        host_key_policy=ssh.host_keys,
        connect=ssh.connect,
        port=ssh.port,
        remote_dir=ssh.remote_dir,
        python=ssh.python,
        poweroff_on_exit=ssh.poweroff_on_exit,
    )
    return SshBootstrap(settings, local_port, token, agent_args(cfg), console=console)

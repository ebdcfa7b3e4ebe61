"""How an EC2 run with ``bootstrap: ssh`` starts its agents: an SSH bootstrapper (fabric,
a reverse tunnel per instance) made from the ``ec2.ssh`` section."""

from __future__ import annotations

from typing import TYPE_CHECKING

from autoscaler.core.errors import AutoscalerError
from autoscaler.providers.kind import BootContext, agent_args

if TYPE_CHECKING:
    from autoscaler.bootstrap.ssh import SshBootstrap
    from autoscaler.config.schema import Platform


def ec2_agent_args(cfg: Platform) -> list[str]:
    """Agent flags on EC2: every provider's, and where to read a spot interruption notice
    (an on-demand instance never has one: the metadata answers 404)."""
    args = agent_args(cfg)
    if cfg.ec2 is not None and cfg.ec2.notice_url:
        args += ["--notice-url", cfg.ec2.notice_url]
        args += ["--notice-every-s", f"{cfg.ec2.notice_every_s:g}"]
    return args


def ssh_bootstrap(cfg: Platform, ctx: BootContext) -> SshBootstrap | None:
    """The SSH bootstrapper of a run with ``bootstrap: ssh``; None otherwise."""
    if cfg.ec2 is None or cfg.ec2.bootstrap != "ssh":
        return None
    from autoscaler.bootstrap.ssh import SshBootstrap, SshSettings

    ssh = cfg.ec2.ssh
    assert ssh is not None
    if not ssh.key_file.is_file():  # checked here: a dry run needs no key
        raise AutoscalerError(f"ec2.ssh.key_file: no such file: {ssh.key_file}")
    console = getattr(ctx.provider, "console_output", None)
    settings = SshSettings(
        user=ssh.user,
        key_file=ssh.key_file,
        known_hosts=ctx.run_dir / "known_hosts",
        host_key_policy=ssh.host_keys,
        connect=ssh.connect,
        port=ssh.port,
        remote_dir=ssh.remote_dir,
        python=ssh.python,
        poweroff_on_exit=ssh.poweroff_on_exit,
        ready_timeout_s=ssh.timeout_s,
    )
    return SshBootstrap(settings, ctx.local_port, ctx.token, ec2_agent_args(cfg), console=console)

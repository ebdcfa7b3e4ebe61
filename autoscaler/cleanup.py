"""``autoscaler cleanup``: machines that carry one of our run tags but no live run owns.

Every machine we start carries its run's id (an EC2 tag, a Grid Engine job name, a
local agent's environment). A run is live while a daemon holds the lock of its run
directory; a machine of any other run is a stray: a daemon killed and never resumed, or
a bug. Untagged machines are not ours and are never listed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from autoscaler.daemon import daemon_alive
from autoscaler.errors import AutoscalerError
from autoscaler.wiring import ec2_settings
from config.schema import RunConfig


@dataclass(frozen=True, slots=True)
class Tagged:
    id: str  # what the provider terminates by: an instance id, a job id, a pid
    run_id: str
    type: str
    state: str
    owner_pid: int | None  # the live daemon that owns it, if any


def _owner(run_id: str, runs: Sequence[Path]) -> int | None:
    for base in runs:
        run_dir = base / run_id
        if run_dir.is_dir():
            pid = daemon_alive(run_dir)
            if pid is not None:
                return pid
    return None


def find_strays(cfg: RunConfig, runs: Sequence[Path]) -> list[Tagged]:
    """Every machine of ours the config's provider knows, with its owner if live."""
    found: list[tuple[str, str, str, str]] = []
    if cfg.provider == "ec2":
        from providers.ec2 import list_tagged

        found = [(i.id, i.run_id, i.type, i.state) for i in list_tagged(ec2_settings(cfg))]
    elif cfg.provider == "sge":
        from providers.sge import list_tagged as list_jobs

        found = [(j.job_id, j.run_id, j.machine, j.state) for j in list_jobs()]
    elif cfg.provider == "local":
        from providers.local import MACHINE_TAG, RUN_TAG, tagged_processes

        found = [
            (str(pid), tags[RUN_TAG], tags[MACHINE_TAG], "running")
            for pid, tags in tagged_processes()
        ]
    else:
        raise AutoscalerError(
            f"provider {cfg.provider!r} starts no machines: nothing to clean up "
            "(give a config whose provider is local, sge or ec2)"
        )
    return [Tagged(i, run, t, st, _owner(run, runs)) for i, run, t, st in sorted(found)]


def terminate_strays(cfg: RunConfig, strays: Sequence[Tagged]) -> list[str]:
    """Terminate ``strays`` (never one a live run owns); the ids terminated."""
    ids = [m.id for m in strays if m.owner_pid is None]
    if not ids:
        return []
    if cfg.provider == "ec2":
        from providers.ec2 import terminate_instances

        return terminate_instances(ec2_settings(cfg), ids)
    if cfg.provider == "sge":
        from providers.sge import delete_jobs

        return delete_jobs(ids)
    from providers.local import terminate_tagged

    return terminate_tagged([int(i) for i in ids])

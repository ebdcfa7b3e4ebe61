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

from autoscaler.config.schema import RunConfig
from autoscaler.daemon import daemon_alive
from autoscaler.errors import AutoscalerError
from autoscaler.journal import JOURNAL_DB, SqliteJournal
from autoscaler.providers.base import split_machine_id
from autoscaler.wiring import ec2_settings


@dataclass(frozen=True, slots=True)
class Tagged:
    id: str  # what the provider terminates by: an instance id, a job id, a pid
    run_id: str
    type: str
    state: str
    owner_pid: int | None  # the live daemon that owns it, if any


def live_runs(runs: Sequence[Path]) -> dict[str, int]:
    """Run id -> daemon pid of every run under ``runs`` whose daemon holds its lock.

    The run id is read from each run directory's journal, not its name: ``run --out``
    names the directory anything.
    """
    live: dict[str, int] = {}
    for base in runs:
        if not base.is_dir():
            continue
        for run_dir in [base, *sorted(p for p in base.iterdir() if p.is_dir())]:
            if not (run_dir / JOURNAL_DB).is_file():
                continue
            pid = daemon_alive(run_dir)
            if pid is None:
                continue
            journal = SqliteJournal(run_dir / JOURNAL_DB)
            try:
                run_id = journal.meta().get("run_id")
            finally:
                journal.close()
            if run_id is not None:
                live[str(run_id)] = pid
    return live


def find_strays(cfg: RunConfig, runs: Sequence[Path]) -> list[Tagged]:
    """Every machine of ours the config's provider knows, with its owner if live."""
    found: list[tuple[str, str, str, str]] = []
    if cfg.provider == "ec2":
        from autoscaler.providers.ec2 import list_tagged

        found = [(i.id, i.run_id, i.type, i.state) for i in list_tagged(ec2_settings(cfg))]
    elif cfg.provider == "sge":
        from autoscaler.providers.sge import list_tagged as list_jobs

        found = [(j.job_id, j.run_id, split_machine_id(j.machine)[0], j.state) for j in list_jobs()]
    elif cfg.provider == "local":
        from autoscaler.providers.local import MACHINE_TAG, RUN_TAG, tagged_processes

        found = [
            (str(pid), tags[RUN_TAG], split_machine_id(tags[MACHINE_TAG])[0], "running")
            for pid, tags in tagged_processes()
        ]
    else:
        raise AutoscalerError(
            f"provider {cfg.provider!r} starts no machines: nothing to clean up "
            "(give a config whose provider is local, sge or ec2)"
        )
    live = live_runs(runs)
    return [Tagged(i, run, t, st, live.get(run)) for i, run, t, st in sorted(found)]


def terminate_strays(cfg: RunConfig, strays: Sequence[Tagged]) -> list[str]:
    """Terminate ``strays`` (never one a live run owns); the ids terminated."""
    ids = [m.id for m in strays if m.owner_pid is None]
    if not ids:
        return []
    if cfg.provider == "ec2":
        from autoscaler.providers.ec2 import terminate_instances

        return terminate_instances(ec2_settings(cfg), ids)
    if cfg.provider == "sge":
        from autoscaler.providers.sge import delete_jobs

        return delete_jobs(ids)
    from autoscaler.providers.local import terminate_tagged

    return terminate_tagged([int(i) for i in ids])

"""``autoscaler cleanup``: machines that carry one of our run tags but no live run owns.

Every machine we start carries its run's id (an EC2 tag, a Grid Engine job name, a
local agent's environment). A run is live while a daemon holds the lock of its run
directory; a machine of any other run is a stray: a daemon killed and never resumed, or
a bug. Untagged machines are not ours and are never listed.

Live runs are found where every daemon registers itself (``autoscaler.run.live_runs``), so
wherever a run's directory is and wherever cleanup is started; run directories under
``--runs`` count too (runs started before the registry, or under another state
directory). Liveness is always the run directory's lock, never an entry's existence.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from autoscaler.config.schema import Platform
from autoscaler.core.errors import AutoscalerError
from autoscaler.core.journal import JOURNAL_DB, SqliteJournal
from autoscaler.providers import multi, registry
from autoscaler.providers.kind import Sweeper
from autoscaler.run.live_runs import (
    RunEntry,
    Unreadable,
    entry_path,
    read_entries,
    read_entry,
    remove_entry,
    state_dir,
)
from autoscaler.run.rundir import daemon_alive, run_lock


@dataclass(frozen=True, slots=True)
class Owner:
    """The live run a machine belongs to: such a machine is never ended."""

    pid: int | None  # the run's daemon, when known
    source: str  # how the run was found live: its run directory, or an unreadable entry


@dataclass(frozen=True, slots=True)
class Tagged:
    id: str  # what the provider terminates by: an instance id, a job id, a pid
    run_id: str
    type: str
    state: str
    owner: Owner | None  # None: a stray


@dataclass(frozen=True, slots=True)
class Survey:
    machines: list[Tagged]
    notes: list[str]  # what the registry held that the user should hear about


def _scan_runs(runs: Sequence[Path]) -> dict[str, Owner]:
    """Live runs in the run directories under ``runs``.

    The run id is read from each run directory's journal, not its name: ``run --out``
    names the directory anything.
    """
    live: dict[str, Owner] = {}
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
                live[str(run_id)] = Owner(pid, str(run_dir.absolute()))
    return live


def _pid_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: it exists
        return True
    return True


def _check_entry(state: Path, entry: RunEntry) -> tuple[Owner | None, str | None]:
    """The entry's run if live, else None with the stale entry removed; and a note.

    A stale entry is removed while holding its run's lock, so a daemon resuming the run
    meanwhile (it registers only once it holds that lock) is seen as live, and its fresh
    entry is never removed in its place. A run whose lock cannot be looked at is kept.
    """
    where = str(entry.run_dir)
    try:
        pid = daemon_alive(entry.run_dir)
    except OSError as exc:
        return Owner(None, f"cannot check the lock of {where}"), (
            f"run {entry.run_id}: cannot check whether a daemon holds {where} ({exc}): "
            "its machines are kept"
        )
    if pid is not None:
        return Owner(pid, where), None
    if not entry.run_dir.is_dir():
        if _pid_exists(entry.pid):
            return Owner(entry.pid, where), (
                f"run {entry.run_id}: its directory {where} is gone but its daemon's "
                f"pid {entry.pid} still runs: its machines are kept"
            )
        return None, _forget(state, entry.run_id, f"{where} is gone")
    path = entry_path(state, entry.run_id)
    try:
        with run_lock(entry.run_dir):
            current = read_entry(path)
            if isinstance(current, RunEntry) and current.run_dir == entry.run_dir:
                return None, _forget(state, entry.run_id, f"no daemon holds {where}")
    except AutoscalerError:  # a daemon took the run since we looked: it is live
        pid = daemon_alive(entry.run_dir)
        return Owner(-1 if pid is None else pid, where), None
    except OSError as exc:  # cannot take the lock to remove the entry safely; it is free
        return None, f"run {entry.run_id}: no daemon holds {where}; its entry stays ({exc})"
    if isinstance(current, RunEntry):  # rewritten meanwhile, by a copy of the run elsewhere
        return _check_entry(state, current)
    return _kept(current) if path.exists() else (None, None)


def _kept(entry: Unreadable) -> tuple[Owner, str]:
    """An entry that cannot be read keeps its run's machines: whether it is live is unknown."""
    return Owner(None, f"unreadable registry entry {entry.path}"), (
        f"{entry.path}: cannot read it ({entry.reason}); the machines of run "
        f"{entry.run_id} are kept: delete the file if that run is over"
    )


def _forget(state: Path, run_id: str, why: str) -> str:
    """Remove a stale entry; what to tell the user."""
    try:
        remove_entry(state, run_id)
    except OSError as exc:
        return f"run {run_id}: {why}, but its stale registry entry stays ({exc})"
    return f"run {run_id}: removed its stale registry entry ({why})"


def live_runs(runs: Sequence[Path], state: Path) -> tuple[dict[str, Owner], list[str]]:
    """Run id -> owner of every live run: registered in ``state``, or under ``runs``.

    An entry that cannot be read keeps its run's machines (the run id is the file's
    name): whether that run is live is unknown, and ending a live run's machines is the
    one mistake cleanup must not make.
    """
    live: dict[str, Owner] = {}
    notes: list[str] = []
    for item in read_entries(state):
        owner, note = _kept(item) if isinstance(item, Unreadable) else _check_entry(state, item)
        if owner is not None:
            live[item.run_id] = owner
        if note is not None:
            notes.append(note)
    live.update(_scan_runs(runs))
    return live, notes


def _sweeper(cfg: Platform) -> Sweeper:
    if cfg.providers is not None:
        return multi.sweeper(cfg)
    make = registry.kind(cfg.provider).sweeper
    if make is None:
        raise AutoscalerError(
            f"provider {cfg.provider!r} starts no machines: nothing to clean up "
            f"(give a config whose provider is {' or '.join(registry.real_kinds())})"
        )
    return make(cfg)


def find_strays(cfg: Platform, runs: Sequence[Path], state: Path | None = None) -> Survey:
    """Every machine of ours the config's provider knows, with its owner if live.

    The machines are listed before the live runs are looked for: a run that starts in
    between has no machine in the list, and one that ends in between ends its own.
    """
    found = _sweeper(cfg).list_tagged()
    live, notes = live_runs(runs, state_dir() if state is None else state)
    machines = [
        Tagged(m.id, m.run_id, m.type, m.state, live.get(m.run_id))
        for m in sorted(found, key=lambda m: (m.id, m.run_id, m.type, m.state))
    ]
    return Survey(machines, notes)


def terminate_strays(cfg: Platform, strays: Sequence[Tagged]) -> list[str]:
    """Terminate ``strays`` (never one a live run owns); the ids terminated."""
    ids = [m.id for m in strays if m.owner is None]
    if not ids:
        return []
    return _sweeper(cfg).terminate(ids)

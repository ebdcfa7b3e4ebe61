"""Where this user's runs are: one small file per run a daemon runs now.

``autoscaler cleanup`` must never end a machine of a live run, wherever that run's
directory is (``run --out`` puts it anywhere). Every daemon therefore writes
``live/<run_id>.json`` (its run directory, its pid, when it started) into the user's
state directory once it holds its run lock, new or resumed, and removes it when the run
ends. The entry alone proves nothing: a killed daemon leaves its entry behind. A reader
decides liveness from the run itself, by whether the entry's run directory is locked
(``daemon_alive``), and an entry whose directory is not locked is stale.

The state directory is ``$AUTOSCALER_STATE_DIR`` if set, else
``$XDG_STATE_HOME/autoscaler``, else ``~/.local/state/autoscaler``.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from autoscaler.core.atomic import write_atomic
from autoscaler.core.errors import AutoscalerError

STATE_DIR_ENV = "AUTOSCALER_STATE_DIR"
LIVE_DIR = "live"
_SUFFIX = ".json"


def state_dir(env: Mapping[str, str] | None = None) -> Path:
    """This user's state directory (not created here)."""
    env = os.environ if env is None else env
    if env.get(STATE_DIR_ENV):
        return Path(env[STATE_DIR_ENV]).expanduser().absolute()
    xdg = env.get("XDG_STATE_HOME", "")
    if xdg and Path(xdg).is_absolute():  # the XDG spec: a relative path is to be ignored
        return Path(xdg) / "autoscaler"
    try:
        home = Path.home()
    except RuntimeError as exc:
        raise AutoscalerError(
            f"no home directory to keep run state in ({exc}): set {STATE_DIR_ENV}"
        ) from None
    return home / ".local" / "state" / "autoscaler"


@dataclass(frozen=True, slots=True)
class RunEntry:
    """A run as its daemon registered it."""

    run_id: str
    run_dir: Path  # absolute: readers run from anywhere
    pid: int  # the daemon's
    started_at: str  # ISO 8601, UTC: when the daemon took the run (a resume is a new entry)


@dataclass(frozen=True, slots=True)
class Unreadable:
    """An entry that cannot be read: its run's liveness is unknown."""

    path: Path
    run_id: str  # from the file's name
    reason: str


def entry_path(state: Path, run_id: str) -> Path:
    if not run_id or "/" in run_id or run_id in (".", ".."):
        raise AutoscalerError(f"run id {run_id!r} cannot name a registry entry")
    return state / LIVE_DIR / f"{run_id}{_SUFFIX}"


def write_entry(state: Path, entry: RunEntry) -> Path:
    """Write ``entry`` atomically: a reader sees the old file or the new one, never half."""
    path = entry_path(state, entry.run_id)
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    text = json.dumps(
        {
            "run_id": entry.run_id,
            "run_dir": str(entry.run_dir),
            "pid": entry.pid,
            "started_at": entry.started_at,
        }
    )
    write_atomic(path, text + "\n", prefix=f"{entry.run_id}.")
    return path


def read_entry(path: Path) -> RunEntry | Unreadable:
    run_id = path.name.removesuffix(_SUFFIX)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        entry = RunEntry(
            run_id=str(data["run_id"]),
            run_dir=Path(str(data["run_dir"])),
            pid=int(data["pid"]),
            started_at=str(data["started_at"]),
        )
    except (OSError, ValueError, KeyError, TypeError) as exc:
        reason = f"{type(exc).__name__}: {exc}" if isinstance(exc, KeyError) else str(exc)
        return Unreadable(path, run_id, reason or type(exc).__name__)
    if entry.run_id != run_id:
        return Unreadable(path, run_id, f"it names run {entry.run_id!r}, not {run_id!r}")
    if not entry.run_dir.is_absolute():
        return Unreadable(path, run_id, f"run directory {entry.run_dir} is not absolute")
    return entry


def read_entries(state: Path) -> list[RunEntry | Unreadable]:
    """Every entry in the registry, sorted by run id (none if there is no registry yet)."""
    live = state / LIVE_DIR
    try:
        names = sorted(os.listdir(live))  # raises where a glob would see nothing
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise AutoscalerError(f"cannot list the run registry {live}: {exc}") from None
    return [read_entry(live / name) for name in names if name.endswith(_SUFFIX)]


def remove_entry(state: Path, run_id: str) -> None:
    entry_path(state, run_id).unlink(missing_ok=True)


@contextlib.contextmanager
def register(run_id: str, run_dir: Path, state: Path | None = None) -> Iterator[RunEntry]:
    """Registered while the block runs; call it only while holding the run's lock.

    A run that cannot register does not start: unregistered, its machines would look
    stray to ``autoscaler cleanup`` started anywhere but next to its directory.
    """
    state = state_dir() if state is None else state
    entry = RunEntry(
        run_id=run_id,
        run_dir=run_dir.absolute(),
        pid=os.getpid(),
        started_at=datetime.now(UTC).isoformat(timespec="seconds"),
    )
    try:
        write_entry(state, entry)
    except OSError as exc:
        raise AutoscalerError(
            f"cannot register the run in {state / LIVE_DIR} ({exc}): "
            f"set {STATE_DIR_ENV} to a writable directory"
        ) from None
    try:
        yield entry
    finally:
        try:
            current = read_entry(entry_path(state, run_id))
            if not isinstance(current, RunEntry) or current == entry:  # not another daemon's
                remove_entry(state, run_id)
        except OSError as exc:
            raise AutoscalerError(
                f"the run ended but its registry entry stays ({exc}); "
                "`autoscaler cleanup` removes it as stale"
            ) from exc

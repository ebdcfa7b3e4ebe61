"""The run registry, and how ``autoscaler cleanup`` decides from it which runs are live.

Liveness is a run directory's lock: here this process holds it (``run_lock``), as a
daemon would; ``daemon_alive`` opens the lock file anew, so it sees the lock as another
process would.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from autoscaler.core.errors import AutoscalerError
from autoscaler.core.journal import JOURNAL_DB, SqliteJournal
from autoscaler.run.cleanup import live_runs
from autoscaler.run.daemon import run_lock
from autoscaler.run.live_runs import (
    LIVE_DIR,
    STATE_DIR_ENV,
    RunEntry,
    Unreadable,
    entry_path,
    read_entries,
    register,
    state_dir,
    write_entry,
)

RUN = "r-20260101T000000Z-0001"


def entry(run_dir: Path, run_id: str = RUN, pid: int = 4242) -> RunEntry:
    return RunEntry(run_id, run_dir, pid, "2026-01-01T00:00:00+00:00")


def dead_pid() -> int:
    """The pid of a process that has exited (and been reaped)."""
    code = "import os; print(os.getpid())"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return int(done.stdout)


# --- where the registry is ---------------------------------------------------------------


def test_the_state_directory_follows_the_variable_then_xdg_then_home(tmp_path: Path) -> None:
    home = Path.home()
    assert state_dir({STATE_DIR_ENV: str(tmp_path), "XDG_STATE_HOME": "/x"}) == tmp_path
    assert state_dir({"XDG_STATE_HOME": "/x/state"}) == Path("/x/state/autoscaler")
    assert state_dir({}) == home / ".local" / "state" / "autoscaler"


def test_a_relative_xdg_state_home_is_ignored_as_the_spec_says() -> None:
    assert state_dir({"XDG_STATE_HOME": "state"}) == Path.home() / ".local/state/autoscaler"


# --- entries -------------------------------------------------------------------------------


def test_an_entry_reads_back_as_written(tmp_path: Path) -> None:
    written = entry(tmp_path / "run")
    path = write_entry(tmp_path, written)
    assert path == tmp_path / LIVE_DIR / f"{RUN}.json"
    assert read_entries(tmp_path) == [written]


def test_a_rewrite_replaces_the_file_and_leaves_no_temporary_behind(tmp_path: Path) -> None:
    """A reader holding the old file still reads it whole: the new one is a new file,
    renamed over the old (never truncated and rewritten in place)."""
    path = write_entry(tmp_path, entry(tmp_path / "run", pid=1))
    with path.open(encoding="utf-8") as old:
        write_entry(tmp_path, entry(tmp_path / "run", pid=2))
        assert json.loads(old.read())["pid"] == 1
    assert read_entries(tmp_path) == [entry(tmp_path / "run", pid=2)]
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name]


def test_no_registry_yet_means_no_entries(tmp_path: Path) -> None:
    assert read_entries(tmp_path / "nowhere") == []


def fields(**changed: object) -> str:
    """An entry's text with some fields changed (None: left out)."""
    data = {"run_id": RUN, "run_dir": "/r", "pid": 1, "started_at": "x", **changed}
    return json.dumps({k: v for k, v in data.items() if v is not None})


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("{not json", "Expecting property name"),
        (fields(run_dir=None), "run_dir"),
        (fields(run_id="other"), "names run 'other'"),
        (fields(run_dir="r"), "not absolute"),
        (fields(pid="one"), "'one'"),
    ],
)
def test_an_unreadable_entry_is_reported_with_its_reason(
    tmp_path: Path, text: str, reason: str
) -> None:
    path = entry_path(tmp_path, RUN)
    path.parent.mkdir(parents=True)
    path.write_text(text, encoding="utf-8")
    (found,) = read_entries(tmp_path)
    assert isinstance(found, Unreadable)
    assert (found.path, found.run_id) == (path, RUN)
    assert reason in found.reason


def test_temporaries_of_a_write_cut_short_are_not_entries(tmp_path: Path) -> None:
    write_entry(tmp_path, entry(tmp_path / "run"))
    (tmp_path / LIVE_DIR / f"{RUN}.abcd.tmp").write_text("{", encoding="utf-8")
    assert read_entries(tmp_path) == [entry(tmp_path / "run")]


def test_a_registry_that_cannot_be_listed_is_an_error_not_an_empty_list(tmp_path: Path) -> None:
    (tmp_path / LIVE_DIR).write_text("a file where the directory should be", encoding="utf-8")
    with pytest.raises(AutoscalerError, match="cannot list the run registry"):
        read_entries(tmp_path)


def test_a_run_id_that_is_no_file_name_is_refused(tmp_path: Path) -> None:
    with pytest.raises(AutoscalerError, match="cannot name a registry entry"):
        entry_path(tmp_path, "../escape")


# --- a daemon's registration ------------------------------------------------------------------


def test_register_holds_an_entry_for_the_block_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = tmp_path / "state"
    monkeypatch.chdir(tmp_path)
    with register(RUN, Path("run"), state) as mine:
        assert read_entries(state) == [mine]
        assert mine.run_dir == tmp_path / "run"  # absolute, whatever the cwd of readers
        assert mine.pid == os.getpid()
    assert read_entries(state) == []


def test_register_removes_its_entry_when_the_run_fails(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError), register(RUN, tmp_path / "run", tmp_path):
        raise RuntimeError("the run broke")
    assert read_entries(tmp_path) == []


def test_register_leaves_an_entry_another_daemon_wrote_since(tmp_path: Path) -> None:
    other = entry(tmp_path / "copy")
    with register(RUN, tmp_path / "run", tmp_path):
        write_entry(tmp_path, other)
    assert read_entries(tmp_path) == [other]


def test_a_run_that_cannot_register_does_not_start(tmp_path: Path) -> None:
    blocked = tmp_path / "state"
    blocked.write_text("a file, not a directory", encoding="utf-8")
    ran = False
    with (
        pytest.raises(AutoscalerError, match=f"cannot register the run.*{STATE_DIR_ENV}"),
        register(RUN, tmp_path / "run", blocked),
    ):
        ran = True
    assert not ran


# --- liveness, as cleanup decides it ---------------------------------------------------------


def run_dir_of(base: Path, run_id: str) -> Path:
    """A run directory not named after its run (as ``run --out`` makes one)."""
    run_dir = base / f"somewhere-{run_id[-4:]}"
    run_dir.mkdir(parents=True)
    journal = SqliteJournal(run_dir / JOURNAL_DB)
    journal.set_meta(run_id=run_id)
    journal.close()
    return run_dir


def test_a_registered_run_whose_directory_is_locked_is_live(tmp_path: Path) -> None:
    state, run_dir = tmp_path / "state", run_dir_of(tmp_path / "elsewhere", RUN)
    with run_lock(run_dir), register(RUN, run_dir, state):
        live, notes = live_runs([tmp_path / "runs"], state)
    assert live[RUN].pid == os.getpid()
    assert notes == []


def test_a_stale_entry_is_not_live_and_is_removed(tmp_path: Path) -> None:
    """The daemon died (lock free) and left its entry: stale, removed, said so."""
    state, run_dir = tmp_path / "state", run_dir_of(tmp_path, RUN)
    write_entry(state, entry(run_dir))
    live, notes = live_runs([], state)
    assert RUN not in live
    assert read_entries(state) == []
    assert len(notes) == 1
    assert "removed its stale registry entry" in notes[0]


def test_an_entry_whose_directory_and_daemon_are_gone_is_removed(tmp_path: Path) -> None:
    state = tmp_path / "state"
    write_entry(state, entry(tmp_path / "deleted", pid=dead_pid()))
    live, notes = live_runs([], state)
    assert live == {}
    assert read_entries(state) == []
    assert "is gone" in notes[0]


def test_an_entry_whose_directory_is_gone_but_daemon_runs_stays_live(tmp_path: Path) -> None:
    """A live daemon whose directory was deleted under it still owns its machines."""
    state = tmp_path / "state"
    write_entry(state, entry(tmp_path / "deleted", pid=os.getpid()))
    live, notes = live_runs([], state)
    assert live[RUN].pid == os.getpid()
    assert len(read_entries(state)) == 1
    assert "still runs" in notes[0]


def test_an_unreadable_entry_keeps_its_runs_machines_with_a_clear_note(tmp_path: Path) -> None:
    state = tmp_path / "state"
    path = entry_path(state, RUN)
    path.parent.mkdir(parents=True)
    path.write_text("{cut short", encoding="utf-8")
    live, notes = live_runs([], state)
    assert live[RUN].pid is None
    assert str(path) in live[RUN].source
    (note,) = notes
    assert note.startswith(f"{path}: cannot read it (Expecting property name")
    assert f"the machines of run {RUN} are kept" in note
    assert path.exists(), "an entry that cannot be read is not cleanup's to remove"


def test_runs_directories_still_count_beside_the_registry(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    unregistered = run_dir_of(runs, "old-20260101T000000Z-0002")
    with run_lock(unregistered):
        live, _ = live_runs([runs], tmp_path / "state")
    assert live["old-20260101T000000Z-0002"].pid == os.getpid()
    assert live_runs([runs], tmp_path / "state")[0] == {}

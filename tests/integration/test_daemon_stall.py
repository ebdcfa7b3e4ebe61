"""A daemon that stalls loses no machine to its own deafness (issue 36 §3).

The real daemon (``benchmarks/daemon_scale_run.py``, as ``autoscaler run`` starts it) runs
1,000 simulated agents (``benchmarks/sim_agents.py``) in a process of its own, each with
two synthetic tasks of about 8 s. Once every machine is up and tasks are running, the
daemon is stalled for 30 s on purpose:

* ``daemon``: the whole process stopped (SIGSTOP, then SIGCONT: the dispatcher is deaf
  too) while the agents go on: their tasks end, their polls go unread;
* ``host``: the agents' processes stopped with it (a paused host: a local run's agents
  live beside the daemon), and resumed ``AGENTS_LATE_S`` after it, as agents in their
  retry backoff are heard again only a moment after the daemon wakes. Health checks
  fall due every 0.25 s: one runs before any agent is heard, each agent's last request
  30 s old;
* ``main-loop``: only its main loop (the benchmark's ``stall_s``: its progress hook
  sleeps while the dispatcher's threads go on), which leaves polls unanswered.

Afterwards, from the run's journal: no machine was lost, every task was assigned once
and done once, and all were done.

No timing is checked: the stall only has to be longer than ``daemon.lost_after_s`` (15 s)
and shorter than the agents' patience (``orphan_after_s``, 60 s).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
import subprocess
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from autoscaler.core.journal import JOURNAL_DB, SqliteJournal
from autoscaler.core.model import Assign, AssignGroup, MachineLost, MachineReady, TaskDone
from benchmarks.daemon_scale import alive_pids, run_child
from benchmarks.daemon_scale_run import Spec

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.long(3),
    # 1,000 agents and their dispatcher threads on the host: a host loaded beside them
    # starves the agents themselves, which a daemon rightly loses.
    pytest.mark.alone,
    # The variants one after another on one worker: two runs of 1,000 agents beside
    # each other would starve each other's agents.
    pytest.mark.xdist_group("stall"),
]

AGENTS, TASKS_EACH, TASK_S, PER_PROCESS = 1000, 2, 8.0, 500
STALL_S = 30.0
AGENTS_LATE_S = 3.0
UP_WITHIN_S = 600.0  # patience for the run to reach the stall, and to end: never a check


def journal_counts(run_dir: Path) -> tuple[int, int]:
    """(machines ready, tasks done) journaled so far; (0, 0) before the journal exists."""
    path = run_dir / JOURNAL_DB
    if not path.exists():
        return 0, 0
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5)
    try:
        counts = dict(
            db.execute(
                "SELECT type, COUNT(*) FROM journal WHERE type IN ('MachineReady', 'TaskDone')"
                " GROUP BY type"
            ).fetchall()
        )
    except sqlite3.OperationalError:  # the schema is not written yet
        return 0, 0
    finally:
        db.close()
    return counts.get("MachineReady", 0), counts.get("TaskDone", 0)


def stall_due(run_dir: Path) -> bool:
    """Every machine is up and a first result is in: the other machines' tasks run."""
    ready, done = journal_counts(run_dir)
    return ready >= AGENTS and done >= 1


def wait_for(what: str, proc: subprocess.Popen[bytes], ready: Callable[[], bool]) -> None:
    deadline = time.monotonic() + UP_WITHIN_S
    while not ready():
        if proc.poll() is not None:
            raise AssertionError(f"the daemon exited {proc.returncode} before {what}")
        if time.monotonic() > deadline:
            raise AssertionError(f"the run did not reach {what}")
        time.sleep(0.5)


def generators(out: Path) -> list[int]:
    """The pids of the run's load generators (its agents), alive now."""
    return alive_pids(out / "generators.pids", ("benchmarks.sim_agents",))


def run_with_stall(out: Path, stall: str) -> tuple[Path, dict[str, Any]]:
    """The run, stalled once every machine is up and tasks are running; its run
    directory and figures. Every process it started is ended, by pid (``run_child``)."""
    tasks = AGENTS * TASKS_EACH
    spec = Spec(AGENTS, tasks, TASK_S, PER_PROCESS, str(out))
    if stall == "main-loop":  # as ``stall_due``: the first result is in
        spec = Spec(AGENTS, tasks, TASK_S, PER_PROCESS, str(out), stall_s=STALL_S, stall_at_done=1)
    run_dir = out / "run"

    def stop_and_go(proc: subprocess.Popen[bytes]) -> None:
        """SIGSTOP the daemon (and the agents, for ``host``) for ``STALL_S``."""
        if stall == "main-loop":
            return  # the daemon's own progress hook sleeps
        wait_for("every machine up and a task done", proc, lambda: stall_due(run_dir))
        agents = [] if stall == "daemon" else generators(out)
        stopped: list[int] = []
        try:
            for pid in [*agents, proc.pid]:
                os.kill(pid, signal.SIGSTOP)
                stopped.append(pid)
            time.sleep(STALL_S)
            os.kill(proc.pid, signal.SIGCONT)
            if agents:
                time.sleep(AGENTS_LATE_S)
        finally:
            for pid in stopped:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGCONT)

    figures, _ = run_child(spec, during=stop_and_go, limit_s=UP_WITHIN_S)
    return run_dir, figures


@pytest.mark.parametrize("stall", ["daemon", "host", "main-loop"])
def test_a_daemon_stalled_30s_loses_no_machine_and_runs_no_task_twice(
    tmp_path: Path, stall: str
) -> None:
    run_dir, figures = run_with_stall(tmp_path / "row", stall)
    if stall == "main-loop":
        assert "stalled" in figures  # the main loop did stall
    journal = SqliteJournal(run_dir / JOURNAL_DB)
    try:
        records = list(journal.records())
    finally:
        journal.close()
    done = Counter(r.item.task for r in records if isinstance(r.item, TaskDone))
    assigned: Counter[int] = Counter()
    for r in records:
        if isinstance(r.item, Assign):
            assigned[r.item.task] += 1
        elif isinstance(r.item, AssignGroup):
            assigned.update(r.item.tasks)
    end = max(r.t for r in records if isinstance(r.item, TaskDone))
    lost = [r.item for r in records if isinstance(r.item, MachineLost) and r.t <= end]
    ready = sum(1 for r in records if isinstance(r.item, MachineReady))
    assert ready == AGENTS
    assert lost == []
    assert sorted(done) == list(range(AGENTS * TASKS_EACH))  # all done
    assert set(done.values()) == {1}  # each once
    assert set(assigned.values()) == {1}  # none run again
    assert figures["stop_reason"] is None

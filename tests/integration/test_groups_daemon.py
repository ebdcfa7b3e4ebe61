"""Real runs with slots and task groups: the daemon, its dispatcher and agent processes
that run several tasks at once and report many results per request (time-scaled local
runs, ``daemon_helpers``)."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

import pytest

from autoscaler.providers.local import run_processes
from tests.integration.daemon_helpers import (
    assert_clean_end,
    done_counts,
    journal_rows,
    kill_agents,
    local_config,
    local_fields,
    run_id_of,
    start_daemon,
    wait_for,
)

pytestmark = pytest.mark.integration

SLOTS = 3


def slotted_types() -> list[dict[str, Any]]:
    """The local run's two types, each with ``SLOTS`` slots."""
    return [{**t, "slots": SLOTS} for t in local_fields()["machine_types"]]


def given_to(run_dir: Path, machine: str) -> list[int]:
    """Tasks assigned to ``machine``, one by one or in groups, in the journal's order."""
    tasks: list[int] = []
    for _, kind, data in journal_rows(run_dir):
        if data.get("machine") != machine:
            continue
        if kind == "Assign":
            tasks.append(data["task"])
        elif kind == "AssignGroup":
            tasks.extend(data["tasks"])
    return tasks


def test_an_agent_killed_mid_group_loses_no_task(tmp_path: Path) -> None:
    """kill -9 of an agent running several tasks: every task it held runs elsewhere,
    each task is done once, within budget, and no agent is left."""
    config = local_config(tmp_path, bag={"synthetic": 80}, machine_types=slotted_types())
    run_dir = tmp_path / "run"
    daemon = start_daemon(str(config), "--out", str(run_dir))
    try:
        wait_for(lambda: len(journal_rows(run_dir, "TaskDone")) >= 10, 60, "10 tasks done")
        run_id = run_id_of(run_dir)
        ready = {d["machine"] for _, _, d in journal_rows(run_dir, "MachineReady")}
        victim_pid, victim = next(
            (pid, tags["AUTOSCALER_MACHINE"])
            for pid, tags in run_processes(run_id)
            if tags["AUTOSCALER_MACHINE"] in ready
        )
        os.kill(victim_pid, signal.SIGKILL)
        assert daemon.wait(120) == 0, daemon.stdout.read() if daemon.stdout else ""
    finally:
        if daemon.poll() is None:
            daemon.kill()
        kill_agents(run_id_of(run_dir))
    lost = [d for _, _, d in journal_rows(run_dir, "MachineLost") if d["machine"] == victim]
    assert lost, f"{victim} was not noticed as lost"
    finished_there = {
        d["task"] for _, _, d in journal_rows(run_dir, "TaskDone") if d["machine"] == victim
    }
    cut = [t for t in given_to(run_dir, victim) if t not in finished_there]
    assert cut, "the killed agent had no task in hand"
    done = done_counts(run_dir)
    assert all(done[task] == 1 for task in cut), "a task cut off by the kill did not run again"
    report = json.loads((run_dir / "report.json").read_text())
    assert_clean_end(run_dir, report, 80)

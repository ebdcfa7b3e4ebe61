"""Task groups on real agents (issue 21 §2): many tasks per message, and nothing weaker.

Short tasks (about 30 emulated seconds, a tenth of a real second at 360x) under the
default group horizon (``daemon.group_s`` 2 real seconds): an agent is handed a group of
tasks at once. kill -9 of the daemon, or of an agent, in the middle of groups loses no
task and runs none to success twice.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

from autoscaler.providers.local import run_processes
from tests.integration.daemon_helpers import (
    agents_of,
    assert_clean_end,
    assigned_rows,
    done_counts,
    journal_rows,
    kill_agents,
    local_config,
    run_cli,
    run_id_of,
    start_daemon,
    wait_for,
)

N = 240


def short_tasks(tmp_path: Path, **overrides: object) -> Path:
    return local_config(
        tmp_path,
        bag={"synthetic": N},
        constraint={"budget": 80},
        emulator={"runtime": {"dist": "normal", "mean_s": "30s", "sd_s": "5s"}},
        **overrides,
    )


def groups_of(run_dir: Path) -> list[list[int]]:
    return [d["tasks"] for _, _, d in journal_rows(run_dir, "AssignGroup")]


def test_groups_are_one_record_each_and_every_task_runs_once(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    daemon = start_daemon(str(short_tasks(tmp_path)), "--out", str(run_dir))
    try:
        assert daemon.wait(180) == 0, daemon.stdout.read() if daemon.stdout else ""
    finally:
        if daemon.poll() is None:
            daemon.kill()
        kill_agents(run_id_of(run_dir))
    report = json.loads((run_dir / "report.json").read_text())
    assert_clean_end(run_dir, report, N)
    groups = groups_of(run_dir)
    assert groups, "no task group was handed out"
    assert max(len(g) for g in groups) >= 5
    # After the plan (sampling hands out tasks one by one), far fewer assignment
    # records than tasks: one per group.
    planned_at = min(
        t for t, _, d in journal_rows(run_dir, "Configure") if d["predicted_makespan_s"]
    )
    after = [(kind, d) for t, kind, d in journal_rows(run_dir) if t >= planned_at]
    records = sum(kind in ("Assign", "AssignGroup") for kind, _ in after)
    tasks = sum(len(d["tasks"]) if kind == "AssignGroup" else kind == "Assign" for kind, d in after)
    assert records < tasks / 3


def test_kill_9_of_the_daemon_mid_group_then_resume_loses_and_repeats_nothing(
    tmp_path: Path,
) -> None:
    run_dir = tmp_path / "run"
    daemon = start_daemon(str(short_tasks(tmp_path)), "--out", str(run_dir))
    try:
        wait_for(lambda: len(groups_of(run_dir)) >= 3, 90, "three groups handed out")
        wait_for(lambda: len(journal_rows(run_dir, "TaskDone")) >= 60, 90, "60 tasks done")
        run_id = run_id_of(run_dir)
        os.kill(daemon.pid, signal.SIGKILL)
        daemon.wait(10)
        assert agents_of(run_id), "agents should outlive a killed daemon"
        resumed = run_cli("run", "--resume", str(run_dir), timeout=180)
        assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    finally:
        if daemon.poll() is None:
            daemon.kill()
        kill_agents(run_id_of(run_dir))
    report = json.loads((run_dir / "report.json").read_text())
    assert report["stop_reason"] is None
    assert_clean_end(run_dir, report, N)


def test_an_agent_killed_mid_group_has_its_group_run_elsewhere(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    daemon = start_daemon(str(short_tasks(tmp_path)), "--out", str(run_dir))
    victim = None
    try:
        wait_for(lambda: len(groups_of(run_dir)) >= 2, 90, "two groups handed out")
        run_id = run_id_of(run_dir)
        holders = {m for _, _, d in journal_rows(run_dir, "AssignGroup") for m in [d["machine"]]}
        for pid, tags in run_processes(run_id):
            if tags["AUTOSCALER_MACHINE"] in holders:
                victim = tags["AUTOSCALER_MACHINE"]
                os.kill(pid, signal.SIGKILL)
                break
        assert victim is not None
        assert daemon.wait(180) == 0, daemon.stdout.read() if daemon.stdout else ""
    finally:
        if daemon.poll() is None:
            daemon.kill()
        kill_agents(run_id_of(run_dir))
    lost = [d for _, _, d in journal_rows(run_dir, "MachineLost") if d["machine"] == victim]
    assert lost, f"{victim} was not noticed as lost"
    handed = {d["task"] for _, _, d in assigned_rows(run_dir) if d["machine"] == victim}
    finished_there = {
        d["task"] for _, _, d in journal_rows(run_dir, "TaskDone") if d["machine"] == victim
    }
    cut = handed - finished_there
    assert cut, "the killed agent held no task"
    done = done_counts(run_dir)
    assert all(done[t] == 1 for t in cut)
    report = json.loads((run_dir / "report.json").read_text())
    assert_clean_end(run_dir, report, N)

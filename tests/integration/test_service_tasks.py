"""A job the service starts runs the tasks it was given, whole: their files in and out
and their timeout. The service's store kept only each task's command and env. A job of
its own had its files put back from its config (``run.start.with_files``) and its
bag's timeout from the run's one bag, but a deadline job in the shared pool (a run of
``jobs:``, with no run-wide bag) ran with no timeout: a hung task held its machine."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.integration.daemon_helpers import journal_rows
from tests.integration.service_helpers import ServiceProcess, service_config

pytestmark = pytest.mark.integration


def test_a_service_job_s_files_and_timeout_reach_its_tasks(tmp_path: Path) -> None:
    inputs = tmp_path / "in"
    inputs.mkdir()
    for i in range(3):
        (inputs / f"seed-{i}.txt").write_text(f"seed {i}\n")
    job = {
        "name": "whole",
        "bag": {
            # Task 2 would sleep past its timeout; the others copy their input.
            "command": "[ {i} = 2 ] && sleep 60; cat seed.txt > result.txt",
            "sweep": {"i": [0, 1, 2]},
            "timeout_s": 2,
            "max_retries": 0,
            "files": {
                "inputs": [{"path": str(inputs / "seed-{i}.txt"), "as": "seed.txt"}],
                "outputs": ["result.txt"],
            },
        },
        "constraint": {"budget": 30},
    }
    due = {
        "name": "due",
        "bag": {
            "command": "[ {i} = 1 ] && sleep 60; true",
            "sweep": {"i": [0, 1, 2]},
            "timeout_s": 2,
            "max_retries": 0,
        },
        "constraint": {"deadline_s": "3h"},
        "task_s": {"small": 600, "fast": 200},
    }
    svc = ServiceProcess(service_config(tmp_path), tmp_path / "state")
    try:
        job_id, due_id = svc.submit(job), svc.submit(due)
        for one in (job_id, due_id):
            waited = svc.client.call("GET", f"/api/v1/jobs/{one}/wait?timeout=120", timeout=150)
            assert waited["state"] in ("done", "failed"), waited
        run_dir = Path(svc.view(job_id)["run_dir"])
        due_report = Path(svc.view(due_id)["run_dir"]) / "report.json"
        pool = Path(json.loads(due_report.read_text())["shared_run"])
    finally:
        assert svc.stop() == 0
    failed = [d for _, _, d in journal_rows(pool, "TaskFailed")]
    assert [(d["task"], d["error"]) for d in failed] == [(1, "timed out after 2s")]
    for i in (0, 1):  # inputs put in place, outputs collected under outputs/<task>/
        assert (run_dir / "outputs" / str(i) / "result.txt").read_text() == f"seed {i}\n"
    failed = [d for _, _, d in journal_rows(run_dir, "TaskFailed")]
    assert [d["task"] for d in failed] == [2]
    assert failed[0]["error"] == "timed out after 2s"
    report = json.loads((run_dir / "report.json").read_text())
    assert report["tasks_done"] == 2

"""The service's commands as a user runs them against a real `autoscaler serve`: what
`update`, `cancel` and `jobs` print and their exit codes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from tests.integration.daemon_helpers import wait_for
from tests.integration.service_helpers import ServiceProcess, budget_job, service_config


def test_update_prints_the_new_budget_and_what_a_deadline_counts_from(tmp_path: Path) -> None:
    svc = ServiceProcess(service_config(tmp_path), tmp_path / "state")
    try:
        budget = svc.submit(budget_job("b", 300, 30))
        due = svc.submit(
            {"name": "due", "bag": {"synthetic": 200}, "constraint": {"deadline_s": "10h"}}
        )
        # The two jobs share the types' max_count: the budget job may wait for the deadline
        # pool's machines, so the deadline job is updated while it surely runs.
        wait_for(lambda: svc.view(due)["deadline_at"] is not None, 60, "the deadline job to run")
        moved = svc.cli("update", due, "--deadline", "12h")
        assert moved.returncode == 0, moved.stderr
        assert moved.stdout.strip() == f"{due}: deadline set to 12h from now (run time) (running)"

        wait_for(lambda: svc.view(budget)["done"] >= 1, 120, "the budget job to run")

        raised = svc.cli("update", budget, "--budget", "60")
        assert raised.returncode == 0, raised.stderr
        assert raised.stdout.strip() == f"{budget}: budget set to 60.00 (running)"

        # A budget job has no deadline to move: the error says what to update instead.
        wrong = svc.cli("update", budget, "--deadline", "2h")
        assert wrong.returncode == 2
        assert "runs under a budget, not a deadline: update its --budget" in wrong.stderr

        helped = svc.cli("update", "--help")
        words = " ".join(w for w in helped.stdout.split() if w not in ("│", "|"))
        assert "counted from now" in words
    finally:
        svc.stop(timeout=90)


def test_cancel_of_an_ended_job_is_an_error_and_jobs_reads_a_stopped_service(
    tmp_path: Path,
) -> None:
    state_dir = tmp_path / "state"
    svc = ServiceProcess(service_config(tmp_path), state_dir)
    try:
        job = svc.submit(budget_job("short", 10, 30))
        assert svc.cli("wait", job).returncode == 0
        ended = svc.cli("cancel", job)
        assert ended.returncode == 2
        assert f"error: {job} has ended (done): nothing to cancel" in ended.stderr
        assert ended.stdout == ""
    finally:
        assert svc.stop() == 0

    listed = ServiceProcess.cli(svc, "jobs")
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert lines[0] == f"the service of {state_dir} is not running: its jobs as it kept them"
    [row] = [line.split() for line in lines if line.split()[:1] == [job]]
    assert row[1:4] == ["short", "done", "10/10"]


def test_jobs_shows_the_date_of_a_deadline_that_is_not_today(tmp_path: Path) -> None:
    svc = ServiceProcess(service_config(tmp_path), tmp_path / "state")
    try:
        at = (datetime.now(UTC) + timedelta(days=3)).replace(microsecond=0)
        due = svc.submit(
            {
                "name": "later",
                "bag": {"synthetic": 20},
                "constraint": {"deadline_at": at.isoformat()},
            }
        )
        wait_for(lambda: svc.view(due)["deadline_at"] is not None, 60, "the deadline job to run")
        listed = svc.cli("jobs")
        assert listed.returncode == 0, listed.stderr
        [row] = [line for line in listed.stdout.splitlines() if line.split()[:1] == [due]]
        assert f"/ {at.strftime('%Y-%m-%d')} " in row
    finally:
        svc.stop(timeout=90)

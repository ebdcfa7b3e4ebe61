"""Projects with budgets over a period, through a real `autoscaler serve` and the
commands a user runs: a job its project cannot pay is refused naming what is left, or
queued and started once money frees up; a deadline job without a budget stops when its
project's money runs out, and never spends past it."""

from __future__ import annotations

import json
import re
import shutil
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tests.integration.daemon_helpers import wait_for
from tests.integration.service_helpers import ServiceProcess, budget_job, service_config, write_job
from tests.integration.services import missing

pytestmark = pytest.mark.integration

PROJECTS = [
    {"name": "lab-a", "budget": 40},
    {"name": "lab-q", "budget": 40, "when_over": "queue"},
    {"name": "lab-d", "budget": 3},
]


def projects_service(tmp_path: Path, time_scale: float | None = None) -> ServiceProcess:
    """A service with ``PROJECTS`` (``time_scale``: other than the helpers' 360)."""
    scaled = {} if time_scale is None else {"local": {"time_scale": time_scale}}
    config = service_config(tmp_path, service={"projects": PROJECTS}, **scaled)
    return ServiceProcess(config, tmp_path / "state")


def standing(svc: ServiceProcess, project: str) -> dict[str, object]:
    status = svc.client.call("GET", "/api/v1/status")
    return next(p for p in status["service"]["projects"] if p["project"] == project)


def test_a_project_at_its_limit_refuses_a_job_naming_what_is_left(tmp_path: Path) -> None:
    # The first job must still run at the last command: at the helpers' scale it spent
    # its budget in about 25 s, and a loaded host's commands took longer (CI).
    svc = projects_service(tmp_path, time_scale=60)
    try:
        first = write_job(tmp_path, {**budget_job("first", 300, 30), "project": "lab-a"})
        taken = svc.cli("submit", str(first))
        assert taken.returncode == 0, taken.stderr
        job = taken.stdout.split()[0]

        over = write_job(tmp_path, {**budget_job("over", 10, 20), "project": "lab-a"})
        refused = svc.cli("submit", str(over))
        assert refused.returncode != 0
        assert "Traceback" not in refused.stderr
        [line] = refused.stderr.strip().splitlines()
        assert re.fullmatch(
            r"error: project lab-a has \$10\.00 left of \$40\.00 this month \(\d{4}-\d\d\); "
            r"job asks \$20\.00",
            line,
        ), line

        unknown = write_job(tmp_path, {**budget_job("unknown", 10, 20), "project": "lab-z"})
        named = svc.cli("submit", str(unknown))
        assert named.returncode == 2
        assert "project: 'lab-z' is not a project of this service; give one of: " in named.stderr
        assert "lab-a, lab-q, lab-d" in named.stderr

        lab = standing(svc, "lab-a")
        assert (lab["budget"], lab["period"]) == (40.0, "month")
        assert lab["spent"] + lab["held"] == pytest.approx(30.0)  # type: ignore[operator]
        raised = svc.cli("update", job, "--budget", "50")
        assert raised.returncode == 2, raised.stdout + raised.stderr
        assert "project lab-a has $10.00 left of $40.00 this month" in raised.stderr
        assert "a budget of $50.00 asks $20.00 more" in raised.stderr
        assert svc.cli("update", job, "--budget", "40").returncode == 0
        assert standing(svc, "lab-a")["left"] == pytest.approx(0.0)
        assert svc.cli("cancel", job).returncode == 0
    finally:
        svc.stop(timeout=90)


def test_a_queued_project_starts_a_job_once_an_earlier_one_returns_what_it_did_not_spend(
    tmp_path: Path,
) -> None:
    svc = projects_service(tmp_path)
    try:
        # Both by the API, a moment apart: a job of 10 tasks ends in a few seconds, and
        # a command's start on a loaded host (CI) took longer, so the early job had
        # ended and the later one was admitted at once.
        early = svc.submit({**budget_job("early", 10, 30), "project": "lab-q"})
        later = svc.submit({**budget_job("later", 10, 20), "project": "lab-q"})
        # Admitted to wait, as the service said when it took the job (the early job may
        # end and let it in before a view is asked for, on a busy host).
        log = (svc.state_dir / "service.log.jsonl").read_text().splitlines()
        (said,) = [
            e["waits"]
            for e in map(json.loads, log)
            if e.get("event") == "job submitted" and e.get("job") == later
        ]
        assert said.startswith(
            "waiting for money: project lab-q has $10.00 left of $40.00 this month"
        )

        assert svc.cli("wait", early, timeout=180).returncode == 0
        assert svc.cli("wait", later, timeout=180).returncode == 0
        ended = {j: svc.view(j) for j in (early, later)}
        assert ended[early]["cost"] <= 20.0  # what let the later job in
        assert all(v["state"] == "done" for v in ended.values())
        lab = standing(svc, "lab-q")
        spent = sum(v["cost"] for v in ended.values())
        assert lab["spent"] == pytest.approx(spent, abs=1e-3)
        assert lab["left"] == pytest.approx(40.0 - spent, abs=1e-3)

        def daily_by_project() -> dict[str, float]:
            by: dict[str, float] = {}
            for path in (svc.state_dir / "reports" / "daily").glob("*.json"):
                for g in json.loads(path.read_text())["groups"]["project"]:
                    by[g["name"]] = by.get(g["name"], 0.0) + g["cost"]
            return by

        wait_for(lambda: "lab-q" in daily_by_project(), 30, "the daily report of lab-q")
        assert daily_by_project()["lab-q"] == pytest.approx(spent, abs=1e-3)
        assert "| lab-q |" in "".join(
            p.read_text() for p in (svc.state_dir / "reports" / "daily").glob("*.md")
        )
    finally:
        svc.stop(timeout=90)


def test_a_deadline_job_without_a_budget_stops_when_its_project_s_money_runs_out(
    tmp_path: Path,
) -> None:
    svc = projects_service(tmp_path)
    try:
        job = svc.submit(
            {
                "name": "big",
                "project": "lab-d",
                "bag": {"synthetic": 200},
                "constraint": {"deadline_s": "3h"},
            }
        )
        wait_for(lambda: svc.view(job)["state"] != "queued", 60, "the job to start")
        waited = svc.cli("wait", job, timeout=180)
        assert waited.returncode == 3, waited.stdout + waited.stderr  # stopped
        view = svc.view(job)
        assert view["state"] == "stopped"
        assert view["stop_reason"].startswith(
            "project lab-d's money ran out (it had $3.00 left this month"
        ), view["stop_reason"]
        assert 0 < view["done"] < 200
        assert 0 < view["cost"] <= 3.0 + 1e-9
        assert view["spend"] <= 3.0 + 1e-9
        lab = standing(svc, "lab-d")
        assert lab["spent"] <= 3.0 + 1e-9  # type: ignore[operator]
        assert lab["held"] == 0.0

        more = write_job(tmp_path, {**budget_job("more", 10, 2), "project": "lab-d"})
        refused = svc.cli("submit", str(more))
        assert refused.returncode != 0
        assert "job asks $2.00" in refused.stderr
    finally:
        svc.stop(timeout=90)


class Calendar:
    """The service's wall clock, set to a date and running from there (``Service``'s
    ``clock``): a test crosses the end of a month without waiting for it."""

    def __init__(self, at: datetime) -> None:
        self.offset = 0.0
        self.set(at)

    def set(self, at: datetime) -> None:
        self.offset = at.timestamp() - time.time()

    def __call__(self) -> float:
        return time.time() + self.offset


FAKETIME_LIB = Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1")


def test_a_new_month_gives_a_project_its_budget_again(tmp_path: Path) -> None:
    """``autoscaler serve`` with its clock set by libfaketime to 31 December 23:50 (an
    offset from the real clock, read from a file each time the time is asked, the same
    for the service and the agents it starts): once a job has spent some of lab-a's and
    lab-q's money, a job asking the whole budget is refused (lab-a) or waits (lab-q);
    the clock set past midnight of 1 January, lab-a takes it, and lab-q's waiting job
    starts and runs. No job runs while the clock jumps (a running job's machines bill
    by the clock)."""
    if not FAKETIME_LIB.exists():
        missing("libfaketime is not installed (Debian's faketime package)")
    clock = tmp_path / "faketime"

    def set_clock(at: datetime) -> None:
        clock.write_text(f"{round(at.timestamp() - time.time()):+d}\n")

    set_clock(datetime(2026, 12, 31, 23, 50, tzinfo=UTC))
    projects = [
        {"name": "lab-a", "budget": 10},
        {"name": "lab-q", "budget": 10, "when_over": "queue"},
    ]
    config = service_config(tmp_path, service={"projects": projects})
    faked = {
        "LD_PRELOAD": str(FAKETIME_LIB),
        "FAKETIME_TIMESTAMP_FILE": str(clock),
        "FAKETIME_NO_CACHE": "1",
    }
    svc = ServiceProcess(config, tmp_path / "state", env=faked)
    try:
        for project in ("lab-a", "lab-q"):
            first = write_job(
                tmp_path, {**budget_job(f"first-{project}", 3, 5), "project": project}
            )
            taken = svc.cli("submit", str(first))
            assert taken.returncode == 0, taken.stderr
            assert svc.cli("wait", taken.stdout.split()[0], timeout=180).returncode == 0
        whole_a = write_job(tmp_path, {**budget_job("whole-a", 3, 10), "project": "lab-a"})
        refused = svc.cli("submit", str(whole_a))
        assert refused.returncode == 2, refused.stdout + refused.stderr
        assert "left of $10.00 this month (2026-12); job asks $10.00" in refused.stderr
        whole_q = write_job(tmp_path, {**budget_job("whole-q", 3, 10), "project": "lab-q"})
        queued = svc.cli("submit", str(whole_q))
        assert queued.returncode == 0, queued.stderr
        waits = queued.stdout.split()[0]
        assert svc.view(waits)["waiting"].startswith("waiting for money: project lab-q has $")

        set_clock(datetime(2027, 1, 1, 0, 0, 1, tzinfo=UTC))
        wait_for(
            lambda: standing(svc, "lab-a")["period_label"] == "2027-01", 30, "the service's January"
        )
        taken = svc.cli("submit", str(whole_a))
        assert taken.returncode == 0, taken.stderr
        for job in (taken.stdout.split()[0], waits):
            assert svc.cli("wait", job, timeout=180).returncode == 0, svc.events()
            assert svc.view(job)["state"] == "done"
        january = standing(svc, "lab-q")
        assert january["period_label"] == "2027-01"
        assert january["held"] == 0.0
    finally:
        svc.stop(timeout=90)


def test_a_job_asking_more_than_a_queued_projects_whole_budget_is_refused_not_queued(
    tmp_path: Path,
) -> None:
    """lab-q queues jobs its money cannot pay yet; a job asking $50 of a project of $40
    a month can never fit, and waited for ever. It is refused at once, naming both."""
    svc = projects_service(tmp_path)
    try:
        big = write_job(tmp_path, {**budget_job("big", 10, 50), "project": "lab-q"})
        refused = svc.cli("submit", str(big))
        assert refused.returncode != 0, refused.stdout
        assert "Traceback" not in refused.stderr
        [line] = refused.stderr.strip().splitlines()
        assert line == (
            "error: project lab-q's budget is $40.00 a month; "
            "job asks $50.00, more than the project ever has"
        ), line
        assert svc.client.call("GET", "/api/v1/jobs")["jobs"] == []
    finally:
        svc.stop(timeout=90)


def test_a_job_whose_run_is_deleted_still_counts_what_it_spent(tmp_path: Path) -> None:
    """A user deletes an ended job's run directory (to clean up its outputs), and the
    service restarts: its cost was counted as 0, so the project showed money it had
    spent and admitted jobs past its budget. Its stored cost counts."""
    svc = projects_service(tmp_path)
    try:
        job = svc.submit({**budget_job("spent", 10, 10), "project": "lab-a"})
        assert svc.cli("wait", job, timeout=180).returncode == 0
        cost = svc.view(job)["cost"]
        assert cost > 0
        assert standing(svc, "lab-a")["spent"] == pytest.approx(cost, abs=1e-3)
        run_dir = Path(svc.view(job)["run_dir"])
    finally:
        svc.stop(timeout=90)
    assert run_dir.is_dir()
    shutil.rmtree(run_dir)
    again = projects_service(tmp_path)
    try:
        lab = standing(again, "lab-a")
        assert lab["spent"] == pytest.approx(cost, abs=1e-3)
        assert lab["left"] == pytest.approx(40.0 - cost, abs=1e-3)
    finally:
        again.stop(timeout=90)

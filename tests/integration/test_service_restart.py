"""The service across a restart, as systemd or an upgrade does it: SIGTERM to `autoscaler
serve`, then a new `serve` on the same state directory. Running jobs hand their machines
over (their paid time is not lost) and the next service adopts them; while no service
runs, `jobs` and `status` read the runs' journals."""

from __future__ import annotations

import json
import re
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from autoscaler.cli.text import when
from autoscaler.core.billing import BillingModel
from tests.integration.daemon_helpers import (
    agents_of,
    assert_clean_end,
    committed_over_time,
    journal_rows,
    run_cli,
    run_id_of,
    wait_for,
)
from tests.integration.service_helpers import ServiceProcess, budget_job, service_config

pytestmark = pytest.mark.integration

PRICES = {"small": 1.0, "fast": 3.0}  # service_config's types
ATU_S = 4 * 3600.0  # 40 real seconds at 360x: the job and its restart fit in one unit


def _report(view: dict[str, Any]) -> dict[str, Any]:
    return json.loads((Path(view["run_dir"]) / "report.json").read_text())


def _paid_while_down(report: dict[str, Any], stop_t: float, resume_t: float) -> float:
    """What the units that the run's machines entered between the stop and the next
    service's first step cost: the time a restart may spend."""
    billing = BillingModel("fixed", ATU_S)
    extra = 0.0
    for m in report["machines"]:
        end = m["end_s"] if m["end_s"] is not None else resume_t
        if m["start_s"] >= stop_t or end <= stop_t:
            continue
        later = billing.units(min(end, resume_t) - m["start_s"])
        extra += PRICES[m["type"]] * (later - billing.units(stop_t - m["start_s"]))
    return extra


@pytest.mark.alone  # time-scaled: the job and its restart must fit in the machines' unit
def test_a_restarted_service_adopts_the_machines_and_spends_no_more(tmp_path: Path) -> None:
    """A job restarted mid-run (SIGTERM to the real `serve`, then a new `serve` on the same
    state directory) finishes every task, each once, and spends no more than the same
    job without the restart plus the units its machines entered while no service ran.
    SIGTERM hands the machines over (journaled ``HandedOver``; their agents live on) and
    the next service adopts them."""
    config = service_config(tmp_path, billing={"mode": "fixed", "atu_s": "4h"})
    job = budget_job("sweep", 120, 40)

    alone = ServiceProcess(config, tmp_path / "alone")
    try:
        first = alone.submit(job)
        waited = alone.cli("wait", first, timeout=240)
        assert waited.returncode == 0, waited.stdout + waited.stderr
        cost_alone = _report(alone.view(first))["cost"]
    finally:
        assert alone.stop() == 0

    state_dir = tmp_path / "state"
    svc = ServiceProcess(config, state_dir, release_on_exit=False)
    job_id = svc.submit(job)
    try:
        wait_for(lambda: svc.view(job_id)["done"] >= 20, 60, "tasks done before the restart")
        run_dir = Path(svc.view(job_id)["run_dir"])
    finally:
        assert svc.stop(signal.SIGTERM) == 0
    run_id = run_id_of(run_dir)
    kept = len(journal_rows(run_dir))
    handed = agents_of(run_id)
    svc = ServiceProcess(config, state_dir, release_on_exit=False)
    try:
        waited = svc.cli("wait", job_id, timeout=240)
        assert waited.returncode == 0, waited.stdout + waited.stderr
        report = _report(svc.view(job_id))
    finally:
        assert svc.stop() == 0

    rows = journal_rows(run_dir)
    (stop_t,) = [t for t, kind, _ in rows[:kept] if kind in ("HandedOver", "Interrupted")]
    resume_t = rows[kept][0]
    allowance = _paid_while_down(report, stop_t, resume_t)
    assert report["cost"] <= cost_alone + allowance + 1e-6, (
        f"cost {report['cost']} with a restart, {cost_alone} without, "
        f"{allowance} paid while no service ran"
    )
    assert_clean_end(run_dir, report, 120)
    assert handed, "the machines did not outlive the service that stopped"
    assert [kind for _, kind, _ in rows[:kept]][-1] == "HandedOver"
    assert agents_of(run_id) == []


def _row(listing: str, job_id: str) -> re.Match[str]:
    """``job_id``'s line of `autoscaler jobs`: state, done, tasks, spend, budget, finish."""
    found = re.search(
        rf"^\s*{job_id}\s+\S+\s+(\w+)\s+(\d+)/(\d+)\s+([\d.]+) / (\S+)\s+(\S+) / (\S+)",
        listing,
        re.MULTILINE,
    )
    assert found, f"no line of {job_id} in:\n{listing}"
    return found


def test_jobs_and_status_of_a_stopped_service_read_the_journals(tmp_path: Path) -> None:
    """With the service stopped, `autoscaler jobs` shows an interrupted job's tasks done
    and money committed as its journal has them, and says the service is not running;
    `autoscaler status` on the job's run directory says to start the service again (not
    `run --plan`, a held plan's advice). A job that ended shows when it finished, with
    the service running and stopped. The machines handed over, with no service to adopt
    them, end by themselves (their agents' leases, or their orphan time)."""
    state_dir = tmp_path / "state"
    svc = ServiceProcess(service_config(tmp_path), state_dir, release_on_exit=False)
    try:
        short = svc.submit(budget_job("short", 10, 30))
        assert svc.cli("wait", short, timeout=240).returncode == 0
        ended_at = svc.view(short)["ended_at"]
        long = svc.submit(budget_job("long", 120, 40))
        wait_for(lambda: svc.view(long)["done"] >= 20, 60, "tasks of the long job done")
        listed = svc.cli("jobs")
        assert listed.returncode == 0, listed.stderr
        finish = _row(listed.stdout, short).group(6)
        assert finish == when(ended_at, time.time()), listed.stdout
    finally:
        assert svc.stop(signal.SIGTERM) == 0
    run_dir = state_dir / "jobs" / long
    done = len(journal_rows(run_dir, "TaskDone"))
    committed = committed_over_time(run_dir)[-1]
    assert 20 <= done < 120

    listed = run_cli("jobs", "--state-dir", str(state_dir))
    assert listed.returncode == 0, listed.stderr
    assert "is not running" in listed.stdout
    row = _row(listed.stdout, long)
    assert row.group(1) == "interrupted"
    assert (int(row.group(2)), int(row.group(3))) == (done, 120), listed.stdout
    assert row.group(4) == f"{committed:.2f}", listed.stdout
    assert committed > 0
    assert _row(listed.stdout, short).group(6) == finish

    status = run_cli("status", str(run_dir))
    assert status.returncode == 0, status.stderr
    assert f"{done} done" in status.stdout
    assert f"autoscaler serve <its service config> --state-dir {state_dir}" in status.stdout
    assert "--plan" not in status.stdout, status.stdout
    assert "--resume" not in status.stdout, status.stdout
    run_id = run_id_of(run_dir)
    wait_for(lambda: agents_of(run_id) == [], 90, "the machines handed over to end by themselves")


@pytest.mark.alone  # time-scaled, with a deadline
def test_the_deadline_pool_is_handed_over_and_adopted_by_the_next_service(
    tmp_path: Path,
) -> None:
    """A deadline job in the service's shared pool, restarted mid-run: the pool's daemon
    journals ``HandedOver`` and keeps its machines; the next service adopts every one of
    them that still runs and the job meets its deadline, each task done once."""
    config = service_config(tmp_path, billing={"mode": "fixed", "atu_s": "4h"})
    state_dir = tmp_path / "state"
    pool = state_dir / "pool"
    job = {
        "name": "due",
        "bag": {"synthetic": 40},
        "constraint": {"deadline_s": "3h"},
        "task_s": {"small": 600, "fast": 200},
    }
    svc = ServiceProcess(config, state_dir, release_on_exit=False)
    try:
        job_id = svc.submit(job)
        wait_for(lambda: svc.view(job_id)["done"] >= 5, 60, "the pool job's first tasks")
    finally:
        assert svc.stop(signal.SIGTERM) == 0
    kept = len(journal_rows(pool))
    assert [kind for _, kind, _ in journal_rows(pool)][-1] == "HandedOver"
    handed = agents_of(run_id_of(pool))
    assert handed, "the pool's machines did not outlive the service"
    listed = run_cli("jobs", "--state-dir", str(state_dir))  # the pool's journal, its job's line
    assert listed.returncode == 0, listed.stderr
    row = _row(listed.stdout, job_id)
    done = len(journal_rows(pool, "TaskDone"))
    assert (row.group(1), int(row.group(2)), int(row.group(3))) == ("interrupted", done, 40)
    status = run_cli("status", str(pool))
    assert f"--state-dir {state_dir}" in status.stdout, status.stdout + status.stderr
    svc = ServiceProcess(config, state_dir)  # released when it stops: the pool stays open
    try:
        waited = svc.cli("wait", job_id, timeout=240)
        assert waited.returncode == 0, waited.stdout + waited.stderr
    finally:
        assert svc.stop(signal.SIGTERM) == 0
    assert agents_of(run_id_of(pool)) == []
    rows = journal_rows(pool)
    lost = [d for _, kind, d in rows[kept:] if kind == "MachineLost"]
    assert not [d for d in lost if d["reason"] == "ended while the daemon was down"], lost
    done = [d["task"] for _, kind, d in rows if kind == "TaskDone"]
    assert sorted(done) == list(range(40)), "a task was lost or done twice"


@pytest.mark.alone  # time-scaled budget jobs, the service killed meanwhile
def test_a_job_whose_run_cannot_be_read_fails_alone_and_the_service_starts(
    tmp_path: Path,
) -> None:
    """A service killed -9 with two jobs running, one of whose journals has lost its
    run's facts: the service starts again (it refused to start, exit 2: "the journal
    lacks 'run_id'"), that job fails saying why, the other is resumed and finishes, and
    `jobs` lists both. The unreadable job's machines, adopted by nobody, end by
    themselves."""
    import sqlite3

    state_dir = tmp_path / "state"
    config = service_config(tmp_path)
    svc = ServiceProcess(config, state_dir)
    broken = svc.submit(budget_job("broken", 600, 100))
    fine = svc.submit(budget_job("fine", 200, 60))
    wait_for(
        lambda: svc.view(broken)["done"] >= 3 and svc.view(fine)["done"] >= 3,
        90,
        "tasks of both jobs done",
    )
    svc.kill9()
    run_dir = state_dir / "jobs" / broken
    run_id = run_id_of(run_dir)
    with sqlite3.connect(run_dir / "journal.sqlite") as db:
        db.execute("DELETE FROM meta WHERE key = 'run_id'")
    svc = ServiceProcess(config, state_dir)
    try:
        waited = svc.cli("wait", fine, timeout=240)
        assert waited.returncode == 0, waited.stdout + waited.stderr + svc.events()
        assert svc.view(fine)["done"] == 200
        view = svc.view(broken)
        assert view["state"] == "failed", view
        assert "the journal lacks 'run_id'" in view["stop_reason"], view
        listed = svc.cli("jobs")
        assert listed.returncode == 0, listed.stderr
        assert broken in listed.stdout
        assert fine in listed.stdout
    finally:
        assert svc.stop() == 0
    wait_for(lambda: agents_of(run_id) == [], 90, "the unread job's machines to end")

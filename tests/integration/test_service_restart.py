"""The service across a restart, as systemd or an upgrade does it: SIGTERM to `autoscaler
serve`, then a new `serve` on the same state directory. Running jobs hand their machines
over (their paid time is not lost) and the next service adopts them; while no service
runs, `jobs` and `status` read the runs' journals."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import pytest

from autoscaler.core.billing import BillingModel
from tests.integration.daemon_helpers import (
    agents_of,
    assert_clean_end,
    journal_rows,
    run_id_of,
    wait_for,
)
from tests.integration.service_helpers import ServiceProcess, budget_job, service_config

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

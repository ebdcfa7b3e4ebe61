"""Several providers in one real run: two local providers (worker processes on this host,
each its own provider with its own agents' directory), one with a quota, driven by the
daemon through the composite provider; the report, journal, status and cleanup name
each machine's provider."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.integration.daemon_helpers import (
    assert_clean_end,
    isolated,
    journal_rows,
    local_fields,
    run_cli,
    run_in_process,
    wait_for,
)
from tests.integration.service_helpers import ServiceProcess, service_config_from
from tests.integration.services import missing

pytestmark = pytest.mark.integration


def two_providers(tmp: Path, *, quota: int = 2, **work: Any) -> Path:
    """``local_fields``' two types, each from a provider of its own; ``fast``'s provider
    lets the run have at most ``quota`` machines at once."""
    data: dict[str, Any] = {"name": "multi", **local_fields(), **work}
    data.pop("provider")
    data.pop("local")
    data["providers"] = {
        "here": {"kind": "local", "time_scale": 360},
        "there": {"kind": "local", "time_scale": 360, "max_machines": quota},
    }
    data["machine_types"][0]["provider"] = "here"
    data["machine_types"][1]["provider"] = "there"
    path = tmp / "run.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def test_a_bag_runs_on_two_providers_within_budget_and_quota(tmp_path: Path) -> None:
    """120 tasks on two local providers: every task done once, within budget; no more than
    the quota's machines of the limited provider were ever alive at once; the report
    splits machines and cost per provider, and the journal names each launch's."""
    config = two_providers(tmp_path, bag={"synthetic": 120}, constraint={"budget": 40})
    run_dir = tmp_path / "run"
    report = run_in_process(config, run_dir).report
    data = report.to_json()
    assert_clean_end(run_dir, data, 120)
    assert report.provider == "here (local), there (local)"
    assert set(report.providers) == {"here", "there"}
    for name, summary in report.providers.items():
        mine = [m for m in report.machines if m.provider == name]
        assert summary.machines == len(mine)
        assert summary.cost == pytest.approx(sum(m.cost for m in mine), abs=1e-3)
        assert summary.tasks_run == sum(m.tasks_run for m in mine)
    assert sum(p.cost for p in report.providers.values()) == pytest.approx(report.cost, abs=1e-3)
    assert {m.provider for m in report.machines if m.type == "small"} <= {"here"}
    assert {m.provider for m in report.machines if m.type == "fast"} <= {"there"}
    assert report.providers["there"].machines > 0, "the plan used the limited provider"
    # The quota: at no moment were more than 2 machines of "there" alive.
    events = sorted(
        [(m.start_s, 1) for m in report.machines if m.provider == "there"]
        + [(m.end_s, -1) for m in report.machines if m.provider == "there"],
        key=lambda e: (e[0], e[1]),
    )
    alive = most = 0
    for _, step in events:
        alive += step
        most = max(most, alive)
    assert most <= 2
    launched = journal_rows(run_dir, "MachineLaunched")
    assert launched
    assert {data["provider"] for _, _, data in launched} <= {"here", "there"}
    md = (run_dir / "report.md").read_text(encoding="utf-8")
    assert "| provider | kind | types |" in md
    status = run_cli("status", str(run_dir))
    assert status.returncode == 0, status.stderr
    assert "here (local):" in status.stdout
    assert "there (local):" in status.stdout


def test_cleanup_sweeps_every_provider_of_the_config(tmp_path: Path) -> None:
    """`autoscaler cleanup` on a config of several providers lists and ends the strays of
    each (here: none, the runs having ended their machines), naming the providers."""
    config = two_providers(tmp_path, bag={"synthetic": 4}, constraint={"budget": 10})
    # Local agents are host-wide and every test has a registry of its own: on this host,
    # the agents of other tests' live runs would look like strays, and --yes would end them.
    # In a PID namespace of its own, cleanup sees only what it starts.
    prefix = isolated()
    if not prefix:
        missing("no PID namespace here: cleanup would end other tests' agents")
    result = run_cli("cleanup", str(config), "--yes", cwd=tmp_path, prefix=prefix)
    assert result.returncode == 0, result.stderr
    assert "no stray machines of ours in here (local), there (local)" in result.stdout


def test_the_service_runs_a_job_on_two_providers_and_names_them(tmp_path: Path) -> None:
    """`autoscaler serve` on a platform of two local providers: a budget job runs on both,
    its machines carry their provider while it runs (the API's job view), and its report
    splits cost per provider; the service's status names its providers."""
    run_config = two_providers(tmp_path, quota=2)
    config = service_config_from(run_config, max_running_jobs=2)
    svc = ServiceProcess(config, tmp_path / "state")
    try:
        job_id = svc.submit(
            {"name": "sweep", "bag": {"synthetic": 60}, "constraint": {"budget": 30}}
        )
        seen: set[tuple[str, str]] = set()

        def done() -> bool:
            view = svc.view(job_id)
            seen.update((m["type"], m["provider"]) for m in view["machines"])
            return bool(view["state"] == "done")

        wait_for(done, 300, "the job to finish")
        assert seen, "machines were seen while the job ran"
        assert seen <= {("small", "here"), ("fast", "there")}
        view = svc.view(job_id)
        report = json.loads((Path(view["run_dir"]) / "report.json").read_text())
        assert set(report["providers"]) == {"here", "there"}
        assert sum(p["cost"] for p in report["providers"].values()) == pytest.approx(
            report["cost"], abs=1e-3
        )
        status = svc.client.call("GET", "/api/v1/status")
        assert status["service"]["provider"] == "here (local), there (local)"
    finally:
        assert svc.stop() == 0

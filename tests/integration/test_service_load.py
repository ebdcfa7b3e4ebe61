"""The service under load: 200 jobs submitted at once from 8 clients."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from autoscaler.service.client import Client
from tests.integration.daemon_helpers import agents_of, done_counts, run_id_of
from tests.integration.service_helpers import ServiceProcess, budget_job, service_config

JOBS = 200
CLIENTS = 8


@pytest.mark.long(2.5)  # 200 daemons, 8 at a time
def test_200_jobs_from_8_clients_none_lost_every_one_reported(tmp_path: Path) -> None:
    config = service_config(
        tmp_path,
        service={"max_running_jobs": 8, "plots": False},
        # Per-second billing: a job's machine goes once its two tasks are done, so 200
        # jobs pass in well under a minute (fixed hourly units would hold each for one).
        billing={"mode": "per_second", "atu_s": "1h", "min_charge_s": "1m"},
        # Two machines for each of the 8 jobs at once (the limit is the service's).
        machine_types=[{"name": "small", "price": 1, "max_count": 16, "boot_s": "1m"}],
        emulator={"speed": {}, "runtime": {"dist": "normal", "mean_s": "5m", "sd_s": "1m"}},
    )
    svc = ServiceProcess(config, tmp_path / "state")
    ids: list[list[str]] = [[] for _ in range(CLIENTS)]
    errors: list[BaseException] = []

    def client(k: int) -> None:
        api = Client(svc.state_dir)
        try:
            for i in range(k, JOBS, CLIENTS):
                answer = api.call("POST", "/api/v1/jobs", {"job": budget_job(f"n{i}", 2, 3)})
                ids[k].append(answer["id"])
        except BaseException as exc:  # reported below, in the test thread
            errors.append(exc)

    threads = [threading.Thread(target=client, args=(k,)) for k in range(CLIENTS)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        every = [i for client_ids in ids for i in client_ids]
        assert len(every) == JOBS
        assert len(set(every)) == JOBS, "a job id was given twice"
        listed = {v["id"]: v for v in svc.views()}
        assert set(listed) == set(every), "a job acknowledged is missing from the list"
        assert sorted(v["name"] for v in listed.values()) == sorted(f"n{i}" for i in range(JOBS))
        for job_id in every:
            waited = svc.client.call("GET", f"/api/v1/jobs/{job_id}/wait?timeout=240", timeout=300)
            assert waited["state"] == "done", waited
        for v in svc.views():
            run_dir = Path(v["run_dir"])
            report = json.loads((run_dir / "report.json").read_text())
            assert report["tasks_done"] == 2
            assert report["cost"] <= 3 + 1e-9
            assert sorted(done_counts(run_dir).elements()) == [0, 1]
            assert agents_of(run_id_of(run_dir)) == []
    finally:
        assert svc.stop() == 0

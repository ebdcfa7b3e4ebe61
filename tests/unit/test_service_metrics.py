"""The service's /metrics text, parsed back with prometheus_client's parser."""

from __future__ import annotations

from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from autoscaler.service.prometheus import JOB_STATES, render_metrics
from autoscaler.service.quota_ledger import Usage
from autoscaler.service.view import JobView


def view(**changes: Any) -> dict[str, Any]:
    """A JobView's JSON as the API gives it (issue 13), with ``changes``."""
    base: dict[str, Any] = {
        "id": "j1",
        "name": "sweep",
        "state": "running",
        "mode": "budget",
        "submitted_at": 1_700_000_000.0,
        "started_at": 1_700_000_010.0,
        "ended_at": None,
        "tasks": 100,
        "done": 40,
        "failed": 1,
        "running": 4,
        "spend": 0.12,
        "cost": 0.1,
        "budget": 1.0,
        "deadline_at": None,
        "predicted_finish_at": 1_700_003_600.0,
        "machines": [
            {"id": "m1", "type": "small", "state": "busy"},
            {"id": "m2", "type": "small", "state": "released"},
            {"id": "m3", "type": "fast", "state": "booting"},
        ],
        "stop_reason": None,
        "run_dir": "/tmp/jobs/j1",
    }
    return base | changes


def samples(body: bytes) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(body.decode("utf-8")):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def job(id_: str, name: str, **more: str) -> tuple[tuple[str, str], ...]:
    return tuple(sorted({"job": id_, "name": name, **more}.items()))


JOBS = [
    view(),
    view(
        id="j2",
        name="deadline run",
        state="queued",
        mode="deadline",
        started_at=None,
        done=0,
        failed=0,
        running=0,
        spend=0.0,
        cost=0.0,
        budget=None,
        deadline_at=1_700_007_200.0,
        predicted_finish_at=None,
        machines=[],
    ),
    view(
        id="j3",
        name="old",
        state="done",
        done=100,
        running=0,
        spend=0.5,
        cost=0.45,
        machines=[{"id": "m9", "type": "small", "state": "released"}],
    ),
]


def test_per_job_gauges_are_the_views_figures() -> None:
    body, content_type = render_metrics([JobView.from_json(v) for v in JOBS])
    assert content_type.startswith("text/plain")
    got = samples(body)
    for v in JOBS:
        key = job(v["id"], v["name"])
        for st in ("done", "failed", "running"):
            assert got[("autoscaler_job_tasks", job(v["id"], v["name"], state=st))] == v[st]
        assert got[("autoscaler_job_tasks", job(v["id"], v["name"], state="total"))] == v["tasks"]
        assert got[("autoscaler_job_spend_committed", key)] == v["spend"]
        assert got[("autoscaler_job_cost", key)] == v["cost"]
        for st in JOB_STATES:
            one = got[("autoscaler_job_state", job(v["id"], v["name"], state=st))]
            assert one == (1.0 if st == v["state"] else 0.0)


def test_budget_deadline_and_finish_only_when_set() -> None:
    got = samples(render_metrics([JobView.from_json(v) for v in JOBS])[0])
    j1, j2 = job("j1", "sweep"), job("j2", "deadline run")
    assert got[("autoscaler_job_budget", j1)] == 1.0
    assert ("autoscaler_job_budget", j2) not in got
    assert got[("autoscaler_job_deadline_timestamp_seconds", j2)] == 1_700_007_200.0
    assert ("autoscaler_job_deadline_timestamp_seconds", j1) not in got
    assert got[("autoscaler_job_predicted_finish_timestamp_seconds", j1)] == 1_700_003_600.0
    assert ("autoscaler_job_predicted_finish_timestamp_seconds", j2) not in got


def test_service_gauges_count_jobs_and_live_machines() -> None:
    got = samples(render_metrics([JobView.from_json(v) for v in JOBS])[0])
    by_state = {st: got[("autoscaler_service_jobs", (("state", st),))] for st in JOB_STATES}
    assert by_state == {st: float(sum(v["state"] == st for v in JOBS)) for st in JOB_STATES}
    # m1 busy and m3 booting; m2 and m9 released.
    assert got[("autoscaler_service_machines_alive", ())] == 2.0
    assert got[("autoscaler_service_spend_committed", ())] == pytest.approx(
        sum(v["spend"] for v in JOBS)
    )


def test_no_jobs_gives_zeros() -> None:
    got = samples(render_metrics([])[0])
    assert all(got[("autoscaler_service_jobs", (("state", st),))] == 0.0 for st in JOB_STATES)
    assert got[("autoscaler_service_machines_alive", ())] == 0.0
    assert not [k for k in got if k[0].startswith("autoscaler_job_")]


def test_each_shared_limit_shows_what_all_jobs_hold_against_it() -> None:
    quota = [
        Usage("type", "small", 6, {"j1": 4, "j3": 2}),
        Usage("type", "fast", 6, {}),
        Usage("provider", "campus", 8, {"j1": 4, "j3": 2}),
    ]
    body, _ = render_metrics([JobView.from_json(v) for v in JOBS], quota)
    got = samples(body)
    for kind, name, held, most in (("type", "small", 6, 6), ("type", "fast", 0, 6)):
        key = (("kind", kind), ("name", name))
        assert got[("autoscaler_service_quota_held", key)] == held
        assert got[("autoscaler_service_quota_max", key)] == most
    campus = (("kind", "provider"), ("name", "campus"))
    assert got[("autoscaler_service_quota_held", campus)] == 6
    assert got[("autoscaler_service_quota_max", campus)] == 8

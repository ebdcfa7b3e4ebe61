"""A user's requests to a real service, through the library the commands call
(service.control), and a service served in the foreground until stopped
(service.serving): what ``submit``, ``wait``, ``cancel``, ``jobs`` and ``serve`` rest on."""

from __future__ import annotations

from pathlib import Path

import pytest

from autoscaler.config.service_schema import load_service_config
from autoscaler.core.errors import AutoscalerError, ConfigError
from autoscaler.service import control
from autoscaler.service.client import API_FILE, Client
from autoscaler.service.service import Service
from autoscaler.service.serving import serving, stop
from tests.integration.service_helpers import (
    ServiceProcess,
    budget_job,
    service_config,
    write_job,
)

pytestmark = pytest.mark.integration


def test_a_job_is_submitted_waited_for_listed_and_kept_after_the_service_stops(
    tmp_path: Path,
) -> None:
    where = tmp_path / "state"
    svc = ServiceProcess(service_config(tmp_path), where)
    try:
        bad = write_job(tmp_path, {"name": "bad", "bag": {"synthetic": 3}, "constraint": {}})
        with pytest.raises(ConfigError) as refused:
            control.submit(where, bad)
        assert refused.value.source == "the service refused it:"
        assert refused.value.problems
        assert refused.value.problems[0].startswith("- ")

        path = write_job(tmp_path, budget_job("a-file", 10, 30))
        job = control.submit(where, path, name="short")
        waited = control.wait(where, job, None)
        assert waited.ended
        assert (control.outcome(waited.view), waited.view["done"]) == ("done", 10)
        assert control.exit_code(waited.view) == 0

        with pytest.raises(AutoscalerError, match=r"has ended \(done\): nothing to cancel"):
            control.cancel(where, job)

        listing = control.list_jobs(where)
        assert listing.running
        assert [(v["id"], v["name"], v["state"]) for v in listing.views] == [(job, "short", "done")]
    finally:
        assert svc.stop() == 0

    kept = control.list_jobs(where)
    assert not kept.running
    [view] = kept.views
    assert (view["id"], view["state"], view["done"], view["tasks"]) == (job, "done", 10, 10)


def test_served_its_api_answers_and_once_stopped_nothing_points_at_it(tmp_path: Path) -> None:
    where = tmp_path / "state"
    service = Service(load_service_config(service_config(tmp_path)), where)
    with serving(service, "127.0.0.1", 0) as api:
        assert Client(where).url == api.url
        assert control.list_jobs(where) == control.Listing([], running=True)
        stop(service, api, release=True)
    assert not (where / API_FILE).exists()
    assert control.list_jobs(where) == control.Listing([], running=False)

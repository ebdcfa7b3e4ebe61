"""Bad requests at a real ``autoscaler serve``, over HTTP: a body that is not JSON, an
update that gives both a budget and a deadline, and a browser without the token."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from tests.integration.service_helpers import ServiceProcess, budget_job, service_config

pytestmark = [pytest.mark.integration]


@pytest.fixture(scope="module")
def svc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceProcess]:
    tmp = tmp_path_factory.mktemp("bad")
    served = ServiceProcess(service_config(tmp), tmp / "state")
    try:
        yield served
    finally:
        served.stop()


def request(
    svc: ServiceProcess,
    method: str,
    path: str,
    body: bytes | None = None,
    headers: dict[str, str] | None = None,
    token: bool = True,
) -> tuple[int, str, str]:
    """The status, content type and body text of one request."""
    sent = {"Content-Type": "application/json", **(headers or {})}
    if token:
        sent["Authorization"] = f"Bearer {svc.client.token}"
    asked = urllib.request.Request(svc.client.url + path, data=body, method=method, headers=sent)
    try:
        with urllib.request.urlopen(asked, timeout=30) as answer:
            return answer.status, answer.headers["content-type"], answer.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers["content-type"], exc.read().decode()


def json_of(text: str) -> Any:
    return json.loads(text)


@pytest.mark.parametrize("body", [b"garbage", b"{not json", b'{"job": '])
def test_a_body_that_is_not_json_is_said_to_be_so(svc: ServiceProcess, body: bytes) -> None:
    status, _, text = request(svc, "POST", "/api/v1/jobs", body)
    assert status == 400, text
    answer = json_of(text)
    assert answer["error"] == "the request body is not JSON"
    assert len(answer["problems"]) == 1
    assert answer["problems"][0].startswith("body: not JSON (")
    assert "JSON decode error" not in text
    assert "got {}" not in text


def test_an_update_with_a_budget_and_a_deadline_is_a_bad_request_naming_both(
    svc: ServiceProcess,
) -> None:
    job = svc.submit(budget_job("both", tasks=4, budget=20.0))
    for deadline in ("deadline_s", "deadline_at"):
        body = json.dumps({"budget": 25.0, deadline: 7200.0 if deadline == "deadline_s" else 2e9})
        status, _, text = request(svc, "POST", f"/api/v1/jobs/{job}/update", body.encode())
        assert status == 400, text
        answer = json_of(text)
        assert answer["problems"] == [
            f"budget and {deadline}: give a budget or a deadline, not both"
        ]
    status, _, text = request(svc, "POST", f"/api/v1/jobs/{job}/update", b"{}")
    assert status == 400, text
    assert json_of(text)["problems"] == ["budget, deadline_s, deadline_at: give one of them"]


def test_a_browser_without_the_token_is_told_how_to_log_in(svc: ServiceProcess) -> None:
    """``GET /`` from a browser (``Accept: text/html``) answers a page on how to log in;
    an API client still gets the JSON 401, and the login it points to works."""
    browser = {"Accept": "text/html,application/xhtml+xml,*/*;q=0.8"}
    status, kind, text = request(svc, "GET", "/", headers=browser, token=False)
    assert status == 401
    assert kind.startswith("text/html")
    assert "autoscaler page" in text
    assert "/login?token=" in text
    assert "Authorization: Bearer" in text
    status, kind, text = request(svc, "GET", "/", token=False)
    assert status == 401
    assert kind == "application/json"
    assert json_of(text)["error"].startswith("no valid token")
    status, kind, text = request(svc, "GET", "/api/v1/jobs", headers=browser, token=False)
    assert (status, kind) == (401, "application/json")
    shown = svc.cli("page")
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.strip().startswith(f"{svc.client.url}/login?token=")

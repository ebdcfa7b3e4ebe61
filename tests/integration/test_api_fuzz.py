"""The service's API fuzzed from its own OpenAPI document (schemathesis) against a real
``autoscaler serve``, with each role's token (admin, submit, read): no 5xx, every answer as
documented (a refusal of the role is a documented 403), and every 4xx names what is
wrong."""

from __future__ import annotations

import re
import time
import urllib.parse
from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, settings
from schemathesis import Case
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    ignored_auth,
    response_schema_conformance,
    status_code_conformance,
)

from autoscaler.service.users import Role, issue
from tests.integration.service_helpers import ServiceProcess, service_config

pytestmark = [pytest.mark.integration, pytest.mark.slow]

FIELD = re.compile(r"^.+?: \S", re.DOTALL)
"""A problem line: ``field.path[0].name: what is wrong``."""


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceProcess]:
    tmp = tmp_path_factory.mktemp("fuzz")
    svc = ServiceProcess(service_config(tmp, service={"max_running_jobs": 1}), tmp / "state")
    try:
        yield svc
    finally:
        svc.stop()


@pytest.fixture(scope="module")
def api(served: ServiceProcess) -> Any:
    auth = {"Authorization": f"Bearer {served.client.token}"}
    return schemathesis.openapi.from_url(f"{served.client.url}/openapi.json", headers=auth)


schema = schemathesis.pytest.from_fixture("api")


@pytest.fixture(scope="module")
def tokens(served: ServiceProcess) -> dict[Role, str]:
    """A token of each role: the state directory's own (admin's), and one made for a
    submit and a read user."""
    made = {
        role: issue(served.state_dir, f"fuzz-{role.value}", role, None, time.time())[0]
        for role in (Role.SUBMIT, Role.READ)
    }
    return {Role.ADMIN: served.client.token, **made}


def names_what_is_wrong(ctx: Any, response: Any, case: Case) -> bool | None:
    """A 4xx answers ``{"error": ...}``; a 400 lists each bad field as ``field: why``;
    a 404 names the job or the endpoint asked for."""
    if not 400 <= response.status_code < 500:
        return None
    body = response.json()
    error = body.get("error")
    assert isinstance(error, str), f"a {response.status_code} without an error: {body}"
    assert error.strip(), body
    if response.status_code == 400:
        problems = body.get("problems")
        assert problems, f"a 400 that names no field: {body}"
        bad = [p for p in problems if not FIELD.match(p)]
        assert not bad, f"problems that name no field: {bad}"
    if response.status_code == 404:
        asked = (case.path_parameters or {}).get("job_id")
        named = asked is None or repr(urllib.parse.unquote(str(asked))) in error
        assert named or "no such endpoint" in error, body
    return True


@schema.parametrize()
@settings(
    max_examples=15,
    deadline=None,
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=list(HealthCheck),
)
def test_the_api_answers_every_request_as_documented(case: Case, tokens: dict[Role, str]) -> None:
    """Generated requests to every operation, with each role's token: never a 5xx, each
    status and body as the document says, a request without the token refused, and each
    4xx naming the field."""
    timeout = (case.query or {}).get("timeout")
    if isinstance(timeout, int | float) and not isinstance(timeout, bool) and timeout > 1:
        case.query = {**(case.query or {}), "timeout": 1}  # a job that exists would block
    for token in tokens.values():
        case.call_and_validate(
            headers={"Authorization": f"Bearer {token}"},
            checks=[
                not_a_server_error,
                status_code_conformance,
                content_type_conformance,
                response_schema_conformance,
                ignored_auth,
                names_what_is_wrong,
            ],
            timeout=30,
        )


def test_the_openapi_document_needs_the_token(served: ServiceProcess) -> None:
    """``/openapi.json`` is behind the token like every other endpoint but ``/login``."""
    import urllib.error
    import urllib.request

    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(f"{served.client.url}/openapi.json", timeout=10)
    assert refused.value.code == 401
    doc = served.client.call("GET", "/openapi.json")
    assert "/api/v1/jobs/{job_id}/update" in doc["paths"]
    assert doc["components"]["securitySchemes"]["bearer"]["scheme"] == "bearer"

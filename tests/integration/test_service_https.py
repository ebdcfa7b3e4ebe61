"""The service's API over HTTPS (issue 39 §5): a certificate made at the first start
(self-signed, kept in the state directory 0600) or the config's; its fingerprint in
``api.json``, pinned by the command line, which refuses a server with another
certificate; the status page in headless Chromium over it. ``autoscaler serve`` and the
CLI run as processes."""

from __future__ import annotations

import http.client
import json
import ssl
import stat
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from autoscaler.bootstrap.tls import fingerprint, self_signed
from tests.integration.service_helpers import budget_job, service_config, write_job
from tests.integration.test_status_page import serving as served

if TYPE_CHECKING:
    from playwright.sync_api import Browser

pytestmark = pytest.mark.integration


def test_a_self_signed_api_is_pinned_by_the_cli(tmp_path: Path) -> None:
    """``service.tls: {}``: the certificate is made once and kept (0600); the CLI
    submits and lists jobs over HTTPS; with another fingerprint in api.json it refuses
    the server with a one-line error (and submits nothing)."""
    config = service_config(tmp_path, service={"tls": {}})
    state = tmp_path / "state"
    with served(config, state) as service:
        info = json.loads((state / "api.json").read_text())
        assert info["url"].startswith("https://127.0.0.1:")
        cert, key = state / "api-cert.pem", state / "api-key.pem"
        assert info["fingerprint"] == fingerprint(cert.read_bytes())
        assert stat.S_IMODE(key.stat().st_mode) == 0o600
        assert stat.S_IMODE(cert.stat().st_mode) == 0o600
        job = write_job(tmp_path, budget_job("tls", tasks=4, budget=10))
        submitted = service.cli("submit", str(job))
        assert submitted.returncode == 0, submitted.stderr
        listed = service.cli("jobs")
        assert listed.returncode == 0, listed.stderr
        assert submitted.stdout.strip() in listed.stdout
        # The login cookie holds the token: over HTTPS it is never sent over plain HTTP.
        host, port = info["url"].removeprefix("https://").split(":")
        unpinned = ssl.create_default_context()
        unpinned.check_hostname, unpinned.verify_mode = False, ssl.CERT_NONE
        login = http.client.HTTPSConnection(host, int(port), context=unpinned, timeout=30)
        login.request("GET", f"/login?token={service.client.token}")
        cookie = login.getresponse().getheader("set-cookie") or ""
        login.close()
        assert cookie.startswith("autoscaler_token="), cookie
        assert "secure" in [part.strip().lower() for part in cookie.split(";")], cookie
        (state / "api.json").write_text(json.dumps({**info, "fingerprint": "0" * 64}))
        refused = service.cli("submit", str(job))
        assert refused.returncode != 0
        assert "is not the one api.json pins" in refused.stderr
        assert "Traceback" not in refused.stderr
        (state / "api.json").write_text(json.dumps(info))
        assert len(service.views()) == 1
    made = cert.read_bytes()
    with served(config, state):  # a restart keeps the certificate: the pin holds
        assert cert.read_bytes() == made


def test_the_configs_certificate_is_served_and_pinned(tmp_path: Path) -> None:
    cert, key = tmp_path / "site.pem", tmp_path / "site.key"
    self_signed(cert, key, ["127.0.0.1"])
    tls = {"cert_file": str(cert), "key_file": str(key)}
    config = service_config(tmp_path, service={"tls": tls})
    state = tmp_path / "state"
    with served(config, state) as service:
        info = json.loads((state / "api.json").read_text())
        assert info["fingerprint"] == fingerprint(cert.read_bytes())
        assert service.cli("jobs").returncode == 0
        assert not (state / "api-cert.pem").exists()


def test_a_config_with_half_a_certificate_is_refused(tmp_path: Path) -> None:
    config = service_config(tmp_path, service={"tls": {"cert_file": "x.pem"}})
    from tests.integration.daemon_helpers import run_cli

    checked = run_cli("serve", str(config), "--state-dir", str(tmp_path / "s"), timeout=60)
    assert checked.returncode == 2
    assert "service.tls" in checked.stderr
    assert "cert_file and key_file together" in checked.stderr


@pytest.mark.slow
def test_the_status_page_works_over_https(browser: Browser, tmp_path: Path) -> None:
    """Chromium (told to accept the self-signed certificate) logs in and sees a job."""
    config = service_config(tmp_path, service={"tls": {}})
    with served(config, tmp_path / "state") as service:
        job_id = service.submit(budget_job("page", tasks=4, budget=10))
        context = browser.new_context(ignore_https_errors=True)
        try:
            page = context.new_page()
            url = service.client.url
            response = page.goto(f"{url}/login?token={service.client.token}")
            assert response is not None
            assert response.ok, response.status
            assert page.url == f"{url}/"
            assert url.startswith("https://")
            page.wait_for_selector(f'tr[data-job-id="{job_id}"]', timeout=30_000)
        finally:
            context.close()

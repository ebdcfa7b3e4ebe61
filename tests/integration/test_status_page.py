"""The status page of a real service (``autoscaler serve``) in a real headless browser.

The service runs as a process on the example configuration (local provider, agents as
processes); a job is submitted with ``autoscaler submit``; chromium logs in through
``/login?token=...`` and the test reads the page's DOM as the job's tasks finish. The
last screenshot is kept in the test's directory and copied to ``/tmp/status_page.png``.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.integration.daemon_helpers import ROOT, wait_for
from tests.integration.service_helpers import ServiceProcess

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SERVICE_YAML = ROOT / "config" / "examples" / "service.yaml"
JOB_YAML = ROOT / "config" / "examples" / "job.yaml"
# Job names are refused at submit unless letters, digits, "_", "." and "-" (they name the
# run and its files); tests/unit/test_statuspage.py checks that every string is escaped.
NAME = "sweep.page-1"
SCREENSHOT_COPY = Path("/tmp/status_page.png")


@pytest.fixture
def served(tmp_path: Path) -> Iterator[ServiceProcess]:
    """``autoscaler serve`` on the example service file, stopped with SIGTERM at the end."""
    service = ServiceProcess(SERVICE_YAML, tmp_path / "state")
    try:
        yield service
    finally:
        try:
            service.stop()
        except subprocess.TimeoutExpired:
            service.proc.kill()
            service.proc.wait()


def done_of(page: Page, job_id: str) -> tuple[int, int]:
    """The job row's progress as the page shows it: its text ``done/tasks``."""
    text = page.locator(f'tr[data-job-id="{job_id}"] td[data-field="done"] .text').inner_text()
    match = re.fullmatch(r"(\d+)/(\d+)", text.strip())
    assert match, text
    return int(match[1]), int(match[2])


def test_page_follows_a_running_job(
    browser: Browser, served: ServiceProcess, tmp_path: Path
) -> None:
    """Logged in through ``/login``, the page lists the submitted job and its done count
    rises as tasks finish, in step with the API, with the name shown as plain text."""
    submitted = served.cli("submit", str(JOB_YAML), "--name", NAME)
    assert submitted.returncode == 0, submitted.stderr
    job_id = submitted.stdout.strip()

    context = browser.new_context(viewport={"width": 1300, "height": 900})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    try:
        response = page.goto(f"{served.client.url}/login?token={served.client.token}")
        assert response is not None
        assert response.ok, response.status
        assert page.url == f"{served.client.url}/"
        row = page.locator(f'tr[data-job-id="{job_id}"]')
        row.wait_for(timeout=60_000)

        assert row.locator('td[data-field="name"]').inner_text() == NAME
        tasks = served.view(job_id)["tasks"]
        seen = [done_of(page, job_id)]
        assert seen[0][1] == tasks

        def rose_twice() -> bool:
            now = done_of(page, job_id)
            if now != seen[-1]:
                seen.append(now)
            return len({d for d, _ in seen if d > 0}) >= 2

        wait_for(rose_twice, 300, f"the page's done count to rise twice (seen {seen})")
        assert [d for d, _ in seen] == sorted(d for d, _ in seen)
        assert page.locator("#error").is_hidden()

        detail = page.locator(f'section[data-job-detail="{job_id}"]')
        assert detail.locator('svg[data-chart="done"] polyline').count() == 1
        assert detail.locator('svg[data-chart="spend"] line.budget').count() == 1
        wait_for(
            lambda: detail.locator("tr[data-machine-id]").count() > 0,
            60,
            "the job's machines on the page",
        )
        assert served.view(job_id)["done"] >= seen[-1][0]
        assert errors == []
    finally:
        shot = tmp_path / "status_page.png"
        page.screenshot(path=str(shot), full_page=True)
        shutil.copyfile(shot, SCREENSHOT_COPY)
        context.close()


def test_page_and_api_refuse_a_browser_without_the_token(
    browser: Browser, served: ServiceProcess
) -> None:
    """A fresh browser (no cookie) gets 401 for the page (a page that says how to log in)
    and the API; a wrong token does not log it in."""
    context = browser.new_context()
    try:
        page = context.new_page()
        response = page.goto(f"{served.client.url}/")
        assert response is not None
        assert response.status == 401
        assert "autoscaler page" in page.inner_text("body")  # how to log in, not JSON
        for path in ("/", "/api/v1/status", f"/login?token={served.client.token}x"):
            answer = context.request.get(served.client.url + path, max_redirects=0)
            assert answer.status == 401, path
            assert "error" in answer.json()
        assert context.cookies() == []
    finally:
        context.close()

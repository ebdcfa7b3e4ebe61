"""The status page of a real service (``autoscaler serve``) in a real headless browser.

The service runs as a process on the example configuration (local provider, agents as
processes); jobs are submitted with ``autoscaler submit`` or the API; chromium logs in
through ``/login?token=...`` and the tests read the page's DOM as the jobs' tasks finish.
Each test's last screenshot is kept in its directory and copied to ``/tmp``
(``status_page.png``, ``status_page_quota.png``).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import yaml

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
# The page's figures, read in one go (the page cannot render between): the header's
# held / limit text and its limits, and each job row's last cell as the user sees them.
FIGURES_JS = """() => ({
  quota: document.querySelector('#service [data-field="quota"]').innerText.trim(),
  limits: [...document.querySelectorAll('#service [data-limit]')]
    .map((e) => [e.dataset.limit, Number(e.dataset.held), Number(e.dataset.max)]),
  notes: Object.fromEntries([...document.querySelectorAll('#jobs tr[data-job-id]')]
    .map((r) => [r.dataset.jobId,
                 r.querySelector('td[data-field="stop_reason"]').innerText.trim()])),
})"""
QUOTA_MAX = 2  # each type's max_count in the quota test: less than one job alone wants
ENDED = {"done", "stopped", "failed", "cancelled"}
WAIT = re.compile(r"(\d+) (small|fast) machines? held by (j\d+(?:, j\d+)*)")


@contextmanager
def serving(config: Path, state_dir: Path) -> Iterator[ServiceProcess]:
    """``autoscaler serve CONFIG``, stopped with SIGTERM at the end (killed if it hangs)."""
    service = ServiceProcess(config, state_dir)
    try:
        yield service
    finally:
        try:
            service.stop()
        except subprocess.TimeoutExpired:
            service.proc.kill()
            service.proc.wait()


@pytest.fixture
def served(tmp_path: Path) -> Iterator[ServiceProcess]:
    """``autoscaler serve`` on the example service file."""
    with serving(SERVICE_YAML, tmp_path / "state") as service:
        yield service


@contextmanager
def logged_in(browser: Browser, service: ServiceProcess, shot: Path) -> Iterator[Page]:
    """A page of a fresh browser context logged in through ``/login?token=...``; its
    screenshot is kept in ``shot`` at the end, copied to ``/tmp``, and no script error
    may have happened on it."""
    context = browser.new_context(viewport={"width": 1300, "height": 900})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    try:
        response = page.goto(f"{service.client.url}/login?token={service.client.token}")
        assert response is not None
        assert response.ok, response.status
        assert page.url == f"{service.client.url}/"
        yield page
        assert errors == []
    finally:
        page.screenshot(path=str(shot), full_page=True)
        shutil.copyfile(shot, Path("/tmp") / shot.name)
        context.close()


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

    with logged_in(browser, served, tmp_path / "status_page.png") as page:
        row = page.locator(f'tr[data-job-id="{job_id}"]')
        row.wait_for(timeout=60_000)

        assert row.locator('td[data-field="name"]').inner_text() == NAME
        assert row.locator('td[data-field="user"]').inner_text() == "admin"  # the submitter
        you = page.locator('#service [data-field="user"]').inner_text()
        assert " ".join(you.split()) == "admin (admin)"  # the token the page was opened with
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


def quota_config(tmp: Path) -> Path:
    """config/examples/service.yaml with each type's max_count cut to ``QUOTA_MAX`` (its
    report plots left out), written in ``tmp``."""
    data = yaml.safe_load(SERVICE_YAML.read_text(encoding="utf-8"))
    data["service"]["plots"] = False
    for t in data["machine_types"]:
        t["max_count"] = QUOTA_MAX
    path = tmp / "service.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def quota_said(quota: list[dict[str, Any]]) -> str:
    """The API's quota as the page's header says it: ``small 2/2 (j1 1, j2 1) · fast 2/2
    (j1 2)``, a provider's limit as ``provider NAME``."""

    def one(use: dict[str, Any]) -> str:
        what = f"provider {use['name']}" if use["kind"] == "provider" else use["name"]
        by = ", ".join(f"{holder} {n}" for holder, n in use["by"].items())
        return f"{what} {use['held']}/{use['max']}" + (f" ({by})" if by else "")

    return " · ".join(one(use) for use in quota) or "none"


def waits_said(note: str) -> list[tuple[str, set[str]]]:
    """A job row's note as (type, holders) for each wait it names; none if the
    note is not a wait (a stop reason, or empty). A wait not in the API's form fails."""
    if not note.startswith("waiting for "):
        return []
    parts = [WAIT.fullmatch(part) for part in note.removeprefix("waiting for ").split("; ")]
    assert all(parts), note
    return [(m[2], set(m[3].split(", "))) for m in parts if m]


def test_page_shows_the_shared_limits_and_who_waits(browser: Browser, tmp_path: Path) -> None:
    """Three copies of config/examples/job.yaml in the example service with each type's
    max_count cut to 2: the page's header shows, per type, the machines all the jobs hold
    against the limit and whose they are, never past it, as the API counts them; a job
    that cannot have machines says on its row how many of which type it waits for and
    which jobs hold them, that type's machines all held."""
    job = yaml.safe_load(JOB_YAML.read_text(encoding="utf-8"))
    seen: list[tuple[dict[str, Any], dict[str, Any]]] = []
    with (
        serving(quota_config(tmp_path), tmp_path / "state") as service,
        logged_in(browser, service, tmp_path / "status_page_quota.png") as page,
    ):
        ids = [service.submit(job) for _ in range(3)]

        def page_says_what_api_says() -> bool:
            shown = page.evaluate(FIGURES_JS)
            status = service.client.call("GET", "/api/v1/status")
            seen.append((shown, status))
            assert not all(v["state"] in ENDED for v in status["jobs"]), (
                f"every job ended; the page: {shown}"
            )
            limits = {name for name, _, _ in shown["limits"]}
            assert limits == {"type:small", "type:fast"}, shown
            assert all(held <= most == QUOTA_MAX for _, held, most in shown["limits"]), shown
            notes = {
                v["id"]: v.get("stop_reason") or v.get("waiting") or "" for v in status["jobs"]
            }
            if shown["quota"] != quota_said(status["service"]["quota"]) or shown["notes"] != notes:
                return False  # one read between two renders: read both again
            full = {
                use["name"]: set(use["by"])
                for use in status["service"]["quota"]
                if use["held"] == use["max"]
            }
            return any(
                kind in full and holders == full[kind] - {job_id}
                for job_id, note in shown["notes"].items()
                for kind, holders in waits_said(note)
            )

        wait_for(
            page_says_what_api_says,
            120,
            "the page to show a full type and a job waiting for it, as the API does",
            lambda: f"last read (page, API): {seen[-1] if seen else 'none'}",
        )
        shown = seen[-1][0]
        assert set(shown["notes"]) == set(ids)
        assert page.locator("#error").is_hidden()


def money(x: float) -> str:
    """An amount as the page's ``money()`` writes it."""
    return "$" + (f"{x:.2f}" if abs(x) >= 1 or x == 0 else re.sub(r"0{1,2}$", "", f"{x:.4f}"))


def test_page_shows_each_project_s_money_this_period(browser: Browser, tmp_path: Path) -> None:
    """The example service with projects and its lab-a job: the header shows each
    project's period, what it spent and, against its budget, what its jobs hold and what
    is left, as the API counts them."""
    job = yaml.safe_load((ROOT / "config" / "examples" / "job_lab_a.yaml").read_text())
    config = ROOT / "config" / "examples" / "team.yaml"
    with (
        serving(config, tmp_path / "state") as service,
        logged_in(browser, service, tmp_path / "status_page_projects.png") as page,
    ):
        service.submit(job)
        seen: list[tuple[dict[str, str], list[dict[str, Any]]]] = []

        def page_says_what_api_says() -> bool:
            shown = page.evaluate(
                """() => Object.fromEntries([...document.querySelectorAll('[data-project]')]
                  .map((e) => [e.dataset.project, e.innerText.trim()]))"""
            )
            said = service.client.call("GET", "/api/v1/status")["service"]["projects"]
            seen.append((shown, said))
            lab = next(p for p in said if p["project"] == "lab-a")
            if lab["held"] + lab["spent"] != pytest.approx(40.0) or lab["spent"] == 0:
                return False
            return shown == {
                p["project"]: f"{p['project']} {p['period_label']}: {money(p['spent'])} spent"
                f" + {money(p['held'])} held of {money(p['budget'])}, {money(p['left'])} left"
                for p in said
            }

        wait_for(
            page_says_what_api_says,
            120,
            "the page to show lab-a's spend and what it holds, as the API does",
            lambda: f"last read (page, API): {seen[-1] if seen else 'none'}",
        )
        assert page.locator("#error").is_hidden()

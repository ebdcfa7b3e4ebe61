"""The team example (``config/examples/team.yaml``) as a team runs it: a real ``autoscaler
serve``, tokens made from the config's users, each user submitting to their project
through the CLI, one refused the other's job, and what each project and each user spent
the same in the status (API), the metrics and the daily report as in the jobs' reports."""

from __future__ import annotations

import json
import os
import subprocess
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.integration.daemon_helpers import ROOT, run_cli, wait_for
from tests.integration.service_helpers import ServiceProcess

pytestmark = [pytest.mark.integration, pytest.mark.slow]

EXAMPLES = ROOT / "config" / "examples"
TEAM = EXAMPLES / "team.yaml"


def as_user(token_file: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "AUTOSCALER_TOKEN"}
    return run_cli(*args, "--token-file", str(token_file), env=env)


def get(svc: ServiceProcess, path: str, token: str) -> Any:
    request = urllib.request.Request(
        svc.client.url + path, headers={"Authorization": f"Bearer {token}"}
    )
    with urllib.request.urlopen(request, timeout=30) as answer:
        body = answer.read()
    return body.decode() if path == "/metrics" else json.loads(body)


def test_two_users_in_two_projects_each_see_their_spend(tmp_path: Path) -> None:
    state = tmp_path / "state"
    tokens = {}
    for name in ("alice", "bob", "carol"):
        made = run_cli("token", "create", name, "--service", str(TEAM), "--state-dir", str(state))
        assert made.returncode == 0, made.stderr
        tokens[name] = tmp_path / f"{name}.token"
        tokens[name].write_text(made.stdout)
    svc = ServiceProcess(TEAM, state)
    try:
        where = ("--state-dir", str(state))
        a = as_user(tokens["alice"], "submit", str(EXAMPLES / "job_lab_a.yaml"), *where)
        b = as_user(tokens["bob"], "submit", str(EXAMPLES / "job_lab_b.yaml"), *where)
        assert a.returncode == 0, a.stderr
        assert b.returncode == 0, b.stderr
        ja, jb = a.stdout.strip(), b.stdout.strip()
        refused = as_user(tokens["bob"], "cancel", ja, *where)
        assert (refused.returncode, refused.stderr) == (
            2,
            f"error: user bob (role submit) may cancel only their own jobs: {ja} is alice's\n",
        )
        read_only = as_user(tokens["carol"], "submit", str(EXAMPLES / "job_lab_a.yaml"), *where)
        assert read_only.stderr == "error: user carol (role read) may not submit jobs\n"
        for job in (ja, jb):
            done = as_user(tokens["carol"], "wait", job, "--timeout", "240", *where)
            assert done.returncode == 0, (done.stdout, done.stderr, svc.events())

        carol = tokens["carol"].read_text().strip()
        views = {v["id"]: v for v in get(svc, "/api/v1/jobs", carol)["jobs"]}
        assert (views[ja]["user"], views[ja]["project"]) == ("alice", "lab-a")
        assert (views[jb]["user"], views[jb]["project"]) == ("bob", "lab-b")
        cost = {
            j: json.loads((Path(views[j]["run_dir"]) / "report.json").read_text())["cost"]
            for j in (ja, jb)
        }
        assert 0 < cost[ja] <= 40 + 1e-6  # job_lab_a's budget
        assert 0 < cost[jb] <= 20 + 1e-6

        service = get(svc, "/api/v1/status", carol)["service"]
        projects = {p["project"]: p for p in service["projects"]}
        assert projects["lab-a"]["spent"] == pytest.approx(cost[ja], abs=1e-3)
        assert projects["lab-b"]["spent"] == pytest.approx(cost[jb], abs=1e-3)
        assert projects["lab-a"]["left"] == pytest.approx(100 - cost[ja], abs=1e-3)
        users = {u["user"]: u["spent"] for u in service["users"]}
        assert users == pytest.approx({"alice": cost[ja], "bob": cost[jb]}, abs=1e-3)

        metrics = get(svc, "/metrics", carol)
        assert 'autoscaler_project_spent{period="' in metrics
        wait_for(lambda: list((state / "reports" / "daily").glob("*.json")), 30, "a daily report")
        (day,) = sorted((state / "reports" / "daily").glob("*.json"))[-1:]
        groups = json.loads(day.read_text())["groups"]
        by_user = {g["name"]: g["cost"] for g in groups["user"]}
        by_project = {g["name"]: g["cost"] for g in groups["project"]}
        assert by_user == pytest.approx({"alice": cost[ja], "bob": cost[jb]}, abs=1e-3)
        assert by_project == pytest.approx({"lab-a": cost[ja], "lab-b": cost[jb]}, abs=1e-3)
    finally:
        svc.stop(timeout=90)

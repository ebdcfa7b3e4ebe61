"""Users and roles against a real ``autoscaler serve``: tokens made with ``autoscaler
token create``, each role's allowed and refused calls through the CLI (exit code, the one
line printed) and the API (status, body), a revoked token refused at once, the audit log
with its refusals, and a state directory from before users whose jobs stay admin's."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.integration.daemon_helpers import run_cli, wait_for
from tests.integration.service_helpers import (
    ServiceProcess,
    budget_job,
    service_config,
    write_job,
)

pytestmark = pytest.mark.integration

USERS = [{"name": "alice", "role": "submit"}, {"name": "bob", "role": "read"}]


def autoscaler(*args: str, token: str | None = None) -> subprocess.CompletedProcess[str]:
    """``autoscaler ARGS`` as a user runs it, with ``AUTOSCALER_TOKEN`` set to ``token``."""
    env = {k: v for k, v in os.environ.items() if k != "AUTOSCALER_TOKEN"}
    if token is not None:
        env["AUTOSCALER_TOKEN"] = token
    return run_cli(*args, env=env)


def make_token(state_dir: Path, name: str, *more: str) -> str:
    made = autoscaler("token", "create", name, "--state-dir", str(state_dir), *more)
    assert made.returncode == 0, made.stderr
    assert f"for {name} (role " in made.stderr
    return made.stdout.strip()


def api(svc: ServiceProcess, method: str, path: str, token: str, body: object = None) -> Any:
    """(status, JSON body) of a request with ``token``."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        svc.client.url + path,
        data=data,
        method=method,
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def refused_once(done: subprocess.CompletedProcess[str], line: str) -> None:
    """A refusal as the CLI shows it: exit 2, nothing on stdout, one line on stderr."""
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert done.stdout == ""
    assert done.stderr == f"error: {line}\n"


@dataclass
class Team:
    svc: ServiceProcess
    config: Path
    alice: str
    bob: str


@pytest.fixture
def team(tmp_path: Path) -> Iterator[Team]:
    # One emulated hour a minute: the jobs must still run at the tests' last commands
    # (at the helpers' 10 s an hour a job spent its budget in about 25 s, and on a loaded
    # host the commands before took longer: CI saw alice's job end before it was looked at).
    config = service_config(tmp_path, service={"users": USERS}, local={"time_scale": 60})
    state_dir = tmp_path / "state"
    alice = make_token(state_dir, "alice", "--service", str(config))
    bob = make_token(state_dir, "bob", "--role", "read")
    svc = ServiceProcess(config, state_dir)
    try:
        yield Team(svc, config, alice, bob)
    finally:
        svc.stop(timeout=90)


def test_each_role_through_the_cli(team: Team, tmp_path: Path) -> None:
    svc, where = team.svc, str(team.svc.state_dir)
    job = str(write_job(tmp_path, budget_job("long", 400, 30)))

    refused_once(
        autoscaler("submit", job, "--state-dir", where, token=team.bob),
        "user bob (role read) may not submit jobs",
    )
    mine = autoscaler("submit", job, "--state-dir", where, token=team.alice)
    assert mine.returncode == 0, mine.stderr
    alice_job = mine.stdout.strip()
    theirs = autoscaler("submit", job, "--state-dir", where)  # the state directory's token
    assert theirs.returncode == 0, theirs.stderr
    admin_job = theirs.stdout.strip()

    refused_once(
        autoscaler("cancel", admin_job, "--state-dir", where, token=team.alice),
        f"user alice (role submit) may cancel only their own jobs: {admin_job} is admin's",
    )
    refused_once(
        autoscaler("update", admin_job, "--budget", "40", "--state-dir", where, token=team.alice),
        f"user alice (role submit) may update only their own jobs: {admin_job} is admin's",
    )
    bob_file = tmp_path / "bob.token"
    bob_file.write_text(team.bob + "\n")
    refused_once(
        svc.cli("cancel", alice_job, "--token-file", str(bob_file)),
        "user bob (role read) may not cancel jobs",
    )

    wait_for(lambda: svc.view(alice_job)["state"] == "running", 60, "alice's job to run")
    raised = autoscaler(
        "update", alice_job, "--budget", "40", "--state-dir", where, token=team.alice
    )
    assert raised.returncode == 0, raised.stderr
    assert raised.stdout.strip() == f"{alice_job}: budget set to 40.00 (running)"

    listed = svc.cli("jobs", "--token-file", str(bob_file))
    assert listed.returncode == 0, listed.stderr
    rows = {line.split()[0]: line.split() for line in listed.stdout.splitlines()[1:]}
    assert "finish / deadline user waits for" in " ".join(listed.stdout.splitlines()[0].split())
    assert "alice" in rows[alice_job]
    assert "admin" not in rows[alice_job]
    assert "admin" in rows[admin_job]
    as_json = autoscaler("jobs", "--json", "--state-dir", where, token=team.bob)
    assert {v["id"]: v["user"] for v in json.loads(as_json.stdout)} == {
        alice_job: "alice",
        admin_job: "admin",
    }

    stopped = autoscaler("cancel", alice_job, "--state-dir", where, token=team.alice)
    assert stopped.returncode == 0, stopped.stderr
    by_admin = autoscaler("cancel", admin_job, "--state-dir", where)
    assert by_admin.returncode == 0, by_admin.stderr

    audit = [json.loads(line) for line in (svc.state_dir / "audit.jsonl").read_text().splitlines()]
    said = [(a["user"], a["action"], a["job"], a["outcome"]) for a in audit]
    assert said == [
        (audit[0]["user"], "token create", None, "ok"),
        (audit[1]["user"], "token create", None, "ok"),
        ("bob", "submit", None, "refused"),
        ("alice", "submit", alice_job, "ok"),
        ("admin", "submit", admin_job, "ok"),
        ("alice", "cancel", admin_job, "refused"),
        ("alice", "update", admin_job, "refused"),
        ("bob", "cancel", alice_job, "refused"),
        ("alice", "update", alice_job, "ok"),
        ("alice", "cancel", alice_job, "ok"),
        ("admin", "cancel", admin_job, "ok"),
    ]
    assert audit[2]["detail"] == "user bob (role read) may not submit jobs"
    assert [a["subject"] for a in audit[:2]] == ["alice", "bob"]
    assert team.alice not in (svc.state_dir / "audit.jsonl").read_text()


def test_each_role_through_the_api_and_a_revoked_token(team: Team) -> None:
    svc = team.svc
    job = {"job": budget_job("short", 4, 30)}
    assert api(svc, "POST", "/api/v1/jobs", team.bob, job) == (
        403,
        {"error": "user bob (role read) may not submit jobs"},
    )
    status, made = api(svc, "POST", "/api/v1/jobs", team.alice, job)
    assert status == 201, made
    status, view = api(svc, "GET", f"/api/v1/jobs/{made['id']}", team.bob)
    assert (status, view["user"]) == (200, "alice")
    status, whole = api(svc, "GET", "/api/v1/status", team.bob)
    assert (status, whole["user"]) == (200, {"name": "bob", "role": "read"})
    assert api(svc, "POST", f"/api/v1/jobs/{made['id']}/update", team.bob, {"budget": 50})[0] == 403
    admin = svc.client.token
    status, other = api(svc, "POST", "/api/v1/jobs", admin, job)
    assert status == 201
    status, body = api(svc, "POST", f"/api/v1/jobs/{other['id']}/cancel", team.alice)
    assert (status, body["error"]) == (
        403,
        f"user alice (role submit) may cancel only their own jobs: {other['id']} is admin's",
    )
    assert api(svc, "POST", f"/api/v1/jobs/{made['id']}/cancel", team.alice)[0] == 200

    revoked = autoscaler("token", "revoke", "alice", "--state-dir", str(svc.state_dir))
    assert revoked.returncode == 0, revoked.stderr
    assert revoked.stdout.startswith("revoked token ")
    status, body = api(svc, "GET", "/api/v1/jobs", team.alice)
    assert status == 401
    assert body["error"].startswith("no valid token")
    refused = autoscaler("jobs", "--state-dir", str(svc.state_dir), token=team.alice)
    assert refused.returncode == 2
    assert refused.stderr.startswith("error: no valid token")
    assert "Traceback" not in refused.stderr
    assert api(svc, "GET", "/api/v1/jobs", team.bob)[0] == 200

    listed = autoscaler("token", "list", "--state-dir", str(svc.state_dir))
    assert listed.returncode == 0, listed.stderr
    assert "bob" in listed.stdout
    assert "alice" not in listed.stdout
    assert team.bob not in listed.stdout
    assert team.bob.partition(".")[2] not in listed.stdout


def test_a_token_logs_a_browser_in_as_its_user(team: Team) -> None:
    """``/login`` takes any user's token; its cookie then acts as that user, until the
    token is revoked."""
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor())
    with opener.open(f"{team.svc.client.url}/login?token={team.bob}", timeout=30) as page:
        assert page.status == 200
    with opener.open(f"{team.svc.client.url}/api/v1/status", timeout=30) as answer:
        assert json.loads(answer.read())["user"] == {"name": "bob", "role": "read"}
    assert (
        autoscaler("token", "revoke", "bob", "--state-dir", str(team.svc.state_dir)).returncode == 0
    )
    with pytest.raises(urllib.error.HTTPError) as refused:
        opener.open(f"{team.svc.client.url}/api/v1/status", timeout=30)
    assert refused.value.code == 401


def test_bad_token_commands_are_one_line_naming_the_flag(tmp_path: Path) -> None:
    where = str(tmp_path / "state")
    config = service_config(tmp_path, service={"users": USERS})
    for args, line in [
        (
            ("--role", "writer"),
            "error: --role 'writer': not a role (give one of admin, submit, read)",
        ),
        ((), "error: --role: give carol's role: one of admin, submit, read"),
    ]:
        done = autoscaler("token", "create", "carol", "--state-dir", where, *args)
        assert (done.returncode, done.stdout, done.stderr) == (2, "", line + "\n")
    contradicted = autoscaler(
        "token", "create", "bob", "--role", "admin", "--service", str(config), "--state-dir", where
    )
    assert contradicted.returncode == 2
    assert contradicted.stderr.startswith(
        "error: --role admin: the service config lists bob as read"
    )
    unknown = autoscaler("token", "revoke", "nobody", "--state-dir", where)
    assert unknown.returncode == 2
    assert unknown.stderr == (
        "error: 'nobody': no token has that id or user (see `autoscaler token list`)\n"
    )
    bad = tmp_path / "bad.yaml"
    bad.write_text(config.read_text().replace("role: read", "role: reader"))
    refused = autoscaler("serve", str(bad), "--state-dir", where)
    assert refused.returncode == 2
    assert "service.users[1].role: must be 'admin', 'submit' or 'read' (got 'reader')" in (
        refused.stderr
    )
    assert "Traceback" not in refused.stderr


def test_a_state_directory_from_before_users_keeps_its_jobs_as_admin_s(tmp_path: Path) -> None:
    """A service's state directory as the service before users left it (a store without
    the ``user`` column, no tokens but its own): its jobs list as admin's, its own token
    still works as admin's, and a submit user may not cancel them."""
    state_dir = tmp_path / "state"
    config = service_config(tmp_path)
    old = ServiceProcess(config, state_dir)
    try:
        kept = old.submit(budget_job("kept", 4, 30))
        long = old.submit(budget_job("long", 400, 30))
        assert old.cli("wait", kept).returncode == 0
    finally:
        assert old.stop() == 0
    db = sqlite3.connect(state_dir / "service.db")
    db.execute("ALTER TABLE jobs DROP COLUMN user")
    db.commit()
    db.close()
    assert not (state_dir / "users.db").exists()

    stopped = autoscaler("jobs", "--json", "--state-dir", str(state_dir))
    assert stopped.returncode == 0, stopped.stderr
    assert {v["id"]: v["user"] for v in json.loads(stopped.stdout)} == {
        kept: "admin",
        long: "admin",
    }

    config = service_config(tmp_path, service={"users": USERS})
    alice = make_token(state_dir, "alice", "--service", str(config))
    svc = ServiceProcess(config, state_dir)
    try:
        assert {v["id"]: v["user"] for v in svc.views()} == {kept: "admin", long: "admin"}
        refused_once(
            autoscaler("cancel", long, "--state-dir", str(state_dir), token=alice),
            f"user alice (role submit) may cancel only their own jobs: {long} is admin's",
        )
        assert svc.cli("cancel", long).returncode == 0  # the state directory's own token
        mine = autoscaler(
            "submit", str(write_job(tmp_path, budget_job("new", 4, 30))), "--state-dir",
            str(state_dir), token=alice,
        )  # fmt: skip
        assert mine.returncode == 0, mine.stderr
        assert svc.view(mine.stdout.strip())["user"] == "alice"
    finally:
        svc.stop(timeout=90)


def test_a_state_directory_that_cannot_hold_tokens_is_one_line_naming_it(tmp_path: Path) -> None:
    """``token create`` where the state directory is a file, ``token list`` over a
    ``users.db`` that is not a database: one line naming the path, not a traceback."""
    not_a_dir = tmp_path / "state"
    not_a_dir.write_text("")
    made = autoscaler("token", "create", "alice", "--role", "read", "--state-dir", str(not_a_dir))
    refused_once(made, f"{not_a_dir}: cannot be used (File exists)")

    state = tmp_path / "other"
    state.mkdir()
    (state / "users.db").write_text("not a database\n" * 100)
    listing = autoscaler("token", "list", "--state-dir", str(state))
    refused_once(listing, f"{state / 'users.db'}: cannot be used (file is not a database)")


def test_a_change_the_audit_log_cannot_take_is_answered_and_logged(tmp_path: Path) -> None:
    """An audit log the disk refuses (here a directory where the file goes) does not
    turn a journaled submit into a 500 the user would submit again: the id is answered
    and the service's log has the line the audit log could not."""
    state_dir = tmp_path / "state"
    state_dir.mkdir(mode=0o700)
    (state_dir / "audit.jsonl").mkdir()
    svc = ServiceProcess(service_config(tmp_path), state_dir)
    try:
        done = svc.cli("submit", str(write_job(tmp_path, budget_job("kept", 4, 5))))
        assert done.returncode == 0, done.stderr
        job = done.stdout.strip()
        assert [v["id"] for v in svc.views()] == [job]
        log = (state_dir / "service.log.jsonl").read_text().splitlines()
        events = [json.loads(line) for line in log]
        [unaudited] = [e for e in events if e["event"] == "audit log cannot be written"]
        said = [unaudited[k] for k in ("user", "action", "job", "outcome")]
        assert said == ["admin", "submit", job, "ok"]
    finally:
        assert svc.stop(timeout=90) == 0

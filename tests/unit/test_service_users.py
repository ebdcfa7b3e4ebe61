"""Users, roles and tokens (``autoscaler.service.users``): what each role may change, how a
token is kept (its hash only) and found, how the config's roles and the tokens' combine,
how a config names its users, and a store from before users."""

from __future__ import annotations

import json
import os
import sqlite3
import stat
from pathlib import Path

import pytest
import yaml

from autoscaler.config.service_schema import service_config
from autoscaler.core.errors import AutoscalerError, ConfigError
from autoscaler.service.api import service_token
from autoscaler.service.audit import AuditLog
from autoscaler.service.client import TOKEN_FILE
from autoscaler.service.store import Store
from autoscaler.service.users import (
    ADMIN,
    TOKENS_DB,
    Forbidden,
    Role,
    Tokens,
    User,
    Users,
    check,
    digest,
    issue,
    listed,
    refusal,
    revoke,
)
from tests.unit.test_service_config import EXAMPLES, NOW, service
from tests.unit.test_service_store import _job

ALICE = User("alice", Role.SUBMIT)
BOB = User("bob", Role.READ)
ROOT = User("root", Role.ADMIN)


@pytest.mark.parametrize("action", ["submit", "update", "cancel"])
def test_an_admin_may_do_anything_to_any_job(action: str) -> None:
    assert refusal(ROOT, action, "j1", "alice") is None  # type: ignore[arg-type]


def test_a_submit_user_submits_and_changes_only_its_own_jobs() -> None:
    assert refusal(ALICE, "submit", None, None) is None
    assert refusal(ALICE, "cancel", "j1", "alice") is None
    assert refusal(ALICE, "update", "j1", "alice") is None
    assert refusal(ALICE, "cancel", "j2", "carol") == (
        "user alice (role submit) may cancel only their own jobs: j2 is carol's"
    )
    assert refusal(ALICE, "update", "j3", ADMIN) == (
        "user alice (role submit) may update only their own jobs: j3 is admin's"
    )


@pytest.mark.parametrize("action", ["submit", "update", "cancel"])
def test_a_read_user_changes_nothing_even_its_own(action: str) -> None:
    assert refusal(BOB, action, "j1", "bob") == f"user bob (role read) may not {action} jobs"  # type: ignore[arg-type]


def test_check_raises_forbidden_with_what_the_role_lacks() -> None:
    with pytest.raises(Forbidden, match=r"^user bob \(role read\) may not submit jobs$"):
        check(BOB, "submit")
    check(ALICE, "cancel", "j1", "alice")


def test_a_token_is_kept_as_its_hash_and_found_again(tmp_path: Path) -> None:
    tokens = Tokens(tmp_path)
    token, record = tokens.create("alice", Role.SUBMIT, NOW)
    token_id, _, secret = token.partition(".")
    assert record.id == token_id
    assert len(secret) >= 40
    raw = (tmp_path / TOKENS_DB).read_bytes()
    assert secret.encode() not in raw
    assert token.encode() not in raw
    assert digest(token).encode() in raw
    assert stat.S_IMODE(os.stat(tmp_path / TOKENS_DB).st_mode) == 0o600
    assert tokens.find(token) == record
    assert tokens.find(token[:-1] + ("A" if token[-1] != "A" else "B")) is None
    assert tokens.find(f"{token_id}.") is None
    assert tokens.find(secret) is None  # no id: not one of these


def test_two_tokens_of_one_user_and_revoking_by_id_or_by_user(tmp_path: Path) -> None:
    tokens = Tokens(tmp_path)
    first, one = tokens.create("alice", Role.SUBMIT, NOW)
    second, two = tokens.create("alice", Role.SUBMIT, NOW + 1)
    other, three = tokens.create("bob", Role.READ, NOW + 2)
    assert [r.id for r in tokens.revoke(one.id)] == [one.id]
    assert tokens.find(first) is None
    assert tokens.find(second) == two
    assert [r.id for r in tokens.revoke("alice")] == [two.id]
    assert tokens.find(second) is None
    assert tokens.find(other) == three
    with pytest.raises(AutoscalerError, match="'alice': no token has that id or user"):
        tokens.revoke("alice")


def test_the_config_s_role_wins_over_the_token_s(tmp_path: Path) -> None:
    """A name the config lists has the config's role (a demotion holds without
    re-issuing tokens); a name it does not list has its token's role; the state
    directory's own token is admin's."""
    tokens = Tokens(tmp_path)
    alice, _ = tokens.create("alice", Role.ADMIN, NOW)
    carol, _ = tokens.create("carol", Role.SUBMIT, NOW)
    users = Users("the-state-dir-token", tokens, {"alice": Role.READ})
    assert users.identify(alice) == User("alice", Role.READ)
    assert users.identify(carol) == User("carol", Role.SUBMIT)
    assert users.identify("the-state-dir-token") == User(ADMIN, Role.ADMIN)
    assert users.identify("the-state-dir-tokem") is None
    assert users.identify(None) is None
    tokens.revoke("carol")
    assert users.identify(carol) is None


def test_an_empty_state_dir_token_file_is_made_again_and_no_empty_token_is_admin(
    tmp_path: Path,
) -> None:
    """A ``token`` file left empty (a first start stopped before writing it, a full disk)
    is given a token on the next start: taken as it was, a request with an empty cookie
    (``autoscaler_token=``) was admin's."""
    (tmp_path / TOKEN_FILE).write_text("\n")
    own = service_token(tmp_path)
    assert len(own) >= 40
    assert (tmp_path / TOKEN_FILE).read_text() == own
    assert stat.S_IMODE(os.stat(tmp_path / TOKEN_FILE).st_mode) == 0o600
    assert service_token(tmp_path) == own  # kept once made
    users = Users(own, Tokens(tmp_path), {})
    assert users.identify("") is None
    assert users.identify(own) == User(ADMIN, Role.ADMIN)
    assert Users("", Tokens(tmp_path), {}).identify("") is None


def test_issue_takes_the_role_from_the_config_and_refuses_a_contradiction(
    tmp_path: Path,
) -> None:
    roster = {"alice": Role.SUBMIT}
    _, record = issue(tmp_path / "state", "alice", None, roster, NOW)
    assert record.role is Role.SUBMIT
    with pytest.raises(AutoscalerError, match=r"^--role read: the service config lists alice"):
        issue(tmp_path / "state", "alice", Role.READ, roster, NOW)
    with pytest.raises(AutoscalerError, match=r"^--role: give dave's role"):
        issue(tmp_path / "state", "dave", None, roster, NOW)
    with pytest.raises(AutoscalerError, match=r"^NAME 'd ave': a user's name is"):
        issue(tmp_path / "state", "d ave", Role.READ, None, NOW)
    with pytest.raises(AutoscalerError, match=r"^--role read: admin is the state directory"):
        issue(tmp_path / "state", ADMIN, Role.READ, None, NOW)
    assert [r.user for r in listed(tmp_path / "state")] == ["alice"]
    assert stat.S_IMODE(os.stat(tmp_path / "state").st_mode) == 0o700


def test_token_commands_are_in_the_audit_log_without_the_token(tmp_path: Path) -> None:
    token, record = issue(tmp_path, "alice", Role.SUBMIT, None, NOW)
    revoke(tmp_path, "alice", NOW + 60)
    lines = AuditLog(tmp_path).lines()
    assert [(a["action"], a["subject"], a["token"], a["outcome"]) for a in lines] == [
        ("token create", "alice", record.id, "ok"),
        ("token revoke", "alice", record.id, "ok"),
    ]
    assert lines[0]["time"] == "2027-01-15T08:00:00.000Z"
    assert lines[0]["user"].startswith("local:")
    assert token not in (tmp_path / "audit.jsonl").read_text()
    assert stat.S_IMODE(os.stat(tmp_path / "audit.jsonl").st_mode) == 0o600


def test_the_audit_log_is_appended_to_one_json_line_a_record(tmp_path: Path) -> None:
    log = AuditLog(tmp_path)
    log.record(NOW, user="bob", role="read", action="submit", job=None, outcome="refused",
               detail="user bob (role read) may not submit jobs")  # fmt: skip
    AuditLog(tmp_path).record(NOW + 1, user="alice", role="submit", action="submit",
                              job="j1", outcome="ok")  # fmt: skip
    text = (tmp_path / "audit.jsonl").read_text()
    assert [json.loads(line)["user"] for line in text.splitlines()] == ["bob", "alice"]
    assert json.loads(text.splitlines()[0])["detail"] == "user bob (role read) may not submit jobs"


def _service_problems(users: object) -> list[str]:
    with pytest.raises(ConfigError) as refused:
        service(service={"users": users})
    return refused.value.problems


def test_the_config_names_users_and_each_bad_one_is_named() -> None:
    svc = service(service={"users": [{"name": "alice", "role": "submit"}]})
    assert [(u.name, u.role) for u in svc.users] == [("alice", "submit")]
    assert _service_problems([{"name": "alice", "role": "writer"}]) == [
        "service.users[0].role: must be 'admin', 'submit' or 'read' (got 'writer')"
    ]
    [bad_name] = _service_problems([{"name": "al ice", "role": "read"}])
    assert bad_name.startswith("service.users[0].name: must match the pattern")
    assert _service_problems([{"name": "a", "role": "read"}, {"name": "a", "role": "admin"}]) == [
        "service.users: a is listed twice"
    ]
    [admin] = _service_problems([{"name": "admin", "role": "read"}])
    assert admin.startswith("service.users[0]: admin is the state directory's own token's user")


def test_the_config_reads_its_users_from_a_file(tmp_path: Path) -> None:
    data = yaml.safe_load((EXAMPLES / "service.yaml").read_text())
    (tmp_path / "team.yaml").write_text(
        yaml.safe_dump({"users": [{"name": "alice", "role": "admin"}]})
    )
    svc = service_config(
        {**data, "service": {"users_file": "team.yaml"}}, source="s.yaml", base_dir=tmp_path
    )
    assert [(u.name, u.role) for u in svc.users] == [("alice", "admin")]
    (tmp_path / "team.yaml").write_text(yaml.safe_dump({"users": [{"name": "x", "role": "no"}]}))
    with pytest.raises(ConfigError) as refused:
        service_config(
            {**data, "service": {"users_file": "team.yaml"}}, source="s.yaml", base_dir=tmp_path
        )
    assert refused.value.source == str(tmp_path / "team.yaml")
    assert refused.value.problems == [
        "users[0].role: must be 'admin', 'submit' or 'read' (got 'no')"
    ]
    with pytest.raises(ConfigError, match="users, users_file: give the users or a file"):
        service_config(
            {
                **data,
                "service": {"users_file": "team.yaml", "users": [{"name": "a", "role": "read"}]},
            },
            source="s.yaml",
            base_dir=tmp_path,
        )


def test_a_store_from_before_users_keeps_its_jobs_as_admin_s(tmp_path: Path) -> None:
    """A store made without the ``user`` column: read as it was left, its jobs are
    admin's; opened to write, it gains the column, keeps them admin's and records the
    submitter of new ones."""
    cfg, tasks = _job(2)
    store = Store(tmp_path / "service.db")
    old = store.add("old", cfg, tasks, NOW, lambda j: tmp_path / j)
    store.close()
    db = sqlite3.connect(tmp_path / "service.db")
    db.execute("ALTER TABLE jobs DROP COLUMN user")  # as the store before users made it
    db.commit()
    db.close()
    assert Store(tmp_path / "service.db", read_only=True).row(old).user == ADMIN
    store = Store(tmp_path / "service.db")
    new = store.add("new", cfg, tasks, NOW, lambda j: tmp_path / j, user="alice")
    assert [(r.id, r.user) for r in store.rows()] == [(old, ADMIN), (new, "alice")]

"""Who may do what to a service: its users, their roles, and their tokens.

A user is a name with a role: ``admin`` (everything), ``submit`` (submit jobs, update
and cancel its own, read all) or ``read`` (read only). Users come from two places, and
the config wins where both name one:

* the service config's roster, ``service.users`` (or the file ``service.users_file``
  names): a name listed there has the role listed there, whatever role its tokens
  were made with, so a demotion in the config holds from the next start on;
* the tokens, made on the service's machine by whoever can write its state directory
  (``autoscaler token create NAME --role R``): a name the config does not list acts
  with the role its token was made with.

The state directory's own token (``<state dir>/token``, made at the first start, from
before there were users) is the token of ``admin``, role admin, and so are the jobs of a
store from then. The name ``admin`` is always an admin: the config may list it only so,
and a token made for it (``token create admin``) is one more of admin's.

A token is ``<id>.<secret>``: its id (public: ``token list`` shows it, ``token revoke``
takes it) finds its record, and only the SHA-256 of the whole token is kept
(``<state dir>/users.db``, SQLite, mode 0600), compared in constant time. A token is 256
random bits, so a fast hash is enough (no password to guess from a dictionary) and
every request pays microseconds, not the tens of milliseconds scrypt would cost.
"""

from __future__ import annotations

import contextlib
import getpass
import hashlib
import hmac
import os
import re
import secrets
import sqlite3
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Literal

from autoscaler.core.errors import AutoscalerError
from autoscaler.run.auth import token_matches
from autoscaler.service.audit import AuditLog

ADMIN = "admin"
"""The user of the state directory's own token, and of the jobs stored before users."""
TOKENS_DB = "users.db"
"""The tokens' hashes, in the state directory (mode 0600)."""
NAME = re.compile(r"^[A-Za-z0-9_.\-]+$")
"""What a user's name may be made of (as a config's names)."""

Action = Literal["submit", "update", "cancel"]
"""What changes a service; reading is every user's."""


class Role(StrEnum):
    """What a user may do."""

    ADMIN = "admin"
    """Everything: submit, and update or cancel any job."""
    SUBMIT = "submit"
    """Submit jobs, update and cancel its own, read all."""
    READ = "read"
    """Read only: jobs, status, metrics, the page."""


ROLES = ", ".join(r.value for r in Role)


@dataclass(frozen=True)
class User:
    """Who a request acts as."""

    name: str
    role: Role

    def said(self) -> str:
        return f"user {self.name} (role {self.role.value})"


STATE_DIR_ADMIN = User(ADMIN, Role.ADMIN)
"""The state directory's own token's user."""


class Forbidden(AutoscalerError):
    """A user's role does not allow what it asked (the API's 403)."""

    code = "Forbidden"


def refusal(user: User, action: Action, job_id: str | None, owner: str | None) -> str | None:
    """Why ``user`` may not ``action`` (a job ``job_id`` that ``owner`` submitted), or
    None when it may."""
    if user.role is Role.ADMIN:
        return None
    if user.role is Role.READ:
        return f"{user.said()} may not {action} jobs"
    if action == "submit" or owner == user.name:
        return None
    return f"{user.said()} may {action} only their own jobs: {job_id} is {owner}'s"


def check(user: User, action: Action, job_id: str | None = None, owner: str | None = None) -> None:
    """Raise ``Forbidden`` saying what ``user``'s role lacks, if it lacks it."""
    why = refusal(user, action, job_id, owner)
    if why is not None:
        raise Forbidden(why)


def role_of(text: str, flag: str) -> Role:
    """``text`` as a role, or an error naming ``flag`` and the roles there are."""
    try:
        return Role(text)
    except ValueError:
        raise AutoscalerError(f"{flag} {text!r}: not a role (give one of {ROLES})") from None


def check_name(name: str, flag: str) -> str:
    """``name`` if it can be a user's, else an error naming ``flag``."""
    if not NAME.fullmatch(name):
        raise AutoscalerError(
            f"{flag} {name!r}: a user's name is letters, digits, '_', '.' and '-'"
        )
    return name


def digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass(frozen=True)
class TokenRecord:
    """A token as kept: never the token, only its hash."""

    id: str
    user: str
    role: Role
    created: float  # wall clock, epoch seconds
    sha256: str


class Tokens:
    """The tokens of a state directory (``users.db``): made, revoked, listed, and found
    by the token a request carries. Safe across threads and processes (SQLite)."""

    def __init__(self, state_dir: Path) -> None:
        self.path = state_dir / TOKENS_DB
        self._lock = threading.Lock()
        self._db: sqlite3.Connection | None = None

    def _open(self) -> sqlite3.Connection:
        if self._db is None:
            # Made 0600 before SQLite opens it: its journal takes the same mode.
            os.close(os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600))
            db = sqlite3.connect(self.path, check_same_thread=False, timeout=30)
            db.execute(
                "CREATE TABLE IF NOT EXISTS tokens (id TEXT PRIMARY KEY, user TEXT NOT NULL, "
                "role TEXT NOT NULL, created REAL NOT NULL, sha256 TEXT NOT NULL)"
            )
            db.commit()
            self._db = db
        return self._db

    @contextlib.contextmanager
    def _cursor(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            db = self._open()
            with db:  # one transaction, committed or rolled back
                yield db

    def close(self) -> None:
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None

    def create(self, user: str, role: Role, now: float) -> tuple[str, TokenRecord]:
        """A new token for ``user`` as ``role``: the token (shown once) and its record."""
        check_name(user, "NAME")
        if user == ADMIN and role is not Role.ADMIN:
            raise AutoscalerError(
                f"--role {role.value}: {ADMIN} is the state directory's own user, an admin"
            )
        token_id = secrets.token_hex(4)
        token = f"{token_id}.{secrets.token_urlsafe(32)}"
        record = TokenRecord(token_id, user, role, now, digest(token))
        with self._cursor() as db:
            db.execute(
                "INSERT INTO tokens (id, user, role, created, sha256) VALUES (?, ?, ?, ?, ?)",
                (record.id, record.user, record.role.value, record.created, record.sha256),
            )
        return token, record

    def revoke(self, name_or_id: str) -> list[TokenRecord]:
        """Revoke the token with id ``name_or_id``, or else every token of that user; the
        records revoked (an error when there is none)."""
        gone = [r for r in self.records() if r.id == name_or_id] or [
            r for r in self.records() if r.user == name_or_id
        ]
        if not gone:
            raise AutoscalerError(
                f"{name_or_id!r}: no token has that id or user (see `autoscaler token list`)"
            )
        with self._cursor() as db:
            db.executemany("DELETE FROM tokens WHERE id = ?", [(r.id,) for r in gone])
        return gone

    def records(self) -> list[TokenRecord]:
        """Every token's record, oldest first."""
        if not self.path.exists():
            return []
        with self._cursor() as db:
            rows = db.execute(
                "SELECT id, user, role, created, sha256 FROM tokens ORDER BY created, id"
            ).fetchall()
        return [TokenRecord(i, u, Role(r), c, h) for i, u, r, c, h in rows]

    def find(self, token: str) -> TokenRecord | None:
        """The record of ``token``, if it is one of these (compared in constant time)."""
        token_id, dot, _ = token.partition(".")
        if not dot or not self.path.exists():
            return None
        with self._cursor() as db:
            row = db.execute(
                "SELECT id, user, role, created, sha256 FROM tokens WHERE id = ?", (token_id,)
            ).fetchone()
        if row is None or not hmac.compare_digest(digest(token), row[4]):
            return None
        return TokenRecord(row[0], row[1], Role(row[2]), row[3], row[4])


class Users:
    """Who a token is: the state directory's own token is ``admin``'s; another is looked
    up among the tokens, and its user takes the role ``roster`` (the config's users)
    gives it, else the one it was made with."""

    def __init__(self, state_dir_token: str, tokens: Tokens, roster: Mapping[str, Role]) -> None:
        self._own = state_dir_token
        self.tokens = tokens
        self.roster = dict(roster)

    def identify(self, token: str | None) -> User | None:
        """The user ``token`` acts as; None for no token (or an empty one), or one not (or
        no longer) valid."""
        if not token:
            return None
        if token_matches(token, self._own):
            return STATE_DIR_ADMIN
        try:
            record = self.tokens.find(token)
        except sqlite3.Error:
            return None
        if record is None:
            return None
        return User(record.user, self.roster.get(record.user, record.role))


def local_actor() -> str:
    """Who runs a ``token`` command, as the audit log names them: the login on the
    service's machine (whoever can write the state directory is in effect its admin)."""
    try:
        return f"local:{getpass.getuser()}"
    except (KeyError, OSError):
        return f"local:uid {os.getuid()}"


def issue(
    state_dir: Path, name: str, role: Role | None, roster: Mapping[str, Role] | None, now: float
) -> tuple[str, TokenRecord]:
    """A new token for the user ``name``: the token (to show once) and its record, with
    a line in the audit log. Its role is ``role``, else the one ``roster`` (the service
    config's users, when given) lists; a role the roster contradicts is an error."""
    check_name(name, "NAME")
    listed = (roster or {}).get(name)
    if role is None:
        if listed is None:
            where = "" if roster is None else " (the service config does not list it)"
            raise AutoscalerError(f"--role: give {name}'s role{where}: one of {ROLES}")
        role = listed
    elif listed is not None and listed is not role:
        raise AutoscalerError(
            f"--role {role.value}: the service config lists {name} as {listed.value} "
            "(service.users), and that role is the one the service gives it"
        )
    with _kept(state_dir, make=True) as tokens:
        token, record = tokens.create(name, role, now)
        _audit(state_dir, now, "token create", record, granted=role.value)
    return token, record


def revoke(state_dir: Path, name_or_id: str, now: float) -> list[TokenRecord]:
    """Revoke the token with id ``name_or_id``, or else every token of that user (a line
    in the audit log each); the records revoked."""
    with _kept(state_dir) as tokens:
        gone = tokens.revoke(name_or_id)
        for record in gone:
            _audit(state_dir, now, "token revoke", record)
    return gone


def listed(state_dir: Path) -> list[TokenRecord]:
    """Every token's record (none for a state directory without tokens)."""
    with _kept(state_dir) as tokens:
        return tokens.records()


@contextlib.contextmanager
def _kept(state_dir: Path, *, make: bool = False) -> Iterator[Tokens]:
    """The tokens of ``state_dir`` (``make``: the directory made if it is not there),
    closed after; a state directory, token file or audit log the system refuses is an
    error naming it, not a traceback."""
    tokens = Tokens(state_dir)
    try:
        if make:
            state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        yield tokens
    except (OSError, sqlite3.Error) as exc:
        where = getattr(exc, "filename", None) or tokens.path
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise AutoscalerError(f"{where}: cannot be used ({why})") from None
    finally:
        tokens.close()


def _audit(state_dir: Path, now: float, action: str, record: TokenRecord, **more: str) -> None:
    """A token command's line in the audit log: who ran it, whose token, never the token."""
    AuditLog(state_dir).record(
        now,
        user=local_actor(),
        role=Role.ADMIN.value,
        action=action,
        job=None,
        outcome="ok",
        subject=record.user,
        token=record.id,
        **more,
    )

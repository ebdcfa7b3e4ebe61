"""The service's alerts, delivered: a look at the jobs' figures every ``check_every_s``,
the alerts ``service.alerts.decide`` calls for written to ``alerts.json`` in the state
directory before any is sent, and a sender thread that posts each to the webhook,
signed, trying again with backoff while the receiver is down or answers 5xx.

``alerts.json`` keeps the keys already alerted, the alerts not yet delivered (with the
tries each had) and the counts delivered and dropped; a restarted service reads it, so
it never decides an alert twice and resumes the deliveries it had not finished. A
delivery is at least once: a service killed between the receiver's answer and the
file's update posts that alert again on restart, with the same ``id``.

Neither thread is the service's: a receiver that is slow or down delays only the
deliveries behind it. Jobs that ended before alerts were first set up on the state
directory are history, not alerted.
"""

from __future__ import annotations

import contextlib
import json
import math
import sqlite3
import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from http.client import HTTPException
from pathlib import Path
from typing import Any, Literal

from autoscaler.config.service_schema import AlertSettings, read_secret
from autoscaler.core.atomic import write_atomic
from autoscaler.core.errors import AutoscalerError
from autoscaler.service.alerts import (
    SIGNATURE_HEADER,
    Alert,
    BudgetFigure,
    DeadlineFigure,
    Figures,
    body,
    decide,
    sign,
)
from autoscaler.service.job_states import JobState
from autoscaler.service.view import JobView

ALERTS_FILE = "alerts.json"
BudgetSource = Callable[[], Iterable[BudgetFigure]]
"""More budgets to alert on than the jobs' own (a project's over a period)."""
Outcome = Literal["delivered", "retry", "refused"]


@dataclass(frozen=True)
class Pending:
    """An alert decided and not yet delivered: the tries it had, when the next is due."""

    alert: Alert
    tries: int = 0
    next_at: float = 0.0  # epoch seconds

    def to_json(self) -> dict[str, Any]:
        return {"alert": self.alert.to_json(), "tries": self.tries, "next_at": self.next_at}


@dataclass(frozen=True)
class Book:
    """What ``alerts.json`` holds."""

    since: float  # when alerts were first set up on the state directory
    sent: frozenset[str] = frozenset()
    pending: tuple[Pending, ...] = ()
    delivered: int = 0
    dropped: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "since": self.since,
            "sent": sorted(self.sent),
            "pending": [p.to_json() for p in self.pending],
            "delivered": self.delivered,
            "dropped": self.dropped,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Book:
        return cls(
            since=float(data["since"]),
            sent=frozenset(data["sent"]),
            pending=tuple(
                Pending(Alert.from_json(p["alert"]), int(p["tries"]), float(p["next_at"]))
                for p in data["pending"]
            ),
            delivered=int(data["delivered"]),
            dropped=int(data["dropped"]),
        )


@dataclass(frozen=True)
class AlertStatus:
    """What ``/metrics`` shows of the alerts: the figures of the running jobs (and of
    the other budgets' sources), and the deliveries so far."""

    figures: Figures
    now: float
    delivered: int = 0
    dropped: int = 0
    pending: int = 0


def job_figures(views: Sequence[JobView], since: float = math.inf) -> Figures:
    """The budgets and deadline forecasts of the running jobs, and of the jobs that
    ended at or after ``since`` (their last spend; a job may end right past a
    threshold). Each job is subject ``job:<id>``."""
    budgets: list[BudgetFigure] = []
    deadlines: list[DeadlineFigure] = []
    for v in views:
        live = v.state is JobState.RUNNING
        if not live and (v.ended_at is None or v.ended_at < since):
            continue
        p = v.progress
        subject = f"job:{v.id}"
        if p.budget is not None and p.budget > 0:
            budgets.append(BudgetFigure(subject, p.budget, p.spend, v.id))
        if live and p.mode == "deadline":
            deadlines.append(
                DeadlineFigure(
                    subject,
                    v.id,
                    p.deadline_at,
                    p.predicted_finish_at,
                    p.late_tasks,
                    p.tasks - p.done - p.failed,
                )
            )
    return Figures(tuple(budgets), tuple(deadlines))


def next_try_in(settings: AlertSettings, tries: int) -> float:
    """Seconds to wait after ``tries`` failed tries: doubling from ``first_delay_s``,
    at most ``max_delay_s``."""
    r = settings.retry
    return min(r.max_delay_s, r.first_delay_s * 2.0 ** (tries - 1))


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """A redirect is the receiver's answer, not followed: urllib would repost it as a
    GET without the body."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


def post(settings: AlertSettings, raw: bytes, headers: dict[str, str]) -> tuple[Outcome, str]:
    """Post ``raw`` to the webhook: delivered (2xx), to retry (no connection, a timeout,
    408, 429 or 5xx) or refused (any other answer: trying again would not change it),
    and what was heard."""
    request = urllib.request.Request(settings.webhook, data=raw, headers=headers, method="POST")
    opener = urllib.request.build_opener(_NoRedirect)
    try:
        with opener.open(request, timeout=settings.retry.timeout_s) as answer:
            return "delivered", f"HTTP {answer.status}"
    except urllib.error.HTTPError as exc:
        said = f"HTTP {exc.code}"
        exc.close()
        return ("retry" if exc.code >= 500 or exc.code in (408, 429) else "refused"), said
    except (OSError, HTTPException) as exc:  # URLError, refused, reset, timed out
        return "retry", repr(getattr(exc, "reason", exc))


class Alerting:
    """The service's alerts: figures for ``/metrics`` always; with ``settings``, the
    looks and the deliveries, on threads of their own once ``start``ed."""

    def __init__(
        self,
        settings: AlertSettings | None,
        *,
        state_dir: Path,
        source: str,
        service: str,
        views: Callable[[], Sequence[JobView]],
        clock: Callable[[], float],
        log: Any,
    ) -> None:
        self.settings = settings
        self.path = state_dir / ALERTS_FILE
        self.source = source  # the service config, for errors
        self.service = service
        self._views = views
        self._clock = clock
        self.log = log
        self._sources: list[BudgetSource] = []
        self._cond = threading.Condition()
        self._book: Book | None = None
        self._secret = b""
        self._stopping = False
        self._threads: list[threading.Thread] = []

    def add_source(self, source: BudgetSource) -> None:
        """Alert on more budgets than the jobs' own: ``source()`` gives their figures at
        each look (a project's budget over a period: subject ``project:<name>:<period>``)."""
        self._sources.append(source)

    def figures(self, views: Sequence[JobView], since: float = math.inf) -> Figures:
        """The jobs' figures (``job_figures``) and those of every added source; a source
        that fails is logged and left out of this look."""
        jobs = job_figures(views, since)
        more: list[BudgetFigure] = []
        for source in self._sources:
            try:
                more.extend(source())
            except (AutoscalerError, OSError, sqlite3.Error, ValueError) as exc:
                self._say("warning", "alert budget source failed", error=repr(exc))
        return replace(jobs, budgets=jobs.budgets + tuple(more))

    def status(self, views: Sequence[JobView]) -> AlertStatus:
        book = self._book
        figures = self.figures(views)
        if book is None:
            return AlertStatus(figures, self._clock())
        return AlertStatus(figures, self._clock(), book.delivered, book.dropped, len(book.pending))

    # --- start and stop ---------------------------------------------------------------

    def start(self) -> None:
        """Read the secret and ``alerts.json`` (a ``ConfigError`` or ``AutoscalerError``
        says what is wrong with them), then start looking and delivering. Nothing
        without settings."""
        if self.settings is None:
            return
        self._secret = read_secret(self.settings.secret_file, self.source)
        self._book = self._load()
        self._save(self._book)
        for name, target in (("alert-watch", self._watch), ("alert-send", self._send)):
            thread = threading.Thread(target=target, name=name, daemon=True)
            self._threads.append(thread)
            thread.start()

    def stop(self) -> None:
        """Stop looking (after a last look: a job that ended a moment ago is alerted) and
        delivering; what is not delivered yet stays in ``alerts.json`` for the next
        start. A try under way is waited for, at most its timeout."""
        if self.settings is None or self._book is None:
            return
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        for thread in self._threads:
            thread.join(timeout=self.settings.retry.timeout_s + 1.0)
        self._threads = []
        self._look()

    # --- looking ----------------------------------------------------------------------

    def check(self) -> tuple[Alert, ...]:
        """One look: the alerts decided, written to ``alerts.json`` before they are
        handed to the sender."""
        assert self.settings is not None
        assert self._book is not None
        now = self._clock()
        figures = self.figures(self._views(), self._book.since)
        with self._cond:
            book = self._book
            decision = decide(
                book.sent,
                figures,
                self.settings.thresholds,
                now,
                recovered=self.settings.deadline_recovered,
            )
            if decision.sent == book.sent:
                return ()
            added = tuple(Pending(a, 0, now) for a in decision.alerts)
            book = replace(book, sent=decision.sent, pending=book.pending + added)
            self._save(book)
            self._book = book
            self._cond.notify_all()
        for a in decision.alerts:
            self._say("info", "alert", id=a.id, kind=a.kind, subject=a.subject, message=a.message)
        return decision.alerts

    def _look(self) -> None:
        try:
            self.check()
        except (AutoscalerError, OSError, sqlite3.Error, ValueError) as exc:
            self._say("warning", "alert look failed", error=repr(exc))

    def _watch(self) -> None:
        assert self.settings is not None
        every = self.settings.check_every_s
        while True:
            self._look()
            with self._cond:
                if self._cond.wait_for(lambda: self._stopping, timeout=every):
                    return

    # --- delivering -------------------------------------------------------------------

    def _due(self) -> Pending | None:
        """The next pending alert once it is due, waiting for it; None once stopping.
        Called holding ``_cond``."""
        while not self._stopping:
            assert self._book is not None
            pending = self._book.pending
            if pending:
                first = min(pending, key=lambda p: p.next_at)
                wait = first.next_at - self._clock()
                if wait <= 0:
                    return first
                self._cond.wait(timeout=wait)
            else:
                self._cond.wait()
        return None

    def _send(self) -> None:
        assert self.settings is not None
        while True:
            with self._cond:
                item = self._due()
            if item is None:
                return
            raw = body(item.alert, self.service)
            headers = {
                "Content-Type": "application/json",
                "User-Agent": "autoscaler-alerts",
                SIGNATURE_HEADER: sign(raw, self._secret),
                "X-Autoscaler-Delivery": item.alert.id,
                "X-Autoscaler-Event": item.alert.kind,
            }
            outcome, heard = post(self.settings, raw, headers)
            self._settle(item, outcome, heard)

    def _settle(self, item: Pending, outcome: Outcome, heard: str) -> None:
        """Record a try's outcome: delivered, dropped (refused, or out of tries), or due
        again after the backoff. Unlike a decision, it holds in memory even when it
        cannot be written: the sender goes on, and a restart at worst posts it again."""
        assert self.settings is not None
        tries = item.tries + 1
        a = item.alert
        with self._cond:
            book = self._book
            assert book is not None
            rest = tuple(p for p in book.pending if p.alert.id != a.id)
            if outcome == "delivered":
                book = replace(book, pending=rest, delivered=book.delivered + 1)
            elif outcome == "refused" or tries >= self.settings.retry.attempts:
                book = replace(book, pending=rest, dropped=book.dropped + 1)
            else:
                again = Pending(a, tries, self._clock() + next_try_in(self.settings, tries))
                book = replace(book, pending=(*rest, again))
            self._book = book
            try:
                self._save(book)
            except OSError as exc:  # the next write says it all; a restart may resend it
                self._say("warning", "alerts.json cannot be written", error=repr(exc))
        if outcome == "delivered":
            self._say("info", "alert delivered", id=a.id, subject=a.subject, tries=tries)
        elif outcome == "retry" and tries < self.settings.retry.attempts:
            self._say(
                "warning", "alert not delivered, will retry", id=a.id, tries=tries, heard=heard
            )
        else:
            fields = {"kind": a.kind, "subject": a.subject, "message": a.message}
            self._say("error", "alert dropped", id=a.id, tries=tries, heard=heard, **fields)

    # --- alerts.json ------------------------------------------------------------------

    def _load(self) -> Book:
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return Book(since=self._clock())
        except OSError as exc:
            raise AutoscalerError(f"{self.path}: cannot be read: {exc.strerror}") from None
        try:
            return Book.from_json(json.loads(text))
        except (ValueError, KeyError, TypeError) as exc:
            raise AutoscalerError(f"{self.path}: not an alerts file: {exc!r}") from None

    def _save(self, book: Book) -> None:
        write_atomic(self.path, json.dumps(book.to_json()))

    def _say(self, level: str, event: str, **fields: Any) -> None:
        if self.log is not None:
            with contextlib.suppress(ValueError):  # the service closed its log meanwhile
                getattr(self.log, level)(event, **fields)

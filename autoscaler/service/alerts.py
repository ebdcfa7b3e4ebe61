"""What the service alerts, decided from figures (pure: no clock, no I/O).

A *subject* is a budget or a deadline someone is told about: ``job:<id>`` for a job's
own budget and deadline, ``project:<name>:<period>`` for a project's budget over a
period (``project:lab:2026-12``). Two things are alerted:

* ``budget_threshold``: a subject's spend (money committed) reaches a threshold, a
  fraction of its budget. Each threshold once per subject: spend only grows, so a
  look that finds it past two thresholds sends both.
* ``deadline_miss``: a deadline job will miss its deadline (its controller says some
  of its tasks will end late, or the deadline passed with tasks left); once per turn to
  "will miss", and, if asked, ``deadline_recovered`` once when it is expected on time
  again.

``decide`` is the whole decision: what was sent before (``sent``, keys kept across
restarts), the figures now, and ``now`` in; the alerts to send and the keys sent out.
A delivery (``service.alerting``) posts each alert's ``body`` signed with ``sign``.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

AlertKind = Literal["budget_threshold", "deadline_miss", "deadline_recovered"]
SIGNATURE_HEADER = "X-Autoscaler-Signature"
"""The header that carries ``sha256=<hex>``, the HMAC-SHA256 of the raw body."""
_EPS = 1e-9  # spend is rounded to 1e-4: a threshold of 1.0 is reached at spend == budget


@dataclass(frozen=True)
class BudgetFigure:
    """A budget and what was spent against it (money committed)."""

    subject: str  # job:<id>, project:<name>:<period>
    budget: float
    spent: float
    job: str | None = None  # the job's id, for a job's own budget

    @property
    def ratio(self) -> float:
        return self.spent / self.budget if self.budget > 0 else 0.0


@dataclass(frozen=True)
class DeadlineFigure:
    """A running deadline job's outlook: ``late_tasks`` its controller expects to end
    after the deadline, and the ``tasks_left`` it has not done."""

    subject: str
    job: str
    deadline_at: float | None  # epoch seconds
    forecast_finish_at: float | None  # epoch seconds, as its last plan expects
    late_tasks: int
    tasks_left: int = 0

    def misses(self, now: float) -> bool:
        """Whether it will miss its deadline: its controller says so, or the deadline
        has passed with tasks left (a task that outlives its estimate may not be
        counted late before then)."""
        passed = self.deadline_at is not None and now > self.deadline_at
        return self.late_tasks > 0 or (passed and self.tasks_left > 0)


@dataclass(frozen=True)
class Figures:
    """What the alerts are decided from, at one look."""

    budgets: tuple[BudgetFigure, ...] = ()
    deadlines: tuple[DeadlineFigure, ...] = ()


@dataclass(frozen=True)
class Alert:
    """One alert, as its webhook body says it. ``id`` is the same on every try of one
    alert (a receiver drops a repeat by it); a threshold's alert has the same id
    whenever it is decided, so even a decision made twice is one alert to a receiver."""

    id: str
    kind: AlertKind
    subject: str
    time: float  # epoch seconds, when it was decided
    message: str
    job: str | None = None
    threshold: float | None = None
    budget: float | None = None
    spent: float | None = None
    deadline_at: float | None = None
    forecast_finish_at: float | None = None
    late_tasks: int | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Alert:
        return cls(**data)


@dataclass(frozen=True)
class Decision:
    alerts: tuple[Alert, ...]
    sent: frozenset[str]


def threshold_key(subject: str, threshold: float) -> str:
    return f"{subject}@{threshold:g}"


def late_key(subject: str) -> str:
    return f"late:{subject}"


def decide(
    sent: frozenset[str],
    figures: Figures,
    thresholds: Sequence[float],
    now: float,
    *,
    recovered: bool = True,
) -> Decision:
    """The alerts ``figures`` call for that ``sent`` does not hold yet, and the keys sent
    afterwards. A threshold reached is kept in ``sent`` for good (a budget raised later
    does not alert it again); a deadline's "will miss" is kept while it holds."""
    out: list[Alert] = []
    keys = set(sent)
    for b in figures.budgets:
        if b.budget <= 0:
            continue
        for t in thresholds:
            key = threshold_key(b.subject, t)
            if key in keys or b.spent < t * b.budget - _EPS * max(1.0, b.budget):
                continue
            keys.add(key)
            out.append(
                Alert(
                    id=_id(key),
                    kind="budget_threshold",
                    subject=b.subject,
                    time=now,
                    message=f"{b.subject}: {b.spent:.2f} spent of a budget of {b.budget:.2f} "
                    f"({b.ratio:.0%}), past {t:.0%}",
                    job=b.job,
                    threshold=t,
                    budget=b.budget,
                    spent=b.spent,
                )
            )
    for d in figures.deadlines:
        key = late_key(d.subject)
        misses = d.misses(now)
        if misses == (key in keys):
            continue
        if misses:
            keys.add(key)
            kind: AlertKind = "deadline_miss"
            said = f"{d.subject}: will miss its deadline, " + (
                f"{d.late_tasks} tasks late" if d.late_tasks else f"{d.tasks_left} tasks left"
            )
        else:
            keys.discard(key)
            if not recovered:
                continue
            kind, said = "deadline_recovered", f"{d.subject}: expected on time again"
        out.append(
            Alert(
                id=_id(f"{kind}:{d.subject}:{now!r}"),
                kind=kind,
                subject=d.subject,
                time=now,
                message=said,
                job=d.job,
                deadline_at=d.deadline_at,
                forecast_finish_at=d.forecast_finish_at,
                late_tasks=d.late_tasks,
            )
        )
    return Decision(tuple(out), frozenset(keys))


def body(alert: Alert, service: str) -> bytes:
    """The webhook's JSON body for ``alert`` from service ``service`` (UTF-8, keys
    sorted: the bytes signed are the bytes sent)."""
    return json.dumps(
        {**alert.to_json(), "service": service}, sort_keys=True, separators=(",", ":")
    ).encode()


def sign(raw: bytes, secret: bytes) -> str:
    """The signature header's value for body ``raw``: ``sha256=`` and the hex HMAC-SHA256
    of the raw body under the shared secret (as GitHub signs its webhooks)."""
    return "sha256=" + hmac.new(secret, raw, hashlib.sha256).hexdigest()


def signed_by(raw: bytes, header: str, secret: bytes) -> bool:
    """Whether ``header`` is ``sign(raw, secret)`` (compared in constant time)."""
    return hmac.compare_digest(header.encode(), sign(raw, secret).encode())


def _id(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()[:32]

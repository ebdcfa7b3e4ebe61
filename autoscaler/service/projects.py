"""Projects' money over a period: what each project has spent and holds, and whether a
job fits what it has left.

A project (``service.projects``) has a budget per period: a calendar month, an ISO week
(Monday to Sunday) or a day, all UTC. Its **spent** money in a period is what its jobs'
machines cost in that period: each job's cost split by UTC day as the daily reports split
it (``service.daily``: a machine's cost over the days of its life, in proportion to the
seconds in each), summed over the period's days. A job whose machines ran across the
start of a period is so charged to both periods, each for the time it ran in it.

A job that has not ended **holds** money: a budget job its budget, a deadline job the cap
it was given when it started (``cap``: what its project had left then). What a live job
holds in a period is its hold less what it spent in earlier periods; of that, what it
has not spent yet is the period's ``held``. So ``spent + held`` is the most the period's
jobs can commit, and ``left = budget - spent - held`` is what a new job may take: the
sum of the admitted jobs' budgets (and the deadline jobs' caps) never passes the
project's budget. A job that ends under its budget holds nothing more: the difference
is left again.

Pure: charges and ``now`` in, standings and verdicts out; the service gathers the
charges (``service.project_money``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta

from autoscaler.config.service_schema import Period, Project
from autoscaler.service.daily import DayReport

SLACK = 1e-9
"""Money compared with this much slack (sums of floats)."""


@dataclass(frozen=True)
class Span:
    """One period: its kind, its label (``2026-12``, ``2026-W49``, ``2026-12-02``) and its
    UTC days ``first`` to ``last``."""

    kind: Period
    label: str
    first: date
    last: date

    def holds(self, day: date) -> bool:
        return self.first <= day <= self.last

    @property
    def start(self) -> float:
        """Epoch seconds at its start."""
        return datetime(self.first.year, self.first.month, self.first.day, tzinfo=UTC).timestamp()

    @property
    def said(self) -> str:
        """``this month (2026-12)``."""
        return f"this {self.kind} ({self.label})"


def span_at(kind: Period, now: float) -> Span:
    """The period of ``kind`` that epoch seconds ``now`` fall in."""
    day = datetime.fromtimestamp(now, UTC).date()
    if kind == "day":
        return Span(kind, day.isoformat(), day, day)
    if kind == "week":
        first = day - timedelta(days=day.weekday())
        year, week, _ = first.isocalendar()
        return Span(kind, f"{year}-W{week:02d}", first, first + timedelta(days=6))
    first = day.replace(day=1)
    following = (first + timedelta(days=32)).replace(day=1)
    return Span(kind, f"{day.year}-{day.month:02d}", first, following - timedelta(days=1))


@dataclass(frozen=True)
class Charge:
    """One job as its project's ledger sees it."""

    job: str
    project: str
    days: Mapping[date, float]
    """Its machines' cost so far per UTC day (``daily.daily_costs``)."""
    hold: float | None = None
    """A job that has not ended: the money it may commit in all (its budget, or its cap);
    None: it holds none (it ended, or it is a deadline job of a project without budget)."""


@dataclass(frozen=True)
class Standing:
    """A project in the current period."""

    project: str
    budget: float | None
    """None: the project has no limit (a service without projects: ``default``)."""
    span: Span
    spent: float
    """What its jobs' machines cost in the period."""
    held: float
    """What its live jobs may still commit in the period."""
    days: Mapping[str, float] = field(default_factory=dict)
    """Its spend per UTC day of the period (YYYY-MM-DD), the days with spend."""

    @property
    def left(self) -> float | None:
        return None if self.budget is None else self.budget - self.spent - self.held

    def to_json(self) -> dict[str, object]:
        left = self.left
        return {
            "project": self.project,
            "budget": self.budget,
            "period": self.span.kind,
            "period_label": self.span.label,
            "spent": round(self.spent, 4),
            "held": round(self.held, 4),
            "left": None if left is None else round(left, 4),
            "days": {d: round(c, 4) for d, c in sorted(self.days.items())},
        }

    def said(self) -> str:
        """``project lab-a has $12.50 left of $100.00 this month (2026-12)``."""
        left = max(self.left or 0.0, 0.0)
        return (
            f"project {self.project} has ${left:,.2f} left of ${self.budget or 0:,.2f} "
            f"{self.span.said}"
        )


UNLIMITED = Project(name="default", budget=0.0)
"""The project of a service that lists none: every job's, without a limit."""


def standings(
    projects: Sequence[Project], charges: Iterable[Charge], now: float
) -> dict[str, Standing]:
    """Each project's standing at ``now``; see the module docstring. Without
    ``projects``, each group the charges name (and ``default``) without a limit, its
    period a month: what each spent this month, per day (another grouping of the jobs,
    such as their users, is summed so too)."""
    charges = list(charges)
    known = {p.name: p for p in projects} or {
        name: UNLIMITED.model_copy(update={"name": name})
        for name in sorted({UNLIMITED.name, *(c.project for c in charges)})
    }
    spans = {name: span_at(p.period, now) for name, p in known.items()}
    spent = dict.fromkeys(known, 0.0)
    held = dict.fromkeys(known, 0.0)
    days: dict[str, dict[str, float]] = {name: {} for name in known}
    for c in charges:
        span = spans.get(c.project)
        if span is None:
            continue  # a project the config no longer lists
        before = sum(cost for day, cost in c.days.items() if day < span.first)
        now_in = 0.0
        for day, cost in c.days.items():
            if span.holds(day):
                now_in += cost
                label = day.isoformat()
                days[c.project][label] = days[c.project].get(label, 0.0) + cost
        spent[c.project] += now_in
        if c.hold is not None:
            held[c.project] += max(0.0, c.hold - before - now_in)
    return {
        name: Standing(
            name,
            p.budget if projects else None,
            spans[name],
            spent[name],
            held[name],
            days[name],
        )
        for name, p in known.items()
    }


def days_by_job(reports: Iterable[DayReport]) -> dict[str, dict[date, float]]:
    """Each job's cost per UTC day, from the daily reports' records."""
    days: dict[str, dict[date, float]] = {}
    for report in reports:
        day = date.fromisoformat(report.day)
        for j in report.jobs:
            mine = days.setdefault(j.id, {})
            mine[day] = mine.get(day, 0.0) + j.cost
    return days


def refusal(standing: Standing, asks: float | None) -> str | None:
    """Why a job asking ``asks`` (its budget; None: a deadline job without one, which
    needs some money) does not fit its project now; None if it does."""
    left = standing.left
    if left is None:
        return None
    if asks is not None and asks <= left + SLACK:
        return None
    if asks is None and left > SLACK:
        return None
    wants = f"job asks ${asks:,.2f}" if asks is not None else "a deadline job needs some"
    return f"{standing.said()}; {wants}"


def never_fits(standing: Standing, asks: float | None) -> str | None:
    """Why a job asking ``asks`` can never fit its project, whatever its jobs spend: its
    budget is more than the project's whole budget for a period; None if it is not."""
    if standing.budget is None or asks is None or asks <= standing.budget + SLACK:
        return None
    return (
        f"project {standing.project}'s budget is ${standing.budget:,.2f} a "
        f"{standing.span.kind}; job asks ${asks:,.2f}, more than the project ever has"
    )


def cap(standing: Standing) -> float | None:
    """The budget a deadline job without one runs under when it starts: what its project
    has left (None: the project has no limit)."""
    left = standing.left
    return None if left is None else max(left, 0.0)

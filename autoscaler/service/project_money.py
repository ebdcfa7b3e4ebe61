"""The service's projects' money: admission of jobs against what their project has left
this period (``service.projects`` has the rule), and the cap a deadline job without a
budget runs under.

* A job submitted to a project with a budget is admitted when its budget fits what the
  project has left (a deadline job without a budget: when anything is left). Otherwise it
  is refused (``ProjectRefused``, naming the project, its budget, the period and what is
  left), or, when the project's ``when_over`` is ``queue``, journaled as **waiting**: it
  holds nothing, and the pump starts it once it fits (money freed by a job that ended
  under its budget, or a new period).
* A deadline job without a budget, starting in a project with a budget, runs on machines
  of its own under a budget, its **cap**: what the project has left then. It is charged
  as it spends (its cost by day counts, as every job's) and holds the rest of its cap
  until it ends; it stops as a budget run stops, once its cap cannot pay another unit,
  and its stop reason names the project. (It does not share the deadline pool: a pool's
  budget is the pool's, not one job's.) Its cap is not raised when a new period begins.
* A budget raised by ``update`` must fit too; a job then holds its new budget (the
  updates' log has it, as a running job's config keeps the budget it started with).

Whether a job waits and a deadline job's cap are logged in the store's ``updates``
(kinds ``project``, ``project_cap``), so a restarted service knows them. What admits or
caps a job is called holding the service's lock, so two admissions never spend the same
money; ``standings`` only reads, and is read without it for the status.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import date
from typing import Any

from pydantic import ValidationError

from autoscaler.config.schema import RunConfig
from autoscaler.config.service_schema import ServiceSettings
from autoscaler.core.errors import AutoscalerError
from autoscaler.service.job_states import ENDED
from autoscaler.service.projects import (
    SLACK,
    Charge,
    Standing,
    cap,
    never_fits,
    refusal,
    span_at,
    standings,
)
from autoscaler.service.runners import with_constraint
from autoscaler.service.store import JobRow, Store
from autoscaler.service.view import Progress

JobDays = Callable[[list[JobRow]], dict[str, dict[date, float]]]
"""Each job's cost per UTC day so far, as the daily reports split it (``Service._job_days``)."""


class ProjectRefused(AutoscalerError):
    """A job its project's money left this period cannot pay."""

    code = "ProjectRefused"


@dataclass(frozen=True)
class Capped:
    """A deadline job's cap: the project's money left when it started."""

    project: str
    cap: float
    period: str


class ProjectMoney:
    """Admissions against the projects' money; see the module docstring."""

    def __init__(
        self,
        settings: ServiceSettings,
        store: Store,
        job_days: JobDays,
        clock: Callable[[], float],
    ) -> None:
        self.settings = settings
        self.store = store
        self.job_days = job_days
        self.clock = clock
        self.waiting: dict[str, str] = {}  # job id -> why it waits
        self.caps: dict[str, Capped] = {}
        for job, _, data in store.updates("project"):
            if data.get("waiting"):
                self.waiting[job] = str(data.get("said", ""))
            else:
                self.waiting.pop(job, None)
        self.budgets: dict[str, float] = {}  # job id -> its budget as last updated
        for job, _, data in store.updates("update"):
            if data.get("budget") is not None:
                self.budgets[job] = float(data["budget"])
        for job, _, data in store.updates("project_cap"):
            self.caps[job] = Capped(data["project"], data["cap"], data["period"])

    # --- where the projects stand ------------------------------------------------------

    def standings(self, only: str | None = None) -> dict[str, Standing]:
        """Every project's standing now (``only``: that project's jobs alone are read)."""
        now = self.clock()
        rows = self._rows(only, now)
        days = self.job_days(rows)
        charges = [Charge(r.id, r.project, days.get(r.id, {}), self._hold(r)) for r in rows]
        return standings(self.settings.projects, charges, now)

    def standing(self, project: str) -> Standing:
        return self.standings(project)[project]

    def _rows(self, only: str | None, now: float) -> list[JobRow]:
        """The jobs that can count in a current period: those not ended, or ended within
        the longest period."""
        earliest = min(
            (span_at(p.period, now).start for p in self.settings.projects),
            default=span_at("month", now).start,
        )
        where = "WHERE (ended_at IS NULL OR ended_at >= ?)"
        args: tuple[Any, ...] = (earliest,)
        if only is not None:
            where += " AND COALESCE(project, 'default') = ?"
            args = (earliest, only)
        return self.store.rows(where, args)

    def _hold(self, row: JobRow) -> float | None:
        """The money a job not ended holds in all: its budget (or cap); a waiting job none."""
        if row.state in ENDED or row.id in self.waiting:
            return None
        return self.budgets.get(row.id, row.config.constraint.budget)

    # --- admission ---------------------------------------------------------------------

    def admit(self, cfg: RunConfig) -> str | None:
        """A job about to be journaled: None if it fits its project (or the project has no
        budget); why it waits if its project queues; else ``ProjectRefused``."""
        project = self.settings.project(cfg.project_name)
        if project is None:
            return None
        standing = self.standing(project.name)
        never = never_fits(standing, cfg.constraint.budget)
        if never is not None:  # not queued: it would wait forever
            raise ProjectRefused(never)
        why = refusal(standing, cfg.constraint.budget)
        if why is None:
            return None
        if project.when_over == "queue":
            return f"waiting for money: {why}"
        raise ProjectRefused(why)

    def submitted(self, job_id: str, waits: str | None) -> None:
        """Journal that a job just added waits (``waits``: why)."""
        if waits is not None:
            self._wait(job_id, waits)

    def _wait(self, job_id: str, why: str) -> None:
        if self.waiting.get(job_id) == why:
            return
        self.waiting[job_id] = why
        self.store.log_update(job_id, self.clock(), "project", {"waiting": True, "said": why})

    def passes(self, row: JobRow) -> bool:
        """Whether a queued job may start now: one that waits is admitted once it fits."""
        if row.id not in self.waiting:
            return True
        project = self.settings.project(row.project)
        why = None
        if project is not None:
            standing = self.standing(project.name)
            budget = self.budgets.get(row.id, row.config.constraint.budget)
            if budget is None:
                why = _capped_config(row.config, standing)[1]
            elif never_fits(standing, budget) is None:
                why = refusal(standing, budget)
            # else it can never fit: it goes on to start, where ``capped`` refuses it
        if why is not None:
            self._wait(row.id, f"waiting for money: {why}")
            return False
        del self.waiting[row.id]
        self.store.log_update(row.id, self.clock(), "project", {"waiting": False})
        return True

    def capped(self, row: JobRow) -> JobRow | None:
        """A job about to start, as it starts: a deadline job without a budget in a project
        with one, under its cap (stored with its config). None: it went back to waiting
        (its project queues); ``ProjectRefused``: nothing is left for it."""
        project = self.settings.project(row.project)
        if project is None or row.started_at is not None:
            return row
        budget = self.budgets.get(row.id, row.config.constraint.budget)
        if budget is not None:
            never = never_fits(self.standing(project.name), budget)
            if never is not None:
                raise ProjectRefused(never)
            return row
        standing = self.standing(project.name)
        cfg, why = _capped_config(row.config, standing)
        if cfg is None:
            if project.when_over == "queue":
                self._wait(row.id, f"waiting for money: {why}")
                return None
            raise ProjectRefused(str(why))
        self.store.set_config(row.id, cfg, row.deadline_at)
        capped = Capped(project.name, cfg.constraint.budget or 0.0, standing.span.said)
        self.caps[row.id] = capped
        self.store.log_update(
            row.id,
            self.clock(),
            "project_cap",
            {"project": capped.project, "cap": capped.cap, "period": capped.period},
        )
        return self.store.row(row.id)

    def check_update(self, row: JobRow, budget: float) -> None:
        """Raise if a job's new ``budget`` passes what its project has left (a budget
        lowered always fits; a job that waits is admitted, or not, when it may start,
        unless its budget passes the project's whole budget)."""
        if self.settings.project(row.project) is None:
            return
        standing = self.standing(row.project)
        if row.id in self.waiting:  # a budget it may start with some day, or never
            never = never_fits(standing, budget)
            if never is not None:
                raise ProjectRefused(never)
            return
        held = self._hold(row) or 0.0
        more = budget - held
        left = standing.left
        if more <= 0 or left is None or more <= left + SLACK:
            return
        raise ProjectRefused(
            f"{standing.said()}; a budget of ${budget:,.2f} asks ${more:,.2f} more"
        )

    def updated(self, job_id: str, budget: float) -> None:
        """A job's budget was updated (a running job's config keeps the one it started
        with; its daemon has the new one)."""
        self.budgets[job_id] = budget

    def stopped(self, job_id: str, view: Progress) -> Progress:
        """A job's last view, its stop reason naming its project when its cap stopped it."""
        capped = self.caps.get(job_id)
        if capped is None or not view.stop_reason:
            return view
        said = (
            f"project {capped.project}'s money ran out (it had ${capped.cap:,.2f} left "
            f"{capped.period} when the job started): {view.stop_reason}"
        )
        return replace(view, stop_reason=said)


def _capped_config(cfg: RunConfig, standing: Standing) -> tuple[RunConfig | None, str | None]:
    """A deadline job's config under its cap, what its project has left (shared evenly by
    its jobs); or None and why it cannot have one (nothing left, or less than one unit of
    the cheapest machine type)."""
    why = refusal(standing, None)
    if why is not None:
        return None, why
    try:
        return with_constraint(cfg, (cap(standing) or 0.0) / max(len(cfg.jobs), 1), None), None
    except ValidationError:
        return None, f"{standing.said()}, less than one unit of the cheapest machine type"

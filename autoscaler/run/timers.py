"""The daemon's timers (APScheduler jobs): each puts an item on the daemon's queue when
it falls due, for the main loop to turn into events."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime, timedelta

from apscheduler.jobstores.base import JobLookupError
from apscheduler.schedulers.base import BaseScheduler

from autoscaler.core.leases import Timeline, boundary_due, delay_s
from autoscaler.core.model import BoundaryNear, Event, JobArrived
from autoscaler.core.state import Machine, RunState
from autoscaler.run.inbox import ArrivalsDue, BoundaryDue, HealthDue, TickDue

HEALTH_S = 0.25
"""Real seconds between health checks (silent machines, machines that never came up)."""


class Timers:
    """The run's periodic checks, and one timer per machine's unit boundary and per
    arrival time. ``margin_s``: how long before its boundary a machine is looked at."""

    def __init__(
        self,
        scheduler: BaseScheduler,
        put: Callable[[object], None],
        timeline: Timeline,
        margin_s: float,
    ) -> None:
        self.scheduler = scheduler
        self._put_item = put
        self._timeline = timeline
        self._margin_s = margin_s

    def _put(self, item: object) -> None:
        """The jobs' function: a Python one, not the queue's ``put`` (a builtin): a job
        added checks its function's signature, and a builtin's is parsed from its
        docstring (about 0.9 ms against 0.1, for each machine's boundary timer)."""
        self._put_item(item)

    def checks(self, tick_s: float, describe_s: float, describe: Callable[[], None]) -> None:
        """The periodic jobs: the monitoring tick every ``tick_s`` real seconds, the health
        check, and ``describe`` (the provider's) every ``describe_s`` if above 0."""
        put = self._put
        self.scheduler.add_job(put, "interval", seconds=tick_s, args=[TickDue()], id="tick")
        self.scheduler.add_job(put, "interval", seconds=HEALTH_S, args=[HealthDue()])
        if describe_s > 0:
            self.scheduler.add_job(describe, "interval", seconds=describe_s)

    def arrivals(self, state: RunState, now: float) -> list[Event]:
        """Deadline mode: jobs due to arrive, one timer per arrival time (jobs arriving
        together are planned together); those due already (a restart) arrive now."""
        due: list[Event] = []
        at: dict[float, list[JobArrived]] = {}
        for job in state.work.jobs:
            if job.name in state.work.arrived:
                continue
            if job.at <= now:
                due.append(JobArrived(job.name))
            else:
                at.setdefault(job.at, []).append(JobArrived(job.name))
        for when, arrivals in at.items():
            delay = delay_s(self._timeline, when, time.monotonic())
            self.scheduler.add_job(
                self._put,
                "date",
                run_date=datetime.now().astimezone() + timedelta(seconds=delay),
                args=[ArrivalsDue(tuple(arrivals))],
                id=f"arrival:{when}",
                replace_existing=True,
                misfire_grace_time=None,
            )
        return due

    def wake(self, at: float) -> None:
        """A monitoring tick at run time ``at`` besides the periodic ones: launches that
        wait for a hold to lift are tried then, not at the next interval."""
        delay = delay_s(self._timeline, at, time.monotonic())
        self.scheduler.add_job(
            self._put,
            "date",
            run_date=datetime.now().astimezone() + timedelta(seconds=max(0.0, delay)),
            args=[TickDue()],
            id="wake",
            replace_existing=True,
            misfire_grace_time=None,
        )

    def boundary(self, m: Machine) -> None:
        """(Re)set the timer of ``m``'s next unit boundary."""
        due = boundary_due(m.paid_until, self._margin_s)
        delay = delay_s(self._timeline, due, time.monotonic())
        self.scheduler.add_job(
            self._put,
            "date",
            run_date=datetime.now().astimezone() + timedelta(seconds=delay),
            args=[BoundaryDue(m.id)],
            id=f"boundary:{m.id}",
            replace_existing=True,
            misfire_grace_time=None,
        )

    def cancel_boundary(self, mid: str) -> None:
        try:
            self.scheduler.remove_job(f"boundary:{mid}")
        except JobLookupError:
            return  # it fired already (a date job then goes), or the machine never had one

    def boundary_event(self, m: Machine | None, now: float) -> list[Event]:
        """A machine's boundary timer fired: ``BoundaryNear``, unless it fired early (it is
        set again for the right moment) or the machine is gone."""
        if m is None or not m.alive:
            return []
        if now < boundary_due(m.paid_until, self._margin_s):
            self.boundary(m)
            return []
        return [BoundaryNear(m.id)]

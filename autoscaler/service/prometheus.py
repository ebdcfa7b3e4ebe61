"""Prometheus text for the service's ``GET /metrics``: per job (labels ``job``, its id,
and ``name``) its tasks by state, money committed and cost, its budget, deadline and
predicted finish when it has them, and a 0/1 gauge per job state; for the service, jobs
by state, machines alive, and per shared limit (a type's ``max_count``, a provider's
``max_machines``) the machines all jobs hold against it; per project (label
``project``) its budget, what it spent and what is left this period.

The alerts' figures (``alert_metrics``): per budget subject the share of it spent, per
running deadline job whether it is forecast to miss its deadline, and the webhook's
deliveries; ``infra/prometheus/alerts.yml`` alerts on them.

Built afresh from the jobs' views (``service.view.JobView``) on each scrape, in a
registry of its own, so a job that is gone leaves no stale series behind.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from autoscaler.service.job_states import JobState
from autoscaler.service.quota_ledger import Usage
from autoscaler.service.view import JobView

if TYPE_CHECKING:  # types only: the renderer needs none of the alerts' delivery
    from prometheus_client import CollectorRegistry

    from autoscaler.service.alerting import AlertStatus
    from autoscaler.service.projects import Standing

JOB_STATES = tuple(s.value for s in JobState)
"""The states of a service job (``JobView.state``)."""
_RELEASED = "released"


def render_metrics(
    jobs: Sequence[JobView],
    quota: Sequence[Usage] = (),
    alerts: AlertStatus | None = None,
    projects: Sequence[Standing] = (),
) -> tuple[bytes, str]:
    """The body and content type of ``/metrics`` for the views ``jobs`` (a machine is
    alive unless ``released``), the shared limits' ``quota``, the ``alerts`` and the
    ``projects``."""
    from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Gauge, generate_latest

    r = CollectorRegistry()
    labels = ["job", "name"]
    tasks = Gauge("autoscaler_job_tasks", "a job's tasks by state", [*labels, "state"], registry=r)
    spend = Gauge("autoscaler_job_spend_committed", "money a job committed", labels, registry=r)
    cost = Gauge("autoscaler_job_cost", "what a job's machines cost so far", labels, registry=r)
    budget = Gauge("autoscaler_job_budget", "a job's budget (if it has one)", labels, registry=r)
    deadline = Gauge(
        "autoscaler_job_deadline_timestamp_seconds",
        "a job's deadline, epoch seconds (if it has one)",
        labels,
        registry=r,
    )
    finish = Gauge(
        "autoscaler_job_predicted_finish_timestamp_seconds",
        "a job's finish as its plan predicts it, epoch seconds (once planned)",
        labels,
        registry=r,
    )
    job_state = Gauge(
        "autoscaler_job_state",
        "1 for a job's state, 0 for the others",
        [*labels, "state"],
        registry=r,
    )
    by_state = Gauge(
        "autoscaler_service_jobs", "the service's jobs by state", ["state"], registry=r
    )
    alive = Gauge(
        "autoscaler_service_machines_alive", "machines not yet released, all jobs", registry=r
    )
    spend_all = Gauge("autoscaler_service_spend_committed", "money committed, all jobs", registry=r)
    limit = ["kind", "name"]
    held = Gauge(
        "autoscaler_service_quota_held",
        "machines all jobs hold (alive or being launched) under a shared limit",
        limit,
        registry=r,
    )
    most = Gauge(
        "autoscaler_service_quota_max",
        "a shared limit: a type's max_count, a provider's max_machines",
        limit,
        registry=r,
    )
    for use in quota:
        held.labels(use.kind, use.name).set(use.held)
        most.labels(use.kind, use.name).set(use.most)
    counts = dict.fromkeys(JOB_STATES, 0)
    machines = 0
    committed = 0.0
    for view in jobs:
        key = (view.id, view.name)
        p = view.progress
        for st, n in (("done", p.done), ("failed", p.failed), ("running", p.running)):
            tasks.labels(*key, st).set(n)
        tasks.labels(*key, "total").set(p.tasks)
        spend.labels(*key).set(p.spend)
        cost.labels(*key).set(p.cost)
        for gauge, value in (
            (budget, p.budget),
            (deadline, p.deadline_at),
            (finish, p.predicted_finish_at),
        ):
            if value is not None:
                gauge.labels(*key).set(value)
        for st in JOB_STATES:
            job_state.labels(*key, st).set(int(view.state == st))
        counts[view.state] = counts.get(view.state, 0) + 1
        machines += sum(m.state != _RELEASED for m in p.machines)
        committed += p.spend
    for st, n in counts.items():
        by_state.labels(st).set(n)
    alive.set(machines)
    spend_all.set(committed)
    if alerts is not None:
        alert_metrics(r, alerts)
    _project_gauges(r, projects)
    return generate_latest(r), CONTENT_TYPE_LATEST


def alert_metrics(r: CollectorRegistry, alerts: AlertStatus) -> None:
    """The alerts' gauges and counters in registry ``r``."""
    from prometheus_client import Counter, Gauge

    used = Gauge(
        "autoscaler_budget_used_ratio",
        "money committed over the budget, per budget subject (job:<id>, "
        "project:<name>:<period>); running jobs only",
        ["subject"],
        registry=r,
    )
    miss = Gauge(
        "autoscaler_deadline_forecast_miss",
        "1 while a running deadline job will miss its deadline (its controller says so, "
        "or the deadline passed with tasks left), else 0",
        ["job"],
        registry=r,
    )
    sent = Counter("autoscaler_alerts_sent", "alerts the webhook took (2xx)", registry=r)
    failed = Counter(
        "autoscaler_alerts_failed",
        "alerts dropped: refused by the webhook, or out of tries",
        registry=r,
    )
    pending = Gauge("autoscaler_alerts_pending", "alerts decided and not yet delivered", registry=r)
    for b in alerts.figures.budgets:
        used.labels(b.subject).set(b.ratio)
    for d in alerts.figures.deadlines:
        miss.labels(d.job).set(int(d.misses(alerts.now)))
    sent.inc(alerts.delivered)
    failed.inc(alerts.dropped)
    pending.set(alerts.pending)


def _project_gauges(r: CollectorRegistry, projects: Sequence[Standing]) -> None:
    """Per project, this period: what it spent, its budget and what is left (the last
    two only for a project with a budget)."""
    from prometheus_client import Gauge

    labels = ["project", "period"]
    spent = Gauge(
        "autoscaler_project_spent", "what a project's jobs cost this period", labels, registry=r
    )
    budget = Gauge("autoscaler_project_budget", "a project's budget per period", labels, registry=r)
    left = Gauge(
        "autoscaler_project_left",
        "what a project has left this period: its budget less what it spent and what its "
        "live jobs hold",
        labels,
        registry=r,
    )
    for p in projects:
        key = (p.project, p.span.label)
        spent.labels(*key).set(p.spent)
        if p.budget is not None and p.left is not None:
            budget.labels(*key).set(p.budget)
            left.labels(*key).set(p.left)

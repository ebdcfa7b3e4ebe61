"""Prometheus gauges of a live run, on their own port: tasks by state, machines by type
and state, committed spend, the budget, and the plan's predicted makespan; in deadline
mode, per job its tasks done and in all, its deadline, and the lateness last said."""

from __future__ import annotations

from typing import Any

from autoscaler.config.schema import RunConfig
from autoscaler.core.errors import AutoscalerError
from autoscaler.core.state import RunState
from autoscaler.run.live import jobs_done, machine_counts


class Metrics:
    """Prometheus gauges on their own port (prometheus_client, its own registry)."""

    def __init__(self, cfg: RunConfig) -> None:
        from prometheus_client import CollectorRegistry, Gauge

        self.registry = CollectorRegistry()
        r = self.registry
        self.tasks = Gauge("autoscaler_tasks", "tasks by state", ["state"], registry=r)
        self.machines = Gauge(
            "autoscaler_machines", "live machines by type and state", ["type", "state"], registry=r
        )
        self.spend = Gauge("autoscaler_spend_committed", "money committed", registry=r)
        self.provider_machines = Gauge(
            "autoscaler_provider_machines", "live machines by provider", ["provider"], registry=r
        )
        self.provider_spend = Gauge(
            "autoscaler_provider_spend_committed",
            "money committed to each provider's machines",
            ["provider"],
            registry=r,
        )
        self.budget = Gauge("autoscaler_budget", "the run's budget", registry=r)
        self.needed = Gauge(
            "autoscaler_budget_needed",
            "the budget the estimates say the run needs, once it is unlikely to finish (else 0)",
            registry=r,
        )
        self.shortfall = Gauge(
            "autoscaler_budget_shortfall",
            "1 once the budget is unlikely to finish the bag, else 0",
            registry=r,
        )
        self.makespan = Gauge(
            "autoscaler_estimated_makespan_seconds", "the plan's predicted makespan", registry=r
        )
        labels = ["job"]
        self.job_tasks = Gauge(
            "autoscaler_job_tasks",
            "deadline mode: a job's tasks by state",
            ["job", "state"],
            registry=r,
        )
        self.job_deadline = Gauge(
            "autoscaler_job_deadline_seconds",
            "deadline mode: a job's deadline, in seconds from the run's start",
            labels,
            registry=r,
        )
        self.job_late_tasks = Gauge(
            "autoscaler_job_late_tasks",
            "deadline mode: a job's tasks expected to miss its deadline, as last said (0: on time)",
            labels,
            registry=r,
        )
        self.job_late_seconds = Gauge(
            "autoscaler_job_late_seconds",
            "deadline mode: by how much a job's last task is expected to be late, as last said",
            labels,
            registry=r,
        )
        self.configured_budget = cfg.constraint.budget
        if cfg.constraint.budget is not None:
            self.budget.set(cfg.constraint.budget)
        self._server: Any = None

    @classmethod
    def start(cls, cfg: RunConfig) -> Metrics:
        from prometheus_client import start_http_server

        metrics = cls(cfg)
        port = cfg.daemon.metrics_port
        assert port is not None
        try:
            metrics._server, _ = start_http_server(
                port, addr=cfg.daemon.metrics_host, registry=metrics.registry
            )
        except OSError as exc:
            raise AutoscalerError(f"metrics cannot listen on port {port}: {exc}") from None
        return metrics

    def update(self, state: RunState, estimate: float | None) -> None:
        running = len(state.tasks.running_on)
        self.tasks.labels("done").set(state.tasks.done)
        self.tasks.labels("failed").set(state.tasks.failed)
        self.tasks.labels("running").set(running)
        self.tasks.labels("pending").set(len(state.tasks.pending))
        for name, counts in machine_counts(state).items():
            for key, n in counts.items():
                self.machines.labels(name, key).set(n)
        self.spend.set(state.money.committed)
        for name, (alive, money) in state.fleet.by_provider().items():
            self.provider_machines.labels(name).set(alive)
            self.provider_spend.labels(name).set(money)
        budget = state.money.budget_of(self.configured_budget)
        if budget is not None:
            self.budget.set(budget)
        if state.decisions.shortfalls:
            self.shortfall.set(1)
            self.needed.set(state.decisions.shortfalls[-1][1].needed_budget or 0.0)
        if estimate is not None:
            self.makespan.set(estimate)
        done = jobs_done(state)
        for job in state.work.jobs:
            self.job_tasks.labels(job.name, "done").set(done[job.name])
            self.job_tasks.labels(job.name, "total").set(job.count)
            self.job_deadline.labels(job.name).set(job.deadline)
            late = state.work.late.get(job.name)
            self.job_late_tasks.labels(job.name).set(0 if late is None else late.tasks)
            self.job_late_seconds.labels(job.name).set(0.0 if late is None else late.seconds)

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

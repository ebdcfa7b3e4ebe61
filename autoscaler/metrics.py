"""Prometheus gauges of a live run, on their own port: tasks by state, machines by type
and state, committed spend, the budget, and the plan's predicted makespan."""

from __future__ import annotations

from typing import Any

from autoscaler.config.schema import RunConfig
from autoscaler.errors import AutoscalerError
from autoscaler.live import machine_counts
from autoscaler.state import RunState


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
        running = len(state.running_on)
        self.tasks.labels("done").set(state.done)
        self.tasks.labels("failed").set(state.failed)
        self.tasks.labels("running").set(running)
        self.tasks.labels("pending").set(len(state.pending))
        for name, counts in machine_counts(state).items():
            for key, n in counts.items():
                self.machines.labels(name, key).set(n)
        self.spend.set(state.committed)
        budget = state.budget_of(self.configured_budget)
        if budget is not None:
            self.budget.set(budget)
        if state.shortfalls:
            self.shortfall.set(1)
            self.needed.set(state.shortfalls[-1][1].needed_budget or 0.0)
        if estimate is not None:
            self.makespan.set(estimate)

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

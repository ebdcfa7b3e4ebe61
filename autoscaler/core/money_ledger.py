"""The money of a run and whether it may go on spending: the budget, what is committed
(paid units plus launches in flight) and its log, a hold for a budget, and the run's
stop, shutdown and interruption."""

from __future__ import annotations

from dataclasses import dataclass, field

from autoscaler.core.model import BudgetSet, Hold, Stop


@dataclass
class Money:
    budget: float | None
    committed: float = 0.0  # money committed: paid units plus launches in flight
    spend_log: list[tuple[float, float]] = field(default_factory=list)  # (time, committed)
    budget_set_at: float | None = None  # when the last BudgetSet came
    awaiting_budget: bool = False  # held after sampling (Hold) until a BudgetSet
    held_means: dict[str, float] = field(default_factory=dict)  # the Hold's estimated means
    stop_reason: str | None = None
    stopped: bool = False  # Stop was decided: nothing new is committed, machines drain
    shutdown: bool = False  # asked to end now: machines go at once, nothing is dispatched
    interrupted: bool = False  # Interrupted (the service stopped), until Resumed

    def commit(self, now: float, amount: float) -> None:
        self.committed += amount
        self.spend_log.append((now, self.committed))

    def budget_of(self, configured: float | None) -> float | None:
        """The run's budget: the last one set during the run (``BudgetSet``), else the
        config's (``configured``; round robin runs without one but is reported on it)."""
        return self.budget if self.budget_set_at is not None else configured

    def budget_set(self, now: float, event: BudgetSet) -> None:
        self.budget = event.budget
        self.budget_set_at = now
        self.awaiting_budget = False

    def hold(self, action: Hold) -> None:
        """Nothing more is committed: the budget becomes what is committed."""
        self.awaiting_budget = True
        self.held_means = dict(action.means)
        self.budget = self.committed

    def stop(self, action: Stop) -> None:
        self.stopped = True
        self.stop_reason = action.reason

    def interrupt(self, interrupted: bool) -> None:
        """The service stopped (``Interrupted``: end now, wait for a budget) or came back
        (``Resumed``)."""
        self.shutdown = self.awaiting_budget = self.interrupted = interrupted

    def add_budget(self, budget: float | None) -> None:
        """A job joined with ``budget``: the run's budget stays the sum of the jobs'
        budgets while every job has one."""
        if self.budget is not None:
            self.budget = None if budget is None else self.budget + budget

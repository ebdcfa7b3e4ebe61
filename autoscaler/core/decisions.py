"""What the controller said about the run as a whole: the configuration in force and
those before it (with their predictions), the launches deferred, and the warnings
given (a shortfall of the budget, a budget at risk)."""

from __future__ import annotations

from dataclasses import dataclass, field

from autoscaler.core.model import Configure, Defer, Risk, Shortfall


@dataclass
class Decisions:
    target: dict[str, int] = field(default_factory=dict)  # current configuration
    configurations: list[tuple[float, Configure]] = field(default_factory=list)
    deferred: tuple[str, ...] = ()  # types whose wanted launches wait for a tick (Defer)
    shortfalls: list[tuple[float, Shortfall]] = field(default_factory=list)  # warnings given
    risks: list[tuple[float, Risk]] = field(default_factory=list)  # "budget at risk" said

    def plan(self) -> Configure | None:
        """The configuration in force that came with a prediction (the last plan), or
        None before the first plan: sampling and round robin predict nothing."""
        for _, c in reversed(self.configurations):
            if c.predicted_makespan_s is not None:
                return c
        return None

    def configure(self, now: float, action: Configure) -> None:
        self.target = dict(action.counts)
        self.configurations.append((now, action))

    def defer(self, action: Defer) -> None:
        self.deferred = action.types

    def shortfall(self, now: float, action: Shortfall) -> None:
        self.shortfalls.append((now, action))

    def risk(self, now: float, action: Risk) -> None:
        self.risks.append((now, action))

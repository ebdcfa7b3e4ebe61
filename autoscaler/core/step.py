"""One step of a controller: the state, ``now``, and the actions it decides."""

from __future__ import annotations

from autoscaler.core.model import Action, Event
from autoscaler.core.state import RunState


class Step:
    """One call of a controller's ``step`` at ``now``: applies its records to the state
    and collects the actions (the budget and the deadline controller share it)."""

    def __init__(self, state: RunState, now: float):
        self.state = state
        self.now = now
        self.actions: list[Action] = []

    def feed(self, event: Event) -> None:
        self.state.apply(self.now, event)

    def do(self, action: Action) -> None:
        self.state.apply(self.now, action)
        self.actions.append(action)

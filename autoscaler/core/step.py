"""One step of a controller: the state, ``now``, and the actions it decides."""

from __future__ import annotations

from collections.abc import Iterable

from autoscaler.core.model import Action, Assign, AssignGroup, Event
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

    def decided(self) -> list[Action]:
        """The actions, with each run of ``Assign``s to one machine made one
        ``AssignGroup`` (a task group: one journal record, one message to its agent).
        Applying the group is applying its ``Assign``s in order, so the state the step
        left is the state a replay of the merged records rebuilds."""
        if len(self.actions) <= 1:  # most steps: nothing to merge
            return list(self.actions)
        out: list[Action] = []
        run: list[int] = []
        machine = ""

        def flush() -> None:
            if len(run) == 1:
                out.append(Assign(run[0], machine))
            elif run:
                out.append(AssignGroup(tuple(run), machine))
            run.clear()

        for action in self.actions:
            if isinstance(action, Assign):
                if run and action.machine != machine:
                    flush()
                machine = action.machine
                run.append(action.task)
                continue
            flush()
            out.append(action)
        flush()
        return out


def assignments(actions: Iterable[object]) -> list[tuple[int, str]]:
    """(task, machine) of every ``Assign`` and ``AssignGroup`` among ``actions``, in order."""
    out: list[tuple[int, str]] = []
    for a in actions:
        if isinstance(a, Assign):
            out.append((a.task, a.machine))
        elif isinstance(a, AssignGroup):
            out.extend((t, a.machine) for t in a.tasks)
    return out

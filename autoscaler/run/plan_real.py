"""``autoscaler plan`` on a real provider, the parts that compute: what sampling rents
and what its machines' first paid units commit (said before the user is asked), and the
budget frontier once the run holds, worked out on a copy of the state on a thread of
its own (the solves and the plot take a while; the daemon goes on meanwhile: its
machines' boundaries come)."""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable
from dataclasses import dataclass

from autoscaler.budget.controller import Controller
from autoscaler.budget.frontier import Frontier, frontier
from autoscaler.config.schema import RunConfig
from autoscaler.core.errors import AutoscalerError
from autoscaler.core.state import RunState
from autoscaler.run.assemble import new_state, planning_settings


@dataclass(frozen=True)
class SamplingOffer:
    """What a plan's sampling rents: machines per type, why, what their first paid units
    commit, and the budget that caps it."""

    counts: dict[str, int]
    reason: str
    first_commit: float
    budget: float | None


def sampling_offer(cfg: RunConfig, n_tasks: int, seed: int) -> SamplingOffer:
    """The sampling a new plan's run of ``cfg`` starts with (pure: nothing is rented)."""
    state = new_state(cfg, n_tasks, seed)
    sampling = Controller(planning_settings(cfg)).sampling(state)
    billing = state.billing
    first = sum(
        c * billing.cost(state.types[n].commit_price, billing.first_step_s)
        for n, c in sampling.counts.items()
    )
    return SamplingOffer(dict(sampling.counts), sampling.reason, first, state.money.budget)


@dataclass(frozen=True)
class HeldFrontier:
    """The frontier when the run held, and how long (real seconds) its sampling machines
    still work on the bag: until their paid time ends."""

    frontier: Frontier
    paid_left_s: float


class Frontiers:
    """The hold hook of a plan's run (``Daemon.on_hold``): each hold's frontier goes to
    ``shown`` from a thread of its own; a frontier that cannot be made (or shown) goes
    to ``failed``, its reason in one line. ``join`` waits for every one."""

    def __init__(
        self,
        time_scale: float,
        shown: Callable[[HeldFrontier], None],
        failed: Callable[[str], None],
    ) -> None:
        self.time_scale = time_scale
        self.shown = shown
        self.failed = failed
        self._threads: list[threading.Thread] = []

    def on_hold(self, controller: Controller, state: RunState, now: float) -> None:
        thread = threading.Thread(target=self._show, args=(controller, copy.deepcopy(state), now))
        thread.start()
        self._threads.append(thread)

    def join(self) -> None:
        for thread in self._threads:
            thread.join()

    def _show(self, controller: Controller, state: RunState, now: float) -> None:
        try:
            made = frontier(controller, state, now)
            paid = max((m.paid_until for m in state.fleet.alive_machines()), default=now)
            self.shown(HeldFrontier(made, (paid - now) / self.time_scale))
        except (AutoscalerError, ValueError) as exc:
            self.failed(str(exc))

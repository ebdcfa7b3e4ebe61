"""The daemon's hands: a journaled step's events and actions carried out in the world.

Machines launched are tracked (the dispatcher admits their agents, a boundary timer is
set) and booted; machines released or lost are forgotten (their agents are turned away)
and terminated; launches go to the provider. After a restart, the journal's machines are
matched with the provider's (``Executor.reconcile``). Nothing here decides.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from autoscaler.config.schema import RunConfig
from autoscaler.core.errors import AutoscalerError
from autoscaler.core.model import (
    NEVER,
    Action,
    Assign,
    AssignGroup,
    Cancel,
    Defer,
    Event,
    Extend,
    Launch,
    MachineLaunched,
    MachineLost,
    MachineState,
    Move,
    Release,
    Replicate,
)
from autoscaler.core.state import Machine, RunState
from autoscaler.providers.base import ProviderState
from autoscaler.run.agents import heard_since, lost_after_s, lost_contact
from autoscaler.run.assemble import log_action, log_reclaim_holds
from autoscaler.run.dispatch import Dispatcher
from autoscaler.run.giveup import UNSEEN_REASON
from autoscaler.run.hearing import Hearing
from autoscaler.run.machines import MachineLifecycle, launch_events
from autoscaler.run.timers import Timers

SCANS_PER_LIMIT = 20
"""Health checks, at most, in the time a machine may be silent (``agents.lost_after_s``):
a silent machine is found within a twentieth of that time past it."""

WAKE_AFTER_S = 0.01
"""A deferred launch is tried this long (run seconds) after its hold lifts."""


@dataclass
class Executor:
    """Carries out the steps of one run. ``since``: the machines tracked, by when their
    launch or adoption was seen (monotonic), shared with the daemon's health check."""

    lifecycle: MachineLifecycle
    dispatcher: Dispatcher
    timers: Timers
    log: Any
    since: dict[str, float]
    killed: bool = False  # every machine was ended at once (a second signal)
    hearing: Hearing = field(default_factory=Hearing)  # when the daemon could not hear
    _scanned: float = field(default=float("-inf"), init=False)  # the last health check

    def apply(self, state: RunState, events: list[Event], actions: list[Action]) -> set[str]:
        """Carry out a journaled step; the machines whose agents have news."""
        touched: set[str] = set()
        if self.dispatcher.files is not None:  # outputs of results that counted: committed
            self.dispatcher.files.settle(state, events)
        for event in events:
            match event:
                case MachineLaunched(machine=mid):
                    self.track(state.fleet.machines[mid])
                    self.lifecycle.boot(mid)
                case MachineLost(machine=mid, reason=reason):
                    self.log.warning("machine lost", machine=mid, reason=reason)
                    self.forget(mid)
                    self.lifecycle.end(mid)
        for action in actions:
            match action:
                case Launch(type=tname):
                    avoid = state.capacity.reclaims.held_zones(tname, state.now)
                    self.lifecycle.launch(action, avoid)
                case Extend(machine=mid):
                    self.timers.boundary(state.fleet.machines[mid])
                    touched.add(mid)
                case Release(machine=mid):
                    self.forget(mid)
                    touched.add(mid)
                    self.lifecycle.end(mid)
                case (
                    Assign(machine=mid)
                    | AssignGroup(machine=mid)
                    | Replicate(machine=mid)
                    | Cancel(machine=mid)
                ):
                    touched.add(mid)
                case Move(source=src, target=dst):
                    touched.update((src, dst))
                case Defer(types=types) if types:
                    at = state.capacity.launchable_at(types)
                    if state.now < at < NEVER:  # (types given up wait for nothing)
                        self.timers.wake(at + WAKE_AFTER_S)
                case _:
                    pass
            log_action(self.log, state.now, action)
        log_reclaim_holds(self.log, state, events)
        return touched

    def track(self, m: Machine) -> None:
        self.since[m.id] = time.monotonic()
        self.dispatcher.allowed.add(m.id)
        self.dispatcher.launches[m.id] = m.token
        self.timers.boundary(m)

    def forget(self, mid: str) -> None:
        self.dispatcher.gone.add(mid)
        self.dispatcher.allowed.discard(mid)
        self.timers.cancel_boundary(mid)

    def health(self, state: RunState, cfg: RunConfig, gone: set[str]) -> list[MachineLost]:
        """Machines that went silent while the daemon could hear (``hearing``), or that
        never came up; dropped tunnels reopened.

        ``gone``: machines already found gone in this step, left out, and those found
        here added: checks that queued up while the loop was busy make one event each.
        A check looks at every machine, so it is done at most ``SCANS_PER_LIMIT`` times
        in the time a machine may be silent: at 10,000 machines a check every 0.25 s
        (``timers.HEALTH_S``) cost the main loop a sixth of its time."""
        mono = time.monotonic()
        every = lost_after_s(cfg.daemon, len(state.fleet.alive)) / SCANS_PER_LIMIT
        if mono - self._scanned < every:
            return []
        self._scanned = mono
        alive = [m for m in state.fleet.alive_machines() if m.id not in gone]
        for m in alive:
            if m.id not in self.since:
                continue
            if m.state is MachineState.BOOTING and self.lifecycle.booting(m.id):
                # Its agent is not started yet: "never reported in" counts from the end
                # of its SSH bootstrap, which fails the machine on its own timeout.
                self.since[m.id] = mono
            else:
                self.lifecycle.keep_tunnel(m.id)
        queued, seen = self.lifecycle.queued, self.dispatcher.last_seen
        lost = self._scheduler_says(
            lost_contact(alive, self.since, seen, mono, cfg, queued, self.hearing)
        )
        oldest = heard_since(alive, self.since, seen)
        self.hearing.forget_before(mono if oldest is None else oldest)
        gone.update(e.machine for e in lost)
        return lost

    def _scheduler_says(self, lost: list[MachineLost]) -> list[MachineLost]:
        """Machines whose agents never reported in, with what their provider says of
        them when it says anything (a batch job in an error state, its log's tail): a
        host too busy to read the scheduler before the boot limit passed still names
        the scheduler's reason, not only the silence (losses are few: one look each)."""
        unseen = [e.machine for e in lost if e.reason == UNSEEN_REASON]
        if not unseen:
            return lost
        try:
            said = {s.id: s.reason for s in self.lifecycle.provider.describe(unseen) if s.reason}
        except AutoscalerError as exc:
            self.log.warning("provider not asked why machines never reported in", error=str(exc))
            return lost
        return [
            MachineLost(e.machine, f"{e.reason}; {said[e.machine]}") if e.machine in said else e
            for e in lost
        ]

    def kill_all(self) -> None:
        """The second signal: every machine the run knows ends now, without grace."""
        if self.killed:
            return
        self.killed = True
        ids = sorted(self.since)
        self.log.warning("second signal: terminating every machine now", machines=ids)
        self.lifecycle.kill(ids)

    def reconcile(self, state: RunState, now: Callable[[], float]) -> list[Event]:
        """Match the journal's machines with the provider's after a restart: adopt those
        still running, relaunch (idempotently) the launches without a result, lose the
        machines that ended meanwhile, and terminate strays."""
        lifecycle, provider = self.lifecycle, self.lifecycle.provider
        if self.dispatcher.files is not None:  # the journal's commits done, the rest dropped
            self.dispatcher.files.recover(state)
        events: list[Event] = []
        adopted: set[str] = set()
        for token, (tname, count) in list(state.fleet.pending_launches.items()):
            done = lifecycle.launch_now(Launch(tname, count, token))
            events.extend(launch_events(done, state, lifecycle.cfg, now(), self.log))
            adopted.update(r.id for r in done.records)
        live = {s.id for s in provider.describe() if s.state is not ProviderState.TERMINATED}
        for m in state.fleet.alive_machines():
            if m.id in live:
                self.track(m)
                lifecycle.boot(m.id)
            else:
                events.append(MachineLost(m.id, "ended while the daemon was down"))
        known = {m.id for m in state.fleet.alive_machines()} | adopted
        strays = sorted(live - known)
        if strays:
            self.log.warning("terminating strays", machines=strays)
            provider.terminate(strays)
        self.log.info(
            "resumed",
            machines=sorted(m.id for m in state.fleet.alive_machines()),
            relaunched=sorted(adopted),
            committed=round(state.money.committed, 4),
            done=state.tasks.done,
        )
        return events

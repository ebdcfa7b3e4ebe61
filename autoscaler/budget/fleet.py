"""Carrying out the configuration: launch, keep and mark machines towards the target."""

from __future__ import annotations

import math

from autoscaler.budget.settings import EPS
from autoscaler.core.limits import new_caps, quota_bound
from autoscaler.core.model import Defer, Launch, Mark
from autoscaler.core.step import Step


def meet_target(s: Step) -> None:
    """Launch, keep and mark machines so each type moves towards ``state.target``.

    A launch that must wait (an outage of its type, an account hold) is deferred: the
    state learns which types wait (``Defer``) and a tick tries again.
    """
    state = s.state
    waiting = () if state.money.stopped or state.money.awaiting_budget else _launch_or_mark(s)
    if waiting != s.state.decisions.deferred:
        s.do(Defer(waiting))


def _launch_or_mark(s: Step) -> tuple[str, ...]:
    """The launches and marks towards the target; returns the types whose launch waits.
    A limited provider's room caps the launches of its types, whatever the target."""
    state = s.state
    waiting: list[str] = []
    caps = new_caps(state) if state.capacity.limits or state.capacity.quota is not None else None
    for name, want in state.decisions.target.items():
        t = state.types[name]
        alive = [m for m in state.fleet.alive_machines() if m.type.name == name]
        in_flight = sum(c for tn, c in state.fleet.pending_launches.values() if tn == name)
        keep = [m for m in alive if not m.marked]
        have = len(keep) + in_flight
        if want > have:
            kept_again = (m for m in alive if m.marked and not m.draining)
            for m in sorted(kept_again, key=lambda m: -m.paid_until):
                if have >= want:
                    break
                s.do(Mark(m.id, release=False))
                have += 1
            count = min(want - have, t.max_count - len(alive) - in_flight)
            unit = state.billing.cost(t.commit_price, state.billing.first_step_s)
            if state.money.budget is not None and unit > 0:  # a free type costs no money
                count = min(
                    count, math.floor((state.money.budget - state.money.committed) / unit + EPS)
                )
            free = count  # before the providers' limits and the service's quota
            if caps is not None:
                count = min(count, caps[name])
            if count > 0 and not state.capacity.launchable(name, s.now):
                waiting.append(name)
            elif free > 0 >= count and quota_bound(state, name):
                waiting.append(name)  # other jobs of the service hold the machines
            elif count > 0:
                s.do(Launch(name, count, state.fleet.next_token()))
        elif want < have:
            for m in sorted(keep, key=lambda m: m.paid_until)[: have - want]:
                s.do(Mark(m.id, release=True))
    return tuple(waiting)

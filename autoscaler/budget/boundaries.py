"""Money at the end of a paid unit: extend a machine one step (an ATU, or ``commit_s``
under per-second billing) while the budget pays for it and it has work, else release
it; keep an idle machine to the end of a unit already paid for."""

from __future__ import annotations

from autoscaler.budget.sampling import probing
from autoscaler.budget.settings import EPS
from autoscaler.core.limits import may_extend, no_extension
from autoscaler.core.model import Extend, Release
from autoscaler.core.state import Machine, RunState
from autoscaler.core.step import Step


def can_extend(state: RunState, m: Machine) -> bool:
    """Whether the budget pays for ``m``'s next step (and no budget is awaited)."""
    if state.money.awaiting_budget:
        return False
    if state.money.budget is None:
        return may_extend(state, m)
    extra = state.billing.extension_cost(m.type.commit_price, m.launched_at, m.paid_until)
    return state.money.committed + extra <= state.money.budget + EPS and may_extend(state, m)


def boundary(s: Step, m: Machine) -> None:
    """``BoundaryNear`` for ``m``: extend it or release it."""
    state = s.state
    margin = state.billing.boundary_margin_s()
    if not m.alive or m.paid_until - s.now > margin + EPS:
        return  # gone already, or extended since this event was scheduled
    has_work = bool(m.running or m.queue)
    only_replicas = has_work and all(
        len(state.tasks.running_on.get(t, {})) > 1 for t in (*m.running, *m.queue)
    )
    if probing(state, m) and can_extend(state, m):
        s.do(Extend(m.id, m.paid_until + state.billing.step_s))  # a pair is not cut off
    elif state.money.stopped or m.marked:
        s.do(
            Release(
                m.id, "end of paid time: " + ("run stopping" if state.money.stopped else "marked")
            )
        )
    elif not has_work and not state.tasks.pending:
        s.do(Release(m.id, "end of paid time: no work left"))
    elif only_replicas and not state.tasks.pending:
        s.do(Release(m.id, "end of paid time: only replicas left"))
    elif can_extend(state, m):
        s.do(Extend(m.id, m.paid_until + state.billing.step_s))
    elif state.money.awaiting_budget:
        s.do(Release(m.id, "end of paid time: the run waits for a budget"))
    else:
        why = no_extension(state, m) or "budget cannot pay another unit"
        s.do(Release(m.id, f"end of paid time: {why}"))


def standby(s: Step, m: Machine) -> bool:
    """Keep an idle machine to the end of its paid unit while tasks run elsewhere.

    Only under fixed billing and once the machine is inside the unit it paid for: an
    early release then saves nothing, and a machine kept can take over a task that
    fails, is cut off at another machine's boundary, or runs slow. (A machine just
    extended, whose new unit has not begun, is released: that saves the unit.)
    """
    state = s.state
    billing = state.billing
    return (
        billing.mode == "fixed"
        and bool(state.tasks.running_on)
        and not state.money.stopped
        and s.now >= m.paid_until - billing.step_s
    )

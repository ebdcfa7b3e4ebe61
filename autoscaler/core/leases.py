"""Lease arithmetic: when an agent must stop, when it should ask again, when a machine's
boundary check is due. Pure functions of the values passed in; no clock is read here.

Two clocks meet here. The controller's is run time: emulated seconds, ``time_scale`` of
them per real second, anchored at the run's start on the wall clock so that a resumed
daemon carries on the same timeline. Agents and timers live on the daemon's monotonic
clock (real seconds). A ``Timeline`` converts between the two.

A machine's paid time ends at ``paid_until`` (run time). The boundary margin is how long
before that the controller decides whether to extend or release it (``boundary_due``).
An agent's lease ends at a quarter of the margin before the paid time (``hard_end``): a
machine never runs into a unit nobody committed, even when its daemon is gone. The agent
asks again at half the margin before it (``renew_at``), so a live daemon always renews
the lease in time.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Timeline:
    """Run time anchored to one monotonic reading: ``t0`` run seconds at ``mono0``."""

    t0: float  # run time (emulated seconds) at the anchor
    mono0: float  # the monotonic clock (real seconds) at the anchor
    time_scale: float  # emulated seconds per real second

    @classmethod
    def resume(cls, start_wall: float, wall: float, mono: float, time_scale: float) -> Timeline:
        """The timeline of a run started at wall time ``start_wall``, read at ``wall`` (wall
        clock) and ``mono`` (monotonic clock) at the same moment."""
        return cls((wall - start_wall) * time_scale, mono, time_scale)

    def run_time(self, mono: float) -> float:
        """Run time at monotonic time ``mono``."""
        return self.t0 + (mono - self.mono0) * self.time_scale

    def mono_at(self, t: float) -> float:
        """Monotonic time at run time ``t``."""
        return self.mono0 + (t - self.t0) / self.time_scale


def boundary_due(paid_until: float, margin_s: float) -> float:
    """Run time at which the controller decides whether a machine's next unit is paid."""
    return paid_until - margin_s


def renew_at(paid_until: float, margin_s: float) -> float:
    """Run time by which an agent asks for its lease again (half the margin before)."""
    return paid_until - margin_s / 2


def hard_end(paid_until: float, margin_s: float) -> float:
    """Run time at which an agent stops if nobody renewed its lease (a quarter before)."""
    return paid_until - margin_s / 4


def delay_s(timeline: Timeline, t: float, mono: float) -> float:
    """Real seconds from monotonic time ``mono`` until run time ``t``; 0 if it has passed."""
    return max(0.0, timeline.mono_at(t) - mono)


@dataclass(frozen=True, slots=True)
class Lease:
    """What an agent is told, in real seconds from its request's arrival."""

    lease_s: float  # stop (and release the machine) after this unless renewed
    renew_in_s: float  # ask again after at most this


def lease(
    timeline: Timeline, paid_until: float, margin_s: float, arrived: float, floor_s: float = 0.0
) -> Lease:
    """The lease of a machine paid until ``paid_until``, for a request that arrived at
    monotonic time ``arrived``; a machine past its lease gets zero, never less.
    ``floor_s``: the lease ends at least this many real seconds after the agent's next
    ask (time-scaled runs, where a margin of minutes is a second or less of real time,
    and no money is real)."""
    hard = timeline.mono_at(hard_end(paid_until, margin_s)) - arrived
    renew = timeline.mono_at(renew_at(paid_until, margin_s)) - arrived
    if floor_s > 0:
        hard = max(hard, max(0.0, renew) + floor_s)
    return Lease(round(max(0.0, hard), 4), round(max(0.0, renew), 4))

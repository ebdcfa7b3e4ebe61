"""A run that shares the account's machine limits with other runs (a service's jobs):
what it asks of whoever keeps the count (``Quota``, the service's ledger), and the
arithmetic of a step's launches against what it was granted.

The planners see the quota as an event (``QuotaSet``); a launch is still granted at one
place for every run (``Quota.claim``), because two runs may plan on the same free
machines at the same moment. What is not granted never reaches the provider: it comes
back to the run as a refused launch (``LaunchFailed`` of kind ``quota``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from autoscaler.core.limits import quota_waits
from autoscaler.core.model import Action, Event, Launch, LaunchFailed, QuotaSet
from autoscaler.core.state import RunState

QUOTA_KIND = "quota"
"""``LaunchFailed.kind`` of launches the service's quota did not grant."""


class Quota(Protocol):
    """The count of machines held against limits shared by several runs (holders)."""

    def room(self, holder: str) -> QuotaSet | None:
        """What ``holder`` may hold at once now, its own machines included (None: no
        limit is shared)."""
        ...

    def claim(
        self,
        holder: str,
        have: Mapping[str, int],
        asked: Mapping[str, int],
        waiting: Mapping[str, int],
    ) -> dict[str, int]:
        """Atomically: ``holder`` holds ``have`` machines per type (alive or being
        launched: what it no longer holds goes back), and asks for ``asked`` more; the
        new machines granted per type. ``waiting``: machines per type its plan wants
        and the quota keeps from it (for the jobs' view)."""
        ...

    def watch(self, holder: str, wake: Callable[[], None]) -> None:
        """Call ``wake`` (from any thread) when others give machines back."""
        ...


def launched(actions: Sequence[Action]) -> dict[str, int]:
    """Machines per type a step's launches ask for."""
    out: dict[str, int] = {}
    for a in actions:
        if isinstance(a, Launch):
            out[a.type] = out.get(a.type, 0) + a.count
    return out


def held(state: RunState, asked: Mapping[str, int]) -> dict[str, int]:
    """Machines per type the run holds without the launches ``asked`` in this step."""
    counts = state.fleet.alive_counts()
    return {n: c - asked.get(n, 0) for n, c in counts.items()}


def within(
    actions: Sequence[Action], granted: Mapping[str, int], reason: str
) -> tuple[list[Action], list[LaunchFailed]]:
    """The actions with each launch cut to what was ``granted`` of its type (in order),
    and the refusals of the rest."""
    left = dict(granted)
    out: list[Action] = []
    refused: list[LaunchFailed] = []
    for a in actions:
        if not isinstance(a, Launch):
            out.append(a)
            continue
        n = min(a.count, left.get(a.type, 0))
        left[a.type] = left.get(a.type, 0) - n
        if n > 0:
            out.append(a if n == a.count else dataclasses.replace(a, count=n))
        if n < a.count:
            refused.append(LaunchFailed(a.token, a.type, a.count - n, reason, kind=QUOTA_KIND))
    return out, refused


class Share:
    """A run's side of the limits it shares (``quota``; None: it shares none): the room
    it is told of, and each journaled step's launches claimed. What is not granted is
    refused in the run's next step (``refused``), and ``wake`` (any thread) makes one
    come; ``wake`` is also called when others give machines back."""

    def __init__(self, quota: Quota | None, holder: str, wake: Callable[[], None], log: Any):
        self.quota = quota
        self.holder = holder
        self.wake = wake
        self.log = log
        self._refused: list[Event] = []
        if quota is not None:
            quota.watch(holder, wake)

    def news(self, state: RunState) -> list[Event]:
        """The quota, if it changed since the run last heard it."""
        if self.quota is None:
            return []
        room = self.quota.room(self.holder)
        return [] if room is None or room == state.capacity.quota else [room]

    def granted(self, state: RunState, actions: list[Action]) -> list[Action]:
        """A journaled step's actions as the quota grants their launches."""
        if self.quota is None:
            return actions
        asked = launched(actions)
        have = held(state, asked)
        granted = self.quota.claim(self.holder, have, asked, quota_waits(state))
        if granted == asked:
            return actions
        reason = "the service's quota: other jobs hold the machines"
        kept, refused = within(actions, granted, reason)
        self.log.info("launches beyond the quota refused", asked=asked, granted=granted)
        self._refused.extend(refused)
        self.wake()
        return kept

    def refused(self) -> list[Event]:
        """The launches refused since the run's last step, for its next one."""
        out, self._refused = self._refused, []
        return out

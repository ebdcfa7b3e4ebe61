"""What a refused launch means for later launches, as a ``LaunchFailed`` event.

The provider's error code says what refused (``providers.base.failure_kind``): the type
(no capacity: avoid it), the provider (a quota or a full subnet: hold its types, the
others carry on) or the API (throttled: every scale-up waits a little). The run's
holds say for how long, and how long the types avoided take to count fully again.
The daemon (``run.machines``) and the emulator classify refusals here, so a dry run
fails over as a real run does.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from autoscaler.config.schema import RunConfig
from autoscaler.core.model import Launch, LaunchFailed
from autoscaler.providers.base import failure_kind

UNAVAILABLE_S = 600.0
LIMIT_HOLD_S = 900.0
RECOVER_S = 1800.0
"""How long a type without capacity is avoided, scale-up of a provider's types held
after its limit, and the types then take to regain full weight in the plans (Ray's
autoscaler forgets a node type's launch failure after 30 min:
AUTOSCALER_NODE_AVAILABILITY_MAX_STALENESS_S), for providers without an ``ec2``
section's own settings."""
RETRY_HOLD_S = 60.0
"""After a launch refused for a passing reason (throttling), scale-up waits this long;
after an error not understood, the refused type does."""


@dataclass(frozen=True, slots=True)
class Holds:
    """What a refused launch costs the types it names, in seconds."""

    unavailable_s: float = UNAVAILABLE_S  # a type without capacity is avoided this long
    limit_s: float = LIMIT_HOLD_S  # scale-up of a provider's types waits this long
    recover_s: float = RECOVER_S  # then the types avoided regain full weight over this
    retry_s: float = RETRY_HOLD_S  # every scale-up waits this long when throttled


def holds(cfg: RunConfig, type_name: str | None = None) -> Holds:
    """The holds of the provider of ``type_name`` (of ``cfg``'s one provider): its
    ``ec2`` section's, else the defaults; the wait after throttling in the run's own
    seconds (``time_scale``; EC2's ``throttle_hold_s``, else ``RETRY_HOLD_S``)."""
    view = cfg if type_name is None else cfg.for_provider(cfg.provider_of(type_name))
    if view.ec2 is not None:
        e = view.ec2
        retry_s = e.throttle_hold_s * cfg.time_scale
        return Holds(e.unavailable_s, e.limit_hold_s, e.recover_s, retry_s)
    return Holds(retry_s=RETRY_HOLD_S * cfg.time_scale)


def refusal(
    launch: Launch,
    missing: int,
    reason: str,
    code: str | None,
    retryable: bool,
    siblings: Sequence[str],
    h: Holds,
    now: float,
) -> LaunchFailed:
    """The ``LaunchFailed`` of ``missing`` machines of ``launch`` the provider refused
    with ``code`` at ``now``: the type avoided on a capacity error, ``siblings`` (the
    types of the provider that refused) held on a limit, every scale-up held when
    throttled; an error not understood makes the type wait ``retry_s`` before it is
    tried again (not a launch per step against an API that refuses them all)."""
    kind = failure_kind(code, retryable)
    failed = LaunchFailed(launch.token, launch.type, missing, reason, kind)
    if kind == "throttled":
        return replace(failed, until=now + h.retry_s)
    if kind == "capacity":
        return replace(failed, until=now + h.unavailable_s, recover_s=h.recover_s)
    if kind == "limit":
        return replace(failed, until=now + h.limit_s, types=tuple(siblings), recover_s=h.recover_s)
    return replace(failed, until=now + h.retry_s)

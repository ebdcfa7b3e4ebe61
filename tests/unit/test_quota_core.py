"""A run under a service's quota (``QuotaSet``): its planners and launches stay within
what the other jobs leave, a launch the quota holds back waits instead of stopping the
run, and more room is planned for at once."""

from __future__ import annotations

from autoscaler.budget.controller import Controller
from autoscaler.core.billing import BillingModel
from autoscaler.core.limits import max_alive, new_caps, quota_grew, quota_waits
from autoscaler.core.model import (
    Configure,
    Launch,
    ProviderLimit,
    QuotaSet,
    Stop,
    TypeSpec,
)
from autoscaler.core.state import RunState

HOURLY = BillingModel("fixed", 3600.0)
TYPES = [TypeSpec("small", 1.0, 6, 120.0, "p"), TypeSpec("fast", 3.0, 6, 120.0, "p")]


def _state(limit: int | None = None) -> RunState:
    limits = [ProviderLimit("p", max_machines=limit)] if limit is not None else []
    return RunState.new(TYPES, HOURLY, 40.0, 120, list(range(120)), limits=limits)


def _launched(actions: list) -> dict[str, int]:
    out: dict[str, int] = {}
    for a in actions:
        if isinstance(a, Launch):
            out[a.type] = out.get(a.type, 0) + a.count
    return out


def test_the_quota_caps_what_a_type_and_a_provider_may_launch() -> None:
    state = _state(limit=10)
    assert sum(new_caps(state).values()) == 10
    state.apply(0.0, QuotaSet({"small": 2, "fast": 6}, {"p": 5}))
    assert max_alive(state, "small") == 2
    assert max_alive(state, "fast") == 6  # the type's own maximum still holds
    caps = new_caps(state)
    assert caps["small"] <= 2
    assert caps["small"] + caps["fast"] <= 5


def test_a_run_whose_machines_others_hold_waits_and_does_not_stop() -> None:
    """No room at all: sampling launches nothing, says which types wait, does not stop;
    when room comes, the next step launches within it."""
    state = _state()
    controller = Controller()
    actions = controller.step(state, [QuotaSet({"small": 0, "fast": 0})], 0.0)
    assert _launched(actions) == {}
    assert not any(isinstance(a, Stop) for a in actions)
    assert any(isinstance(a, Configure) for a in actions)
    assert set(state.decisions.deferred) == {"small", "fast"}
    assert quota_waits(state) == {"small": 6, "fast": 6}
    actions = controller.step(state, [QuotaSet({"small": 2, "fast": 1})], 60.0)
    assert _launched(actions) == {"small": 2, "fast": 1}
    assert not any(isinstance(a, Stop) for a in actions)
    assert quota_waits(state) == {"small": 4, "fast": 5}


def test_quota_grew_reads_types_and_providers() -> None:
    state = _state(limit=8)
    small = QuotaSet({"small": 2, "fast": 6}, {"p": 8})
    assert quota_grew(state, small, QuotaSet({"small": 3, "fast": 6}, {"p": 8}))
    assert not quota_grew(state, small, QuotaSet({"small": 1, "fast": 6}, {"p": 8}))
    assert quota_grew(state, QuotaSet({"small": 6, "fast": 6}, {"p": 4}), small)
    assert not quota_grew(state, None, small)  # no quota is the limits' own: the most

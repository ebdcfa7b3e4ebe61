"""A re-plan the run need not make (``monitor.replan`` unforced) is not solved for when
no mix could be fast enough to be taken: the machines every type may have at its
estimated mean. That saves the planner only if no mix the planner finds is ever faster
than that bound: checked here at every tick of emulated runs (the controller's own
``mix_plan``, as a re-plan would choose it)."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings

from autoscaler.budget.problem import TypeEstimate
from autoscaler.config.schema import RunConfig
from autoscaler.core.model import Action, Event, Tick
from autoscaler.core.state import RunState
from autoscaler.run.emulator import Emulator
from autoscaler.run.start import make_emulator
from tests.conftest import make_config
from tests.unit.test_money import run_configs


def _bound(est: dict[str, TypeEstimate]) -> float:
    """Σ max(A_i, live_i)·s_i/T_i over the types with an estimate."""
    return sum(max(e.max_count, e.live) * e.slots / e.mean_s for e in est.values())


def _speeds(cfg: RunConfig) -> list[tuple[float, float]]:
    """(the mix's speed, the bound) at every tick after the first plan."""
    seen: list[tuple[float, float]] = []
    em: Emulator | None = None

    def check(now: float, events: list[Event], actions: list[Action], state: RunState) -> None:
        assert em is not None
        if state.decisions.plan() is None or not any(isinstance(e, Tick) for e in events):
            return
        controller = em.controller
        est, n_e = controller.outlook(state, now)
        if not est or state.money.budget is None:
            return
        found = controller.mix_plan(
            state, now, est, n_e, state.money.budget - state.money.committed
        )
        if found is not None:
            seen.append((found.speed, _bound(est)))

    n = cfg.bag.synthetic
    assert n is not None
    em = make_emulator(cfg, n, on_step=check)
    em.run()
    return seen


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(run_configs())
def test_no_mix_is_faster_than_every_machine_at_its_mean(cfg: RunConfig) -> None:
    for speed, bound in _speeds(cfg):
        assert speed <= bound * (1 + 1e-9)


def test_a_generous_budget_buys_the_bound() -> None:
    """A check that the bound can be reached: with money to spare, the mix is every
    machine of every type, and its speed is the bound."""
    cfg = make_config(bag={"synthetic": 400}, constraint={"budget": 10_000.0})
    seen = _speeds(cfg)
    assert seen
    assert any(speed >= bound * (1 - 1e-9) for speed, bound in seen)

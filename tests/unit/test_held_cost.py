"""A first plan forecast to spend its whole budget (``budget.plans._held_low``): the run
commits its money a unit at a time and stops when the next unit it wants does not fit,
so it may end up to one unit of the dearest type of its mix short of the budget. Before,
under hourly billing at a budget that is not a whole number of dollars, the forecast's
cost interval was the point [B, B] and the runs spent B less a fraction of a unit
(``benchmarks.estimates``, both types booting in 0.4 of the hour, 1.1 × B_min: cost
coverage 40 %)."""

from __future__ import annotations

import pytest

from tests.unit.long_boot_runs import long_boot_run


@pytest.mark.parametrize("seed", [1, 2])
def test_a_run_held_at_its_budget_spends_inside_its_cost_interval(seed: int) -> None:
    cfg, budget, report = long_boot_run("normal", "fixed", 0.4, 1.1, seed)
    p = report.predicted
    assert p is not None
    assert p.cost_interval is not None
    assert p.cost == pytest.approx(budget)  # held at the budget
    dearest = max(t.price for t in cfg.machine_types)
    reserve = sum(t.price for t in cfg.machine_types)  # a step of each type
    assert p.cost_interval == pytest.approx((budget - reserve - dearest, budget))
    assert budget - 1 < report.cost <= budget  # a fraction of a unit short
    assert p.cost_inside
